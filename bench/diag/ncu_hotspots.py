"""The SASS instructions where a profiled kernel's warps stall most.

Reads the CSV of `ncu --import R.ncu-rep --page source --csv --print-source sass`
(a report taken with the SourceCounters section, e.g. --set full) and prints
the instructions with the most warp-stall samples, with the top stall reasons
of each, so a slow epilogue or mainloop shows where its time goes.

    python bench/diag/ncu_hotspots.py sass.csv [--top 40]
"""

import argparse
import csv
import re


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    """'@!P1 FFMA.FTZ R1, ...' -> 'FFMA'."""
    return re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split(" ")[0].split(".")[0]


def short(column):
    return re.sub(r"^(stall_|smsp__pcsamp_warps_issue_stalled_)", "", column)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        lines = f.readlines()
    # ncu prints banner lines before the table: it starts at the header row.
    start = next((i for i, line in enumerate(lines) if '"Source"' in line), None)
    if start is None:
        raise SystemExit(f"{args.csv}: no source table (was the report taken with SourceCounters?)")
    rows = list(csv.DictReader(lines[start:]))
    cols = list(rows[0].keys())
    print("columns:", "; ".join(cols))
    total_col = next((c for c in cols if c.startswith("Warp Stall Sampling (All")), None)
    if total_col is None:
        raise SystemExit("no 'Warp Stall Sampling (All Samples)' column")
    source_col = "Source"
    address_col = "Address" if "Address" in cols else None
    reason_cols = [c for c in cols if c.startswith("stall_") or c.startswith("smsp__pcsamp_warps_issue_stalled")]
    exec_col = next((c for c in cols if c.startswith("Instructions Executed")), None)

    total = sum(number(r[total_col]) for r in rows) or 1.0
    print(f"{len(rows)} SASS lines, {total:.0f} stall samples")
    # Samples by instruction kind: where the kernel as a whole spends them.
    by_op = {}
    for r in rows:
        op = opcode(r[source_col])
        by_op[op] = by_op.get(op, 0.0) + number(r[total_col])
    print("samples by opcode:", ", ".join(f"{op} {100 * s / total:.1f}%" for op, s in
                                          sorted(by_op.items(), key=lambda kv: -kv[1])[:15]))
    # Why the warps stall, per opcode: a latency-bound epilogue shows its
    # FFMAs waiting on each other (short/long scoreboard, wait), one starved
    # of instructions shows no_inst, one sharing the issue port shows dispatch.
    all_reasons = [c for c in reason_cols if "Not Issued" not in c]
    print("stall reasons of the opcodes with the most samples (% of that opcode's samples):")
    for op, op_total in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]:
        per_reason = {c: 0.0 for c in all_reasons}
        for r in rows:
            if opcode(r[source_col]) == op:
                for c in all_reasons:
                    per_reason[c] += number(r[c])
        top = sorted(per_reason.items(), key=lambda kv: -kv[1])[:6]
        print(f"  {op:10s} " + ", ".join(f"{short(c)} {100 * v / max(op_total, 1):.0f}%" for c, v in top if v > 0))
    for r in sorted(rows, key=lambda r: -number(r[total_col]))[: args.top]:
        share = 100 * number(r[total_col]) / total
        reasons = sorted(((number(r[c]), c) for c in reason_cols), reverse=True)[:3]
        why = ", ".join(f"{short(c)} {v:.0f}"
                        for v, c in reasons if v > 0)
        addr = r[address_col] if address_col else ""
        execd = f" exec {r[exec_col]}" if exec_col else ""
        print(f"{share:5.1f}%  {addr:>8} {r[source_col].strip()[:70]:70s}{execd}  [{why}]")


if __name__ == "__main__":
    main()

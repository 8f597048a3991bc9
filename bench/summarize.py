"""Turn a bench/results/*.json into a markdown table and (re)draw its PNG.

    python bench/summarize.py RESULTS.json              # markdown table to stdout
    python bench/summarize.py RESULTS.json --plot       # also RESULTS.png next to it
    python bench/summarize.py RESULTS.json --plot out.png --md out.md

Runs on a CPU-only machine (needs only matplotlib for the plot). bench.py
imports the constants, the text table and the plot from here, so all of them
are defined once. A models.py results file (`*_models.json`, rows by case)
is printed as models.py prints it (its table and plot, which import torch).
"""

import argparse
import json
import os
import sys

# Order in tables and plots. torch_mm is the reference every ratio divides by.
CONTENDERS = ("torch_mm", "eager", "addmm_activation", "compile", "gemm_act",
              "gemm_act:sm90", "gemm_act:sm80", "gemm_act:library", "gemm_act:simt")
# gemm_act with one CUDA backend forced (torch_gemm_act.testing), where the
# build has it: every row times sm80 and library (bench.py --forced); sm90
# and simt only where asked.
FORCED = {c.split(":")[1]: c for c in CONTENDERS if c.startswith("gemm_act:")}
MODES = ("inference", "forward", "forward_backward")

LABELS = {
    "torch_mm": "torch.mm",
    "eager": "eager",
    "addmm_activation": "addmm_act",
    "compile": "compile",
    "gemm_act": "gemm_act",
    "gemm_act:sm90": "ga:sm90",
    "gemm_act:sm80": "ga:sm80",
    "gemm_act:library": "ga:lib",
    "gemm_act:simt": "ga:simt",
}
MODE_LABELS = {"inference": "inf", "forward": "fwd", "forward_backward": "fwd+bwd"}
MODE_TITLES = {
    "inference": "inference (no_grad forward)",
    "forward": "training forward (inputs require grad)",
    "forward_backward": "forward + backward (torch_mm = the 3 GEMMs of a linear)",
}
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}
COLORS = {
    "eager": "#7f7f7f",
    "addmm_activation": "#ff7f0e",
    "compile": "#1f77b4",
    "gemm_act": "#2ca02c",
    "gemm_act:sm90": "#17becf",
    "gemm_act:sm80": "#9467bd",
    "gemm_act:library": "#8c564b",
    "gemm_act:simt": "#e377c2",
}


def dtype_label(row):
    d = DTYPE_SHORT.get(row["dtype"], row["dtype"])
    if row["dtype"] == "float32" and row.get("tf32") is not None:
        d += "+tf32" if row["tf32"] else " ieee"
    return d


def shape_label(row):
    return f'{row["M"]}x{row["K"]}x{row["N"]}'


def ratio(row, name):
    ms = row.get("ms", {})
    ref = ms.get("torch_mm")
    if name not in ms or not ref:
        return None
    return ms[name] / ref


def fmt_ms(v):
    return f"{v:.4f}" if v < 0.1 else f"{v:.3f}"


def _fmt_err(row):
    e = row.get("max_rel_err")
    if e is None:
        return "-"
    s = f"{e:.1e}" if isinstance(e, (int, float)) else str(e)
    if row.get("correct") is False:
        s += " WRONG"
    return s


def text_table(results):
    """The plain-text table bench.py prints last: torch.mm ms, then ratios."""
    others = CONTENDERS[1:]
    head = (f'{"shape":<17} {"dtype":<9} {"act":<10} {"mode":<8} {"mm ms":>8} '
            + " ".join(f"{LABELS[c]:>9}" for c in others) + f' {"gemm err":>14}')
    lines = [head, "-" * len(head)]
    for row in results["rows"]:
        ref = row.get("ms", {}).get("torch_mm")
        cells = []
        for c in others:
            r = ratio(row, c)
            if r is not None:
                cells.append(f"{r:>8.2f}x")
            elif c in row.get("errors", {}):
                cells.append(f'{"error":>9}')
            elif c == "gemm_act" and "gemm_act" in row.get("ms_unverified", {}):
                cells.append(f'{"WRONG":>9}')
            else:
                cells.append(f'{"-":>9}')
        lines.append(
            f"{shape_label(row):<17} {dtype_label(row):<9} {row['activation']:<10} "
            f"{MODE_LABELS.get(row['mode'], row['mode']):<8} "
            f"{(fmt_ms(ref) if ref else '-'):>8} " + " ".join(cells) + f" {_fmt_err(row):>14}")
    lines.append("ratios are time / torch.mm time (lower is better; < 1 beats the bare GEMM)")
    return "\n".join(lines)


def slower_than_eager(results, contender):
    """The rows where `contender` took longer than eager, as text lines."""
    out = []
    for row in results["rows"]:
        ms = row.get("ms", {})
        if contender in ms and "eager" in ms and ms[contender] > ms["eager"]:
            out.append(f"  {shape_label(row):<17} {dtype_label(row):<9} {row['activation']:<10} "
                       f"{MODE_LABELS.get(row['mode'], row['mode']):<8} {ms[contender] / ms['eager']:.3f}x eager")
    return out


def markdown(results):
    """Markdown table for bench/README.md: ms and time / torch.mm per contender."""
    out = []
    meta = results.get("meta", {})
    out.append(f'Device: {results.get("device", "?")} · torch {results.get("torch", "?")} · '
               f'commit `{str(results.get("commit", "?"))[:10]}` · csrc tree '
               f'`{str(results.get("csrc_tree", "?"))[:10]}`'
               + (f' · {meta["created_utc"]}' if "created_utc" in meta else ""))
    out.append("")
    out.append("Each cell: median ms (time / `torch.mm` time). `-`: not applicable.")
    out.append("")
    cols = ["shape M×K×N", "dtype", "act", "mode"] + [LABELS[c] for c in CONTENDERS] + ["gemm_act max rel err"]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "|".join(["---"] * 4 + ["---:"] * (len(CONTENDERS) + 1)) + "|")
    for row in results["rows"]:
        ms = row.get("ms", {})
        cells = [shape_label(row).replace("x", "×"), dtype_label(row), row["activation"],
                 MODE_LABELS.get(row["mode"], row["mode"])]
        for c in CONTENDERS:
            if c in ms:
                r = ratio(row, c)
                cells.append(fmt_ms(ms[c]) + ("" if c == "torch_mm" or r is None else f" ({r:.2f}×)"))
            elif c in row.get("errors", {}):
                cells.append("error")
            elif c == "gemm_act" and "gemm_act" in row.get("ms_unverified", {}):
                cells.append(f'WRONG ({fmt_ms(row["ms_unverified"]["gemm_act"])})')
            else:
                cells.append("-")
        cells.append(_fmt_err(row))
        out.append("| " + " | ".join(cells) + " |")
    notes = meta.get("notes")
    if notes:
        out.append("")
        for n in notes:
            out.append(f"- {n}")
    return "\n".join(out)


def plot(results, path):
    """time / torch.mm per shape for each contender, one panel per mode.

    Returns the path written, or None (with a message) when matplotlib is missing.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - any import problem means no plot
        print(f"matplotlib unavailable ({e}); skipping the plot", file=sys.stderr)
        return None

    rows = results["rows"]
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)]
    modes += sorted({r["mode"] for r in rows} - set(modes))
    if not modes:
        print("no rows to plot", file=sys.stderr)
        return None
    others = CONTENDERS[1:]
    nmax = max(sum(r["mode"] == m for r in rows) for m in modes)
    fig, axes = plt.subplots(len(modes), 1, figsize=(max(8.0, 1.15 * nmax + 3), 4.2 * len(modes)),
                             squeeze=False)
    width = 0.8 / len(others)
    for ax, mode in zip(axes[:, 0], modes):
        mrows = [r for r in rows if r["mode"] == mode]
        xs = range(len(mrows))
        top = 1.0
        for i, c in enumerate(others):
            vals = [ratio(r, c) for r in mrows]
            pos = [x + (i - (len(others) - 1) / 2) * width for x in xs]
            pv = [(p, v) for p, v in zip(pos, vals) if v is not None]
            if not pv:
                continue
            ax.bar([p for p, _ in pv], [v for _, v in pv], width, label=LABELS[c],
                   color=COLORS.get(c))
            top = max(top, max(v for _, v in pv))
        if "gemm_act" in others:  # say why a gemm_act bar is missing
            i = others.index("gemm_act")
            for x, r in zip(xs, mrows):
                why = ("WRONG" if "gemm_act" in r.get("ms_unverified", {})
                       else "error" if "gemm_act" in r.get("errors", {}) else None)
                if why:
                    ax.text(x + (i - (len(others) - 1) / 2) * width, 0.05, why, rotation=90,
                            color="red", fontsize=7, ha="center", va="bottom")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylim(0, min(top * 1.1, 6.0))
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{shape_label(r)}\n{dtype_label(r)} {r['activation']}" for r in mrows],
                           fontsize=7)
        ax.set_ylabel("time / torch.mm")
        ax.set_title(MODE_TITLES.get(mode, mode), fontsize=10)
        ax.legend(fontsize=8, ncol=len(others), loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f'{results.get("device", "?")} · torch {results.get("torch", "?")} · '
                 f'commit {str(results.get("commit", "?"))[:10]}  (lower is better)', fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="a results JSON written by bench/bench.py or bench/models.py")
    p.add_argument("--plot", nargs="?", const="", default=None,
                   help="draw the PNG (default path: the JSON's, with .png)")
    p.add_argument("--md", default=None, help="also write the markdown table to this file")
    p.add_argument("--text", action="store_true", help="print the plain-text table too")
    args = p.parse_args(argv)
    with open(args.json) as f:
        results = json.load(f)
    if any("case" in row for row in results.get("rows", ())):
        return _models(results, args)
    md = markdown(results)
    print(md)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md + "\n")
    if args.text:
        print()
        print(text_table(results))
    if args.plot is not None:
        out = args.plot or os.path.splitext(args.json)[0] + ".png"
        if plot(results, out):
            print(f"\nplot: {out}", file=sys.stderr)
    return 0


def _models(results, args):
    """A models.py results file: its own table (and plot)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models
    print(f'{results.get("device", "?")} · torch {results.get("torch", "?")} · commit '
          f'{str(results.get("commit", "?"))[:10]} · csrc tree {str(results.get("csrc_tree", "?"))[:10]}')
    print(models.table(results["rows"]))
    if args.plot is not None:
        out = args.plot or os.path.splitext(args.json)[0] + ".png"
        if models.plot(results["rows"], out):
            print(f"\nplot: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

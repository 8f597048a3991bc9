"""Compares gemm_act's time / torch.mm between two results of bench.py, row
by row (each ratio from its own run, beside torch.mm in that run).

    python bench/compare.py OLD.json NEW.json [--noise 0.05]

Prints every row with both ratios and flags those where NEW is slower than
OLD by more than --noise (relative); exits 0 either way.
"""

import argparse
import json

from summarize import dtype_label, ratio, shape_label


def key(row):
    return (shape_label(row), dtype_label(row), row["activation"], row["mode"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--noise", type=float, default=0.05, help="relative change counted as noise")
    args = p.parse_args()
    old = {key(r): r for r in json.load(open(args.old))["rows"]}
    new = json.load(open(args.new))["rows"]
    print(f"gemm_act time / torch.mm: old {args.old}, new {args.new}; '!' slower by more than "
          f"{args.noise:.0%}")
    print(f"{'shape':<17}{'dtype':<11}{'act':<10}{'mode':<17}{'old':>7}{'new':>7}{'new/old':>9}")
    slower = 0
    for r in new:
        o = old.get(key(r))
        a, b = (ratio(o, "gemm_act") if o else None), ratio(r, "gemm_act")
        if a is None or b is None:
            print(f"{'  '.join(key(r)):<60} (not in both)")
            continue
        flag = "!" if b / a > 1 + args.noise else ""
        slower += bool(flag)
        print(f"{key(r)[0]:<17}{key(r)[1]:<11}{key(r)[2]:<10}{key(r)[3]:<17}{a:7.3f}{b:7.3f}"
              f"{b / a:9.3f} {flag}")
    print(f"{slower} row(s) slower by more than {args.noise:.0%}")


if __name__ == "__main__":
    main()

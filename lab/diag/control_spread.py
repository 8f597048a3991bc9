"""Why two identical contenders of bench/models.py read apart: the eager
model and its copy (--control) timed in turns over many rounds of do_bench,
each round's times printed, then by bench.time_in_turns (turns of one call),
with the GPU time per step and the kernels of each from the profiler, and
Dynamo's compile counters at each first call.

    python lab/diag/control_spread.py --case vit_l_mlp --mode training --compiled [--rounds 8]
        [--copy-first] [--with-fused]
"""

import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import bench  # noqa: E402
import models  # noqa: E402
import rounds  # noqa: E402  (lab/diag: the do_bench rounds)
from model_step_profile import profile  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="vit_l_mlp", choices=sorted(models.CASES))
    p.add_argument("--mode", default="training", choices=("inference", "training"))
    p.add_argument("--compiled", action="store_true")
    p.add_argument("--copy-first", action="store_true", help="the copy's first (compiling) call before eager's")
    p.add_argument("--with-fused", action="store_true")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--rep", type=int, default=100)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--turns", type=int, default=2, help="times to run bench.time_in_turns after the rounds")
    args = p.parse_args()
    timer, how = rounds.make_timer(args, "cuda")
    eager, fused, x, gy = models.build(args.case, "cuda", False)
    contenders = models.contenders(eager, fused, args.compiled, control=True)
    contenders.pop("compile_fusion", None)
    if not args.with_fused:
        contenders.pop("fused")
    order = list(contenders)
    if args.copy_first:
        order.remove("eager_copy")
        order.insert(0, "eager_copy")
    fns = {}
    for name in order:
        torch._dynamo.utils.counters.clear()
        fns[name] = models.step_fn(contenders[name], x, gy, args.mode)
        with models.first_call(name):
            fns[name]()
        stats = {k: dict(v) for k, v in torch._dynamo.utils.counters.items()
                 if k in ("stats", "graph_break", "recompiles", "aot_autograd", "inductor") and v}
        print(f"first call of {name}: {stats}", flush=True)
    print(f"{args.case} {args.mode} {'compiled' if args.compiled else 'eager mode'}; {how}")
    times = {n: [] for n in order}
    for r in range(args.rounds):
        line = []
        for name in rounds.round_order(order, r):
            times[name].append(timer(fns[name]))
            line.append(f"{name} {times[name][-1]:.3f}")
        print(f"round {r}: " + ", ".join(line), flush=True)
    base = statistics.median(times["eager"])
    for name in order:
        med = statistics.median(times[name])
        print(f"{name:12s} median {med:.3f} ms ({med / base:.3f} x eager), "
              f"min {min(times[name]):.3f}, max {max(times[name]):.3f}")
    for seed in range(args.turns):
        timed = bench.time_in_turns(fns, args, "cuda", seed=seed)
        print(f"in turns call by call ({args.rounds} x {args.rep} ms each), seed {seed}: " + ", ".join(
            f"{n} {ms:.3f} ({ms / timed['eager'][0]:.3f} x eager, IQR {iqr:.1%})" for n, (ms, iqr) in timed.items()),
            flush=True)
    kernels = {}
    for name in order:
        _, counts, us = profile(fns[name], args.steps)
        kernels[name] = (counts, us)
        print(f"{name:12s} GPU busy {sum(us.values()) / args.steps / 1e3:.3f} ms/step, "
              f"{sum(counts.values()) / args.steps:.0f} kernels/step")
    print("kernels (count, us per step):")
    names = sorted({k for c, _ in kernels.values() for k in c},
                   key=lambda k: -max(u[k] for _, u in kernels.values()))
    for k in names[:25]:
        cells = "  ".join(f"{n}: {c[k] / args.steps:3.0f} x {u[k] / args.steps:8.1f}"
                          for n, (c, u) in kernels.items())
        print(f"  {k[:80]:80s} {cells}")


if __name__ == "__main__":
    main()

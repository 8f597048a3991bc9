"""Whether a compiled contender of bench/models.py reads slower for having
been compiled from Inductor's caches (filled by the contender compiled
before it) rather than afresh: copies of the eager model, each compiled
fresh (FX graph and AOTAutograd caches off) or cached, in the order given,
timed by bench.time_in_turns several times; each first call's cache hits
are printed.

    python lab/diag/compile_cache_order.py --case small_mlp_fp32 --mode training \
        --order eager:fresh copy1:cached copy2:fresh copy3:cached [--with-fused] [--turns 3]
"""

import argparse
import contextlib
import copy
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import bench  # noqa: E402
import models  # noqa: E402


def first_call(how):
    if how == "cached":
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="small_mlp_fp32", choices=sorted(models.CASES))
    p.add_argument("--mode", default="training", choices=("inference", "training"))
    p.add_argument("--order", nargs="+", default=["eager:fresh", "copy1:cached", "copy2:fresh", "copy3:cached"])
    p.add_argument("--with-fused", choices=("fresh", "cached"), default=None)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--rep", type=int, default=100)
    p.add_argument("--turns", type=int, default=3)
    args = p.parse_args()
    eager, fused, x, gy = models.build(args.case, "cuda", False)
    bench.compile_in_process()
    torch.compiler.reset()
    plan = [tuple(item.split(":")) for item in args.order]
    if args.with_fused:
        plan.append(("fused", args.with_fused))
    fns = {}
    for name, how in plan:
        model = fused if name == "fused" else (eager if name == "eager" else copy.deepcopy(eager))
        fns[name] = models.step_fn(torch.compile(models.own_frame(model, name)), x, gy, args.mode)
        torch._dynamo.utils.counters.clear()
        with first_call(how):
            fns[name]()
        c = torch._dynamo.utils.counters
        print(f"first call of {name} ({how}): fxgraph hit {c['inductor'].get('fxgraph_cache_hit', 0)} "
              f"miss {c['inductor'].get('fxgraph_cache_miss', 0)}, autograd cache hit "
              f"{c['aot_autograd'].get('autograd_cache_hit', 0)} miss {c['aot_autograd'].get('autograd_cache_miss', 0)}",
              flush=True)
    ratios = {n: [] for n in fns}
    for seed in range(args.turns):
        timed = bench.time_in_turns(fns, args, "cuda", seed=seed)
        base = timed[plan[0][0]][0]
        for n, (ms, _) in timed.items():
            ratios[n].append(ms / base)
        print(f"seed {seed}: " + ", ".join(f"{n} {ms:.3f} ({ms / base:.3f}, IQR {iqr:.1%})"
                                           for n, (ms, iqr) in timed.items()), flush=True)
    hows = dict(plan)
    print("median ratio to the first: " + ", ".join(
        f"{n} ({hows[n]}) {statistics.median(r):.3f}" for n, r in ratios.items()))


if __name__ == "__main__":
    main()

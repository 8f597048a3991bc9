"""Where a model step's time goes, eager beside fused (bench/models.py's
cases), in eager mode and compiled: wall ms per step, the GPU's busy time
per step, kernels per step, the kernels that differ, the host's busiest
operators, and Dynamo's graph count, graph breaks and recompiles.

    python lab/diag/model_step_profile.py [--case gpt2_small_mlp] [--mode training] [--steps 5]
"""

import argparse
import collections
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import models  # noqa: E402


def wall_ms(fn, steps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e3


def profile(fn, steps):
    from torch.profiler import ProfilerActivity, profile as prof
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    kernels = collections.Counter()
    kernel_us = collections.Counter()
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0:
            kernels[e.name[:90]] += 1
            kernel_us[e.name[:90]] += e.device_time_total
    return p, kernels, kernel_us


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="gpt2_small_mlp", choices=sorted(models.CASES))
    p.add_argument("--mode", default="training", choices=("inference", "training"))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", default=None, help="folder for the full profiler tables")
    args = p.parse_args()
    eager, fused, x, gy = models.build(args.case, "cuda", False)
    for compiled in (False, True):
        results = {}
        for name, model in models.contenders(eager, fused, compiled).items():
            torch._dynamo.utils.counters.clear()
            fn = models.step_fn(model, x, gy, args.mode)
            with models.first_call(name):
                fn()
            ms = wall_ms(fn, 20)
            stats = {k: dict(v) for k, v in torch._dynamo.utils.counters.items()
                     if k in ("stats", "graph_break", "recompiles") and v}
            prof, kernels, kernel_us = profile(fn, args.steps)
            results[name] = (ms, kernels, kernel_us)
            gpu_ms = sum(kernel_us.values()) / args.steps / 1e3
            print(f"\n=== {args.case} {args.mode} {'compiled' if compiled else 'eager mode'}: {name}: "
                  f"{ms:.3f} ms/step wall, GPU busy {gpu_ms:.3f} ms/step, "
                  f"{sum(kernels.values()) / args.steps:.0f} kernels/step")
            if stats:
                print("dynamo:", stats)
            table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12,
                                              max_name_column_width=70)
            print("\n".join(table.splitlines()[:16]))
            if args.out:
                with open(os.path.join(args.out, f"profile_{args.case}_{args.mode}_"
                                       f"{'compiled' if compiled else 'eager'}_{name}.txt"), "w") as f:
                    f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=60,
                                                      max_name_column_width=100))
        print("\nkernels per step (count, us per step) by contender:")
        names = sorted({k for r in results.values() for k in r[1]})
        for k in sorted(names, key=lambda k: -max(r[2][k] for r in results.values())):
            cells = "  ".join(f"{n}: {r[1][k] / args.steps:4.0f} x {r[2][k] / args.steps:8.1f}"
                              for n, r in results.items())
            print(f"  {k:90s} {cells}")


if __name__ == "__main__":
    main()

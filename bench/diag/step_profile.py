"""Where a whole model's step (bench/whole.py) spends its time, eager
against fused, compiled or not: per contender, the step's time (CUDA
events, median), the host's time to issue it, the GPU time of its kernels
and their count (torch.profiler), and the kernels that take the most.

    python bench/diag/step_profile.py --case whole_gpt2 [--mode training] [--compiled]
"""

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import compiled as compiled_  # noqa: E402
import whole  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--case", default="whole_gpt2", choices=sorted(whole.WHOLE))
    p.add_argument("--mode", default="training", choices=("training", "inference"))
    p.add_argument("--compiled", action="store_true")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=14)
    args = p.parse_args()
    built = whole.build(args.case, "cuda", False)
    models = {"eager": built.model, "fused": whole.fuse(args.case, copy.deepcopy(built.model))}
    if args.compiled:
        torch._inductor.config.compile_threads = torch._inductor.config.decide_compile_threads()
        models = {name: torch.compile(compiled_.own_frame(m, name)) for name, m in models.items()}
    print(f"=== {args.case} {args.mode}{' compiled' if args.compiled else ''}")
    for name, model in models.items():
        run = whole.step_fn(model, built, args.mode)
        for _ in range(3):  # compiles, then warms
            run()
        torch.cuda.synchronize()
        times, host = [], []
        for _ in range(args.steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            t0 = time.perf_counter()
            run()
            host.append((time.perf_counter() - t0) * 1e3)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                run()
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_time_total > 0]
        gpu = sum(e.device_time_total for e in kernels) / 1e3 / args.steps
        count = sum(e.count for e in kernels) / args.steps
        print(f"--- {name}: step {sorted(times)[len(times) // 2]:.3f} ms median, host {sorted(host)[len(host) // 2]:.3f} ms "
              f"to issue it, {gpu:.3f} ms of GPU time in {count:.0f} kernels")
        for e in sorted(kernels, key=lambda e: -e.device_time_total)[:args.top]:
            print(f"  {e.device_time_total / 1e3 / args.steps:8.3f} ms  x{e.count / args.steps:<5.0f} {e.key[:110]}")
        del run
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Where the language-model head's loss + backward spends its time: each
contender of bench/lm_head.py under torch.profiler (GPU time per kernel
name), and the pieces eager is made of timed alone (CUDA events, median).

    python bench/diag/lm_head_parts.py [--cases linear_ce_gpt2 ...]
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lm_head  # noqa: E402


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def profile(name, fn, top):
    """fn's GPU time per kernel name, the host's time to issue it, and the
    GPU's idle time between its first kernel's start and its last's end."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.device_time_total for e in events)
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    gaps, reached, before = [], spans[0][0] if spans else 0.0, ""
    for begin, end, kernel in spans:
        if begin > reached:
            gaps.append((begin - reached, before, kernel))
        reached, before = max(reached, end), kernel
    print(f"--- {name}: {total / 1e3:.3f} ms of GPU time in {sum(e.count for e in events)} kernels, "
          f"{sum(g for g, _, _ in gaps) / 1e3:.3f} ms idle between them; host {host * 1e3:.3f} ms to issue it")
    for gap, after, kernel in sorted(gaps, reverse=True)[:3]:
        print(f"  idle {gap / 1e3:.3f} ms after {after[:50]} before {kernel[:50]}")
    for e in sorted(events, key=lambda e: -e.device_time_total)[:top]:
        print(f"  {e.device_time_total / 1e3:8.3f} ms  x{e.count:<4d} {e.key[:110]}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", nargs="+", default=sorted(lm_head.LINEAR_CE))
    p.add_argument("--top", type=int, default=10)
    args = p.parse_args()
    for case in args.cases:
        built = lm_head.build(case, "cuda", False, compiled=False)
        h, w, t = built.hidden, built.weight, built.target
        print(f"=== {case}: hidden {tuple(h.shape)}, weight {tuple(w.shape)}")
        for name, fn in built.fns.items():
            print(f"{name}: {median_ms(fn):.3f} ms median")
        logits = F.linear(h, w)
        z = logits.detach().requires_grad_(True)
        parts = {
            "linear (bf16 out)": lambda: F.linear(h, w),
            "cross_entropy forward": lambda: F.cross_entropy(logits, t),
            "cross_entropy forward + backward": lambda: torch.autograd.grad(F.cross_entropy(z, t), z),
            "grad of hidden GEMM": lambda: logits @ w,
            "grad of weight GEMM": lambda: logits.t() @ h,
        }
        for name, fn in parts.items():
            print(f"  {name}: {median_ms(fn):.3f} ms")
        del logits, z
        for name, fn in built.fns.items():
            profile(name, fn, args.top)
        del built
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

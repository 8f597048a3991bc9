"""Host time against GPU time of a bench/models.py step, eager beside fused:
whether a step is host-bound, and which part of it (forward, backward,
clearing the grads) the host spends its time on.

    python lab/diag/step_host_time.py [--cases gpt2_small_mlp,vit_l_mlp] [--steps 3] [--compiled]

The GPU is first kept busy by a spin kernel long enough for the host to
enqueue --steps steps behind it, so the host's times are its own (no wait
on the GPU; a step that synchronises shows as host time near the spin's),
and the GPU then runs the queued steps back to back: their time between two
events is the GPU's alone. A step whose host time is above its GPU time
leaves the GPU idle in a timed loop. --compiled measures the models under
torch.compile instead, with compile fusion's (the pass on compiled eager,
as bench/models.py builds it) beside them. --unbounded adds the fused model
with no layer treated as host-bound (functional.HOST_BOUND_MULTIPLY_ADDS
= 0): every layer through the fused operator, as against ATen's kernels. --bare adds the fused model with its relu-family
layers as a bare nn.Linear subclass running the same ATen ops
(host_bound_variants.bare): the fused module's own Python, split into
forward and backward host time.
"""

import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import bench  # noqa: E402
import models  # noqa: E402
import rounds  # noqa: E402  (lab/diag: the do_bench rounds)

SPIN_MS = 80.0


class Unbounded(torch.nn.Module):
    """`inner` called with no layer treated as host-bound (the threshold is
    read per call, in the forward; the backward follows what it chose)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        from torch_gemm_act import functional
        saved = functional.HOST_BOUND_MULTIPLY_ADDS
        functional.HOST_BOUND_MULTIPLY_ADDS = 0
        try:
            return self.inner(x)
        finally:
            functional.HOST_BOUND_MULTIPLY_ADDS = saved


def spin_cycles():
    props = torch.cuda.get_device_properties(0)
    rate_khz = getattr(props, "clock_rate", 0) or 1_980_000
    return int(SPIN_MS * rate_khz)


def timed_steps(model, x, gy, mode, steps, cycles):
    """Host seconds per part, summed over `steps` steps, and GPU ms per step."""
    xg = x.detach().requires_grad_(mode == "training")
    parts = {"forward": 0.0, "backward": 0.0, "clear": 0.0}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(cycles)
    start.record()
    t_begin = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        if mode == "inference":
            with torch.no_grad():
                model(xg)
            parts["forward"] += time.perf_counter() - t0
            continue
        y = model(xg)
        t1 = time.perf_counter()
        y.backward(gy)
        t2 = time.perf_counter()
        xg.grad = None
        for p in model.parameters():
            p.grad = None
        del y
        parts["forward"] += t1 - t0
        parts["backward"] += t2 - t1
        parts["clear"] += time.perf_counter() - t2
    host_total = time.perf_counter() - t_begin
    end.record()
    torch.cuda.synchronize()
    return {k: v / steps * 1e3 for k, v in parts.items()}, host_total * 1e3, start.elapsed_time(end) / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(sorted(models.CASES)))
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--compiled", action="store_true", help="the models under torch.compile, compile fusion beside")
    p.add_argument("--unbounded", action="store_true", help="beside them, the fused model with no host-bound layer")
    p.add_argument("--bare", action="store_true", help="beside them, the fused layers as bare nn.Linear subclasses")
    args = p.parse_args()
    cycles = spin_cycles()
    print(f"{'case':<20} {'mode':<10} {'model':<14} {'host ms':>8} {'fwd':>7} {'bwd':>7} {'clear':>6} "
          f"{'gpu ms':>8} {'host/gpu':>8}")
    for case in args.cases.split(","):
        eager, fused, x, gy = models.build(case, "cuda", False)
        named = models.contenders(eager, fused, args.compiled)
        if args.unbounded and not args.compiled:
            named["fused_unbounded"] = Unbounded(fused)
        if args.bare and not args.compiled:
            from host_bound_variants import bare
            named["bare"] = bare(fused)
        for mode in args.modes.split(","):
            for name, model in named.items():
                for _ in range(2):  # warm-up: compilation, the caching allocator's blocks, lazy inits
                    with models.first_call(name):
                        timed_steps(model, x, gy, mode, args.steps, cycles // 8)
            # The contenders take turns, so a host whose speed drifts costs
            # them alike (one after the other, identical graphs read 12 %
            # apart in backward host time).
            all_reps = {name: [] for name in named}
            for r in range(args.reps):
                for name in rounds.round_order(list(named), r):
                    all_reps[name].append(timed_steps(named[name], x, gy, mode, args.steps, cycles))
            for name in named:
                reps = all_reps[name]
                med = lambda f: statistics.median(f(r) for r in reps)  # noqa: E731
                host = med(lambda r: sum(r[0].values()))
                gpu = med(lambda r: r[2])
                synced = med(lambda r: r[1]) > 0.9 * SPIN_MS
                print(f"{case:<20} {mode:<10} {name:<14} {host:8.3f} {med(lambda r: r[0]['forward']):7.3f} "
                      f"{med(lambda r: r[0]['backward']):7.3f} {med(lambda r: r[0]['clear']):6.3f} "
                      f"{gpu:8.3f} {host / gpu:8.2f}{'  SYNCHRONISES' if synced else ''}", flush=True)


if __name__ == "__main__":
    main()

"""Where a forward + backward of linear + activation spends its GPU time: the
kernels of eager (F.linear + act), of torch_gemm_act.linear_act and of the
three bare GEMMs (torch.mm), each with its ms per call, for the benchmark's
training shapes. Said per kernel so that a slow backward names its culprit
(the elementwise dZ, a GEMM with an unlucky layout, a copy). --forced adds
gemm_act with a CUDA backend forced in its forward (as bench.py's columns).
Last, each contender's wall time per call (CUDA events, median of --rounds
rounds taken in turns, every other round backwards): kernels that sum to
less than the wall time point at gaps (host, allocator, sync).

    python lab/diag/backward_kernels.py [--only 16384x1024x4096,...] [--forced library sm80] [--group odd --compile]
"""

import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F

from mm_kernels import kernels

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", default=os.path.join(HERE, "..", "..", "bench", "shapes.json"))
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes")
    p.add_argument("--forced", nargs="*", default=[], help="CUDA backends to force in gemm_act's forward")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--group", default="training", help="the shapes file's group")
    p.add_argument("--compile", action="store_true", help="add torch.compile of eager as a contender")
    args = p.parse_args()
    import torch_gemm_act

    with open(args.shapes) as f:
        shapes = json.load(f)[args.group]
    for s in shapes:
        M, K, N = s["M"], s["K"], s["N"]
        if args.only and f"{M}x{K}x{N}" not in args.only.split(","):
            continue
        act = s.get("activation", torch_gemm_act.activations.GELU)
        twin = torch_gemm_act.activations.torch_module(act).forward
        dt = getattr(torch, s["dtype"])
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", dtype=dt, generator=g).requires_grad_()
        w = (torch.randn(N, K, device="cuda", dtype=dt, generator=g) * K ** -0.5).requires_grad_()
        bias = torch.randn(N, device="cuda", dtype=dt, generator=g).requires_grad_()
        gy = torch.randn(M, N, device="cuda", dtype=dt, generator=g)

        def mm3():
            with torch.no_grad():
                return torch.mm(a, w.t()), torch.mm(gy, w), torch.mm(gy.t(), a)

        def step(f):
            return lambda: torch.autograd.grad(f(), (a, w, bias), gy)

        runs = {
            "torch.mm x3": mm3,
            "eager": step(lambda: twin(F.linear(a, w, bias))),
            "gemm_act": step(lambda: torch_gemm_act.linear_act(a, w, bias, act)),
        }
        if args.compile:
            compiled = torch.compile(lambda a, w, bias: twin(F.linear(a, w, bias)))
            runs["compile"] = step(lambda: compiled(a, w, bias))
        for backend in args.forced:
            def forced_fwd(backend=backend):
                with torch_gemm_act.testing.override(cuda_backend=backend):
                    return torch_gemm_act.linear_act(a, w, bias, act)
            runs[f"gemm_act:{backend}"] = step(forced_fwd)
        print(f"{M}x{K}x{N} {s['dtype']} {act}, forward + backward:")
        for label, fn in runs.items():
            times = kernels(fn, runs=10, per_call=True)
            print(f"  {label}: {sum(times.values()):.3f} ms of kernels")
            for name, ms in sorted(times.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.3f} ms  {name[:150]}")
        walls = {label: [] for label in runs}
        order = list(runs)
        for r in range(args.rounds):
            for label in order if r % 2 == 0 else order[::-1]:
                walls[label].append(wall_ms(runs[label]))
        print("  wall ms per call (median of rounds): " + ", ".join(
            f"{label} {statistics.median(v):.3f}" for label, v in walls.items()))


def wall_ms(fn, calls=10):
    """ms per call of fn over `calls` calls back to back, after one warm call."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


if __name__ == "__main__":
    main()

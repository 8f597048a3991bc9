"""Ways ATen computes one Linear's ``x @ w.T + b`` at a host-bound size, side
by side: the kernels and memsets each launches (cuBLAS's heuristics pick
split-K for some fp32 shapes: four launches where one GEMM would do), the
host's time per call with the GPU held by a spin kernel, the GPU's time per
call, and the error against float64; with --training, forward + backward.

    python lab/diag/linear_formulas.py [--shapes 512x1024x256,512x256x1024] [--dtype float32] [--training]

Written for the small fp32 MLP (bench/models.py `small_mlp_fp32`), whose
K = 1024 layer eager runs as cuBLASLt's split-K (memset, scale, GEMM, bias
epilogue), on a host where a launch costs about 8 us.
"""

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from layer_host_time import host_us  # noqa: E402


def formulas():
    """name -> f(x, w, b) computing x @ w.T + b, autograd intact."""
    return {
        "F.linear": lambda x, w, b: F.linear(x, w, b),
        "mm, add_": lambda x, w, b: torch.mm(x, w.t()).add_(b),
        "mm + b": lambda x, w, b: torch.mm(x, w.t()) + b,
        "addmm, bias expanded": lambda x, w, b: torch.addmm(b.expand(x.shape[0], w.shape[0]), x, w.t()),
        "addmm transposed": lambda x, w, b: torch.addmm(b.unsqueeze(1), w, x.t()).t(),
        "baddbmm": lambda x, w, b: torch.baddbmm(b, x.unsqueeze(0), w.t().unsqueeze(0)).squeeze(0),
        "mm only (no bias)": lambda x, w, b: torch.mm(x, w.t()),
    }


def launches(fn, steps=3):
    """(kernels and memsets per call, their names) of fn()."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    short = sorted({n[:60] for n in names})
    return len(names) / steps, short


def gpu_us(fns, turns=60):
    """Median GPU us per call of each fn, the contenders taking turns."""
    times = {n: [] for n in fns}
    for _ in range(5):
        for fn in fns.values():
            fn()
    for _ in range(turns):
        for n, fn in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times[n].append(s.elapsed_time(e) * 1e3)
    return {n: statistics.median(v) for n, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="512x1024x256,512x256x1024,256x1024x256,1024x1024x256,2048x1024x256",
                   help="MxKxN,...")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--training", action="store_true", help="also forward + backward")
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, TF32 {torch.backends.cuda.matmul.allow_tf32}")
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=dtype)
        ref = F.linear(x.double(), w.double(), b.double())
        gy = torch.randn(m, n, device="cuda", dtype=dtype)
        print(f"\n== {m}x{k}x{n} {args.dtype}: y = x @ w.T + b")
        fns = {}
        for name, f in formulas().items():
            with torch.no_grad():
                fns[name] = (lambda f=f: f(x, w, b))
        gpu = gpu_us(fns)
        print(f"{'formula':24s} {'launches':>8s} {'host us':>8s} {'gpu us':>8s} {'rel err':>9s}  kernels")
        for name, fn in fns.items():
            with torch.no_grad():
                count, names = launches(fn)
                host = host_us(fn, args.calls)
                y = fn()
            err = ((y.double() - ref).abs().max() / ref.abs().max()).item() if "no bias" not in name else float("nan")
            print(f"{name:24s} {count:8.1f} {host:8.1f} {gpu[name]:8.1f} {err:9.2e}  {'; '.join(names)}", flush=True)
        if not args.training:
            continue
        xg, wg, bg = (t.detach().requires_grad_(True) for t in (x, w, b))

        def clear():
            for t in (xg, wg, bg):
                t.grad = None
        print(f"{'fwd+bwd':24s} {'launches':>8s} {'host us':>8s} {'gpu us':>8s}  backward kernels")
        steps = {}
        for name, f in formulas().items():
            if "no bias" in name:
                continue

            def step(f=f):
                f(xg, wg, bg).backward(gy)
                clear()
            steps[name] = step
        gpu = gpu_us(steps, turns=30)
        for name, step in steps.items():
            count, names = launches(step)
            host = host_us(step, args.calls)
            print(f"{name:24s} {count:8.1f} {host:8.1f} {gpu[name]:8.1f}  {'; '.join(names)}", flush=True)


if __name__ == "__main__":
    main()

"""The library's fp64 bias + GELU pass in several shapes (pass_variants.cu,
built here as is and with -maxrregcount=32) beside Inductor's fused kernel,
on the op bench's data for its fp64 2048^3 gelu row (Z = A W^T of order 1,
a bias of std 0.5), all timed by triton.testing.do_bench (median, L2
flushed) in rounds, each output checked against ATen's. With --after-gemm
each call first writes Z by the GEMM (torch.mm into Z's buffer), as in the
op bench's row, so the pass reads Z largely from L2; the GEMM's own median
is subtracted.

    python lab/diag/fp64_pass_vs_inductor.py [--size 2048] [--rounds 5] [--after-gemm]
"""
import argparse
import ctypes
import os
import statistics
import subprocess

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def build(tag, flags):
    so = f"/tmp/pass_variants_{tag}.so"
    subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "--expt-relaxed-constexpr", "-I",
                    os.path.join(ROOT, "csrc"), "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v",
                    os.path.join(HERE, "pass_variants.cu"), "-o", so, *flags], check=True)
    lib = ctypes.CDLL(so)
    lib.variant_name.restype = ctypes.c_char_p
    lib.launch_variant.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--after-gemm", action="store_true", help="each call runs the GEMM into Z first")
    args = p.parse_args()
    from triton.testing import do_bench

    n = args.size
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.float64, generator=g)
    w = torch.randn(n, n, device="cuda", dtype=torch.float64, generator=g).mul_(n ** -0.5)
    bias = torch.randn(n, device="cuda", dtype=torch.float64, generator=g).mul_(0.5)
    z = a @ w.t()
    ref = F.gelu(z + bias)
    y = torch.empty_like(z)
    stream = torch.cuda.current_stream().cuda_stream

    fns = {"inductor": torch.compile(lambda z, b: F.gelu(z + b), dynamic=False)}
    for tag, flags in (("default", []), ("r32", ["-maxrregcount=32"])):
        lib = build(tag, flags)
        for v in range(lib.variant_count()):
            name = f"{lib.variant_name(v).decode()}{' r32' if flags else ''}"

            def run(lib=lib, v=v):
                assert lib.launch_variant(v, z.data_ptr(), y.data_ptr(), bias.data_ptr(), n, n, stream) == 0
                return y
            fns[name] = run
    for name, fn in fns.items():
        y.fill_(float("nan"))
        out = fn(z, bias) if name == "inductor" else fn()
        torch.cuda.synchronize()
        assert torch.allclose(out, ref, rtol=1e-12, atol=0), name
    def gemm():
        torch.mm(a, w.t(), out=z)

    if args.after_gemm:
        fns["gemm alone"] = None
    times = {name: [] for name in fns}
    for r in range(args.rounds):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(fns.items())[::-1]):
            call = (lambda fn=fn: fn(z, bias)) if name == "inductor" else fn
            if args.after_gemm:
                call = gemm if fn is None else (lambda call=call: (gemm(), call()))
            times[name].append(do_bench(call, return_mode="median") * 1e3)
    if args.after_gemm:
        gemm_us = statistics.median(times.pop("gemm alone"))
        print(f"GEMM alone {gemm_us:.1f} us, subtracted from every time below")
        times = {name: [t - gemm_us for t in ts] for name, ts in times.items()}
    base = statistics.median(times["inductor"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:36s} {med:7.2f} us ({med / base:.3f} x Inductor)  rounds {' '.join(f'{t:.1f}' for t in ts)}")


if __name__ == "__main__":
    main()

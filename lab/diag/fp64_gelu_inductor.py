"""Inductor's fused bias + erf GELU kernel in fp64 at 2048 x 2048, alone: the
kernel the library's pass (csrc/cuda/library/epilogue_pass_kernels.cuh)
loses to in the op bench's fp64 2048^3 gelu inference row. Times it with the
L2 flushed (triton.testing.do_bench, median) on the data pass_probe.cu
uses (uniform in [-3, 3)) and on a GEMM's output (normal, std 45, where
erf saturates), beside ATen's two kernels. Under ncu (--ncu) it runs each
once for the profiler to count instructions:

    ncu --metrics sm__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread \\
        python3 lab/diag/fp64_gelu_inductor.py --ncu
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ncu", action="store_true", help="run each contender once, untimed")
    args = p.parse_args()
    from triton.testing import do_bench

    g = torch.Generator(device="cuda").manual_seed(0)
    bias = torch.randn(2048, device="cuda", dtype=torch.float64, generator=g) * 0.5
    data = {
        "uniform [-3, 3)": torch.rand(2048, 2048, device="cuda", dtype=torch.float64, generator=g) * 6 - 3,
        "normal, std 45": torch.randn(2048, 2048, device="cuda", dtype=torch.float64, generator=g) * 45,
    }

    def eager(z, b):
        return F.gelu(z + b)

    compiled = torch.compile(eager, dynamic=False)
    for name, z in data.items():
        ref = eager(z, bias)
        out = compiled(z, bias)
        assert torch.allclose(out, ref, rtol=1e-12, atol=1e-300), name
        if args.ncu:
            torch.cuda.synchronize()
            continue
        t_ind = do_bench(lambda: compiled(z, bias), return_mode="median") * 1e3
        t_eager = do_bench(lambda: eager(z, bias), return_mode="median") * 1e3
        print(f"{name}: Inductor {t_ind:.2f} us, ATen (add, gelu) {t_eager:.2f} us")


if __name__ == "__main__":
    main()

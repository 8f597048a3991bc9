"""The layer backward's weight and bias gradients at the model cases' shapes:
weight_bias_grad (one cuBLASLt GEMM with the BGRADA / BGRADB epilogue) beside
the GEMM and bias_grad it replaces and beside eager's GEMM and sum, GPU time
(triton.testing.do_bench, median) and the error of the bias gradient.

    python lab/diag/weight_grad_kernels.py
"""

import torch
import triton

import torch_gemm_act  # noqa: F401  (the operators)

# (tokens M, input K, output N) of the layers without an activation
SHAPES = [(8192, 3072, 768), (12608, 4096, 1024), (4096, 11008, 4096), (8192, 768, 3072)]


def main():
    ops = torch.ops.gemm_act
    print(f"{'M x K x N':>20} {'layout':>8} {'fused ms':>9} {'mm+bias_grad':>13} {'eager mm+sum':>13} "
          f"{'fused/split':>11} {'dbias err':>10}")
    for m, k, n in SHAPES:
        gy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        bias = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
        ref = gy.double().sum(0)
        for transposed in (True, False):
            mm = (lambda: gy.t().mm(x)) if transposed else (lambda: x.t().mm(gy))
            fused = lambda: ops.weight_bias_grad(gy, x, bias, transposed)  # noqa: E731
            split = lambda: (mm(), ops.bias_grad(gy, bias))  # noqa: E731
            eager = lambda: (mm(), gy.sum(0))  # noqa: E731
            t = {name: triton.testing.do_bench(fn, warmup=25, rep=100) for name, fn in
                 (("fused", fused), ("split", split), ("eager", eager))}
            gb, gbias = fused()
            err = ((gbias.double() - ref).abs().max() / ref.abs().max()).item()
            werr = ((gb.double() - mm().double()).abs().max() / mm().double().abs().max()).item()
            print(f"{m:>6}x{k:>6}x{n:>6} {'T' if transposed else 'N':>8} {t['fused']:9.4f} {t['split']:13.4f} "
                  f"{t['eager']:13.4f} {t['fused'] / t['split']:11.3f} {err:10.1e} (dW vs mm {werr:.1e})",
                  flush=True)


if __name__ == "__main__":
    main()

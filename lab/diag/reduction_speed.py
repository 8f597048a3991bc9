"""How close the backward's reductions run to the memory's speed: bias_grad
(the bias gradient of a layer without activation), activation_backward and
its in-place form (dZ and the bias gradient in one pass; timed with a
copy that restores gY, whose time is taken off), beside PyTorch's
sum over rows, its gelu_backward and a plain copy of gY (the bandwidth
reference), at the models' shapes. Medians of triton.testing.do_bench, in
us, and the bytes each moves per us.

    python lab/diag/reduction_speed.py [--dtype bfloat16]
"""

import argparse

import torch
from triton.testing import do_bench

import torch_gemm_act  # noqa: F401  (registers the operators)

SHAPES = [(8192, 768), (8192, 3072), (12608, 1024), (12608, 4096), (4096, 11008), (512, 1024)]


def us(fn):
    return 1e3 * do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    ops = torch.ops.gemm_act
    print(f"{'M x N':>14} {'copy':>8} {'sum(0)':>8} {'bias_grad':>10} {'gelu_bwd+sum':>13} "
          f"{'act_bwd':>8} {'act_bwd_':>9}   (us; GB/s of bias_grad, act_bwd)")
    for m, n in SHAPES:
        g = torch.randn(m, n, device="cuda", dtype=dtype)
        z = torch.randn(m, n, device="cuda", dtype=dtype)
        bias = torch.randn(n, device="cuda", dtype=dtype)
        scratch = g.clone()
        t = {
            "copy": us(lambda: scratch.copy_(g)),
            "sum": us(lambda: g.sum(0)),
            "bias_grad": us(lambda: ops.bias_grad(g, bias)),
            "eager_bwd": us(lambda: torch.ops.aten.gelu_backward(g, z).sum(0)),
            "act_bwd": us(lambda: ops.activation_backward(g, z, bias, "gelu", 0.01)),
            # In place over a fresh copy of gY each call, the copy's time taken off.
            "act_bwd_": us(lambda: ops.activation_backward_(scratch.copy_(g), z, bias, "gelu", 0.01)),
        }
        t["act_bwd_"] -= t["copy"]
        nbytes = g.numel() * g.element_size()
        print(f"{m:>7} x {n:<5} {t['copy']:8.1f} {t['sum']:8.1f} {t['bias_grad']:10.1f} {t['eager_bwd']:13.1f} "
              f"{t['act_bwd']:8.1f} {t['act_bwd_']:9.1f}   {nbytes / t['bias_grad'] / 1e3:6.0f} "
              f"{3 * nbytes / t['act_bwd'] / 1e3:6.0f}")


if __name__ == "__main__":
    main()

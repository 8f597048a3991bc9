"""A layer's weight and bias gradients, fused (weight_bias_grad: cuBLASLt's
BGRAD epilogue) against the GEMM followed by a separate bias sum (ours and
PyTorch's), on the model cases' backward shapes. Prints ms (do_bench
median) and the fused time over the unfused one.

    python lab/diag/wgrad_bias.py
"""

import torch
from triton.testing import do_bench

import torch_gemm_act  # noqa: F401  (registers the operators)

# (name, M tokens, N outputs of the layer (bias length), K inputs)
CASES = [
    ("gpt2 fc1", 8192, 3072, 768),
    ("gpt2 fc2", 8192, 768, 3072),
    ("vit fc1", 12608, 4096, 1024),
    ("vit fc2", 12608, 1024, 4096),
    ("llm up", 4096, 11008, 4096),
    ("llm down", 4096, 4096, 11008),
]


def main():
    op = torch.ops.gemm_act.weight_bias_grad
    print(f"{'case':10} {'dtype':5} {'fused':>8} {'mm+ours':>8} {'mm+sum':>8} {'mm':>8} {'fused/best':>10}")
    for name, m, n, k in CASES:
        for dtype in (torch.bfloat16, torch.float16):
            grad = torch.randn(m, n, dtype=dtype, device="cuda")
            a = torch.randn(m, k, dtype=dtype, device="cuda")
            bias = torch.randn(n, dtype=dtype, device="cuda")
            fused = do_bench(lambda: op(grad, a, bias, True), warmup=50, rep=300)
            ours = do_bench(lambda: (grad.t().mm(a), torch.ops.gemm_act.bias_grad(grad, bias)), warmup=50, rep=300)
            torch_sum = do_bench(lambda: (grad.t().mm(a), grad.sum(0)), warmup=50, rep=300)
            mm = do_bench(lambda: grad.t().mm(a), warmup=50, rep=300)
            w, b = op(grad, a, bias, True)
            err_w = ((w.double() - grad.double().t() @ a.double()).abs().max() /
                     (grad.double().t() @ a.double()).abs().max()).item()
            err_b = ((b.double() - grad.double().sum(0)).abs().max() / grad.double().sum(0).abs().max()).item()
            tag = "bf16" if dtype == torch.bfloat16 else "fp16"
            print(f"{name:10} {tag:5} {fused:8.4f} {ours:8.4f} {torch_sum:8.4f} {mm:8.4f} "
                  f"{fused / min(ours, torch_sum):10.3f}  err w {err_w:.1e} b {err_b:.1e}")


if __name__ == "__main__":
    main()

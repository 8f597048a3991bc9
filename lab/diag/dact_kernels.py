"""gemm_dact against what it replaces, at the model cases' second-layer
input gradients: torch.mm alone (the floor), torch.mm then the activation
backward pass (the unchained backward), and gemm_dact (one fused GEMM) under
the rule and with the library forced; and the first layer's bias gradient:
gemm_dact summing it in its epilogue against gemm_dact then bias_grad, and
bias_grad against PyTorch's sum. Then each compiled sm90 gemm_dact
configuration forced, with the bias gradient (as the chained backward calls
it), beside torch.mm. Median ms (triton's do_bench).

    python lab/diag/dact_kernels.py
"""

import torch
import triton.testing

import torch_gemm_act as tga

# (name, M tokens, N2 = K here, H = N here, activation, dtype)
CASES = [
    ("gpt2", 8192, 768, 3072, "gelu_tanh", torch.bfloat16),
    ("vit_l", 12608, 1024, 4096, "gelu", torch.bfloat16),
    ("llm", 4096, 4096, 11008, "relu", torch.float16),
]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def main():
    print(f"{'case':8} {'mm':>8} {'mm+pass':>8} {'dact':>8} {'dact:lib':>9}  dact/mm  dact/(mm+pass)")
    for name, m, k, n, act, dtype in CASES:
        grad = torch.randn(m, k, device="cuda", dtype=dtype)
        w2 = torch.randn(k, n, device="cuda", dtype=dtype) / k ** 0.5  # nn.Linear's [out, in]: N-major B
        saved = torch.randn(m, n, device="cuda", dtype=dtype)
        mm = bench(lambda: torch.mm(grad, w2))
        unchained = bench(lambda: torch.ops.gemm_act.activation_backward(torch.mm(grad, w2), saved, None, act, 0.01))
        dact = bench(lambda: torch.ops.gemm_act.gemm_dact(grad, w2, saved, None, act, 1.0, 0.01))
        with tga.testing.override(cuda_backend="library"):
            dact_lib = bench(lambda: torch.ops.gemm_act.gemm_dact(grad, w2, saved, None, act, 1.0, 0.01))
        bias = torch.empty(n, device="cuda", dtype=dtype)
        ours_sum = bench(lambda: torch.ops.gemm_act.bias_grad(saved, bias))
        torch_sum = bench(lambda: saved.sum(0))
        fused_bias = bench(lambda: torch.ops.gemm_act.gemm_dact(grad, w2, saved, bias, act, 1.0, 0.01))
        then_sum = bench(lambda: torch.ops.gemm_act.bias_grad(
            torch.ops.gemm_act.gemm_dact(grad, w2, saved, None, act, 1.0, 0.01)[0], bias))
        print(f"{name:8} {mm:8.3f} {unchained:8.3f} {dact:8.3f} {dact_lib:9.3f}  {dact / mm:6.3f}  "
              f"{dact / unchained:6.3f}   bias grad [{m}, {n}]: bias_grad {ours_sum:.3f}, "
              f"sum(0) {torch_sum:.3f} ms; dact with it {fused_bias:.3f} against dact then "
              f"bias_grad {then_sum:.3f} ms")
    configs = sorted({k["name"] for k in tga.testing.kernels("sm90", op="gemm_dact")})
    print(f"\ngemm_dact with the bias gradient, each configuration forced, beside torch.mm (ms): {configs}")
    for name, m, k, n, act, dtype in CASES:
        grad = torch.randn(m, k, device="cuda", dtype=dtype)
        w2 = torch.randn(k, n, device="cuda", dtype=dtype) / k ** 0.5
        saved = torch.randn(m, n, device="cuda", dtype=dtype)
        bias = torch.empty(n, device="cuda", dtype=dtype)
        cells = [f"mm {bench(lambda: torch.mm(grad, w2)):.3f}",
                 f"rule {bench(lambda: torch.ops.gemm_act.gemm_dact(grad, w2, saved, bias, act, 1.0, 0.01)):.3f}"]
        for config in configs:
            with tga.testing.override(sm90_kernel=config):
                ms = bench(lambda: torch.ops.gemm_act.gemm_dact(grad, w2, saved, bias, act, 1.0, 0.01))
            cells.append(f"{config} {ms:.3f}")
        print(f"{name:8} " + "  ".join(cells))


if __name__ == "__main__":
    main()

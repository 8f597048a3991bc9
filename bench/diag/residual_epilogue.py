"""Would a residual epilogue pay? ``F.linear(x, W, b) + r`` (eager's two
kernels) against gemm_act with r as C (beta 1, no activation: the add in the
GEMM's epilogue) and torch.addmm with r as C (cuBLAS's), forward and forward
+ backward, at the out-projections of the model benchmark's blocks (Llama's
o_proj and down_proj, ViT-L's proj and fc2, GPT-2's), bf16, medians of
triton's do_bench; with each result's largest error from float64 and what
gemm_act runs there (explain). Then the forward with each sm90
configuration of FORCED forced: C read from global memory by each thread
against C loaded through TMA (the tmac configurations), each with its error.

    python bench/diag/residual_epilogue.py
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import torch_gemm_act as tga
from torch_gemm_act import ops
from torch_gemm_act.activations import IDENTITY

# name: (tokens, in, out, bias), the model benchmark's sizes (bench/whole.py).
# sm90 configurations timed forced, each C road at two tiles.
FORCED = ("cooperative_128x256_c1x2", "cooperative_128x256_c1x2_tmac", "pingpong_128x128_c1x2",
          "pingpong_128x128_c1x2_tmac")
SHAPES = {"llama_o": (8192, 2048, 2048, False), "llama_down": (8192, 8192, 2048, False),
          "vit_proj": (12608, 1024, 1024, True), "vit_fc2": (12608, 4096, 1024, True),
          "gpt2_attn": (8192, 768, 768, True), "gpt2_mlp": (8192, 3072, 768, True)}


def main():
    torch.manual_seed(0)
    for name, (m, k, n, has_bias) in SHAPES.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if has_bias else None
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

        def eager():
            return F.linear(x, w, b) + r

        def fused():
            return ops.gemm_act(x, w, b, r, IDENTITY, 1.0, 1.0, 0.01, False, True)[0]

        def addmm():
            return torch.addmm(r if b is None else r + b, x, w.t())

        ref = x.double() @ w.double().t() + (b.double() if b is not None else 0) + r.double()
        e_err, f_err = ((f().double() - ref).abs().max().item() for f in (eager, fused))
        te, tf, ta = (do_bench(f, warmup=50, rep=300) for f in (eager, fused, addmm))
        xs, ws, rs = (t.detach().clone().requires_grad_() for t in (x, w, r))
        bs = b.detach().clone().requires_grad_() if b is not None else None
        g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        leaves = [xs, ws, rs] + ([bs] if bs is not None else [])

        def train_eager():
            (F.linear(xs, ws, bs) + rs).backward(g)

        def train_fused():
            ops.gemm_act(xs, ws, bs, rs, IDENTITY, 1.0, 1.0, 0.01, False, True)[0].backward(g)

        tte, ttf = (do_bench(f, warmup=20, rep=300, grad_to_none=leaves) for f in (train_eager, train_fused))
        print(f"{name:11s} {m}x{k}->{n} bias={has_bias}: fwd eager {te * 1e3:7.1f} us fused {tf * 1e3:7.1f} "
              f"({tf / te:.3f}) addmm {ta * 1e3:7.1f} ({ta / te:.3f}) | train eager {tte * 1e3:7.1f} fused "
              f"{ttf * 1e3:7.1f} ({ttf / tte:.3f}) | err eager {e_err:.3g} fused {f_err:.3g} | "
              f"{tga.explain(x, w.t(), b, r, beta=1.0)}")
        compiled = {k["name"] for k in tga.testing.kernels("sm90") if k["dtype"] == "bf16"}
        for config in FORCED:
            if config not in compiled:
                print(f"{'':11s} {config}: not in this build")
                continue
            with tga.testing.override(sm90_kernel=config, cuda_backend="sm90"):
                y = fused()
                t = do_bench(fused, warmup=50, rep=300)
            err = (y.double() - ref).abs().max().item()
            print(f"{'':11s} {config:31s} fwd {t * 1e3:7.1f} us ({t / te:.3f} x eager's) err {err:.3g}")


if __name__ == "__main__":
    main()

"""Which sm90 tile pays for gemm_glu (inference)? At gated MLPs' shapes,
bf16: eager's ``F.silu(x @ Wg.T) * (x @ Wu.T)``, cuBLAS's one GEMM over
both weights packed (what the gated product costs without its epilogue),
the rule's gemm_glu, then each sm90 gemm_glu configuration forced; medians
of triton's do_bench, each result's largest error from float64 on a sample
of rows. `keeping H`: the same call as training's forward makes it
(return_preact, the projections stored beside Y; rule glu_preact_k).

    python bench/diag/glu_configs.py
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import torch_gemm_act as tga

# name: (tokens, hidden, intermediate), the model benchmark's and the op table's.
SHAPES = {"llama_1b": (8192, 2048, 8192), "llama_7b": (4096, 4096, 11008),
          "llama3_8b": (8192, 4096, 14336), "small": (8192, 1024, 2816)}
ROWS = 256  # rows checked against float64


def main():
    torch.manual_seed(0)
    configs = sorted({k["name"] for k in tga.testing.kernels("sm90", op="gemm_glu") if k["dtype"] == "bf16"})
    for name, (m, k, n) in SHAPES.items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        packed = torch.randn(2 * n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        wg, wu = packed[:n], packed[n:]
        ref = (F.silu(x[:ROWS].double() @ wg.double().t()) * (x[:ROWS].double() @ wu.double().t()))

        def eager():
            return F.silu(F.linear(x, wg)) * F.linear(x, wu)

        def packed_gemm():
            return F.linear(x, packed)

        def fused():
            return tga.gemm_glu(x, wg.t(), wu.t())

        def fused_h():
            return tga.gemm_glu(x, wg.t(), wu.t(), return_preact=True)

        def err(y):
            return (y[:ROWS].double() - ref).abs().max().item()

        te, tp, tf, th = (do_bench(f, warmup=50, rep=300) for f in (eager, packed_gemm, fused, fused_h))
        print(f"{name:10s} {m}x{k}->{n}: eager {te * 1e3:7.1f} us | packed GEMM {tp * 1e3:7.1f} ({tp / te:.3f}) | "
              f"gemm_glu {tf * 1e3:7.1f} ({tf / te:.3f}) err {err(fused()):.3g} (eager {err(eager()):.3g}) | "
              f"keeping H {th * 1e3:7.1f} ({th / te:.3f})")
        for config in configs:
            with tga.testing.override(sm90_kernel=config, cuda_backend="sm90"):
                y = fused()
                t = do_bench(fused, warmup=50, rep=300)
                t_h = do_bench(fused_h, warmup=50, rep=300)
            print(f"{'':10s} {config:29s} {t * 1e3:7.1f} us ({t / te:.3f} x eager's, {t / tp:.3f} x the packed "
                  f"GEMM's) err {err(y):.3g} | keeping H {t_h * 1e3:7.1f} us ({t_h / te:.3f})")


if __name__ == "__main__":
    main()

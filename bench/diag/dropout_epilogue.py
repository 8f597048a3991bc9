"""Would a dropout epilogue pay? A block's residual branch, ``r +
F.dropout(F.linear(x, W, b), p)`` then the LayerNorm after it, training
with dropout on, bf16, at the out-projections of the model benchmark's
blocks, forward and forward + backward, medians of triton's do_bench:

  eager      PyTorch's ops (linear, dropout, add, layer_norm)
  composite  linear_dropout_add as the rule runs it: the GEMM, then dropout's
             pass (the same mask drawn again in the backward)
  fused      linear_dropout_add with the sm90 fused kernel forced (rule
             dropout_forced): keep bits drawn by a kernel of their own, then
             the GEMM whose epilogue adds the residual and applies them

and p = 0 (the residual alone: gemm_act with the residual as C). Each line
also gives the fused forward's largest error from float64 with its own mask
against eager's from float64 with eager's mask.

    python bench/diag/dropout_epilogue.py [--p 0.1]
"""

import argparse

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import torch_gemm_act as tga

# name: (tokens, in, out), the model benchmark's sizes (bench/whole.py); every projection has a bias.
SHAPES = {"gpt2_attn": (8192, 768, 768), "gpt2_mlp": (8192, 3072, 768), "bert_attn": (16384, 768, 768),
          "vit_proj": (12608, 1024, 1024)}
FUSED = "pingpong_128x128_c1x2_drop"


def _eager(x, w, b, r, ln_w, ln_b, p):
    h = r + F.dropout(F.linear(x, w, b), p, training=True)
    return h, F.layer_norm(h, (h.shape[-1],), ln_w, ln_b)


def _ours(x, w, b, r, ln_w, ln_b, p):
    h = tga.linear_dropout_add(x, w, b, r, p)
    return h, F.layer_norm(h, (h.shape[-1],), ln_w, ln_b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--p", type=float, default=0.1)
    args = parser.parse_args()
    torch.manual_seed(0)
    contenders = {"eager": _eager, "composite": _ours, "fused": _ours}  # fused: under the switch, below
    for p in (args.p, 0.0):
        for name, (m, k, n) in SHAPES.items():
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
            b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            ln_w = torch.ones(n, device="cuda", dtype=torch.bfloat16)
            ln_b = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
            leaves = [t.detach().clone().requires_grad_() for t in (x, w, b, r, ln_w, ln_b)]
            g_h, g_out = (torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            times = {}
            for cname, fn in contenders.items():
                # The switch entered once around the timing: entered per call, its host time is timed too.
                with tga.testing.override(sm90_kernel=FUSED if cname == "fused" else None):
                    fwd = do_bench(lambda: fn(x, w, b, r, ln_w, ln_b, p), warmup=50, rep=300)

                    def train():
                        h, out = fn(*leaves, p)
                        torch.autograd.backward((h, out), (g_h, g_out))
                    step = do_bench(train, warmup=20, rep=300, grad_to_none=leaves)
                times[cname] = (fwd, step)
            # The fused road's h against float64 with the mask it drew (from the seed drawn as it draws it).
            torch.manual_seed(1)
            with tga.testing.override(sm90_kernel=FUSED):
                h_fused = _ours(x, w, b, r, ln_w, ln_b, p)[0]
            torch.manual_seed(1)
            seed = torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device="cuda")
            z64 = x.double() @ w.double().t() + b.double()
            mask = torch.ops.gemm_act.dropout_scale(torch.ones(m, n, dtype=torch.float64, device="cuda"), p, seed) \
                if p > 0 else 1.0
            err_fused = (h_fused.double() - (r.double() + mask * z64)).abs().max().item()
            dropped = F.dropout(F.linear(x, w, b), p, training=True)
            keep = (dropped != 0).double() / (1 - p) if p > 0 else 1.0
            err_eager = ((r + dropped).double() - (r.double() + keep * z64)).abs().max().item()
            base_f, base_s = times["eager"]
            cells = " ".join(f"{c} {f * 1e3:6.1f}/{s * 1e3:6.1f} ({f / base_f:.3f}/{s / base_s:.3f})"
                             for c, (f, s) in times.items())
            print(f"p={p} {name:10s} {m}x{k}->{n}: fwd/train us (÷ eager) {cells} | "
                  f"err fused {err_fused:.3g} eager {err_eager:.3g}", flush=True)


if __name__ == "__main__":
    main()

"""What the dropout epilogue gives a block's residual branch: ``r +
F.dropout(F.linear(x, W, b), p)`` then the LayerNorm after it (the
pre-norm blocks' ln_2 / ln_1, BERT's LayerNorm), training, bf16, at the
out-projections of the model benchmark's blocks, forward and forward +
backward, medians of triton's do_bench:

  eager            PyTorch's ops (linear, dropout, add, layer_norm)
  fused            linear_dropout_add, then layer_norm
  compiled         torch.compile of eager's function (Inductor folds the
                   dropout and the add into its LayerNorm kernel)
  compile_fusion   the same with enable_compile_fusion() (rule
                   compiles_dropout_add: gemm_dropout_add, then Inductor's
                   LayerNorm)

and p = 0 (no dropout: the residual alone), eager and fused only (the rule
leaves that add to Inductor). Each line also gives the fused forward's
largest error from float64 with its own mask against eager's from float64
with eager's mask (the same formula, PyTorch's rounding).

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


def _branch(linear_dropout_add):
    def f(x, w, b, r, ln_w, ln_b, p):
        h = linear_dropout_add(x, w, b, r, p)
        return h, F.layer_norm(h, (h.shape[-1],), ln_w, ln_b)
    return f


def _eager_branch(x, w, b, r, p):
    return r + F.dropout(F.linear(x, w, b), p, training=True)


def _fused_branch(x, w, b, r, p):
    return tga.linear_dropout_add(x, w, b, r, p)


def _with_pass(fn, enabled):
    """fn run with the compile pass on or off: torch.compile compiles (and
    recompiles, at each new shape) at a call, under the pass set then."""
    def call(*args):
        tga.enable_compile_fusion(enabled)
        try:
            return fn(*args)
        finally:
            tga.enable_compile_fusion(False)
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--p", type=float, default=0.1)
    args = parser.parse_args()
    torch.manual_seed(0)
    eager, fused = _branch(_eager_branch), _branch(_fused_branch)
    torch._dynamo.reset()
    # Each shape, with and without gradients, compiles anew: more than Dynamo's default 8 per function.
    torch._dynamo.config.recompile_limit = 64
    compiled = _with_pass(torch.compile(_branch(_eager_branch)), False)
    compile_fusion = _with_pass(torch.compile(_branch(lambda *a: _eager_branch(*a))), True)
    everyone = {"eager": eager, "fused": fused, "compiled": compiled, "compile_fusion": compile_fusion}
    for p in (args.p, 0.0):
        # Without dropout the rule leaves the branch to Inductor: the compiled pair only with it.
        contenders = everyone if p > 0 else {"eager": eager, "fused": fused}
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
                fwd = do_bench(lambda: fn(x, w, b, r, ln_w, ln_b, p), warmup=50, rep=300)

                def train():
                    h, out = fn(*leaves, p)
                    torch.autograd.backward((h, out), (g_h, g_out))
                step = do_bench(train, warmup=20, rep=300, grad_to_none=leaves)
                times[cname] = (fwd, step)
            # Errors: each road's h against float64 with the mask it drew (0 where h is r exactly).
            torch.manual_seed(1)
            h_fused = _fused_branch(x, w, b, r, p)
            torch.manual_seed(1)
            seed = torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device="cuda")
            z64 = x.double() @ w.double().t() + b.double()
            mask = torch.ops.gemm_act.dropout_scale(torch.ones(m, n, dtype=torch.float64, device="cuda"), p, seed) \
                if p > 0 else 1.0
            err_fused = (h_fused.double() - (r.double() + mask * z64)).abs().max().item()
            z = F.linear(x, w, b)
            dropped = F.dropout(z, p, training=True)
            keep = (dropped != 0).double() / (1 - p) if p > 0 else 1.0
            err_eager = ((r + dropped).double() - (r.double() + keep * z64)).abs().max().item()
            base_f, base_s = times["eager"]
            cells = " ".join(f"{c} {f * 1e3:6.1f}/{s * 1e3:6.1f} ({f / base_f:.3f}/{s / base_s:.3f})"
                             for c, (f, s) in times.items())
            if "compiled" in times:
                (cf, cs), (pf, ps) = times["compiled"], times["compile_fusion"]
                cells += f" | compile_fusion ÷ compiled {pf / cf:.3f}/{ps / cs:.3f}"
            print(f"p={p} {name:10s} {m}x{k}->{n}: fwd/train us (÷ eager) {cells} | "
                  f"err fused {err_fused:.3g} eager {err_eager:.3g}", flush=True)


if __name__ == "__main__":
    main()

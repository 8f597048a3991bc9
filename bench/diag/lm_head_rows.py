"""linear_cross_entropy's roads, loss + backward, at LM heads' shapes: the
rules' choice (ce_eager, ce_rows), the rows road with its block forced to
each of --rows and the chunk road (ce_rows forced to 0; ce_eager off in
both), beside eager and compiled eager; time (median of CUDA-event
timings, rounds interleaved), peak memory above the inputs, and the
gradients' RMS error from float64 where the logits fit; with --profile,
each one's GPU time per kernel name.

    python bench/diag/lm_head_rows.py [--cases gpt2 ...] [--rows 2048 4096] [--profile]
"""

import argparse
import os
import sys
from unittest import mock

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lm_head  # noqa: E402
from lm_head_parts import median_ms, profile  # noqa: E402

import torch_gemm_act  # noqa: E402
from torch_gemm_act import _policy  # noqa: E402

# name: (tokens, hidden width, vocabulary): bench/lm_head.py's heads, whole_llama's and BERT's masked
# rows; small heads, their vocabulary a multiple of 8 or not (what compiled eager holds there); a
# 32000 vocabulary at 4096 wide; logits near rule ce_eager's bound.
HEADS = {"gpt2": lm_head.LINEAR_CE["linear_ce_gpt2"], "llama3": lm_head.LINEAR_CE["linear_ce_llama3"],
         "llama_1b": (8192, 2048, 128256), "bert_masked": (2458, 768, 30522),
         "bert_masked_v8": (2458, 768, 30528), "small_32000": (2048, 1024, 32000),
         "small_32001": (2048, 1024, 32001), "mistral_4k": (4096, 4096, 32000),
         "mistral_8k": (8192, 4096, 32000), "mistral_16k": (16384, 4096, 32000),
         "llama_1b_4k": (4096, 2048, 128256)}


def road(rows):
    """linear_cross_entropy with rule ce_rows answering `rows` and rule
    ce_eager no (None: the rules)."""
    def loss(h, w, t):
        if rows is None:
            return torch_gemm_act.linear_cross_entropy(h, w, t)
        with mock.patch.object(_policy, "ce_rows", lambda *args: rows), \
                mock.patch.object(_policy, "ce_eager", lambda *args: False):
            return torch_gemm_act.linear_cross_entropy(h, w, t)
    return loss


def step(loss_fn, hidden, weight, target):
    h = hidden.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)

    def run():
        h.grad = w.grad = None
        loss = loss_fn(h, w, target)
        loss.backward()
        return loss, h.grad, w.grad
    return run


def peak_mib(fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def rms(a, b):
    return ((a.double() - b.double()) ** 2).mean().sqrt().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", nargs="+", default=list(HEADS))
    p.add_argument("--rows", nargs="+", type=int, default=[1024, 2048, 4096, 8192])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    for case in args.cases:
        tokens, width, vocab = HEADS[case]
        g = torch.Generator(device="cuda").manual_seed(0)
        hidden = torch.randn(tokens, width, device="cuda", generator=g).bfloat16()
        weight = (torch.randn(vocab, width, device="cuda", generator=g) / width ** 0.5).bfloat16()
        target = torch.randint(vocab, (tokens,), device="cuda", generator=g)
        target[::17] = -100

        def eager(h, w, t):
            return F.cross_entropy(F.linear(h, w), t)
        # Each case compiled afresh: the same code at a second case's shapes compiles dynamic (slower) kernels.
        torch._dynamo.reset()
        rule = min(_policy.ce_rows(tokens, width, vocab, 2, 4), tokens)
        chosen = "eager" if _policy.ce_eager(tokens, vocab, 2) else rule or "chunks"
        fns = {"eager": step(eager, hidden, weight, target),
               "compile": step(torch.compile(eager), hidden, weight, target),
               "chunks": step(road(0), hidden, weight, target),
               f"rule ({chosen})": step(road(None), hidden, weight, target)}
        for rows in args.rows:
            if rows <= tokens and (rows != rule or chosen == "eager"):
                fns[f"rows {rows}"] = step(road(rows), hidden, weight, target)
        # Rule ce_rows's model of what compiled eager holds: the logits and the gradients, bf16.
        modelled = 2 * (tokens * vocab + vocab * width + tokens * width) / 2 ** 20
        print(f"=== {case}: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}; ce_rows models "
              f"compiled eager's peak as {modelled:.0f} MiB")
        ref = None
        if tokens * vocab <= 2 ** 31:
            h64, w64 = hidden.double().requires_grad_(True), weight.double().requires_grad_(True)
            F.cross_entropy(F.linear(h64, w64), target).backward()
            ref = [h64.grad, w64.grad]
            del h64, w64
        times = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(median_ms(fn))
        for name, fn in fns.items():
            loss, gh, gw = fn()
            err = "" if ref is None else f"  rms err dH {rms(gh, ref[0]):.3e} dW {rms(gw, ref[1]):.3e}"
            t = sorted(times[name])[len(times[name]) // 2]
            print(f"{name:>16}: {t:8.3f} ms  {t / sorted(times['eager'])[args.rounds // 2]:.3f} x eager  "
                  f"{t / sorted(times['compile'])[args.rounds // 2]:.3f} x compile  "
                  f"peak {peak_mib(fn):8.0f} MiB  loss {loss.item():.5f}{err}", flush=True)
        if args.profile:
            for name, fn in fns.items():
                profile(name, fn, 8)
        del fns, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

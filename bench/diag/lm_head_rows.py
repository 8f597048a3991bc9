"""The LM head's loss with the tokens in blocks instead of the vocabulary in
chunks: a prototype in Python, timed beside linear_cross_entropy, eager and
compiled eager, and checked against float64.

A block of rows takes the whole vocabulary: its logits (one GEMM), each
row's log-sum-exp and at once its gradient (softmax - onehot over the
count of rows that count), then hidden's rows of gradient (one GEMM, whole)
and the weight's gradient (one GEMM added in fp32 over blocks). Three GEMM
passes to the chunk loop's four, for an fp32 weight gradient [V, D] held
from the forward to the backward, which multiplies by the incoming scalar.

    python bench/diag/lm_head_rows.py [--cases linear_ce_gpt2 ...] [--rows 1024 2048]
"""

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lm_head  # noqa: E402

import torch_gemm_act  # noqa: E402
from torch_gemm_act import ops  # noqa: E402


class RowBlocks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, rows, dh_fp32):
        tokens, width = hidden.shape
        vocab = weight.shape[0]
        padded = (vocab + 7) // 8 * 8
        w = weight if padded == vocab else F.pad(weight, (0, 0, 0, padded - vocab))
        acc = torch.promote_types(hidden.dtype, torch.float32)
        valid = target != -100
        scale = torch.where(valid, 1.0 / valid.sum().to(acc), 0.0)
        lse = torch.full((tokens,), -math.inf, dtype=acc, device=hidden.device)
        target_logit = torch.zeros(tokens, dtype=acc, device=hidden.device)
        buf = torch.empty(min(rows, tokens), padded, dtype=hidden.dtype, device=hidden.device)
        grad_w = torch.zeros(padded, width, dtype=acc, device=hidden.device)
        grad_h = torch.empty(tokens, width, dtype=acc if dh_fp32 else hidden.dtype, device=hidden.device)
        for r0 in range(0, tokens, rows):
            r = min(rows, tokens - r0)
            z, h, t = buf[:r], hidden[r0:r0 + r], target[r0:r0 + r]
            torch.mm(h, w.t(), out=z)
            zv = z[:, :vocab]
            ops.ce_chunk_forward(zv, t, 0, 0.0, lse[r0:r0 + r], target_logit[r0:r0 + r], None)
            ops.ce_chunk_backward(zv, t, lse[r0:r0 + r], scale[r0:r0 + r], 0, vocab, 0.0, 0.0)
            if padded > vocab:
                z[:, vocab:].zero_()
            if acc == hidden.dtype or not dh_fp32:
                torch.mm(z, w, out=grad_h[r0:r0 + r])
            else:
                torch.ops.aten.mm.dtype_out(z, w, acc, out=grad_h[r0:r0 + r])
            if acc == hidden.dtype:
                grad_w.addmm_(z.t(), h)
            else:
                torch.ops.aten.addmm.dtype_out(grad_w, z.t(), h, acc, out=grad_w)
        loss = torch.where(valid, lse - target_logit, 0.0).sum() / valid.sum()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.vocab = vocab
        return loss.to(hidden.dtype)

    @staticmethod
    def backward(ctx, grad):
        grad_h, grad_w = ctx.saved_tensors
        g = grad.to(grad_w.dtype)
        return (grad_h * g).to(grad.dtype), (grad_w[:ctx.vocab] * g).to(grad.dtype), None, None, None


def step(loss_fn, hidden, weight, target):
    h = hidden.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)

    def run():
        h.grad = w.grad = None
        loss = loss_fn(h, w, target)
        loss.backward()
        return loss, h.grad, w.grad
    return run


def median_ms(fn, reps=15):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


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
    p.add_argument("--cases", nargs="+", default=sorted(lm_head.LINEAR_CE))
    p.add_argument("--rows", nargs="+", type=int, default=[1024, 2048, 4096])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    for case in args.cases:
        tokens, width, vocab = lm_head.LINEAR_CE[case]
        g = torch.Generator(device="cuda").manual_seed(0)
        hidden = torch.randn(tokens, width, device="cuda", generator=g).bfloat16()
        weight = (torch.randn(vocab, width, device="cuda", generator=g) / width ** 0.5).bfloat16()
        target = torch.randint(vocab, (tokens,), device="cuda", generator=g)
        target[::17] = -100

        def eager(h, w, t):
            return F.cross_entropy(F.linear(h, w), t)
        fns = {"eager": step(eager, hidden, weight, target),
               "compile": step(torch.compile(eager), hidden, weight, target),
               "chunks": step(torch_gemm_act.linear_cross_entropy, hidden, weight, target)}
        for rows in args.rows:
            for fp32 in (True, False):
                fns[f"rows{rows}{'' if fp32 else '_dh16'}"] = step(
                    lambda h, w, t, rows=rows, fp32=fp32: RowBlocks.apply(h, w, t, rows, fp32), hidden, weight, target)
        print(f"=== {case}: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}")
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
            print(f"{name:>14}: {t:8.3f} ms  {t / sorted(times['eager'])[args.rounds // 2]:.3f} x eager  "
                  f"{t / sorted(times['compile'])[args.rounds // 2]:.3f} x compile  "
                  f"peak {peak_mib(fn):8.0f} MiB  loss {loss.item():.5f}{err}", flush=True)
        del fns, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

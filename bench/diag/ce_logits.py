"""How far a chunk of logits computed as linear_cross_entropy's chunk loop
computes it (addmm with the bias a 1-D operand, over the chunk's width padded
to 16 bytes with zero weight rows) lies from float64, beside F.linear's logits
of the whole vocabulary (cuBLASLt's bias epilogue) and the loop's earlier road,
a GEMM whose C is the bias broadcast to 2-D (copied in, then rounded a second
time: the fuzz's unconfirmed bf16 cases, all with a bias; MEASUREMENTS,
session 70). Errors as norms relative to float64's logits.

    python bench/diag/ce_logits.py [--cases 200] [--device cuda]
"""

import argparse

import torch
import torch.nn.functional as F


def rel(a, ref):
    return ((a.double() - ref).norm() / ref.norm()).item()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    g = torch.Generator().manual_seed(args.seed)
    worse = {"loop": 0, "broadcast": 0}
    ratios = {"loop": [], "broadcast": []}
    differ = 0
    for _ in range(args.cases):
        tokens = int(torch.randint(1, 300, (), generator=g))
        width = int(torch.randint(1, 300, (), generator=g))
        vocab = int(torch.randint(2, 5000, (), generator=g))
        chunk = int(torch.randint(1, vocab + 1, (), generator=g))
        h = torch.randn(tokens, width, generator=g).to(args.device, torch.bfloat16)
        w = torch.randn(vocab, width, generator=g).to(args.device, torch.bfloat16)
        b = torch.randn(vocab, generator=g).to(args.device, torch.bfloat16)
        ref = h.double() @ w.double().t() + b.double()
        whole = F.linear(h, w, b)
        chunked = {"loop": torch.empty_like(whole), "broadcast": torch.empty_like(whole)}
        for v0 in range(0, vocab, chunk):
            v1 = min(v0 + chunk, vocab)
            pad = -(-(v1 - v0) // 8) * 8 - (v1 - v0)
            w_rows, b_rows = F.pad(w[v0:v1], (0, 0, 0, pad)), F.pad(b[v0:v1], (0, pad))
            chunked["loop"][:, v0:v1] = torch.addmm(b_rows, h, w_rows.t())[:, :v1 - v0]
            z = torch.addmm(b_rows.expand(tokens, v1 - v0 + pad), h, w_rows.t())
            chunked["broadcast"][:, v0:v1] = z[:, :v1 - v0]
        e_whole = rel(whole, ref)
        differ += not torch.equal(chunked["loop"], whole)
        for name, logits in chunked.items():
            e = rel(logits, ref)
            ratios[name].append(e / max(e_whole, 1e-30))
            worse[name] += e > 1.5 * e_whole
            if e > 1.5 * e_whole:
                print(f"{name}: tokens {tokens} width {width} vocab {vocab} chunk {chunk}: {e:.3e}, "
                      f"F.linear's {e_whole:.3e}")
    print(f"{args.cases} cases; the loop's logits differ from F.linear's in {differ}")
    for name, r in ratios.items():
        r.sort()
        print(f"{name}: further from float64 than 1.5 x F.linear's in {worse[name]}; error ratio median "
              f"{r[len(r) // 2]:.3f}, max {r[-1]:.3f}")


if __name__ == "__main__":
    main()

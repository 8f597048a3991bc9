"""How far a chunk of logits computed as linear_cross_entropy's chunk loop
computes it (a GEMM whose C is the bias broadcast, over the chunk's width
padded to 16 bytes with zero weight rows) lies from float64, beside F.linear's
logits of the whole vocabulary (cuBLASLt's bias epilogue) and the same GEMM
over the chunk's own width (the loop before the padding): the fuzz's
unconfirmed bf16 cases all had a bias.

    python bench/diag/ce_logits.py [--cases 200]
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
    args = p.parse_args()
    g = torch.Generator().manual_seed(args.seed)
    worse = {"narrow": 0, "padded": 0}
    ratios = {"narrow": [], "padded": []}
    differ = 0
    for _ in range(args.cases):
        tokens = int(torch.randint(1, 300, (), generator=g))
        width = int(torch.randint(1, 300, (), generator=g))
        vocab = int(torch.randint(2, 5000, (), generator=g))
        chunk = int(torch.randint(1, vocab + 1, (), generator=g))
        h = torch.randn(tokens, width, generator=g).to("cuda", torch.bfloat16)
        w = torch.randn(vocab, width, generator=g).to("cuda", torch.bfloat16)
        b = torch.randn(vocab, generator=g).to("cuda", torch.bfloat16)
        ref = h.double() @ w.double().t() + b.double()
        whole = F.linear(h, w, b)
        chunked = {"narrow": torch.empty_like(whole), "padded": torch.empty_like(whole)}
        for v0 in range(0, vocab, chunk):
            v1 = min(v0 + chunk, vocab)
            ld = -(-(v1 - v0) // 8) * 8
            z = h.new_empty(tokens, ld)[:, :v1 - v0]
            torch.addmm(b[v0:v1].expand(tokens, v1 - v0), h, w[v0:v1].t(), out=z)
            chunked["narrow"][:, v0:v1] = z
            pad = ld - (v1 - v0)
            z = torch.addmm(F.pad(b[v0:v1], (0, pad)).expand(tokens, ld), h, F.pad(w[v0:v1], (0, 0, 0, pad)).t())
            chunked["padded"][:, v0:v1] = z[:, :v1 - v0]
        e_whole = rel(whole, ref)
        differ += not torch.equal(chunked["narrow"], chunked["padded"])
        for name, logits in chunked.items():
            e = rel(logits, ref)
            ratios[name].append(e / max(e_whole, 1e-30))
            worse[name] += e > 1.5 * e_whole
            if e > 1.5 * e_whole:
                print(f"{name}: tokens {tokens} width {width} vocab {vocab} chunk {chunk}: {e:.3e}, "
                      f"F.linear's {e_whole:.3e}")
    print(f"{args.cases} cases; padded chunks' logits differ from narrow ones' in {differ}")
    for name, r in ratios.items():
        r.sort()
        print(f"{name}: further from float64 than 1.5 x F.linear's in {worse[name]}; error ratio median "
              f"{r[len(r) // 2]:.3f}, max {r[-1]:.3f}")


if __name__ == "__main__":
    main()

"""How far a chunk of logits computed as linear_cross_entropy's chunk loop
computes it (a GEMM whose C is the bias broadcast, into rows padded to 16
bytes) lies from float64, beside F.linear's logits of the whole vocabulary
(cuBLASLt's bias epilogue): the fuzz's unconfirmed bf16 cases all had a
bias.

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
    worse, ratios, differ = 0, [], 0
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
        chunked = torch.empty_like(whole)
        for v0 in range(0, vocab, chunk):
            v1 = min(v0 + chunk, vocab)
            ld = -(-(v1 - v0) // 8) * 8
            z = h.new_empty(tokens, ld)[:, :v1 - v0]
            torch.addmm(b[v0:v1].expand(tokens, v1 - v0), h, w[v0:v1].t(), out=z)
            chunked[:, v0:v1] = z
        e_whole, e_chunked = rel(whole, ref), rel(chunked, ref)
        ratios.append(e_chunked / max(e_whole, 1e-30))
        worse += e_chunked > 1.5 * e_whole
        differ += not torch.equal(whole, chunked)
        if e_chunked > 1.5 * e_whole:
            print(f"tokens {tokens} width {width} vocab {vocab} chunk {chunk}: chunked {e_chunked:.3e} "
                  f"whole {e_whole:.3e}")
    ratios.sort()
    print(f"{args.cases} cases: chunked logits differ from F.linear's in {differ}; further from float64 than "
          f"1.5 x F.linear's in {worse}; error ratio median {ratios[len(ratios) // 2]:.3f}, max {ratios[-1]:.3f}")


if __name__ == "__main__":
    main()

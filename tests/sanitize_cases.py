"""Runs every CUDA kernel on small odd shapes, layouts and bias kinds, for
compute-sanitizer (memcheck, racecheck): any out-of-bounds access or shared
memory race shows up there. Run by tests/test_sanitizer.py as

    compute-sanitizer --tool memcheck --error-exitcode 9 python tests/sanitize_cases.py \
        [--cuda-backend NAME | --sm90-kernel NAME | --sm80-kernel NAME] [--small]

where --cuda-backend forces one CUDA backend on every case, --sm90-kernel
(--sm80-kernel) forces the sm90 (sm80) backend and one of its
configurations on the cases it exists for (bf16 with b = weight.t()), and --small skips the larger shapes
(for racecheck, which is slow).
"""

import argparse
import itertools
from unittest import mock

import torch

import torch_gemm_act as tga

SIZES = [1, 17, 136]  # 136: 16-byte aligned for fp16/bf16, so the sm90 kernel runs too


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cuda-backend", default=None, help="force this CUDA backend (torch_gemm_act.testing)")
    p.add_argument("--sm90-kernel", default=None,
                   help="force this sm90 configuration (torch_gemm_act.testing.kernels()) and run only "
                        "bf16 with b = weight.t()")
    p.add_argument("--sm80-kernel", default=None,
                   help="force the sm80 backend and this configuration; run only bf16 with b = weight.t()")
    p.add_argument("--small", action="store_true", help="only the small shapes")
    args = p.parse_args()
    kernel = args.sm90_kernel or args.sm80_kernel
    backend = "sm90" if args.sm90_kernel else "sm80" if args.sm80_kernel else args.cuda_backend
    with tga.testing.override(cuda_backend=backend, sm90_kernel=args.sm90_kernel,
                              sm80_kernel=args.sm80_kernel):
        count = run_cases(only_bf16_weight_t=kernel is not None, small=args.small)
    torch.cuda.synchronize()
    what = f"{kernel}, bf16, weight.t()" if kernel else (backend or "dispatch rule")
    print(f"sanitize sweep ({what}{', small' if args.small else ''}): {count} problems ran")


def run_cases(only_bf16_weight_t, small):
    dev = "cuda"
    count = 0
    all_dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    sizes = SIZES[1:] if small else SIZES
    for dtype in (torch.bfloat16,) if only_bf16_weight_t else all_dtypes:
        for m, k, n in itertools.product(sizes, sizes, sizes):
            if only_bf16_weight_t and (k % 8 or n % 8):  # the SIMT kernel's: nothing forced there
                continue
            a = torch.randn(m, k, device=dev, dtype=dtype, requires_grad=True)
            w = torch.randn(n, k, device=dev, dtype=dtype, requires_grad=True)
            for bias_shape, b in (((n,), w.t()), ((m, 1), w.t().contiguous()), ((), w.t())):
                if only_bf16_weight_t and b.stride(0) != 1:  # row-major B: no candidate
                    continue
                bias = torch.randn(bias_shape, device=dev, dtype=dtype, requires_grad=True)
                c = torch.randn(m, n, device=dev, dtype=dtype)
                y = tga.gemm_act(a, b, bias, c, activation="gelu", beta=0.5)
                torch.autograd.grad(y, (a, bias), torch.randn_like(y))
                count += 1
    # Each sm90 ping-pong tile (M <= 64, <= 128, <= 256) with ragged edges.
    for dtype in (torch.bfloat16,) if only_bf16_weight_t else (torch.bfloat16, torch.float16):
        for m, k, n in ((40, 72, 200), (100, 136, 200), (129, 72, 136)):
            a = torch.randn(m, k, device=dev, dtype=dtype)
            w = torch.randn(n, k, device=dev, dtype=dtype)
            for bias_shape in ((n,), (m, 1)):
                bias = torch.randn(bias_shape, device=dev, dtype=dtype)
                tga.gemm_act(a, w.t(), bias, activation="gelu", return_preact=True)
                count += 1
    if only_bf16_weight_t:
        return count
    # The activations cuBLASLt fuses (the library backend's fused epilogues),
    # with and without a bias per column, C and Z.
    for dtype in (torch.bfloat16, torch.float32):
        m, k, n = 100, 136, 200
        a = torch.randn(m, k, device=dev, dtype=dtype)
        w = torch.randn(n, k, device=dev, dtype=dtype)
        c = torch.randn(m, n, device=dev, dtype=dtype)
        for act, bias, cc, preact in itertools.product(
                ("none", "relu", "gelu_tanh"), (None, torch.randn(n, device=dev, dtype=dtype)),
                (None, c), (False, True)):
            tga.gemm_act(a, w.t(), bias, cc, activation=act, beta=0.0 if cc is None else 0.5,
                         return_preact=preact)
            count += 1
    # gemm_dact (the chained MLP backward): each sm90 dact configuration
    # (forced; None: the rule's) on aligned operands with ragged tiles, both
    # B layouts; the GEMM and pass elsewhere.
    dact_configs = [None] + sorted({k["name"] for k in tga.testing.kernels("sm90", op="gemm_dact")})
    for dtype, config in itertools.product((torch.bfloat16, torch.float16), dact_configs):
        for m, k, n in ((136, 136, 200), (129, 72, 136), (17, 24, 40), (17, 17, 17)):
            grad = torch.randn(m, k, device=dev, dtype=dtype)
            w = torch.randn(k, n, device=dev, dtype=dtype)
            saved = torch.randn(m, n, device=dev, dtype=dtype)
            with tga.testing.override(sm90_kernel=config):
                for b, act in ((w, "gelu"), (w.t().contiguous().t(), "relu")):
                    for bias in (None, torch.randn(n, device=dev, dtype=dtype)):  # with the column sums
                        torch.ops.gemm_act.gemm_dact(grad, b, saved, bias, act, 1.0, 0.01)
                        count += 1
            if config is None:
                for bias_shape in ((n,), (m, 1), ()):  # bias_grad: the reduction without dZ
                    torch.ops.gemm_act.bias_grad(saved, torch.empty(bias_shape, device=dev, dtype=dtype))
                    count += 1
                for bias_shape in (None, (n,), (m, 1), ()):  # the backward pass in place over gY
                    bias = None if bias_shape is None else torch.empty(bias_shape, device=dev, dtype=dtype)
                    torch.ops.gemm_act.activation_backward_(torch.randn_like(saved), saved, bias, "gelu", 0.01)
                    count += 1
    # Many rows: gemm_dact's column sums over more row tiles than the summing
    # kernel's loads in flight (65 against 64), and bias_grad's column tiles
    # narrowed to one level of partials (4096 x 768).
    for dtype in (torch.bfloat16, torch.float16):
        grad = torch.randn(8320, 72, device=dev, dtype=dtype)
        w = torch.randn(72, 136, device=dev, dtype=dtype)
        saved = torch.randn(8320, 136, device=dev, dtype=dtype)
        torch.ops.gemm_act.gemm_dact(grad, w, saved, torch.randn(136, device=dev, dtype=dtype), "gelu", 1.0, 0.01)
        torch.ops.gemm_act.bias_grad(torch.randn(4096, 768, device=dev, dtype=dtype),
                                     torch.empty(768, device=dev, dtype=dtype))
        count += 2
    # gemm_glu's fused kernels (each family forced: below 256 rows the rule
    # sends it to the composite, and the sm80 family runs only forced), with
    # and without H, with and without biases: ragged M and N (a multiple of
    # 8, not of the tile), the weights (and biases) two tensors or the
    # halves of one, in either order.
    capability = torch.cuda.get_device_capability()
    families = [f for f, runs in (("sm90", capability == (9, 0)), ("sm80", capability[0] >= 8))
                if runs and f in tga.testing.cuda_backends()]
    for family in families:
        with tga.testing.override(cuda_backend=family):
            for dtype in (torch.bfloat16, torch.float16):
                for m, k, n in ((136, 72, 200), (17, 64, 24)):
                    a = torch.randn(m, k, device=dev, dtype=dtype)
                    packed = torch.randn(2 * n, k, device=dev, dtype=dtype)
                    packed_bias = torch.randn(2 * n, device=dev, dtype=dtype)
                    apart = [torch.randn(n, k, device=dev, dtype=dtype) for _ in range(2)]
                    apart_bias = [torch.randn(n, device=dev, dtype=dtype) for _ in range(2)]
                    for (gate, up), biases in ((apart, apart_bias),
                                               ((packed[:n], packed[n:]), (packed_bias[:n], packed_bias[n:])),
                                               ((packed[n:], packed[:n]), (packed_bias[n:], packed_bias[:n]))):
                        for keep_h in (False, True):
                            for bias_gate, bias_up in ((None, None), biases):
                                tga.gemm_glu(a, gate.t(), up.t(), bias_gate, bias_up,
                                             activation="swiglu", return_preact=keep_h)
                                count += 1
    # The gated activation's passes: N a multiple of the 16-byte width or
    # not, h starting on a 16-byte boundary or not.
    for dtype in (torch.bfloat16, torch.float32):
        for m, n in ((33, 64), (17, 13)):
            base = torch.randn(m * 2 * n + 1, device=dev, dtype=dtype)
            for h in (base[: m * 2 * n].view(m, 2 * n), base[1:].view(m, 2 * n)):
                y = torch.ops.gemm_act.glu(h, "silu", 0.01)
                torch.ops.gemm_act.glu_backward(torch.randn_like(y), h, "gelu", 0.01)
                count += 2
    # linear_cross_entropy's chunk passes: widths a multiple of the 16-byte
    # group or not, rows padded or not, rows of more groups per lane than
    # it loads at once, the chunk starting off a 16-byte boundary, targets
    # inside, outside and ignored, softcap on and off.
    for dtype in (torch.bfloat16, torch.float32):
        for rows, width, ld, offset in ((33, 64, 64, 0), (17, 13, 16, 0), (9, 136, 139, 1), (5, 1, 8, 0),
                                         (3, 2504, 2504, 0), (2, 2501, 2504, 1)):
            base = torch.randn(rows * ld + offset, device=dev, dtype=dtype)
            z = base[offset:].view(rows, ld)[:, :width]
            target = torch.randint(-3, width + 3, (rows,), device=dev)
            target[::4] = -100
            lse = torch.randn(rows, device=dev)
            for softcap in (0.0, 2.0):
                torch.ops.gemm_act.ce_chunk_forward(z, target, 0, softcap, lse, torch.empty_like(lse),
                                                    torch.zeros_like(lse))
                torch.ops.gemm_act.ce_chunk_backward(z, target, lse + 1, torch.randn_like(lse), 0, width + 8,
                                                     0.1, softcap)
                count += 2
    # Dropout with the residual: the composite, and the fused kernel forced
    # (on aligned operands with ragged tiles: both B layouts, bias per
    # column, scalar or none); dropout's pass at an odd length and off a
    # 16-byte boundary.
    seed = torch.tensor(12345, device=dev)
    dropout_configs = sorted({k["name"] for k in tga.testing.kernels("sm90", op="gemm_dropout_add")})
    for dtype in (torch.bfloat16, torch.float32):
        for m, k, n in ((136, 72, 200), (17, 24, 40), (129, 136, 136), (5, 7, 9)):
            a = torch.randn(m, k, device=dev, dtype=dtype, requires_grad=True)
            w = torch.randn(n, k, device=dev, dtype=dtype, requires_grad=True)
            r = torch.randn(m, n, device=dev, dtype=dtype, requires_grad=True)
            for b, bias in ((w.t(), torch.randn(n, device=dev, dtype=dtype)), (w.t().contiguous(), None),
                            (w.t(), torch.randn((), device=dev, dtype=dtype))):
                for config in [None] + dropout_configs:  # the rule's road, then each fused kernel forced
                    with tga.testing.override(sm90_kernel=config):
                        y = torch.ops.gemm_act.gemm_dropout_add(a, b, bias, r, 0.3, seed)
                    torch.autograd.grad(y, (a, r), torch.randn_like(y))
                    count += 1
        base = torch.randn(4 * 37 + 1, device=dev, dtype=dtype)
        for z in (base[:4 * 37], base[1:], base[2:]):
            torch.ops.gemm_act.dropout_add(z, torch.randn_like(z), 0.5, seed)
            torch.ops.gemm_act.dropout_scale(z, 0.5, seed)
            count += 2
    # The chunk loops behind linear_cross_entropy: an odd vocabulary (the
    # last chunk narrower, its rows padded), with and without a bias.
    for dtype in (torch.bfloat16, torch.float32):
        hidden = torch.randn(19, 24, device=dev, dtype=dtype, requires_grad=True)
        weight = torch.randn(45, 24, device=dev, dtype=dtype, requires_grad=True)
        bias = torch.randn(45, device=dev, dtype=dtype, requires_grad=True)
        target = torch.randint(45, (19,), device=dev)
        for b in (None, bias):
            with mock.patch.object(tga._policy, "ce_chunk", lambda *shape: 16):
                tga.linear_cross_entropy(hidden, weight, target, b).backward()
            count += 1
    if small:
        return count
    # Strided / unaligned views.
    base = torch.randn(70, 71, device=dev)
    y = tga.gemm_act(base[1:, 1:40], base[3:42, 2:69], None, activation="relu")
    count += 1
    # Exact fp32 large enough for the SIMT kernel's 256 x 128 tiles, ragged.
    a = torch.randn(2053, 70, device=dev)
    w = torch.randn(2100, 70, device=dev)
    tga.gemm_act(a, w.t(), torch.randn(2100, device=dev), torch.randn(2053, 2100, device=dev),
                 activation="gelu", beta=0.5, return_preact=True)
    count += 1
    # fp32 with TF32 allowed (the sm90 TF32 kernels: ping-pong for K <= 1024,
    # cooperative beyond, with and without Z), and misaligned cases
    # above the staging threshold (aligned copies, then the sm90 kernel).
    torch.backends.cuda.matmul.allow_tf32 = True
    for dtype in (torch.float32, torch.bfloat16):
        for m, k, n in ((17, 136, 136), (520, 509, 260), (521, 512, 265), (130, 1032, 136)):
            a = torch.randn(m, k, device=dev, dtype=dtype)
            w = torch.randn(n, k, device=dev, dtype=dtype)
            c = torch.randn(m, n, device=dev, dtype=dtype)
            for bias_shape in ((n,), (m, 1)):
                bias = torch.randn(bias_shape, device=dev, dtype=dtype)
                for preact in (True, False):
                    tga.gemm_act(a, w.t(), bias, c, activation="silu", beta=0.5,
                                 return_preact=preact)
                    count += 1
    torch.backends.cuda.matmul.allow_tf32 = False
    return count


if __name__ == "__main__":
    main()

"""Dropout with the residual: dropout_add, dropout_scale, gemm_dropout_add
and linear_dropout_add, against float64 references built from the mask
csrc/dropout.h defines (checked here against an independent Philox4x32-10
and its published known-answer vectors), and the mask's statistics."""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import assert_close

OPS = torch.ops.gemm_act
MASK32 = 0xFFFFFFFF


def _philox(ctr, key):
    """Philox4x32-10 (Salmon et al. 2011), written from the paper."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def _mask(numel, p, seed):
    """Element i's factor: word i % 4 of Philox at counter (i / 4, 0) under
    key seed, kept below T = round((1 - p) 2^32), scaled by 2^32 / T."""
    threshold = round((1.0 - p) * 2 ** 32)
    scale = 0.0 if threshold == 0 else 2 ** 32 / threshold
    key = (seed & MASK32, (seed >> 32) & MASK32)
    out = []
    for g in range((numel + 3) // 4):
        words = _philox((g & MASK32, g >> 32, 0, 0), key)
        out += [scale if w < threshold else 0.0 for w in words]
    return torch.tensor(out[:numel], dtype=torch.float64)


def _seed(value, device="cpu"):
    return torch.tensor(value, dtype=torch.int64, device=device)


def test_philox_matches_the_published_known_answers():
    # Random123's kat_vectors for philox4x32 with 10 rounds.
    assert _philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert _philox((MASK32,) * 4, (MASK32, MASK32)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert _philox((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == \
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


@pytest.mark.parametrize("seed", [0, 12345, -1, -(2 ** 63), 2 ** 63 - 1])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_cpu_mask_is_the_defined_one(seed, p):
    numel = 103  # not a multiple of 4: the last group is partial
    factors = OPS.dropout_scale(torch.ones(numel, dtype=torch.float64), p, _seed(seed))
    assert torch.equal(factors, _mask(numel, p, seed % 2 ** 64))


def _reference_dropout_add(z, residual, p, seed):
    mask = OPS.dropout_scale(torch.ones(z.shape, dtype=torch.float64), p, seed.cpu())
    return residual.double().cpu() + mask * z.double().cpu()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7,), (5, 13), (3, 4, 8), (0, 3)])
def test_dropout_add_matches_float64(device, dtype, shape):
    z = torch.randn(shape, dtype=dtype, device=device)
    r = torch.randn(shape, dtype=dtype, device=device)
    seed = _seed(987654321, device)
    out = OPS.dropout_add(z, r, 0.3, seed)
    assert out.shape == z.shape and out.dtype == dtype
    assert_close(out, _reference_dropout_add(z, r, 0.3, seed), dtype)
    # Strided inputs read as their logical row-major order.
    zt, rt = z.transpose(0, -1), r.transpose(0, -1)
    assert_close(OPS.dropout_add(zt, rt, 0.3, seed), _reference_dropout_add(zt, rt, 0.3, seed), dtype)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("numel", [1, 4, 4099, 1 << 20])
def test_the_cuda_mask_is_the_cpu_mask(dtype, numel):
    seed = 2 ** 40 + 7
    cpu = OPS.dropout_scale(torch.ones(numel, dtype=dtype), 0.25, _seed(seed))
    cuda = OPS.dropout_scale(torch.ones(numel, dtype=dtype, device="cuda"), 0.25, _seed(seed, "cuda"))
    assert torch.equal(cuda.cpu(), cpu)
    # An unaligned start takes the element-wise loads; the same mask.
    base = torch.ones(numel + 1, dtype=dtype, device="cuda")
    assert torch.equal(OPS.dropout_scale(base[1:], 0.25, _seed(seed, "cuda")).cpu(), cpu)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_mask_keeps_one_minus_p_and_keeps_the_mean(device, p):
    n = 1 << 18
    factors = OPS.dropout_scale(torch.ones(n, dtype=torch.float64, device=device), p, _seed(31337, device))
    kept = (factors != 0).double().mean().item()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) < 6 * sigma, (kept, 1 - p)
    # E[factor] = 1: kept * scale, scale = 2^32 / T.
    assert abs(factors.mean().item() - 1.0) < 6 * sigma / (1 - p)
    assert factors.max().item() == pytest.approx(1 / (1 - p), rel=1e-9)


def test_the_same_seed_draws_the_same_mask_and_another_another(device):
    x = torch.ones(4096, device=device)
    a = OPS.dropout_scale(x, 0.5, _seed(1, device))
    assert torch.equal(a, OPS.dropout_scale(x, 0.5, _seed(1, device)))
    assert not torch.equal(a, OPS.dropout_scale(x, 0.5, _seed(2, device)))


def test_p_zero_keeps_all_and_p_one_drops_all(device):
    z, r = torch.randn(9, 10, device=device), torch.randn(9, 10, device=device)
    assert torch.equal(OPS.dropout_add(z, r, 0.0, _seed(5, device)), r + z)
    assert torch.equal(OPS.dropout_add(z, r, 1.0, _seed(5, device)), r)


# ---------------------------------------------------------------- gemm_dropout_add


def _linear_operands(lead, k, n, dtype, device, bias, requires_grad=False):
    x = torch.randn(*lead, k, dtype=torch.float64)
    w = torch.randn(n, k, dtype=torch.float64) / k ** 0.5
    b = {"none": None, "column": torch.randn(n, dtype=torch.float64),
         "scalar": torch.randn((), dtype=torch.float64)}[bias]
    r = torch.randn(*lead, n, dtype=torch.float64)

    def to(t):
        return None if t is None else t.to(device=device, dtype=dtype).requires_grad_(requires_grad)
    return to(x), to(w), to(b), to(r)


def _reference_linear_dropout_add(x, w, b, r, p, seed):
    """float64 on the CPU with the defined mask, differentiable."""
    d = [None if t is None else t.detach().double().cpu().requires_grad_(t.requires_grad) for t in (x, w, b, r)]
    z = d[0] @ d[1].t() + (d[2] if d[2] is not None else 0.0)
    mask = OPS.dropout_scale(torch.ones(z.shape, dtype=torch.float64), p, seed.cpu()) if p > 0 else 1.0
    return d[3] + mask * z, d


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", ["none", "column", "scalar"])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.6])
def test_gemm_dropout_add_matches_float64(device, dtype, bias, p):
    x, w, b, r = _linear_operands((37,), 40, 24, dtype, device, bias)
    seed = _seed(4242, device)
    y = OPS.gemm_dropout_add(x, w.t(), b, r, p, seed)
    assert y.shape == (37, 24) and y.dtype == dtype
    ref, _ = _reference_linear_dropout_add(x, w, b, r, p, seed)
    assert_close(y, ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("bias", ["none", "column"])
def test_linear_dropout_add_gradients_match_float64(device, dtype, p, bias):
    x, w, b, r = _linear_operands((3, 11), 24, 16, dtype, device, bias, requires_grad=True)
    torch.manual_seed(77)
    y = tga.linear_dropout_add(x, w, b, r, p)
    torch.manual_seed(77)
    seed = torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device=device) if p > 0 else _seed(0)
    ref, d = _reference_linear_dropout_add(x, w, b, r, p, seed)
    assert_close(y, ref, dtype)
    gy = torch.randn(y.shape, dtype=torch.float64)
    (y * gy.to(device=device, dtype=dtype)).sum().backward()
    (ref * gy).sum().backward()
    for got, want in zip((x, w, b, r), d):
        if want is not None:
            assert got.grad is not None
            assert_close(got.grad, want.grad, dtype, normwise=True)


def test_linear_dropout_add_is_linear_plus_residual_without_training(device):
    x, w, b, r = _linear_operands((6, 5), 8, 12, torch.float32, device, "column")
    want = r + F.linear(x, w, b)
    assert_close(tga.linear_dropout_add(x, w, b, r, 0.5, training=False), want, torch.float32)
    assert_close(tga.linear_dropout_add(x, w, b, r, 0.0), want, torch.float32)


def test_linear_dropout_add_draws_a_fresh_mask_each_call_and_follows_manual_seed(device):
    x, w, b, r = _linear_operands((64,), 32, 32, torch.float32, device, "none")
    torch.manual_seed(0)
    first = tga.linear_dropout_add(x, w, b, r, 0.5)
    second = tga.linear_dropout_add(x, w, b, r, 0.5)
    assert not torch.equal(first, second)
    torch.manual_seed(0)
    assert torch.equal(tga.linear_dropout_add(x, w, b, r, 0.5), first)


def test_conv1d_layout_and_offsets(device):
    # b [K, N] contiguous (Conv1D's weight), and operands at odd offsets.
    k, n = 48, 40
    xs = torch.randn(1 + 20 * k, device=device)[1:].view(20, k)
    wt = torch.randn(k, n, device=device) / k ** 0.5
    rs = torch.randn(3 + 20 * n, device=device)[3:].view(20, n)
    seed = _seed(99, device)
    y = OPS.gemm_dropout_add(xs, wt, None, rs, 0.2, seed)
    ref, _ = _reference_linear_dropout_add(xs, wt.t(), None, rs, 0.2, seed)
    assert_close(y, ref, torch.float32)


def test_autocast_keeps_an_fp32_residual_stream(device):
    x, w, b, r = _linear_operands((16,), 32, 24, torch.float32, device, "column")
    dtype = torch.bfloat16
    with torch.autocast(device_type=device, dtype=dtype):
        y = tga.linear_dropout_add(x, w, b, r, 0.0)
        eager = r + F.linear(x, w, b)
        y_low = tga.linear_dropout_add(x.to(dtype), w, b, r.to(dtype), 0.0)
    assert y.dtype == eager.dtype == torch.float32
    assert y_low.dtype == dtype
    assert_close(y, eager.float(), dtype)


@pytest.mark.parametrize("make, match", [
    (lambda d: OPS.dropout_add(torch.ones(3, device=d), torch.ones(3, device=d), 1.5, _seed(0, d)),
     r"p is the probability of dropping an element, in \[0, 1\]; got 1.5"),
    (lambda d: OPS.dropout_add(torch.ones(3, device=d), torch.ones(4, device=d), 0.1, _seed(0, d)),
     r"residual must have z's shape \[3\], got \[4\]"),
    (lambda d: OPS.dropout_scale(torch.ones(3, device=d), 0.1, torch.zeros(2, dtype=torch.int64, device=d)),
     r"seed must be one int64 element"),
    (lambda d: OPS.dropout_scale(torch.ones(3, device=d), 0.1, torch.zeros((), device=d)),
     r"seed must be one int64 element"),
    (lambda d: OPS.gemm_dropout_add(torch.ones(2, 3, device=d), torch.ones(3, 4, device=d), None,
                                    torch.ones(2, 5, device=d), 0.1, _seed(0, d)),
     r"residual must have the output's shape \[2, 4\], got \[2, 5\]"),
    (lambda d: tga.linear_dropout_add(torch.ones(2, 3, device=d), torch.ones(4, 3, device=d), None,
                                      torch.ones(2, 4, device=d), -0.1),
     r"in \[0, 1\]; got -0.1"),
])
def test_bad_arguments_say_what_was_expected(device, make, match):
    with pytest.raises(ValueError, match=match):
        make(device)


@requires_cuda
def test_a_seed_on_another_device_is_refused_cuda():
    with pytest.raises(ValueError, match=r"seed must be on the data's device, cuda:0, got cpu"):
        OPS.dropout_scale(torch.ones(3, device="cuda"), 0.1, _seed(0))


def test_opcheck(device):
    x, w, b, r = _linear_operands((6,), 8, 16, torch.float32, device, "column", requires_grad=True)
    seed = _seed(3, device)
    for op, args in ((OPS.gemm_dropout_add.default, (x, w.t(), b, r, 0.25, seed)),
                     (OPS.dropout_add.default, (r, r.detach().clone().requires_grad_(), 0.25, seed)),
                     (OPS.dropout_scale.default, (r.detach(), 0.25, seed))):
        torch.library.opcheck(op, args)


def test_compiled_linear_dropout_add_draws_fresh_masks_without_recompiling(device):
    x, w, b, r = _linear_operands((32,), 16, 16, torch.float32, device, "column", requires_grad=True)
    counter = torch._dynamo.testing.CompileCounter()
    fn = torch.compile(lambda x, r: tga.linear_dropout_add(x, w, b, r, 0.5), backend=counter, fullgraph=True)
    first, second = fn(x, r), fn(x, r)
    assert counter.frame_count == 1
    assert not torch.equal(first, second)
    first.sum().backward()
    assert x.grad is not None and w.grad is not None and r.grad is not None


# ------------------------------------------------------------- the fused sm90 kernel


def _kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


FUSED = "pingpong_128x128_c1x2_drop"


def _fused_kernels_built():
    return FUSED in {k["name"] for k in tga.testing.kernels("sm90", op="gemm_dropout_add")} and \
        torch.cuda.get_device_capability() == (9, 0)


def _forced():
    """The fused kernel, which only the testing switch chooses (rule dropout_forced)."""
    return tga.testing.override(sm90_kernel=FUSED)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, k, n, bias", [(256, 128, 256, "column"), (1000, 72, 136, "none"),
                                           (130, 64, 64, "scalar"), (4096, 768, 768, "column")])
@pytest.mark.parametrize("conv1d", [False, True])
def test_the_fused_kernel_draws_the_defined_mask_cuda(dtype, m, k, n, bias, conv1d):
    if not _fused_kernels_built():
        pytest.skip("no fused gemm_dropout_add kernel for this GPU in this build")
    x, w, b, r = _linear_operands((m,), k, n, dtype, "cuda", bias)
    wt = w.t().contiguous() if conv1d else w.t()  # [K, N] N-major (Conv1D) or K-major (nn.Linear)
    seed = _seed(2 ** 62 + 12345, "cuda")
    with _forced():
        names = _kernel_names(lambda: OPS.gemm_dropout_add(x, wt, b, r, 0.1, seed))
        y = OPS.gemm_dropout_add(x, wt, b, r, 0.1, seed)
    # The keep bits' kernel, then the GEMM: no GEMM then a dropout pass.
    assert any("keep_bits_kernel" in name for name in names) and not any("dropout_kernel" in name for name in names)
    # Unforced, the rule runs the GEMM and dropout's pass.
    assert any("dropout_kernel" in name for name in _kernel_names(lambda: OPS.gemm_dropout_add(x, wt, b, r, 0.1, seed)))
    ref, _ = _reference_linear_dropout_add(x, w, b, r, 0.1, seed)
    assert_close(y, ref, dtype)
    # Dropped elements are the residual exactly, at the mask's positions.
    dropped = OPS.dropout_scale(torch.ones(m, n, dtype=torch.float64), 0.1, seed.cpu()) == 0
    assert torch.equal(y.cpu()[dropped], r.cpu()[dropped])


@requires_cuda
def test_the_fused_and_composite_roads_agree_cuda():
    if not _fused_kernels_built():
        pytest.skip("no fused gemm_dropout_add kernel for this GPU in this build")
    x, w, b, r = _linear_operands((512,), 256, 384, torch.bfloat16, "cuda", "column")
    seed = _seed(7, "cuda")
    with _forced():
        fused = OPS.gemm_dropout_add(x, w.t(), b, r, 0.3, seed)
    composite = OPS.gemm_dropout_add(x, w.t(), b, r, 0.3, seed)
    dropped = (OPS.dropout_scale(torch.ones(512, 384, dtype=torch.float64), 0.3, seed.cpu()) == 0).cuda()
    assert torch.equal(fused[dropped], r[dropped]) and torch.equal(composite[dropped], r[dropped])
    assert_close(fused, composite, torch.bfloat16)

"""linear_cross_entropy and LinearCrossEntropy against F.cross_entropy of
the materialised logits: float64 as the reference, PyTorch's own
same-dtype error as the bar; every reduction, ignore_index, label
smoothing, softcap, bias, odd vocabularies, several chunks; clear errors
for bad input; the custom ops' registrations (opcheck) and torch.compile."""

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_gemm_act as tga
from conftest import DEVICES, requires_cuda
from torch_gemm_act import _policy

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 128 vocabulary columns: several per call at test sizes;
    the roads, never eager's ops (rule ce_eager)."""
    monkeypatch.setattr(_policy, "ce_chunk", lambda tokens, width, vocab, element_size: 128)
    monkeypatch.setattr(_policy, "ce_eager", lambda tokens, vocab, element_size: False)


def _reference(h, w, t, b, reduction, label_smoothing, softcap, ignore_index=-100):
    z = F.linear(h, w, b)
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    return F.cross_entropy(z.float() if z.dtype in (torch.float16, torch.bfloat16) else z, t,
                           reduction=reduction, label_smoothing=label_smoothing, ignore_index=ignore_index)


def _err(got, ref):
    ref = ref.double()
    scale = ref.abs().max().item() or 1.0
    return (got.double() - ref).abs().max().item() / scale


def _case(tokens, dim, vocab, dtype, bias, device="cpu"):
    g = torch.Generator().manual_seed(tokens * 1000 + vocab)
    h = torch.randn(tokens, dim, generator=g, dtype=torch.float64)
    w = torch.randn(vocab, dim, generator=g, dtype=torch.float64) / dim ** 0.5
    b = torch.randn(vocab, generator=g, dtype=torch.float64) if bias else None
    t = torch.randint(vocab, (tokens,), generator=g)
    t[::7] = -100
    to = dict(device=device)
    return (h.to(**to), w.to(**to), b.to(**to) if bias else None, t.to(**to))


def _check(dtype, tokens, dim, vocab, bias, reduction, label_smoothing, softcap, device="cpu"):
    h64, w64, b64, t = _case(tokens, dim, vocab, dtype, bias, device)
    leaves64 = [x.clone().requires_grad_() for x in (h64, w64) + ((b64,) if bias else ())]
    leaves = [x.detach().to(dtype).requires_grad_() for x in leaves64]
    eager_leaves = [x.detach().to(dtype).requires_grad_() for x in leaves64]

    def split(xs):
        return xs[0], xs[1], xs[2] if bias else None

    ref = _reference(*split(leaves64)[:2], t, split(leaves64)[2], reduction, label_smoothing, softcap)
    ours = tga.linear_cross_entropy(*split(leaves)[:2], t, split(leaves)[2], reduction=reduction,
                                    label_smoothing=label_smoothing, softcap=softcap)
    eager = _reference(*split(eager_leaves)[:2], t, split(eager_leaves)[2], reduction, label_smoothing, softcap)
    assert ours.dtype == dtype and ours.shape == ref.shape
    grad = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(device)
    ref_grads = torch.autograd.grad(ref, leaves64, grad)
    our_grads = torch.autograd.grad(ours, leaves, grad.to(dtype))
    eager_grads = torch.autograd.grad(eager, eager_leaves, grad.to(eager.dtype))
    # PyTorch's own same-dtype error is the bar (3x, and a floor per precision).
    floor = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    for got, want, theirs in zip((ours,) + our_grads, (ref,) + ref_grads, (eager,) + eager_grads):
        assert _err(got, want) <= max(3 * _err(theirs, want), floor), (_err(got, want), _err(theirs, want))


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing,softcap,bias", [(0.0, None, False), (0.1, None, True),
                                                          (0.0, 30.0, False), (0.2, 5.0, True)])
def test_matches_cross_entropy_of_the_logits(dtype, reduction, label_smoothing, softcap, bias):
    _check(dtype, 45, 40, 1031, bias, reduction, label_smoothing, softcap)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("vocab", [1, 2, 127, 128, 129, 300])
def test_odd_vocabularies(vocab):
    _check(torch.float32, 13, 8, vocab, True, "mean", 0.05, None)


def test_leading_dimensions_and_lse():
    h, w, b, t = _case(24, 16, 200, torch.float64, True)
    loss, lse = tga.linear_cross_entropy(h.reshape(4, 6, 16), w, t.reshape(4, 6), b, reduction="none",
                                         return_lse=True)
    assert loss.shape == lse.shape == (4, 6)
    torch.testing.assert_close(loss.reshape(-1), _reference(h, w, t, b, "none", 0.0, None))
    torch.testing.assert_close(lse.reshape(-1), torch.logsumexp(F.linear(h, w, b), -1))


def test_every_row_ignored_is_nan_as_pytorch():
    h, w, _, t = _case(5, 8, 50, torch.float64, False)
    t[:] = -100
    got = tga.linear_cross_entropy(h, w, t)
    assert torch.isnan(got) and torch.isnan(F.cross_entropy(F.linear(h, w), t))
    assert tga.linear_cross_entropy(h, w, t, reduction="sum") == 0


def test_custom_ignore_index():
    h, w, _, t = _case(20, 8, 50, torch.float64, False)
    t[t == -100] = 7
    got = tga.linear_cross_entropy(h, w, t, ignore_index=7)
    torch.testing.assert_close(got, _reference(h, w, t, None, "mean", 0.0, None, ignore_index=7))


@pytest.mark.parametrize("call,error,match", [
    (lambda h, w, t: tga.linear_cross_entropy(h, w[:, :5], t), ValueError, "hidden"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, t[:3]), ValueError, "leading shape"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w[:0], t), ValueError, "no rows"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, t.double()), TypeError, "class indices"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, t, torch.zeros(3)), ValueError, "bias"),
    (lambda h, w, t: tga.linear_cross_entropy(h.double(), w, t), TypeError, "dtype"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, t, reduction="avg"), ValueError, "reduction"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, t, label_smoothing=1.5), ValueError, "label_smoothing"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, t, softcap=0.0), ValueError, "softcap"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, torch.full_like(t, 50)), IndexError, "out of bounds"),
    (lambda h, w, t: tga.linear_cross_entropy(h, w, torch.full_like(t, -2)), IndexError, "out of bounds"),
])
def test_bad_input_says_what_was_given(call, error, match):
    h, w, t = torch.randn(6, 8), torch.randn(50, 8), torch.randint(50, (6,))
    with pytest.raises(error, match=match):
        call(h, w, t)


def test_module_is_a_linear():
    torch.manual_seed(0)
    head = tga.LinearCrossEntropy(16, 100, bias=True, label_smoothing=0.1)
    linear = torch.nn.Linear(16, 100)
    linear.load_state_dict(head.state_dict())
    assert isinstance(head, torch.nn.Linear) and set(head.state_dict()) == {"weight", "bias"}
    h, t = torch.randn(2, 9, 16), torch.randint(100, (2, 9))
    torch.testing.assert_close(head(h, t), F.cross_entropy(linear(h).reshape(-1, 100), t.reshape(-1),
                                                           label_smoothing=0.1))


@pytest.mark.parametrize("bias", [False, True])
def test_opcheck(bias):
    h, w, b, t = _case(10, 8, 300, torch.float32, bias)
    h.requires_grad_()
    w.requires_grad_()
    args = (h, w, t, b, -100, 1, 0.1, 0.0, 128)
    torch.library.opcheck(torch.ops.gemm_act.linear_cross_entropy.default, args)
    _, lse = torch.ops.gemm_act.linear_cross_entropy(*args)
    grad = torch.tensor(1.0)
    torch.library.opcheck(torch.ops.gemm_act.linear_cross_entropy_backward.default,
                          (grad, h.detach(), w.detach(), t, b, lse.detach(), -100, 1, 0.1, 0.0, 128,
                           [True, True, bias]))


def test_eager_rule():
    """Rule ce_eager: a vocabulary a whole number of 16-byte units of the
    dtype, logits below CE_EAGER_MAX_LOGITS_BYTES."""
    assert _policy.ce_eager(4096, 32000, 2)  # Mistral's head at 4096 tokens
    assert not _policy.ce_eager(4096, 32001, 2) and not _policy.ce_eager(2458, 30522, 2)  # unaligned
    assert not _policy.ce_eager(8192, 128256, 2)  # Llama-3's logits: 2 GiB
    assert _policy.ce_eager(100, 52, 4) and not _policy.ce_eager(100, 52, 2)  # units of 4 fp32, of 8 bf16
    tokens = _policy.CE_EAGER_MAX_LOGITS_BYTES // (2 * 1024)
    assert _policy.ce_eager(tokens - 1, 1024, 2) and not _policy.ce_eager(tokens, 1024, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_eager_road_is_eagers_ops(monkeypatch, device, dtype, reduction):
    """Where rule ce_eager holds, a call with a gradient runs F.linear and
    F.cross_entropy: eager's loss and gradients, bit for bit, and neither
    road's operator; with the log-sum-exp asked for, or no gradient, a road."""
    from torch_gemm_act import cross_entropy
    calls = []
    for name in ("_ROWS", "_CHUNKS_FORWARD"):
        op = getattr(cross_entropy, name)
        monkeypatch.setattr(cross_entropy, name, lambda *args, op=op, name=name: calls.append(name) or op(*args))
    h, w, b, t = _case(40, 24, 256, dtype, True, device)
    h, w, b = (x.to(dtype).requires_grad_() for x in (h, w, b))
    assert _policy.ce_eager(40, 256, dtype.itemsize)
    options = dict(reduction=reduction, label_smoothing=0.1, softcap=5.0)
    ours = tga.linear_cross_entropy(h, w, t, b, **options)
    eager = F.cross_entropy(5.0 * torch.tanh(F.linear(h, w, b) / 5.0), t, reduction=reduction, label_smoothing=0.1)
    assert calls == [] and ours.dtype == eager.dtype and torch.equal(ours, eager)
    grad = torch.randn_like(eager)
    for got, want in zip(torch.autograd.grad(ours, (h, w, b), grad), torch.autograd.grad(eager, (h, w, b), grad)):
        assert torch.equal(got, want)
    tga.linear_cross_entropy(h, w, t, b, return_lse=True, **options)
    with torch.no_grad():
        tga.linear_cross_entropy(h, w, t, b, **options)
    assert len(calls) == 2


def test_eager_road_under_autocast():
    """Under autocast eager's road is F.linear in autocast's dtype and
    F.cross_entropy in fp32, as eager mode runs them."""
    h, w, b, t = _case(40, 24, 256, torch.float32, True)
    h, w = h.float().requires_grad_(), w.float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = tga.linear_cross_entropy(h, w, t)
        eager = F.cross_entropy(F.linear(h, w), t)
    assert ours.dtype == eager.dtype == torch.float32 and torch.equal(ours, eager)
    for got, want in zip(torch.autograd.grad(ours, (h, w)), torch.autograd.grad(eager, (h, w))):
        assert torch.equal(got, want)


def test_compiles_in_one_graph():
    h, w, b, t = _case(12, 8, 300, torch.float32, True)
    h.requires_grad_()

    def step(h, w, t, b):
        return tga.linear_cross_entropy(h, w, t, b, label_smoothing=0.1)
    loss = torch.compile(step, fullgraph=True)(h, w, t, b)
    torch.testing.assert_close(loss, step(h, w, t, b))
    loss.backward()
    h2 = h.detach().requires_grad_()
    step(h2, w, t, b).backward()
    torch.testing.assert_close(h.grad, h2.grad)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_matches_cross_entropy_cuda(dtype):
    _check(dtype, 300, 64, 5003, True, "mean", 0.1, None, device="cuda")
    _check(dtype, 257, 96, 3001, False, "none", 0.0, 30.0, device="cuda")


@requires_cuda
@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dtype", DTYPES)
def test_several_chunks_cuda(dtype):
    """Chunks of 128 columns (16-byte accesses) and a last one of 11 (one
    element at a time), on the GPU's chunk passes."""
    _check(dtype, 70, 48, 5003, True, "mean", 0.1, None, device="cuda")
    _check(dtype, 33, 40, 1291, False, "sum", 0.0, 5.0, device="cuda")


# The chunk operators alone: a chunk of logits [rows, width] at columns
# [v0, v0 + width) of a vocabulary, against float64 torch ops.

def _chunk_case(rows, width, dtype, device, offset, v0=64):
    """z as a view of a wider tensor `full` (row stride width + 3 when offset,
    its first element `offset` past the storage's); targets inside the
    chunk, outside it and ignored."""
    g = torch.Generator().manual_seed(rows * 31 + width)
    ld = width + (3 if offset else 0)
    full = (4 * torch.randn(rows * ld + offset, generator=g, dtype=torch.float64)).to(device, dtype)
    z = full[offset:].view(rows, ld)[:, :width]
    target = torch.randint(v0 - 10, v0 + width + 10, (rows,), generator=g)
    target[::5] = -100
    return z, target.to(device), full


def _chunk_expected(z, target, v0, softcap):
    l = z.to("cpu", torch.float64, copy=True)
    if softcap:
        l = softcap * torch.tanh(l / softcap)
    cols = target - v0
    inside = (cols >= 0) & (cols < z.shape[1])
    picked = l.gather(1, cols.clamp(0, max(z.shape[1] - 1, 0))[:, None]).squeeze(1)
    return l, torch.logsumexp(l, dim=1), inside, picked


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width,offset", [(1, 0), (1, 2), (7, 1), (128, 0), (136, 3), (1000, 0), (2504, 0), (2501, 1)])
@pytest.mark.parametrize("softcap", [0.0, 3.0])
def test_chunk_forward_against_float64(device, dtype, width, offset, softcap):
    rows, v0 = 37, 64
    z, target, _ = _chunk_case(rows, width, dtype, device, offset, v0)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    running = torch.randn(rows, dtype=torch.float64)
    lse = running.to(device, acc, copy=True)
    target_logit = torch.full((rows,), 123.0, dtype=acc, device=device)
    logit_sum = torch.full((rows,), 0.5, dtype=acc, device=device)
    tga.ops.ce_chunk_forward(z, target, v0, softcap, lse, target_logit, logit_sum)
    l, chunk_lse, inside, picked = _chunk_expected(z.cpu(), target.cpu(), v0, softcap)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-6, atol=2e-5)
    torch.testing.assert_close(lse.cpu().double(), torch.logaddexp(running, chunk_lse), **tol)
    torch.testing.assert_close(target_logit.cpu().double(), torch.where(inside, picked, 123.0), **tol)
    # A sum of `width` terms: its rounding grows with their magnitudes.
    sum_tol = dict(rtol=0, atol=tol["atol"] + tol["rtol"] * l.abs().sum(dim=1).max().item())
    torch.testing.assert_close(logit_sum.cpu().double(), 0.5 + l.sum(dim=1), **sum_tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [7, 64, 2048])
def test_chunk_forward_infinities_and_nan_as_logsumexp(device, dtype, width):
    """-inf logits add nothing to a row's running log-sum-exp (a row all -inf
    leaves it as it was); a NaN anywhere in the row makes it NaN, wherever
    it falls among the lanes' columns."""
    g = torch.Generator().manual_seed(width)
    z = 3 * torch.randn(8, width, generator=g, dtype=torch.float64)
    z[0] = -math.inf
    z[1, ::3] = -math.inf
    z[2] = -math.inf
    z[2, width // 2] = math.nan
    z[3, -1] = math.nan
    z[4, : width // 2] = -math.inf
    z[5] = -math.inf
    z[5, -1] = 2.0
    z[6, 0] = math.nan
    running = torch.tensor([0.3, 0.3, 0.3, -math.inf, -math.inf, -math.inf, 1.0, -math.inf], dtype=torch.float64)
    z = z.to(device, dtype)
    lse = running.to(device, torch.float32, copy=True)
    target = torch.full((8,), -100, device=device)
    tga.ops.ce_chunk_forward(z, target, 0, 0.0, lse, torch.zeros(8, device=device), None)
    expected = torch.logaddexp(running, torch.logsumexp(z.cpu().double(), dim=1))
    torch.testing.assert_close(lse.cpu().double(), expected, rtol=2e-6, atol=2e-5, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width,offset", [(1, 0), (1, 2), (7, 1), (128, 0), (136, 3), (1000, 0), (2504, 0), (2501, 1)])
@pytest.mark.parametrize("smoothing,softcap", [(0.0, 0.0), (0.1, 3.0)])
def test_chunk_backward_against_float64(device, dtype, width, offset, smoothing, softcap):
    rows, v0, vocab = 37, 64, 3000
    z, target, full = _chunk_case(rows, width, dtype, device, offset, v0)
    outside = torch.ones_like(full, dtype=torch.bool)
    outside[offset:].view(rows, -1)[:, :width] = False
    before = full[outside].clone()
    l, chunk_lse, inside, _ = _chunk_expected(z.cpu(), target.cpu(), v0, softcap)
    lse = chunk_lse + torch.rand(rows, dtype=torch.float64)  # other chunks' share
    scale = torch.randn(rows, dtype=torch.float64)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    tga.ops.ce_chunk_backward(z, target, lse.to(device, acc), scale.to(device, acc), v0, vocab, smoothing, softcap)
    cols = torch.arange(width)[None, :] + v0
    onehot = (cols == target.cpu()[:, None]).double()
    want = (torch.exp(l - lse[:, None]) - smoothing / vocab - (1 - smoothing) * onehot) * scale[:, None]
    if softcap:
        want = want * (1 - (l / softcap) ** 2)
    # One rounding to z's dtype from fp32 (float64) math.
    tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    torch.testing.assert_close(z.cpu().double(), want, rtol=tol, atol=tol * want.abs().max().item())
    assert torch.equal(full[outside], before)  # nothing written outside the chunk


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_opcheck(device):
    z, target, _ = _chunk_case(9, 40, torch.float32, device, 0)
    lse = torch.zeros(9, device=device)
    args = (z, target, 64, 0.0, lse, torch.zeros(9, device=device), torch.zeros(9, device=device))
    torch.library.opcheck(torch.ops.gemm_act.ce_chunk_forward.default, args)
    torch.library.opcheck(torch.ops.gemm_act.ce_chunk_backward.default,
                          (z.clone(), target, lse + 5, torch.ones(9, device=device), 64, 200, 0.1, 2.0))


@pytest.mark.parametrize("call,error,match", [
    (lambda z, t, r: tga.ops.ce_chunk_forward(z[0], t, 0, 0.0, r, r.clone(), None), ValueError, "2-D"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z.t(), t[:4], 0, 0.0, r[:4], r[:4].clone(), None),
     ValueError, "contiguous"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z, t[:3], 0, 0.0, r, r.clone(), None), ValueError, "target"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z, t.int(), 0, 0.0, r, r.clone(), None), TypeError, "Long"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z, t, 0, 0.0, r.double(), r.clone(), None), TypeError, "Float"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z, t, -1, 0.0, r, r.clone(), None), ValueError, "v0"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z, t, 0, -1.0, r, r.clone(), None), ValueError, "softcap"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z, t, 0, 0.0, torch.zeros(12)[::2], r.clone(), None),
     ValueError, "contiguous"),
    (lambda z, t, r: tga.ops.ce_chunk_forward(z.long(), t, 0, 0.0, r, r.clone(), None), TypeError, "floating"),
    (lambda z, t, r: tga.ops.ce_chunk_backward(z, t, r, r, 0, 5, 0.0, 0.0), ValueError, "vocab"),
    (lambda z, t, r: tga.ops.ce_chunk_backward(z, t, r, r, 0, 50, 2.0, 0.0), ValueError, "label_smoothing"),
])
def test_chunk_bad_input_says_what_was_given(call, error, match):
    z, t, r = torch.randn(6, 8), torch.randint(8, (6,)), torch.zeros(6)
    with pytest.raises(error, match=match):
        call(z, t, r)


def _loop_case(device, dtype, tokens=9, width=12, vocab=45, bias=True):
    g = torch.Generator().manual_seed(tokens * vocab + width)
    h = torch.randn(tokens, width, generator=g, dtype=torch.float64)
    w = torch.randn(vocab, width, generator=g, dtype=torch.float64) / width ** 0.5
    b = torch.randn(vocab, generator=g, dtype=torch.float64) if bias else None
    target = torch.randint(vocab, (tokens,), generator=g)
    target[::4] = -100
    cast = lambda t: None if t is None else t.to(device, dtype)  # noqa: E731
    return cast(h), cast(w), cast(b), target.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 7, 16, 45, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_chunk_loops_against_float64(device, dtype, chunk, bias):
    """linear_ce_chunks_forward / _backward: every chunk (the last one narrower,
    its rows padded) folded and differentiated as the whole vocabulary at once."""
    h, w, b, target = _loop_case(device, dtype, bias=bias)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    tokens, vocab = h.shape[0], w.shape[0]
    logits = h.cpu().double() @ w.cpu().double().t() + (0 if b is None else b.cpu().double())
    lse, target_logit, logit_sum = (torch.full((tokens,), -math.inf, device=device, dtype=acc),
                                    torch.zeros(tokens, device=device, dtype=acc),
                                    torch.zeros(tokens, device=device, dtype=acc))
    tga.ops.linear_ce_chunks_forward(h, w, b, target, chunk, 0.0, lse, target_logit, logit_sum)
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 0.1}[dtype]
    valid = target.cpu() >= 0
    torch.testing.assert_close(lse.cpu().double(), torch.logsumexp(logits, 1), rtol=tol, atol=tol)
    picked = logits.gather(1, target.cpu().clamp(min=0)[:, None]).squeeze(1)
    torch.testing.assert_close(target_logit.cpu().double()[valid], picked[valid], rtol=tol, atol=tol)
    torch.testing.assert_close(logit_sum.cpu().double(), logits.sum(1), rtol=tol, atol=tol * vocab)

    scale = torch.where(valid, torch.rand(tokens, dtype=torch.float64) + 0.5, 0.0)
    grads = (torch.full(h.shape, 0.25, device=device, dtype=acc), torch.full_like(w, float("nan")),
             None if b is None else torch.full_like(b, float("nan")))
    exact_lse = torch.logsumexp(logits, 1)
    tga.ops.linear_ce_chunks_backward(h, w, b, target, exact_lse.to(device, acc), scale.to(device, acc), chunk,
                                      0.1, 0.0, *grads)
    onehot = torch.nn.functional.one_hot(target.cpu().clamp(min=0), vocab).double()
    dz = (torch.exp(logits - exact_lse[:, None]) - 0.1 / vocab - 0.9 * onehot) * scale[:, None]
    dtol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(grads[0].cpu().double(), 0.25 + dz @ w.cpu().double(), rtol=dtol, atol=dtol)
    torch.testing.assert_close(grads[1].cpu().double(), dz.t() @ h.cpu().double(), rtol=dtol, atol=dtol)
    if b is not None:
        torch.testing.assert_close(grads[2].cpu().double(), dz.sum(0), rtol=dtol, atol=dtol)


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_loops_opcheck(device):
    h, w, b, target = _loop_case(device, torch.float32)
    rows = lambda: torch.zeros(h.shape[0], device=device)  # noqa: E731
    torch.library.opcheck(torch.ops.gemm_act.linear_ce_chunks_forward.default,
                          (h, w, b, target, 16, 0.0, rows() - 100, rows(), rows()))
    torch.library.opcheck(torch.ops.gemm_act.linear_ce_chunks_backward.default,
                          (h, w, b, target, rows() + 5, rows() + 1, 16, 0.1, 2.0, torch.zeros_like(h),
                           torch.empty_like(w), torch.empty_like(b)))


@pytest.mark.parametrize("call,error,match", [
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_forward(h[0], w, b, t, 8, 0.0, r, r.clone(), None),
     ValueError, "2-D"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_forward(h[:, :5], w, b, t, 8, 0.0, r, r.clone(), None),
     ValueError, "width"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_forward(h.double(), w, b, t, 8, 0.0, r, r.clone(), None),
     TypeError, "dtype"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_forward(h, w, b[:3], t, 8, 0.0, r, r.clone(), None),
     ValueError, "bias"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_forward(h, w, b, t, 0, 0.0, r, r.clone(), None),
     ValueError, "chunk"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_backward(h, w, b, t, r, r, 8, 0.0, 0.0, None, w[:3], None),
     ValueError, "grad_weight"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_backward(h, w, b, t, r, r, 8, 0.0, 0.0, None, w.t().t().double(),
                                                             None), TypeError, "grad_weight"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_backward(h, w, None, t, r, r, 8, 0.0, 0.0, None, None, b),
     ValueError, "needs a bias"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_chunks_backward(h, w, b, t, r, r, 8, 0.0, 0.0, h.t(), None, None),
     ValueError, "grad_hidden"),
])
def test_chunk_loops_bad_input_says_what_was_given(call, error, match):
    h, w, b, t = _loop_case("cpu", torch.float32)
    with pytest.raises(error, match=match):
        call(h, w, b, t, torch.zeros(h.shape[0]))


@requires_cuda
def test_out_of_bounds_target_cuda():
    """A device assert, as F.cross_entropy's; in a process of its own (the
    assert leaves its CUDA context unusable)."""
    code = ("import torch, torch_gemm_act as tga\n"
            "h, w = torch.randn(6, 8, device='cuda'), torch.randn(50, 8, device='cuda')\n"
            "tga.linear_cross_entropy(h, w, torch.full((6,), 50, device='cuda'))\n"
            "torch.cuda.synchronize()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "out of bounds" in run.stderr, run.stderr[-2000:]


def test_under_autocast_as_pytorch():
    """Under autocast, as F.linear and F.cross_entropy run there: the GEMMs in
    autocast's dtype, the loss fp32; gradients in the parameters' dtype."""
    h64, w64, b64, t = _case(40, 32, 700, torch.float64, True)
    h, w, b = (x.float().requires_grad_() for x in (h64, w64, b64))
    with torch.autocast("cpu", torch.bfloat16):
        loss = tga.linear_cross_entropy(h, w, t, b)
        eager = F.cross_entropy(F.linear(h, w, b), t)
    assert loss.dtype == eager.dtype == torch.float32
    ref = _reference(h64, w64, t, b64, "mean", 0.0, None)
    assert _err(loss, ref) <= max(3 * _err(eager, ref), 2e-2)
    loss.backward()
    assert h.grad.dtype == w.grad.dtype == torch.float32


def test_under_autocast_operands_of_mixed_dtypes():
    """Under autocast hidden may come in autocast's dtype and the weight in
    fp32, as F.linear takes them; outside it they must match."""
    h64, w64, b64, t = _case(30, 16, 300, torch.float64, True)
    h, w, b = h64.bfloat16().requires_grad_(), w64.float().requires_grad_(), b64.float().requires_grad_()
    with torch.autocast("cpu", torch.bfloat16):
        loss = tga.linear_cross_entropy(h, w, t, b)
        eager = F.cross_entropy(F.linear(h, w, b), t)
    ref = _reference(h64, w64, t, b64, "mean", 0.0, None)
    assert loss.dtype == eager.dtype == torch.float32
    assert _err(loss, ref) <= max(3 * _err(eager, ref), 2e-2)
    loss.backward()
    assert (h.grad.dtype, w.grad.dtype, b.grad.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    with pytest.raises(TypeError, match="share a dtype, got torch.bfloat16, torch.float32"):
        tga.linear_cross_entropy(h, w, t, b)
    with torch.autocast("cpu", torch.bfloat16), pytest.raises(TypeError, match="autocast's torch.bfloat16"):
        tga.linear_cross_entropy(h64, w, t)  # float64 is not cast: F.linear refuses it too


def test_chunk_rule():
    """Rule ce_chunk: multiples of 128 columns within the vocabulary, about
    CE_CHUNK_BYTES of logits, wider where hidden's fp32 gradient is larger."""
    assert _policy.ce_chunk(8192, 768, 50257, 2) == _policy.CE_CHUNK_BYTES // (2 * 8192) // 128 * 128
    wide = _policy.ce_chunk(16384, 4096, 128256, 2)
    assert wide % 128 == 0 and wide * 16384 * 2 <= 4 * 16384 * 4096 < (wide + 128) * 16384 * 2
    assert _policy.ce_chunk(4, 8, 100, 4) == 100
    assert _policy.ce_chunk(10 ** 9, 8, 10 ** 6, 2) == 128

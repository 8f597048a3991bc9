"""linear_cross_entropy's rows road (rule ce_rows): the tokens in blocks of
the whole vocabulary, the gradients computed in the forward and scaled in
the backward. Against float64 with PyTorch's own same-dtype error as the
bar, at every block size from one row to all of them; where the road is
taken and where not; the operators' registrations; the rule's numbers."""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_gemm_act as tga
from conftest import DEVICES, requires_cuda
from test_cross_entropy import DTYPES, _case, _check, _loop_case, _reference
from torch_gemm_act import _policy, cross_entropy


@pytest.fixture
def roads(monkeypatch):
    """Counts the calls of each road's operator; `force(rows)` makes rule
    ce_rows answer `rows` (0: the chunk road) wherever it is asked, and
    rule ce_eager answer no."""
    calls = {"rows": 0, "chunks": 0}
    rows_op, chunks_op = cross_entropy._ROWS, cross_entropy._CHUNKS_FORWARD

    def counted(name, op):
        def call(*args):
            calls[name] += 1
            return op(*args)
        return call
    monkeypatch.setattr(cross_entropy, "_ROWS", counted("rows", rows_op))
    monkeypatch.setattr(cross_entropy, "_CHUNKS_FORWARD", counted("chunks", chunks_op))

    def force(rows):
        monkeypatch.setattr(_policy, "ce_rows", lambda *args: rows)
        monkeypatch.setattr(_policy, "ce_eager", lambda *args: False)
    calls["force"] = force
    return calls


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("label_smoothing,softcap,bias", [(0.0, None, False), (0.1, None, True),
                                                          (0.0, 30.0, False), (0.2, 5.0, True)])
@pytest.mark.parametrize("rows", [1, 7, 45])
def test_matches_cross_entropy_of_the_logits(roads, dtype, reduction, label_smoothing, softcap, bias, rows):
    """One row per block, several uneven blocks, one block of every token;
    a random incoming gradient (scaled in the backward)."""
    roads["force"](rows)
    _check(dtype, 45, 40, 1031, bias, reduction, label_smoothing, softcap)
    assert roads["rows"] == 1 and roads["chunks"] == 0


@pytest.mark.parametrize("vocab", [1, 2, 127, 128, 129, 300])
def test_odd_vocabularies(roads, vocab):
    """Vocabularies that are not a whole number of 16-byte units pad the block's rows."""
    roads["force"](5)
    _check(torch.bfloat16, 13, 8, vocab, True, "mean", 0.05, None)
    _check(torch.float32, 13, 8, vocab, True, "sum", 0.0, 3.0)
    assert roads["rows"] == 2


def test_taken_only_in_training_with_a_mean_or_sum(roads):
    roads["force"](8)
    h, w, b, t = _case(20, 8, 50, torch.float32, True)
    tga.linear_cross_entropy(h, w, t, b)  # nothing needs a gradient
    h.requires_grad_()
    tga.linear_cross_entropy(h, w, t, b, reduction="none")
    with torch.no_grad():
        tga.linear_cross_entropy(h, w, t, b)
    assert roads["rows"] == 0 and roads["chunks"] == 3
    tga.linear_cross_entropy(h, w, t, b, reduction="sum")
    assert roads["rows"] == 1


@pytest.mark.parametrize("which", [(True, False, False), (False, True, False), (False, False, True),
                                   (True, True, True)])
def test_only_the_gradients_asked_for(roads, which):
    roads["force"](6)
    h64, w64, b64, t = _case(20, 8, 50, torch.float64, True)
    leaves = [x.clone().requires_grad_(need) for x, need in zip((h64, w64, b64), which)]
    ours = tga.linear_cross_entropy(*leaves[:2], t, leaves[2], label_smoothing=0.1)
    ref_leaves = [x.clone().requires_grad_(need) for x, need in zip((h64, w64, b64), which)]
    ref = _reference(*ref_leaves[:2], t, ref_leaves[2], "mean", 0.1, None)
    (2.5 * ours).backward()
    (2.5 * ref).backward()
    for got, want in zip(leaves, ref_leaves):
        assert (got.grad is None) == (want.grad is None)
        if got.grad is not None:
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-10, atol=1e-12)
    assert roads["rows"] == 1


def test_a_second_backward_gives_the_same_gradients(roads):
    """The saved gradients are scaled into new tensors, never in place."""
    roads["force"](7)
    h, w, b, t = _case(30, 8, 100, torch.float32, True)
    h.requires_grad_()
    loss = tga.linear_cross_entropy(h, w, t, b)
    first, = torch.autograd.grad(3 * loss, h, retain_graph=True)
    second, = torch.autograd.grad(0.5 * loss, h)
    torch.testing.assert_close(second * 6, first)


@pytest.mark.parametrize("rows", [0, 7])
def test_lse_comes_back_without_a_gradient(roads, rows):
    roads["force"](rows)
    h, w, _, t = _case(20, 8, 50, torch.float32, False)
    h.requires_grad_()
    loss, lse = tga.linear_cross_entropy(h, w, t, return_lse=True)
    assert loss.requires_grad and not lse.requires_grad
    torch.testing.assert_close(lse, torch.logsumexp(F.linear(h, w), -1).detach())


def test_every_row_ignored_is_nan_with_zero_gradients_as_pytorch(roads):
    roads["force"](4)
    h, w, _, t = _case(9, 8, 50, torch.float64, False)
    t[:] = -100
    h.requires_grad_()
    loss = tga.linear_cross_entropy(h, w, t)
    eager_h = h.detach().requires_grad_()
    eager = F.cross_entropy(F.linear(eager_h, w), t)
    assert torch.isnan(loss) and torch.isnan(eager)
    loss.backward()
    eager.backward()
    torch.testing.assert_close(h.grad, eager_h.grad, equal_nan=True)


def test_compiles_in_one_graph(roads):
    roads["force"](5)
    h, w, b, t = _case(12, 8, 300, torch.float32, True)
    h.requires_grad_()

    def step(h, w, t, b):
        return tga.linear_cross_entropy(h, w, t, b, label_smoothing=0.1)
    loss = torch.compile(step, fullgraph=True)(h, w, t, b)
    loss.backward()
    h2 = h.detach().requires_grad_()
    eager = step(h2, w, t, b)
    eager.backward()
    torch.testing.assert_close(loss, eager)
    torch.testing.assert_close(h.grad, h2.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 4, 9, 100])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_rows_loop_against_float64(device, dtype, rows, bias, padded):
    """linear_ce_rows: every block (the last one shorter) folded into the
    sums and differentiated as the whole at once; each gradient written over
    its old values (NaN: none is read), weight's with the padded rows or not."""
    h, w, b, target = _loop_case(device, dtype, bias=bias)
    width = _policy.padded_vocab(w.shape[0], h.element_size()) if padded else w.shape[0]
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    tokens, vocab = h.shape[0], w.shape[0]
    logits = h.cpu().double() @ w.cpu().double().t() + (0 if b is None else b.cpu().double())
    sums = [torch.full((tokens,), -math.inf, device=device, dtype=acc), torch.zeros(tokens, device=device, dtype=acc),
            torch.zeros(tokens, device=device, dtype=acc)]
    valid = target.cpu() >= 0
    scale = torch.where(valid, torch.rand(tokens, dtype=torch.float64) + 0.5, 0.0)
    grads = (torch.full(h.shape, float("nan"), device=device, dtype=acc),
             torch.full((width, w.shape[1]), float("nan"), device=device, dtype=acc),
             None if b is None else torch.full(b.shape, float("nan"), device=device, dtype=acc))
    tga.ops.linear_ce_rows(h, w, b, target, scale.to(device, acc), rows, 0.1, 0.0, *sums, *grads)
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 0.1}[dtype]
    exact_lse = torch.logsumexp(logits, 1)
    torch.testing.assert_close(sums[0].cpu().double(), exact_lse, rtol=tol, atol=tol)
    picked = logits.gather(1, target.cpu().clamp(min=0)[:, None]).squeeze(1)
    torch.testing.assert_close(sums[1].cpu().double()[valid], picked[valid], rtol=tol, atol=tol)
    torch.testing.assert_close(sums[2].cpu().double(), logits.sum(1), rtol=tol, atol=tol * vocab)
    onehot = F.one_hot(target.cpu().clamp(min=0), vocab).double()
    dz = (torch.exp(logits - exact_lse[:, None]) - 0.1 / vocab - 0.9 * onehot) * scale[:, None]
    dtol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(grads[0].cpu().double(), dz @ w.cpu().double(), rtol=dtol, atol=dtol)
    torch.testing.assert_close(grads[1][:vocab].cpu().double(), dz.t() @ h.cpu().double(), rtol=dtol, atol=dtol)
    assert (grads[1][vocab:] == 0).all()  # the padding rows' gradient is zero
    if b is not None:
        torch.testing.assert_close(grads[2].cpu().double(), dz.sum(0), rtol=dtol, atol=dtol)


@pytest.mark.parametrize("device", DEVICES)
def test_rows_loop_over_no_tokens_writes_zero_sums(device):
    """linear_ce_rows over no tokens: no block runs, and weight's and bias's
    gradients still come back written (zeros), as every block's would."""
    h, w, b, target = _loop_case(device, torch.float32)
    h, target = h[:0], target[:0]
    empty = torch.zeros(0, device=device)
    grads = torch.full_like(w, float("nan")), torch.full_like(b, float("nan"))
    tga.ops.linear_ce_rows(h, w, b, target, empty, 4, 0.0, 0.0, empty.clone(), empty.clone(), None,
                           torch.empty_like(h), *grads)
    assert (grads[0] == 0).all() and (grads[1] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    h, w, b, target = _loop_case(device, torch.float32)
    rows = lambda: torch.zeros(h.shape[0], device=device)  # noqa: E731
    torch.library.opcheck(torch.ops.gemm_act.linear_ce_rows.default,
                          (h, w, b, target, rows() + 0.5, 4, 0.1, 2.0, rows() - math.inf, rows(), rows(),
                           torch.empty_like(h), torch.zeros_like(w), torch.zeros_like(b)))
    h.requires_grad_()
    w.requires_grad_()
    b.requires_grad_()
    torch.library.opcheck(torch.ops.gemm_act.linear_cross_entropy_rows.default,
                          (h, w, target, b, -100, 1, 0.1, 0.0, 4, [True, True, True]))


@pytest.mark.parametrize("call,error,match", [
    (lambda h, w, b, t, r: tga.ops.linear_ce_rows(h, w, b, t, r, 0, 0.0, 0.0, r, r.clone(), None, None, None, None),
     ValueError, "rows must be at least 1, got 0"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_rows(h[:, :5], w, b, t, r, 4, 0.0, 0.0, r, r.clone(), None, None, None,
                                                  None), ValueError, "width"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_rows(h, w, b, t[:3], r, 4, 0.0, 0.0, r, r.clone(), None, None, None,
                                                  None), ValueError, "target must be"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_rows(h, w, b, t, r[:2], 4, 0.0, 0.0, r, r.clone(), None, None, None,
                                                  None), ValueError, "scale must be"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_rows(h, w, b, t, r, 4, 0.0, 0.0, r, r.clone(), None, None, w.t(), None),
     ValueError, "grad_weight"),
    (lambda h, w, b, t, r: tga.ops.linear_ce_rows(h, w, None, t, r, 4, 0.0, 0.0, r, r.clone(), None, None, None, b),
     ValueError, "needs a bias"),
])
def test_bad_input_says_what_was_given(call, error, match):
    h, w, b, t = _loop_case("cpu", torch.float32)
    with pytest.raises(error, match=match):
        call(h, w, b, t, torch.zeros(h.shape[0]))


def test_rule():
    """Rule ce_rows: blocks as few and as even as fit beside the fp32
    gradients in the bytes of the logits (twice at an unaligned vocabulary)
    and the gradients in the inputs' dtype; where there are several, none
    narrower than CE_ROWS_MIN_PRODUCT."""
    def fits(tokens, width, vocab, rows, size=2):
        padded = -(-vocab // 8) * 8
        grads = vocab * width + tokens * width + vocab
        held = 4 * grads + (padded != vocab) * padded * width * size
        logits = tokens * vocab + (padded != vocab) * tokens * padded
        return rows * padded * size + held <= (logits + grads) * size
    assert _policy.ce_rows(8192, 768, 50257, 2, 4) == 8192  # GPT-2: one block
    assert fits(8192, 768, 50257, 8192)
    assert _policy.ce_rows(16384, 4096, 128256, 2, 4) == 8192  # Llama-3's head: two blocks
    assert fits(16384, 4096, 128256, 8192) and not fits(16384, 4096, 128256, 16384)
    assert _policy.ce_rows(8192, 2048, 128256, 2, 4) == 4096
    assert _policy.ce_rows(2458, 768, 30522, 2, 4) >= 2458  # BERT's masked head: one block, below the floor
    assert _policy.ce_rows(2048, 1024, 32001, 2, 4) == 0  # two blocks would be below the floor
    assert fits(2048, 1024, 32001, 1024) and not fits(2048, 1024, 32001, 2048)
    assert _policy.ce_rows(16, 64, 5003, 2, 4) == 0  # the fp32 weight gradient alone exceeds it
    assert not fits(16, 64, 5003, 1)
    assert _policy.ce_rows(0, 768, 50257, 2, 4) == 0


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rows", [64, 1000])
def test_matches_cross_entropy_cuda(roads, dtype, rows):
    roads["force"](rows)
    _check(dtype, 300, 64, 5003, True, "mean", 0.1, None, device="cuda")
    _check(dtype, 300, 64, 4096, False, "sum", 0.0, 10.0, device="cuda")
    assert roads["rows"] == 2


@pytest.mark.parametrize("rows", [0, 200])
def test_the_backward_makes_no_gradient_for_the_unused_outputs(roads, rows):
    """The log-sum-exp and the saved fp32 sums take no gradient: autograd
    must not fill one with zeros, each the size of its output (weight's fp32
    sum among them; docs/MEASUREMENTS.md, session 71), before the backward."""
    from torch.utils._python_dispatch import TorchDispatchMode
    roads["force"](rows)
    h, w, _, t = _case(512, 64, 4000, torch.float64, False)
    h, w = h.bfloat16().requires_grad_(), w.bfloat16().requires_grad_()
    made = []

    class Fills(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in (torch.ops.aten.zeros, torch.ops.aten.zeros_like, torch.ops.aten.new_zeros,
                                       torch.ops.aten.full, torch.ops.aten.full_like, torch.ops.aten.fill_):
                made.append((str(func), tuple(out.shape)))
            return out
    loss = tga.linear_cross_entropy(h, w, t)
    with Fills():
        loss.backward()
    assert not [m for m in made if math.prod(m[1]) >= t.numel()], made

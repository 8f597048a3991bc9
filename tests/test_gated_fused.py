"""gemm_glu's fused kernels (both projections, their biases and the gate in
one GEMM, the weights read where they are): their results against float64
wherever they run, that they do run where the rule sends the case, and that
every other case still gets the composite's results."""

import pytest
import torch

import torch_gemm_act as tga
from conftest import requires_cuda, sm90_configs
from torch_gemm_act import _policy
from reference import torch_twin
from test_gated import _close, _operands, _reference64

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere

GATED = list(tga.GATED)
# Rows from which the rule runs sm90's fused kernel (the C++ side's bound),
# ragged against its 128-row tile.
FUSED_ROWS = (_policy.FUSED_GLU_MIN_ROWS or 512) + 8


def _on_sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _fused_kernel_ran(fn):
    """fn()'s result, and whether a fused gemm_glu kernel ran in it."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return out, any("GluStore" in name or "sm80_gemm_glu_kernel" in name for name in names)


def _backend():
    return tga.testing._C.testing_overrides()[0]


def _rule_starts_at_sm90():
    return _on_sm90() and _backend() in ("", "sm90")


def _has_sm80():
    return (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
            and "sm80" in tga.testing.cuda_backends())


# The depth from which the rule leaves a gemm_glu that keeps H (training) to
# the composite (rule glu_preact_k).
COMPOSED_PREACT_K = tga._rules.NUMBERS["MIN_COMPOSED_PREACT_K"]


def _fused_expected(stores_h=False, k=0):
    """Whether a gemm_glu case the fused kernels take, from FUSED_ROWS rows,
    runs one: sm90's on compute capability 9.0, under the rule where H is not
    kept or K is short, forced in any case; sm80's where that family is
    forced."""
    rule_fuses = not stores_h or k < COMPOSED_PREACT_K or _backend() == "sm90"
    return (_rule_starts_at_sm90() and rule_fuses) or (_backend() == "sm80" and _has_sm80())


def _halves(kind, shape, scale, dtype):
    """Gate's and up's tensors of `shape`: two tensors, or the halves of one
    in either order (the gate's below or above the up projection's), as a
    model that packs both projections in one Linear holds them."""
    n = shape[0]
    if kind == "apart":
        return [torch.randn(shape, device="cuda", dtype=dtype) * scale for _ in range(2)]
    packed = torch.randn((2 * n, *shape[1:]), device="cuda", dtype=dtype) * scale
    return (packed[:n], packed[n:]) if kind == "gate_first" else (packed[n:], packed[:n])


def _weights(kind, n, k, dtype):
    """Gate and up weights [N, K] (_halves)."""
    return _halves(kind, (n, k), 1.0 / k ** 0.5, dtype)


def _biases(kind, n, dtype, which):
    """Gate and up biases [N] packed as the weights are (_halves): both,
    only the one named, or neither."""
    bg, bu = _halves(kind, (n,), 1.0, dtype)
    return (bg if which in ("both", "gate") else None, bu if which in ("both", "up") else None)


@requires_cuda
@pytest.mark.parametrize("activation", GATED)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["apart", "gate_first", "up_first"])
@pytest.mark.parametrize("bias", ["none", "both", "up"])
def test_fused_gemm_glu_matches_float64_cuda(activation, dtype, kind, bias):
    m, k, n = FUSED_ROWS, 136, 392  # ragged against the 128 x 256 tile, N a multiple of 8
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    wg, wu = _weights(kind, n, k, dtype)
    bg, bu = _biases(kind, n, dtype, bias)
    y, fused = _fused_kernel_ran(lambda: tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation=activation))
    assert fused == _fused_expected()
    assert y.shape == (m, n) and y.dtype == dtype
    _close(y, _y_expected(fused, a, wg, wu, bg, bu, activation), dtype)


@requires_cuda
@pytest.mark.parametrize("m", [1, 17, 128, 130])
def test_fused_gemm_glu_small_m_when_forced_cuda(m):
    # Below FUSED_ROWS the rule runs the composite; forced, the fused kernel
    # must still be right on a single partial tile.
    if not _on_sm90():
        pytest.skip("the fused kernel needs compute capability 9.0")
    a, wg, wu, _, _ = _operands(m, 64, 24, torch.bfloat16, "cuda", bias=False)
    with tga.testing.override(cuda_backend="sm90"):
        y, fused = _fused_kernel_ran(lambda: tga.gemm_glu(a, wg.t(), wu.t(), activation="geglu_tanh"))
    assert fused
    _close(y, _reference64(a, wg, wu, None, None, "geglu_tanh")[0], torch.bfloat16)
    if _backend() == "":
        _, fused = _fused_kernel_ran(lambda: tga.gemm_glu(a, wg.t(), wu.t()))
        assert not fused


@requires_cuda
@pytest.mark.parametrize("case", ["bias", "preact", "n_not_8", "grad", "same_weight", "row_major_b",
                                  "batched", "bias_strided", "bias_unaligned"])
def test_gemm_glu_takes_the_fused_kernel_or_the_composite_by_case_cuda(case):
    """Which cases the fused kernel takes (biases, a batch, H kept, a
    backward to follow) and which it leaves to the composite (N not a
    multiple of 8, one weight for both, a row-major B, a bias not contiguous
    or not 16-byte aligned), each right either way."""
    m, k, n = FUSED_ROWS, 64, 13 if case == "n_not_8" else 24
    a, wg, wu, bg, bu = _operands(m, k, n, torch.bfloat16, "cuda", bias=case.startswith("bias"))
    if case == "bias_strided":
        bu = torch.stack([bu, torch.randn_like(bu)], -1)[:, 0]
    if case == "bias_unaligned":
        bg = torch.cat([torch.randn_like(bg[:1]), bg])[1:]
    if case == "same_weight":
        wu = wg
    if case == "batched":
        a = a.view(2, m // 2, k)
    b_gate, b_up = (wg.t().contiguous(), wu.t().contiguous()) if case == "row_major_b" else (wg.t(), wu.t())
    if case == "grad":
        a.requires_grad_(True)
    (y, *_), fused = _fused_kernel_ran(
        lambda: tga.gemm_glu(a, b_gate, b_up, bg, bu, return_preact=True) if case == "preact"
        else (tga.gemm_glu(a, b_gate, b_up, bg, bu),))
    # The fused kernel flattens a batch's rows and writes H where it is kept
    # (return_preact, or for the backward; K is short here); the other cases
    # are the composite's.
    stores_h = case in ("preact", "grad")
    assert fused == (case in ("bias", "batched", "preact", "grad") and _fused_expected(stores_h, k))
    _close(y.reshape(m, n), _y_expected(fused, a.reshape(m, k), wg, wu, bg, bu, "swiglu"), torch.bfloat16)


@requires_cuda
@pytest.mark.parametrize("k", [COMPOSED_PREACT_K - 8, COMPOSED_PREACT_K])
@pytest.mark.parametrize("keep_h", [False, True])
def test_gemm_glu_keeping_h_at_long_k_takes_the_composite_cuda(k, keep_h):
    """Where H is kept, the rule runs the fused kernel only at short K; in
    inference at any K. Right either way."""
    a, wg, wu, _, _ = _operands(FUSED_ROWS, k, 24, torch.bfloat16, "cuda", bias=False)
    out, fused = _fused_kernel_ran(lambda: tga.gemm_glu(a, wg.t(), wu.t(), return_preact=keep_h))
    y = out[0] if keep_h else out
    assert fused == _fused_expected(stores_h=keep_h, k=k)
    _close(y, _y_expected(fused, a, wg, wu, None, None, "swiglu"), torch.bfloat16)


def _y_expected(fused, a, wg, wu, bg, bu, activation):
    """Y's float64 reference. A fused kernel gates the projections' fp32
    values: float64's own. The composite, as eager does, gates H's values
    rounded to a's dtype, whose error (half a unit in the last place of the
    projection, 1/64 at 4 in bf16) the gate and the up value carry into Y
    beyond Y's tolerance where Y is small against them: its Y is checked
    from its own H (which the training tests check against float64)."""
    if fused:
        return _reference64(a, wg, wu, bg, bu, activation)[0]
    with torch.no_grad():
        _, h = tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation=activation, return_preact=True)
    g, u = h.double().cpu().chunk(2, -1)
    return torch_twin(tga.GATED[activation])(g) * u


def _check_training(y, h, fused, a, wg, wu, bg, bu, activation):
    """H as a fused kernel wrote it (the projections and their biases,
    rounded once) against float64, and every gradient of y's backward from
    it: the gated pass's, then the GEMMs' and the biases' sums."""
    _close(y, _y_expected(fused, a, wg, wu, bg, bu, activation), torch.bfloat16)
    _close(h, _reference64(a, wg, wu, bg, bu, activation)[1], torch.bfloat16)
    gy = torch.randn_like(y)
    y.backward(gy)
    g, u = (part.detach().double().cpu().requires_grad_(True) for part in h.chunk(2, -1))
    (torch_twin(tga.GATED[activation])(g) * u).backward(gy.double().cpu())
    d = [t.detach().double().cpu() for t in (a, wg, wu)]
    grads = {a: g.grad @ d[1] + u.grad @ d[2], wg: g.grad.t() @ d[0], wu: u.grad.t() @ d[0],
             bg: g.grad.sum(0), bu: u.grad.sum(0)}
    for tensor, expected in grads.items():
        if tensor is not None:
            _close(tensor.grad, expected, torch.bfloat16, normwise=True)


def _trainable(kind, m, k, n, bias):
    """a, the weights and the biases (_biases's `bias`) of a training case,
    each a leaf that takes a gradient."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    params = (*_weights(kind, n, k, torch.bfloat16), *_biases(kind, n, torch.bfloat16, bias))
    return (a, *(None if t is None else t.detach().requires_grad_(True) for t in params))


@requires_cuda
@pytest.mark.parametrize("activation", ["swiglu", "geglu", "reglu"])
@pytest.mark.parametrize("kind", ["apart", "up_first"])
@pytest.mark.parametrize("bias", ["none", "both"])
def test_fused_gemm_glu_training_matches_float64_cuda(activation, kind, bias):
    """H as the fused kernel writes it, and every gradient from it, against
    float64."""
    a, wg, wu, bg, bu = _trainable(kind, FUSED_ROWS, 136, 392, bias)
    (y, h), fused = _fused_kernel_ran(
        lambda: tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation=activation, return_preact=True))
    assert fused == _fused_expected(stores_h=True, k=136)
    _check_training(y, h, fused, a, wg, wu, bg, bu, activation)


@requires_cuda
@pytest.mark.parametrize("config", sm90_configs("gemm_glu"))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(136, 64, 24), (FUSED_ROWS, 136, 392), (1000, 520, 264)])
def test_each_glu_kernel_matches_float64_cuda(config, dtype, shape):
    """Each sm90 gemm_glu configuration forced (a build may compile more
    than the rule's), ragged against every tile: Y, then H and every
    gradient, against float64."""
    if not _on_sm90():
        pytest.skip("the sm90 family's kernels need an sm_90 GPU")
    m, k, n = shape
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    wg, wu = _weights("up_first", n, k, dtype)
    bg, bu = _biases("up_first", n, dtype, "both")
    with tga.testing.override(cuda_backend="sm90", sm90_kernel=config):
        y, fused = _fused_kernel_ran(lambda: tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation="geglu_tanh"))
    assert fused
    _close(y, _reference64(a, wg, wu, bg, bu, "geglu_tanh")[0], dtype)
    if dtype == torch.bfloat16:
        a, wg, wu, bg, bu = _trainable("apart", m, k, n, "both")
        with tga.testing.override(cuda_backend="sm90", sm90_kernel=config):
            (y, h), fused = _fused_kernel_ran(
                lambda: tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation="swiglu", return_preact=True))
        assert fused
        _check_training(y, h, fused, a, wg, wu, bg, bu, "swiglu")


@requires_cuda
def test_fused_gemm_glu_follows_the_weights_cuda():
    # Nothing is cached from the weights' contents: an in-place update (an
    # optimizer step) shows in the next call.
    a, wg, wu, _, _ = _operands(512, 64, 32, torch.bfloat16, "cuda", bias=False)
    before = tga.gemm_glu(a, wg.t(), wu.t())
    with torch.no_grad():
        wu.mul_(-2.0)
    after = tga.gemm_glu(a, wg.t(), wu.t())
    _close(after, _reference64(a, wg, wu, None, None, "swiglu")[0], torch.bfloat16)
    torch.testing.assert_close(after, before * -2.0, rtol=2e-2, atol=1e-2)


@requires_cuda
@pytest.mark.parametrize("kind", ["apart", "up_first"])
@pytest.mark.parametrize("m", [17, 520])
@pytest.mark.parametrize("bias", ["none", "both", "gate"])
def test_sm80_fused_gemm_glu_matches_float64_cuda(kind, m, bias):
    """The sm80 family's fused kernel, forced (as the family runs today), on
    any GPU from sm_80 on: Y, H and every gradient against float64."""
    if not _has_sm80():
        pytest.skip("needs the sm80 family and a GPU from sm_80 on")
    a, wg, wu, bg, bu = _trainable(kind, m, 136, 392, bias)
    with tga.testing.override(cuda_backend="sm80"):
        with torch.no_grad():
            y, fused = _fused_kernel_ran(lambda: tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation="geglu"))
        assert fused
        _close(y, _y_expected(fused, a, wg, wu, bg, bu, "geglu"), torch.bfloat16)
        (y, h), fused = _fused_kernel_ran(
            lambda: tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation="geglu", return_preact=True))
    assert fused
    _check_training(y, h, fused, a, wg, wu, bg, bu, "geglu")

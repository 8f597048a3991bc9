"""The activation code (csrc/activations.h) against PyTorch's own modules,
forward and derivative, including NaN, +-inf and signed zeros."""

import math

import pytest
import torch

import torch_gemm_act
from reference import ACTIVATIONS, apply_activation, assert_close, torch_twin

SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0]


def _inputs(dtype, device):
    z = torch.cat([torch.tensor(SPECIAL, dtype=torch.float64), torch.randn(245, dtype=torch.float64) * 4])
    return z.reshape(16, 16).to(dtype).to(device)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_forward_matches_torch_module(activation, dtype, device):
    z = _inputs(dtype, device)
    ours = apply_activation(z, activation, 0.2)
    theirs = torch_twin(activation, 0.2)(z.double())
    assert ours.dtype == dtype
    assert_close(ours, theirs, dtype)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_derivative_matches_torch_autograd(activation, dtype, device):
    from torch_gemm_act.activations import _GRAD_FROM_OUTPUT

    z = _inputs(dtype, device)
    z64 = z.double().requires_grad_()
    y64 = torch_twin(activation, 0.2)(z64)
    grad_y = torch.randn_like(z64)
    (expected,) = torch.autograd.grad(y64, z64, grad_y)
    # The backward op takes Y or Z, as the forward saves it.
    saved = apply_activation(z, activation, 0.2) if activation in _GRAD_FROM_OUTPUT else z
    grad_z, grad_bias = torch.ops.gemm_act.activation_backward(
        grad_y.to(dtype), saved, None, activation, 0.2)
    assert grad_bias.numel() == 0
    # Low-precision Y (e.g. tanh near +-1) loses digits in 1 - y^2: compare
    # against the derivative evaluated at the stored y, as PyTorch does.
    if dtype in (torch.float16, torch.bfloat16) and activation in ("tanh", "sigmoid"):
        y_stored = torch_twin(activation)(z.double()).to(dtype).double()
        deriv = 1 - y_stored**2 if activation == "tanh" else y_stored * (1 - y_stored)
        expected = grad_y.to(dtype).double() * deriv
    assert_close(grad_z, expected, dtype)


@pytest.mark.parametrize("activation", sorted(torch_gemm_act.activations._GRAD_FROM_OUTPUT - {"none"}))
def test_in_place_op_computes_and_differentiates_as_the_twin(activation, device):
    """The fused modules' unfused path applies these in place to a fresh
    GEMM result: same values, and autograd's gradient through the layer,
    as the twin module out of place."""
    op = torch_gemm_act.activations._in_place_op(activation)
    x = _inputs(torch.float64, device).nan_to_num(0.0, 50.0, -50.0).requires_grad_()
    w = torch.randn(16, 16, dtype=torch.float64, device=device, requires_grad=True)
    y = op(x @ w, 0.2)
    expected = torch_twin(activation, 0.2)(x @ w)
    assert_close(y, expected, torch.float64)
    grad_y = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, w), grad_y)
    want = torch.autograd.grad(expected, (x, w), grad_y)
    for g, e in zip(got, want):
        assert_close(g, e, torch.float64)


def test_no_in_place_op_for_activations_differentiated_from_their_input():
    from torch_gemm_act.activations import _GRAD_FROM_OUTPUT
    for activation in ACTIVATIONS:
        has_op = torch_gemm_act.activations._in_place_op(activation) is not None
        assert has_op == (activation in _GRAD_FROM_OUTPUT and activation != "none"), activation


def _assert_rounded_correctly(ours, exact, z, dtype):
    """`ours` (float64 of `dtype` values) rounds `exact` correctly but for 1%
    of the spacing of `dtype` there (subnormals: the smallest step); a float
    computation 5e-6 relative off adds at most that to the half-step."""
    _, exponent = torch.frexp(exact)
    finfo = torch.finfo(dtype)
    ulp = torch.ldexp(torch.full_like(exact, finfo.eps), exponent - 1)
    ulp = ulp.clamp_min(finfo.smallest_normal * finfo.eps)
    off = (ours - exact).abs() / ulp
    assert off.max() <= 0.51, f"{off.max():.3f} ulp at z = {z[off.argmax()].item()}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_gelu_accuracy_fits_the_dtype(dtype, device):
    """GELU on a dense grid over [-8, 8]. For |z| <= 6 (act_math.h's
    polynomial range): fp16/bf16 results (a shorter polynomial) rounded
    correctly but for 1% of a unit in the last place, fp32 within 3e-6
    relative.
    Beyond, where PyTorch's own float GELU is already 0, the tail keeps
    decaying like the exact one, within 40%. The tolerance of the other
    tests would not see a tail that is off by orders of magnitude."""
    z = torch.linspace(-8, 8, 20001, dtype=torch.float64).to(dtype)
    exact = torch.nn.functional.gelu(z.double())  # float64: erf is exact here
    ours = apply_activation(z.to(device), "gelu").double().cpu()
    inside = z.double().abs() <= 6
    if dtype == torch.float32:
        torch.testing.assert_close(ours[inside], exact[inside], rtol=3e-6, atol=1e-30)
    else:
        _assert_rounded_correctly(ours[inside], exact[inside], z[inside], dtype)
    tail = ~inside & (exact.abs() > 4 * torch.finfo(dtype).smallest_normal)  # clear of underflow
    rel = ((ours - exact).abs() / exact.abs())[tail]
    assert tail.any() or dtype == torch.float16
    assert (rel <= 0.4).all(), f"{rel.max():.2f} relative in the tail"


def _exact(activation, z):
    """act(z) in float64. gelu_tanh through its sigmoid form: PyTorch's
    0.5 z (1 + tanh u) is 0 once tanh u rounds to -1, in float64 too, where
    the value keeps decaying."""
    if activation == "gelu_tanh":
        return z * torch.sigmoid(_twice_inner(z))
    return torch_twin(activation)(z)


def _twice_inner(z):
    """gelu_tanh's 2u = 2 sqrt(2/pi) (z + 0.044715 z^3)."""
    return 2 * math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)


def _gelu_derivative_and_terms(activation, z):
    """act'(z) in float64 and the size of the two terms it sums, which
    cancel near the GELUs' minimum (z about -0.75)."""
    if activation == "gelu":
        pdf_term = z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
        return cdf + pdf_term, cdf + pdf_term.abs()
    s = torch.sigmoid(_twice_inner(z))
    slope_term = z * s * (1 - s) * 2 * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * z * z)
    return s + slope_term, s + slope_term.abs()


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_gelu_derivative_accuracy_fits_the_dtype(activation, dtype, device):
    """The backward's act'(z) on a dense grid over [-10, 10] (dZ = 1 *
    act'(z), taken at dZ's precision: activations.h, activation_grad), as
    far from correctly rounded as a float computation that is 1e-5 (16-bit
    dZ) or 3e-6 (fp32; for gelu_tanh plus 2e-7 |2u|, its exponent's
    rounding) off, relative to the size of the two terms, may put it.
    Beyond |z| = 6, where PyTorch's float derivative has dropped Phi (1 +
    erf rounds to 0: off by about 1/z^2, 3 % at z = -6), within 3 % of it."""
    z = torch.linspace(-10, 10, 20000, dtype=torch.float64).to(dtype)
    exact, terms = _gelu_derivative_and_terms(activation, z.double())
    grad_z, _ = torch.ops.gemm_act.activation_backward(
        torch.ones(100, 200, dtype=dtype, device=device), z.reshape(100, 200).to(device), None, activation, 0.01)
    ours = grad_z.reshape(-1).double().cpu()
    _, exponent = torch.frexp(exact)
    finfo = torch.finfo(dtype)
    half_ulp = 0.5 * torch.ldexp(torch.full_like(exact, finfo.eps), exponent - 1)
    excess = ((ours - exact).abs() - half_ulp.clamp_min(0.5 * finfo.smallest_normal * finfo.eps)).clamp_min(0)
    inside = z.double().abs() <= 6
    rtol = torch.full_like(exact, 1e-5 if dtype != torch.float32 else 3e-6)
    if dtype == torch.float32 and activation == "gelu_tanh":
        rtol += 2e-7 * _twice_inner(z.double()).abs()
    off = excess / terms
    assert (off[inside] <= rtol[inside]).all(), f"{off[inside].max():.2e} at z = {z[inside][off[inside].argmax()]}"
    assert (off[~inside] <= 0.03).all(), f"{off[~inside].max():.2e} at z = {z[~inside][off[~inside].argmax()]}"


@pytest.mark.parametrize("activation", ["tanh", "sigmoid", "silu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_exponential_activations_accuracy(activation, dtype, device):
    """The activations built on exp (act_math.h: no branch; on the GPU an
    approximate ex2 and division) on a dense grid over [-12, 12], tails and
    tanh's small-argument series included: fp16/bf16 rounded correctly but
    for 1% of a unit in the last place, fp32 within 2e-6 relative. In fp32
    gelu_tanh's argument 2u (cubic in z) carries float rounding that exp
    magnifies |2u|-fold (1.2e-5 relative at z = -9.9), hence 2e-7 |2u| more."""
    z = torch.linspace(-12, 12, 24001, dtype=torch.float64).to(dtype)
    exact = _exact(activation, z.double())
    ours = apply_activation(z.to(device), activation).double().cpu()
    # Clear of float's underflow, where exp(-x) overflows and the GPU flushes
    # results below 2^-126 to 0.
    ok = exact.abs() >= 2.0**-120
    if dtype == torch.float32:
        rtol = torch.full_like(exact, 2e-6)
        if activation == "gelu_tanh":
            rtol += 2e-7 * _twice_inner(z.double()).abs()
        rel = (ours - exact).abs() / exact.abs()
        assert (rel[ok] <= rtol[ok]).all(), f"{rel[ok].max():.2e} relative"
    else:
        _assert_rounded_correctly(ours[ok], exact[ok], z[ok], dtype)
    assert (ours[~ok].abs() <= 2.0**-120).all()


@pytest.mark.parametrize("activation", [a for a in ACTIVATIONS if a not in ("none", "relu")])
def test_float_activation_no_further_from_float64_than_pytorchs(activation, device):
    """In fp32, act(z) and dZ = gY act'(z) against float64, ours beside
    PyTorch's own float kernels on the same device: the derivative's worst
    error per unit of gY (what a bias gradient sums, and a sum that cancels
    magnifies) within 1.5 x PyTorch's or 4e-7, the value's worst relative
    error (off its underflowing tails) within 4 x PyTorch's or 1e-6."""
    from torch_gemm_act.activations import _GRAD_FROM_OUTPUT

    gen = torch.Generator().manual_seed(5)
    z64 = torch.cat([torch.linspace(-12, 12, 24001, dtype=torch.float64),
                     torch.randn(40000, generator=gen, dtype=torch.float64) * 3])
    grad_y = torch.randn(z64.numel(), generator=gen, dtype=torch.float32)
    z = z64.float()
    twin = torch_twin(activation, 0.2)
    zx = z.double().requires_grad_()
    exact_y = twin(zx)
    (exact_dz,) = torch.autograd.grad(exact_y, zx, grad_y.double())

    zt = z.to(device).requires_grad_()
    torch_y = twin(zt)
    (torch_dz,) = torch.autograd.grad(torch_y, zt, grad_y.to(device))
    ours_y = apply_activation(z.reshape(1, -1).to(device), activation, 0.2).reshape(-1)
    saved = ours_y.reshape(1, -1) if activation in _GRAD_FROM_OUTPUT else z.reshape(1, -1).to(device)
    ours_dz, _ = torch.ops.gemm_act.activation_backward(grad_y.reshape(1, -1).to(device), saved, None,
                                                        activation, 0.2)

    def per_unit(dz):
        return ((dz.reshape(-1).double().cpu() - exact_dz).abs() / grad_y.double().abs()).max().item()

    not_tail = exact_y.detach().abs() > 1e-3

    def relative(y):
        err = (y.detach().reshape(-1).double().cpu() - exact_y.detach()).abs() / exact_y.detach().abs()
        return err[not_tail].max().item()

    ours, theirs = per_unit(ours_dz), per_unit(torch_dz)
    assert ours <= max(1.5 * theirs, 4e-7), f"derivative: ours {ours:.2e} per unit of gY, PyTorch's {theirs:.2e}"
    ours, theirs = relative(ours_y), relative(torch_y)
    assert ours <= max(4 * theirs, 1e-6), f"value: ours {ours:.2e} relative, PyTorch's {theirs:.2e}"


def test_captured_calls_are_read_from_the_activation_table():
    from torch_gemm_act.activations import _PYTORCH, _from_call
    F = torch.nn.functional
    assert _from_call(torch.relu, (), {}) == ("relu", 0.01)
    assert _from_call("relu", (), {}) == ("relu", 0.01)
    assert _from_call(F.gelu, (), {}) == ("gelu", 0.01)
    assert _from_call(F.gelu, (), {"approximate": "tanh"}) == ("gelu_tanh", 0.01)
    assert _from_call(F.gelu, ("tanh",), {}) == ("gelu_tanh", 0.01)
    assert _from_call(F.leaky_relu, (0.2,), {}) == ("leaky_relu", 0.2)
    assert _from_call(F.leaky_relu, (), {"negative_slope": 0.3, "inplace": False}) == ("leaky_relu", 0.3)
    assert _from_call(F.silu, (), {"inplace": False}) == ("silu", 0.01)
    # In place, an unknown argument or form, a slope the operator refuses, a non-activation: none.
    assert _from_call(F.relu, (True,), {}) is None
    assert _from_call(F.silu, (), {"inplace": True}) is None
    assert _from_call(F.gelu, (), {"approximate": "erf"}) is None
    assert _from_call(F.gelu, (), {"other": 1}) is None
    assert _from_call(F.leaky_relu, (-1.0,), {}) is None
    assert _from_call(torch.add, (), {}) is None
    # Every call a row lists computes that row's twin.
    x = torch.randn(64, dtype=torch.float64)
    for name, form in _PYTORCH.items():
        twin = form.twin(**form.attrs)
        for call in form.calls:
            out = getattr(x, call)() if isinstance(call, str) else call(x, **form.attrs)
            torch.testing.assert_close(out, twin(x), rtol=0, atol=0, msg=f"{name}: {call}")

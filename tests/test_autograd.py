"""Gradients: gradcheck in float64 and agreement with nn.Linear + activation."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_gemm_act as tga
from conftest import OpNames
from reference import (ACTIVATIONS, BIAS_KINDS, assert_close, linear_act_eager, make_bias,
                       random_operands, torch_twin)
from torch_gemm_act.activations import _GRAD_FROM_OUTPUT


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("with_c", [False, True])
def test_gradcheck(activation, bias_kind, with_c, device):
    m, k, n = 4, 5, 3
    dt = torch.float64
    alpha, beta = (0.7, 1.3) if with_c else (1.1, 0.0)
    # Finite differences across relu's kink at 0 are meaningless: draw until
    # every pre-activation is clear of it.
    for _ in range(100):
        a = torch.randn(m, k, dtype=dt, device=device, requires_grad=True)
        b = torch.randn(k, n, dtype=dt, device=device, requires_grad=True)
        bias = make_bias(bias_kind, (m, n), dt, device, requires_grad=True)
        c = torch.randn(m, n, dtype=dt, device=device, requires_grad=True) if with_c else None
        _, z = tga.gemm_act(a, b, bias, c, activation=activation, alpha=alpha, beta=beta,
                            return_preact=True)
        if (z.abs() > 1e-3).all():
            break
    inputs = [t for t in (a, b, bias, c) if t is not None]

    def fn(*args):
        it = iter(args)
        a_, b_ = next(it), next(it)
        bias_ = next(it) if bias is not None else None
        c_ = next(it) if c is not None else None
        return tga.gemm_act(a_, b_, bias_, c_, activation=activation, alpha=alpha, beta=beta,
                            negative_slope=0.05)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_nn_linear_and_activation(activation, dtype, device):
    x = torch.randn(2, 7, 24, dtype=dtype, device=device)
    linear = torch.nn.Linear(24, 13, dtype=dtype, device=device)
    fused = tga.LinearAct.from_linear(torch.nn.Linear(24, 13, dtype=dtype, device=device), activation)
    with torch.no_grad():
        fused.weight.copy_(linear.weight)
        fused.bias.copy_(linear.bias)
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    y_ref = torch_twin(activation)(linear(x1))
    y = fused(x2)
    assert_close(y, y_ref, dtype)
    grad_y = torch.randn_like(y)
    ref_grads = torch.autograd.grad(y_ref, (x1, linear.weight, linear.bias), grad_y)
    grads = torch.autograd.grad(y, (x2, fused.weight, fused.bias), grad_y)
    for ours, theirs in zip(grads, ref_grads):
        assert ours.shape == theirs.shape
        assert_close(ours, theirs, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_gradients(dtype, device):
    x, w = random_operands(33, 40, 17, dtype, device, requires_grad=True)
    bias = make_bias("column", (33, 17), dtype, device, requires_grad=True)
    y = tga.linear_act(x, w, bias, "gelu")
    grad_y = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, bias), grad_y)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, bias))
    y64 = linear_act_eager(x64, w64, b64, "gelu")
    ref = torch.autograd.grad(y64, (x64, w64, b64), grad_y.double())
    for ours, theirs in zip(grads, ref):
        assert ours.dtype == dtype
        # Gradients are sums over up to 33 rows: scale the tolerance.
        torch.testing.assert_close(ours.double(), theirs, rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("activation", ["tanh", "gelu"])
@pytest.mark.parametrize("uses", ["y and z", "z only", "y only"])
def test_gradient_through_returned_preact(activation, uses, device):
    a = torch.randn(5, 6, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(6, 4, dtype=torch.float64, device=device, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)

    def fn(a_, b_, bias_):
        y, z = tga.gemm_act(a_, b_, bias_, activation=activation, return_preact=True)
        if uses == "z only":
            return z.sin()
        return y * 2 + z.sin() if uses == "y and z" else y * 2

    assert torch.autograd.gradcheck(fn, (a, b, bias))


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_backward_does_no_work_for_unused_preact(activation, device):
    # Z is an output of the op but not the user's: its gradient must not be
    # materialised as zeros and run through a second dZ pass (once over a
    # quarter of the kernels' time of a step at 16384x1024x4096).
    x = torch.randn(6, 8, device=device, requires_grad=True)
    w = torch.randn(5, 8, device=device, requires_grad=True)
    bias = torch.randn(5, device=device, requires_grad=True)
    y = tga.linear_act(x, w, bias, activation)
    with OpNames() as ops:
        torch.autograd.grad(y, (x, w, bias), torch.randn_like(y))
    passes = [n for n in ops.names if n in ("activation_backward.default", "activation_backward_.default")]
    assert len(passes) == 1, ops.names
    assert not [n for n in ops.names if n.startswith(("zeros", "fill", "add"))], ops.names


def test_weight_gradient_needs_no_copy(device):
    # nn.Linear's weight goes in as weight.t(): its gradient must come out in
    # the weight's own layout, or AccumulateGrad copies it (one more kernel
    # as large as the weight per layer and step).
    layer = tga.LinearAct(8, 5, activation="gelu", device=device)
    x = torch.randn(6, 8, device=device, requires_grad=True)
    y = layer(x)
    (gw,) = torch.autograd.grad(y, layer.weight, torch.randn_like(y))
    assert gw.stride() == layer.weight.stride()
    with OpNames() as ops:
        layer(x).backward(torch.randn_like(y))
    assert not [n for n in ops.names if n.startswith(("clone", "copy", "_to_copy", "contiguous"))], ops.names
    # A [K, N] row-major b keeps its layout too.
    b = torch.randn(8, 5, device=device, requires_grad=True)
    (gb,) = torch.autograd.grad(tga.gemm_act(x, b, activation="gelu"), b, torch.randn_like(y))
    assert gb.stride() == b.stride()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k, n", [(187, 177), (187, 176), (184, 177)])
@pytest.mark.parametrize("b_layout", ["row_major", "weight_t"])
def test_gradients_with_rows_not_16_byte_aligned(k, n, dtype, b_layout, device):
    # On CUDA the backward pads K and N for cuBLAS where rows are not 16-byte
    # aligned and the problem is large enough (csrc/autograd.cpp:
    # 2304 * K * N > 2^26 here), and slices the results back; b is padded
    # in whichever layout has contiguous rows (an nn.Linear's weight.t(): the weight).
    a = torch.randn(2, 1152, k, dtype=torch.float64)
    b = torch.randn(k, n, dtype=torch.float64) * k ** -0.5
    if b_layout == "weight_t":
        b = b.t().contiguous().t()
    bias = torch.randn(n, dtype=torch.float64)
    c = torch.randn(2, 1152, n, dtype=torch.float64)
    grad_y = torch.randn(2, 1152, n, dtype=torch.float64)
    ins = [t.to(dtype).to(device).requires_grad_() for t in (a, b, bias, c)]
    assert ins[1].stride() == b.stride()
    y = tga.gemm_act(*ins, activation="gelu", alpha=0.5, beta=1.5)
    grads = torch.autograd.grad(y, ins, grad_y.to(dtype).to(device))
    ref_ins = [t.detach().double().cpu().requires_grad_() for t in ins]
    a64, b64, bias64, c64 = ref_ins
    y64 = torch.nn.functional.gelu(0.5 * (a64 @ b64) + 1.5 * c64 + bias64)
    ref = torch.autograd.grad(y64, ref_ins, grad_y)
    # Sums of up to 2304 products: compared as a whole (entries near zero
    # carry the sums' rounding), to a fraction of the dtype's precision.
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    for ours, theirs in zip(grads, ref):
        assert ours.shape == theirs.shape and ours.dtype == dtype
        err = (ours.double().cpu() - theirs).norm() / theirs.norm()
        assert err < tol, err


def test_double_backward_raises(device):
    x = torch.randn(4, 6, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(3, 6, dtype=torch.float64, device=device, requires_grad=True)
    y = tga.linear_act(x, w, None, "gelu")
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (gx_ref,) = torch.autograd.grad(torch.nn.functional.gelu(x @ w.t()).sum(), x)
    assert_close(gx, gx_ref, torch.float64)  # the first-order gradient is still right
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(gx.sum(), w)


@pytest.mark.parametrize("op", ["gemm_act", "gemm_act_chained", "gemm_glu"])
def test_forward_mode_ad_raises(op, device):
    """No operator has a forward-mode derivative: a tangent on an input is
    an error, whatever grad mode says, never a result without its tangent."""
    import torch.autograd.forward_ad as fwAD
    a, b = torch.randn(4, 6, device=device), torch.randn(6, 3, device=device)
    calls = {
        "gemm_act": lambda x: tga.gemm_act(x, b, activation="gelu"),
        "gemm_act_chained": lambda x: torch.ops.gemm_act.gemm_act_chained(x, None, None, "none", 0.0, b, None, None,
                                                                          "gelu", 1.0, 0.0, 0.01, False, False),
        "gemm_glu": lambda x: tga.gemm_glu(x, b, b),
    }
    with torch.no_grad(), fwAD.dual_level():
        dual = fwAD.make_dual(a, torch.randn_like(a))
        with pytest.raises(RuntimeError, match="jvp is not implemented"):
            calls[op](dual)


def test_no_autograd_node_without_a_backward(device):
    """Under no_grad, or with no input requiring grad, the operators return
    plain results (no grad_fn), as ATen's do."""
    a = torch.randn(5, 6, device=device, requires_grad=True)
    w = torch.randn(4, 6, device=device)
    with torch.no_grad():
        y, z = tga.gemm_act(a, w.t(), activation="gelu", return_preact=True)
    assert y.grad_fn is None and not y.requires_grad and z.grad_fn is None
    y = tga.linear_act(a.detach(), w, None, "gelu")
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, torch.nn.functional.gelu(a.detach() @ w.t()), rtol=1e-5, atol=1e-5)


def test_only_needed_gradients(device):
    a = torch.randn(5, 6, device=device)
    w = torch.randn(4, 6, device=device, requires_grad=True)
    bias = torch.randn(4, device=device)
    y = tga.linear_act(a, w, bias, "silu")
    (gw,) = torch.autograd.grad(y.sum(), (w,))
    assert gw.shape == w.shape and a.grad is None


class _RecordStorePreact(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.flags = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.gemm_act.gemm_act.default:
            self.flags.append(args[8])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_z_written_only_when_backward_needs_it(activation, device):
    x = torch.randn(4, 8, device=device)
    w = torch.randn(3, 8, device=device, requires_grad=True)
    with _RecordStorePreact() as rec:
        tga.linear_act(x, w, None, activation)
        with torch.no_grad():
            tga.linear_act(x, w, None, activation)
        tga.linear_act(x, w.detach(), None, activation)
    assert rec.flags == [activation not in _GRAD_FROM_OUTPUT, False, False]


@pytest.mark.parametrize("bias_kind", ["scalar", "column", "row"])
def test_bias_gradient_is_deterministic(bias_kind, device):
    x, w = random_operands(300, 64, 200, torch.float32, device, requires_grad=True)
    bias = make_bias(bias_kind, (300, 200), torch.float32, device, requires_grad=True)
    grad_y = torch.randn(300, 200, device=device)
    first = torch.autograd.grad(tga.linear_act(x, w, bias, "gelu"), bias, grad_y)[0]
    for _ in range(3):
        again = torch.autograd.grad(tga.linear_act(x, w, bias, "gelu"), bias, grad_y)[0]
        assert torch.equal(first, again)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [512, 16384])
@pytest.mark.parametrize("cols", [72, 768])
def test_bias_gradient_over_many_rows_matches_float64(dtype, rows, cols, device):
    """The per-column sum of bias_grad over a few and over many row tiles
    (on CUDA: one level of partial sums, and two for 72 columns; 768 take
    narrowed column tiles and one level), against float64, twice alike."""
    grad = torch.randn(rows, cols, device=device, dtype=dtype)
    bias = torch.empty(cols, device=device, dtype=dtype)
    got = torch.ops.gemm_act.bias_grad(grad, bias)
    assert torch.equal(got, torch.ops.gemm_act.bias_grad(grad, bias))
    exact = grad.double().sum(0)
    scale = grad.double().abs().sum(0)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert ((got.double() - exact).abs() <= tol * scale + 4 * torch.finfo(dtype).eps * exact.abs()).all()


def test_k_zero_gradients(device):
    a = torch.randn(3, 0, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(0, 4, dtype=torch.float64, device=device, requires_grad=True)
    c = torch.randn(3, 4, dtype=torch.float64, device=device, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a_, b_, c_, bias_: tga.gemm_act(a_, b_, bias_, c_, activation="gelu", beta=0.5),
        (a, b, c, bias))


def test_op_without_stored_preact_recomputes_it(device):
    # Calling the operator directly with store_preact=False still differentiates.
    a = torch.randn(4, 5, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(5, 3, dtype=torch.float64, device=device, requires_grad=True)
    c = torch.randn(4, 3, dtype=torch.float64, device=device, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *t: torch.ops.gemm_act.gemm_act(*t, "gelu", 0.5, 2.0, 0.01, False)[0], (a, b, bias, c))

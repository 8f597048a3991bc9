"""dZ written over gY: the activation_backward_ operator, and the backward
using it only where it holds the only reference to gY."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import ACTIVATIONS, BIAS_KINDS, apply_activation, make_bias, torch_twin
from torch_gemm_act.activations import _GRAD_FROM_OUTPUT

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere

_in_place_op = torch.ops.gemm_act.activation_backward_.default
out_of_place_op = torch.ops.gemm_act.activation_backward.default


def _saved_and_grad(m, n, activation, dtype, device):
    z = torch.randn(m, n, dtype=dtype, device=device) * 3
    saved = apply_activation(z, activation, 0.2) if activation in _GRAD_FROM_OUTPUT else z
    return saved, torch.randn(m, n, dtype=dtype, device=device)


def _same(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(16, 16), (300, 1000), (7, 13)])
def test_in_place_matches_out_of_place(activation, bias_kind, dtype, shape, device):
    """The same dZ and bias gradient, bit for bit (one kernel, one summation
    order), on vectorised, multi-block and unaligned shapes."""
    saved, grad_y = _saved_and_grad(*shape, activation, dtype, device)
    bias = make_bias(bias_kind, shape, dtype, device)
    dz, db = out_of_place_op(grad_y, saved, bias, activation, 0.2)
    g = grad_y.clone()
    db_in_place = _in_place_op(g, saved, bias, activation, 0.2)
    _same(g, dz)
    _same(db_in_place, db)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_in_place_on_a_strided_gradient(activation, device):
    """A non-contiguous grad_y gets dZ in its own strides."""
    saved, grad_y = _saved_and_grad(40, 24, activation, torch.float32, device)
    g = grad_y.t().contiguous().t()  # column-major
    bias = torch.randn(24, device=device)
    dz, db = out_of_place_op(grad_y, saved, bias, activation, 0.01)
    db_in_place = _in_place_op(g, saved, bias, activation, 0.01)
    assert g.stride() == (1, 40)
    _same(g, dz)
    _same(db_in_place, db)


def test_in_place_rejects_overlap(device):
    saved, grad_y = _saved_and_grad(8, 8, "silu", torch.float32, device)
    with pytest.raises(RuntimeError, match="single memory location"):
        _in_place_op(torch.randn(8, device=device).expand(8, 8), saved, None, "silu", 0.01)
    buffer = torch.randn(9, 8, device=device)
    with pytest.raises(RuntimeError, match="single memory location"):
        _in_place_op(buffer[:8], buffer[1:], None, "silu", 0.01)
    # saved may be grad_y itself: each element is read before it is written.
    g = grad_y.clone()
    dz, _ = out_of_place_op(g, g, None, "silu", 0.01)
    _in_place_op(g, g, None, "silu", 0.01)
    _same(g, dz)


@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
def test_opcheck_in_place(bias_kind, device):
    saved, grad_y = _saved_and_grad(6, 5, "silu", torch.float32, device)
    bias = make_bias(bias_kind, (6, 5), torch.float32, device)
    torch.library.opcheck(_in_place_op, (grad_y, saved, bias, "silu", 0.01))


def _ops_run(fn):
    """The names of the operators fn ran, from the profiler (which holds no
    reference to any tensor, where a dispatch mode's Python wrappers would)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.name for e in prof.events()}


def _close(actual, expected):
    """float32 against float64, the error measured against the largest
    term: these gradients are sums whose terms cancel."""
    expected = expected.detach().double().cpu()
    torch.testing.assert_close(actual.detach().double().cpu(), expected, rtol=1e-5,
                               atol=2e-5 * expected.abs().max().item())


def _two_layers(device, dtype=torch.float32):
    x = torch.randn(32, 16, dtype=dtype, device=device, requires_grad=True)
    w1 = torch.randn(24, 16, dtype=dtype, device=device, requires_grad=True)
    b1 = torch.randn(24, dtype=dtype, device=device, requires_grad=True)
    w2 = torch.randn(8, 24, dtype=dtype, device=device, requires_grad=True)
    return x, w1, b1, w2


def _reference_grads(x, w1, b1, w2, activation, upstream):
    leaves = [t.detach().double().requires_grad_() for t in (x, w1, b1, w2)]
    y = torch_twin(activation)(F.linear(leaves[0], leaves[1], leaves[2]))
    out = upstream(y, leaves[3])
    return torch.autograd.grad(out, leaves), y


@pytest.mark.parametrize("activation", ["gelu", "relu", "silu"])
def test_backward_overwrites_a_gradient_it_alone_holds(activation, device):
    """gY from the next layer's mm reaches this layer's backward alone: dZ
    goes over it, and every gradient is right."""
    x, w1, b1, w2 = _two_layers(device)
    upstream = lambda y, w: F.linear(y, w).square().sum()  # noqa: E731
    grads = []
    ops = _ops_run(lambda: grads.extend(torch.autograd.grad(upstream(tga.linear_act(x, w1, b1, activation), w2),
                                                            (x, w1, b1, w2))))
    assert "gemm_act::activation_backward_" in ops and "gemm_act::activation_backward" not in ops, ops
    expected, _ = _reference_grads(x, w1, b1, w2, activation, upstream)
    for g, e in zip(grads, expected):
        _close(g, e)


def test_backward_leaves_a_gradient_a_hook_keeps(device):
    """A hook that keeps gY sees gY, not dZ."""
    x, w1, b1, w2 = _two_layers(device)
    kept = []
    y = tga.linear_act(x, w1, b1, "gelu")
    y.register_hook(kept.append)
    ops = _ops_run(lambda: F.linear(y, w2).square().sum().backward())
    assert "gemm_act::activation_backward" in ops and "gemm_act::activation_backward_" not in ops, ops
    y64 = y.detach().double().requires_grad_()
    (expected_gy,) = torch.autograd.grad(F.linear(y64, w2.detach().double()).square().sum(), y64)
    _close(kept[0], expected_gy)
    upstream = lambda y, w: F.linear(y, w).square().sum()  # noqa: E731
    expected, _ = _reference_grads(x, w1, b1, w2, "gelu", upstream)
    for g, e in zip((x.grad, w1.grad, b1.grad, w2.grad), expected):
        _close(g, e)


def test_backward_leaves_a_gradient_two_layers_share(device):
    """y1 + y2's backward hands both layers one gradient tensor: the first
    backward to run must not overwrite what the second still reads."""
    x, w1, b1, w2 = _two_layers(device)
    w3 = torch.randn_like(w1, requires_grad=True)
    b3 = torch.randn_like(b1, requires_grad=True)
    y = tga.linear_act(x, w1, b1, "gelu") + tga.linear_act(x, w3, b3, "tanh")
    grads = []
    ops = _ops_run(lambda: grads.extend(torch.autograd.grad(F.linear(y, w2).square().sum(), (x, w1, b1, w3, b3))))
    # The first to run shares gY and leaves it; the second then holds it alone.
    assert "gemm_act::activation_backward" in ops and "gemm_act::activation_backward_" in ops, ops
    leaves = [t.detach().double().requires_grad_() for t in (x, w1, b1, w3, b3, w2)]
    y64 = F.gelu(F.linear(*leaves[0:3])) + torch.tanh(F.linear(leaves[0], leaves[3], leaves[4]))
    expected = torch.autograd.grad(F.linear(y64, leaves[5]).square().sum(), leaves[:5])
    for g, e in zip(grads, expected):
        _close(g, e)


def test_backward_leaves_a_gradient_the_caller_passed(device):
    """backward(gradient=g) keeps g as the caller gave it."""
    x, w1, b1, _ = _two_layers(device)
    y = tga.linear_act(x, w1, b1, "relu")
    g = torch.randn_like(y)
    g_before = g.clone()
    y.backward(g)
    _same(g, g_before)


@requires_cuda
@pytest.mark.parametrize("activation", [nn.ReLU, nn.GELU])
def test_small_model_training_step_peaks_no_higher_than_eager_cuda(activation):
    """A small fp32 MLP's training step (the model bench's small case)
    holds no more memory at its peak than the unfused one's."""
    eager = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(256, 1024), activation(),
                                                          nn.Linear(1024, 256))]).cuda()
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    x = torch.randn(512, 256, device="cuda")

    def peak(model):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model(x).square().mean().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, [p.grad for p in model.parameters()]

    peak(fused)  # cuBLAS's workspace and the stream's counters, allocated once
    peak(eager)
    fused_peak, grads = peak(fused)
    eager_peak, expected = peak(eager)
    assert fused_peak <= eager_peak, (fused_peak, eager_peak)
    for g, e in zip(grads, expected):
        _close(g, e)

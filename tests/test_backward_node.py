"""gemm_act's backward node (csrc/autograd.h), as a fused module's layer
and the functional linear_act record it in training: one node whose edge
is the weight itself, where the dispatcher's road adds the transpose's
node. Its gradients must be the operator's, and it must honour what
autograd promises (saved-tensor hooks, version checks, retain_graph, hooks,
create_graph), handing modes, transforms and autocast to the dispatcher."""

import pytest
import torch
import torch.nn.functional as F

import torch_gemm_act as tga
from conftest import OpNames
from reference import ACTIVATIONS, assert_close

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere

NODE = "GemmActBackward"
B_EDGE = 3  # the node's edges: a, a_preact, a_bias, b, bias, c


def layer(x, w, b, activation, slope):
    return tga.linear_act(x, w, b, activation=activation, negative_slope=slope)


def takes_the_weight(y, w):
    """Whether y's node has the weight itself as its edge (no transpose node)."""
    fn = y.grad_fn.next_functions[B_EDGE][0]
    return y.grad_fn.name() == NODE and type(fn).__name__ == "AccumulateGrad" and fn.variable is w


def operands(device, dtype=torch.float64, shape=(6, 10), n=7, bias=True):
    x = torch.randn(*shape, dtype=dtype, device=device, requires_grad=True)
    w = (torch.randn(n, shape[-1], dtype=dtype, device=device) / shape[-1] ** 0.5).requires_grad_(True)
    b = torch.randn(n, dtype=dtype, device=device, requires_grad=True) if bias else None
    return x, w, b


def through_operator(x, w, b, activation, slope=0.05):
    return torch.ops.gemm_act.gemm_act(x, w.t(), b, None, activation, 1.0, 0.0, slope,
                                       activation not in tga.activations._GRAD_FROM_OUTPUT)[0]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shape", [(6, 10), (2, 3, 10)])
@pytest.mark.parametrize("bias", [True, False])
def test_node_matches_the_operator(activation, shape, bias, device):
    """Y and every gradient equal the operator's, bit for bit (the same
    kernels), and the graph is one node whose edges lead to x, the weight
    itself (no transpose node) and the bias."""
    x, w, b = operands(device, shape=shape, bias=bias)
    gy = torch.randn(*shape[:-1], 7, dtype=x.dtype, device=device)
    y = layer(x, w, b, activation, 0.05)
    assert takes_the_weight(y, w)
    ref = through_operator(x, w, b, activation)
    assert ref.grad_fn.name() == NODE and not takes_the_weight(ref, w)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)
    inputs = [t for t in (x, w, b) if t is not None]
    got = torch.autograd.grad(y, inputs, gy)
    expected = torch.autograd.grad(ref, inputs, gy)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert got[1].stride() == w.stride()


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradcheck(activation, device):
    for _ in range(100):  # finite differences need pre-activations clear of any kink
        x, w, b = operands(device, shape=(4, 5), n=3)
        with torch.no_grad():
            z = F.linear(x, w, b)
        if (z.abs() > 1e-3).all():
            break
    assert torch.autograd.gradcheck(lambda *t: layer(*t, activation, 0.05), (x, w, b),
                                    eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("needs", ["x", "weight", "bias", "x,bias", "weight,bias"])
def test_only_the_gradients_asked_for(needs, device):
    """Each subset of operands requiring grad gets its gradients right and
    the rest none; with the weight frozen, x is not kept (its sizes are)."""
    x, w, b = operands(device, shape=(2, 5, 8), n=6)
    for name, t in (("x", x), ("weight", w), ("bias", b)):
        t.requires_grad_(name in needs.split(","))
    wanted = [t for t in (x, w, b) if t.requires_grad]
    gy = torch.randn(2, 5, 6, dtype=x.dtype, device=device)
    y = layer(x, w, b, "relu", 0.01)
    assert y.grad_fn.name() == NODE
    got = torch.autograd.grad(y, wanted, gy)
    expected = torch.autograd.grad(F.relu(F.linear(x, w, b)), wanted, gy)
    for g, e in zip(got, expected):
        assert_close(g, e, torch.float64)


def test_backward_twice_needs_retain_graph(device):
    x, w, b = operands(device)
    y = layer(x, w, b, "gelu", 0.01)
    first = torch.autograd.grad(y.sum(), (x, w, b), retain_graph=True)
    again = torch.autograd.grad(y.sum(), (x, w, b))
    for g, e in zip(again, first):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        torch.autograd.grad(y.sum(), (x, w, b))


def test_double_backward_raises(device):
    x, w, b = operands(device)
    (gx,) = torch.autograd.grad(layer(x, w, b, "tanh", 0.01).sum(), x, create_graph=True)
    (gx_ref,) = torch.autograd.grad(torch.tanh(F.linear(x, w, b)).sum(), x)
    assert_close(gx, gx_ref, torch.float64)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(gx.sum(), w)


def test_saved_tensor_hooks_and_checkpoint(device):
    """The node's saved tensors go through saved_tensors_hooks (what
    activation checkpointing and offloading build on)."""
    x, w, b = operands(device)
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x, w, b, "gelu", 0.01)
    assert len(packed) >= 3  # x, the weight and Z
    got = torch.autograd.grad(y.sum(), (x, w, b))
    expected = torch.autograd.grad(F.gelu(F.linear(x, w, b)).sum(), (x, w, b))
    for g, e in zip(got, expected):
        assert_close(g, e, torch.float64)
    module = tga.LinearAct(10, 7, activation="relu", device=device, dtype=torch.float64)
    ckpt = torch.utils.checkpoint.checkpoint(module, x, use_reentrant=False)
    got = torch.autograd.grad(ckpt.sum(), (x, module.weight))
    expected = torch.autograd.grad(module(x).sum(), (x, module.weight))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_in_place_change_of_a_saved_input_is_an_error(device):
    x, w, b = operands(device)
    x2 = x * 1.0
    y = layer(x2, w, b, "relu", 0.01)
    x2.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_hooks_on_the_output_run(device):
    x, w, b = operands(device)
    y = layer(x, w, b, "sigmoid", 0.01)
    y.register_hook(lambda g: g * 2.0)
    y.retain_grad()
    y.sum().backward()
    assert torch.equal(y.grad, torch.ones_like(y) * 2.0)
    (expected,) = torch.autograd.grad(torch.sigmoid(F.linear(x, w, b)).sum() * 2.0, w)
    assert_close(w.grad, expected, torch.float64)


def test_modes_and_transforms_take_the_operator(device):
    """Under a dispatch mode, a functorch transform or autocast, the call
    goes through the dispatcher, which they act on."""
    x, w, b = operands(device)
    with OpNames() as seen:
        y = layer(x, w, b, "relu", 0.01)
    assert "gemm_act.default" in seen.names and not takes_the_weight(y, w)
    # functorch's transforms get a clear error from the node, on both roads.
    for call in (lambda w_: layer(x.detach(), w_, b.detach(), "relu", 0.01),
                 lambda w_: tga.gemm_act(x.detach(), w_.t(), b.detach(), activation="relu")):
        with pytest.raises(RuntimeError, match="functorch transforms"):
            torch.func.grad(lambda w_: call(w_).sum())(w.detach())
    x32, w32, b32 = (t.detach().float().requires_grad_(True) for t in (x, w, b))
    with torch.autocast(device, dtype=torch.bfloat16):
        y = layer(x32, w32, b32, "relu", 0.01)
    assert y.dtype == torch.bfloat16 and not takes_the_weight(y, w32)


def test_no_node_without_a_backward(device):
    x, w, b = operands(device)
    with torch.no_grad():
        y = layer(x, w, b, "relu", 0.01)
    assert y.grad_fn is None and not y.requires_grad
    y = layer(x.detach(), w.detach(), b.detach(), "relu", 0.01)
    assert y.grad_fn is None


def test_bad_arguments_are_errors(device):
    x, w, b = operands(device)
    with pytest.raises(ValueError, match="cannot be multiplied"):
        layer(x, w.t().contiguous(), None, "relu", 0.01)
    with pytest.raises(ValueError, match="unknown activation 'relu6'"):
        layer(x, w, b, "relu6", 0.01)
    with pytest.raises(TypeError, match="gemm_act: bias must be a Tensor or None, got int"):
        layer(x, w, 3, "relu", 0.01)
    with pytest.raises(TypeError, match="dtype"):
        layer(x, w.float(), b, "relu", 0.01)

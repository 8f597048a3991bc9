"""opcheck, torch.compile (no graph breaks), CUDA graphs and autocast."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import BIAS_KINDS, assert_close, make_bias

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere


@pytest.mark.parametrize("activation", ["gelu", "relu", "leaky_relu"])
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("store_preact", [False, True])
def test_opcheck_gemm_act(activation, bias_kind, store_preact, device):
    a = torch.randn(2, 3, 5, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(4, 5, dtype=torch.float64, device=device, requires_grad=True).t()
    c = torch.randn(2, 3, 4, dtype=torch.float64, device=device, requires_grad=True)
    bias = make_bias(bias_kind, (2, 3, 4), torch.float64, device, requires_grad=True)
    torch.library.opcheck(torch.ops.gemm_act.gemm_act.default,
                          (a, b, bias, c, activation, 0.5, 2.0, 0.1, store_preact))


@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
def test_opcheck_activation_backward(bias_kind, device):
    grad_y = torch.randn(6, 5, device=device)
    z = torch.randn(6, 5, device=device)
    bias = make_bias(bias_kind, (6, 5), torch.float32, device)
    torch.library.opcheck(torch.ops.gemm_act.activation_backward.default, (grad_y, z, bias, "silu", 0.01))


def test_opcheck_zero_pad(device):
    torch.library.opcheck(torch.ops.gemm_act.zero_pad.default, (torch.randn(6, 5, device=device), 7, 8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("src", ["contiguous", "offset_rows", "transposed"])
def test_zero_pad_values(dtype, src, device):
    """zero_pad against ATen's pad: rows of any alignment (a view whose rows
    start at an odd element), a column stride other than 1, each dtype."""
    base = torch.randn(37, 45, dtype=dtype, device=device)
    t = {"contiguous": base, "offset_rows": base[1:, 3:44], "transposed": base.t()}[src]
    assert torch.equal(torch.ops.gemm_act.zero_pad(t, t.shape[0], t.shape[1]), t)  # nothing to add
    out = torch.ops.gemm_act.zero_pad(t, t.shape[0] + 3, t.shape[1] + 5)
    assert out.is_contiguous()
    assert torch.equal(out, F.pad(t, (0, 5, 0, 3)))
    with pytest.raises(ValueError, match="at most"):
        torch.ops.gemm_act.zero_pad(t, t.shape[0] - 1, t.shape[1])


def _fn(x, w, bias):
    return tga.linear_act(x, w, bias, "gelu").sum(-1)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_functional_forward_backward(dynamic, device):
    torch._dynamo.reset()
    compiled = torch.compile(_fn, fullgraph=True, dynamic=dynamic)
    for m in (8, 13):  # a second shape: recompiles (static) or reuses (dynamic)
        x = torch.randn(m, 16, device=device, requires_grad=True)
        w = torch.randn(12, 16, device=device, requires_grad=True)
        bias = torch.randn(12, device=device, requires_grad=True)
        out = compiled(x, w, bias)
        expected = F.gelu(F.linear(x, w, bias)).sum(-1)
        assert_close(out, expected, torch.float32)
        grads = torch.autograd.grad(out.sum(), (x, w, bias))
        ref = torch.autograd.grad(expected.sum(), (x, w, bias))
        for g, r in zip(grads, ref):
            assert_close(g, r, torch.float32)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_module(dynamic, device):
    torch._dynamo.reset()
    model = torch.nn.Sequential(tga.LinearAct(16, 32, activation="silu"), tga.LinearAct(32, 4, activation="tanh")).to(device)
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    x = torch.randn(2, 9, 16, device=device)
    assert_close(compiled(x), model(x), torch.float32)
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        assert_close(g, p.grad, torch.float32)


def test_compiled_fused_model_does_not_recompile_across_batch_sizes(device):
    """A model fused with fuse_linear_act, compiled with dynamic shapes and
    fullgraph (no graph break), trains at several batch sizes from one
    compiled frame."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                                torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(device)
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    # The gelu pair chained to the Linear after it (a LinearAct "none"); the
    # relu pair on no chain (rule links), its Linear left plain.
    assert [m.activation for m in fused.modules() if isinstance(m, tga.LinearAct)] == \
        ["gelu", "none", "relu"]
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fused, backend=counter, fullgraph=True, dynamic=True)
    compiled_after_first = None
    for batch in (8, 13, 40):
        x = torch.randn(batch, 16, device=device)
        out = compiled(x)
        assert_close(out, eager(x), torch.float32)
        out.sum().backward()
        # The first call may compile twice: dynamo restarts its analysis
        # once to specialise the op's float arguments (alpha, beta, slope).
        compiled_after_first = compiled_after_first or counter.frame_count
    assert counter.frame_count == compiled_after_first, (
        f"recompiled for a new batch size: {counter.frame_count} compilations, "
        f"{compiled_after_first} after the first call")
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def _graph_calls(model, x, grad=True):
    """(the call_function targets of the graph torch.compile captures, the output)."""
    calls = []

    def backend(gm, example_inputs):
        # Module construction in the trace records a logging call, not an operator.
        calls.extend(str(n.target) for n in gm.graph.nodes
                     if n.op == "call_function" and "_log_api_usage" not in str(n.target))
        return gm
    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        out = torch.compile(model, backend=backend, fullgraph=True)(x)
    return calls, out


def test_compiled_fused_layers_taking_eagers_formula_trace_as_the_unfused_model(monkeypatch, device):
    """Where a fused layer's operator would take eager's formula under
    torch.compile (exact fp32 on CUDA; made so here on the CPU), the fused
    model compiles to the unfused model's graph, call for call: the
    modules take the unfused path themselves rather than through the chain
    and the operator's Python, whose guards and chain-link writes cost every
    compiled call host time."""
    if device == "cpu":
        monkeypatch.setattr(tga.modules, "_compiles_as_eager", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16),
                                torch.nn.Linear(16, 32), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(32, 8)).to(device)
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    assert sum(isinstance(m, tga.LinearAct) for m in fused.modules()) == 3  # the relu pair unlinked

    x = torch.randn(5, 16, device=device)
    fused_calls, out = _graph_calls(fused, x)
    eager_calls, expected = _graph_calls(eager, x)
    assert fused_calls == eager_calls
    assert_close(out, expected, torch.float32)


@pytest.mark.shipped_policy
@pytest.mark.parametrize("grad", [False, True])
def test_compiled_on_the_cpu_is_atens_formula(grad):
    """Compiled on the CPU, the fused modules and the functional API trace
    eager's formula, which Inductor compiles, rather than the operators,
    whose CPU kernels are the references (rule cpu_atens): a fused
    MLP's graph is the unfused model's, call for call, and so is
    linear_act's."""
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                                torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    x = torch.randn(5, 16)
    fused_calls, out = _graph_calls(fused, x, grad)
    eager_calls, expected = _graph_calls(eager, x, grad)
    # Without grad the modules read x's metadata (the epilogue check): reads
    # the graph records and Inductor drops, not operators.
    fused_ops = [c for c in fused_calls if c != "<built-in function getattr>"]
    assert fused_ops == eager_calls and not any("gemm_act" in c for c in fused_calls), fused_calls
    assert_close(out, expected, torch.float32)

    w, b = eager[0].weight, eager[0].bias
    calls, out = _graph_calls(lambda t: tga.linear_act(t, w, b, activation="gelu"), x, grad)
    assert not any("gemm_act" in c for c in calls), calls
    assert_close(out, F.gelu(F.linear(x, w, b)), torch.float32)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_inference_relu_layer_cuda(monkeypatch, dtype):
    """Compiled with no grad, a relu layer with a bias that takes the
    unfused path (exact fp32) traces as eager's ops (not as
    torch._addmm_activation, whose cuBLASLt RELU turns NaN into 0); in bf16
    it keeps the operator. Either way no batch size compiles again after the
    first call, and the values are eager's."""
    from torch._dynamo.testing import CompileCounterWithBackend

    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    eager = eager.to(device="cuda", dtype=dtype)
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    x = torch.randn(5, 16, device="cuda", dtype=dtype)
    calls, out = _graph_calls(fused, x, grad=False)
    with torch.no_grad():
        assert_close(out, eager(x), dtype)
    assert not any("_addmm_activation" in c for c in calls), calls
    assert any("gemm_act" in c for c in calls) == (dtype != torch.float32), calls
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fused, backend=counter, fullgraph=True, dynamic=True)
    after_first = None
    with torch.no_grad():
        for batch in (8, 13, 40):
            x = torch.randn(batch, 16, device="cuda", dtype=dtype)
            assert_close(compiled(x), eager(x), dtype)
            # Through the operator the first call may compile twice (dynamo
            # restarts once to specialise its float arguments).
            after_first = after_first or counter.frame_count
    assert counter.frame_count == after_first


@pytest.mark.parametrize("grad", [False, True])
def test_compiled_layer_without_activation_is_linear_where_no_link_hands_it_z(grad, device):
    """A fused model's second Linear (a LinearAct with no activation, its
    chain's second link) compiles to F.linear where its input comes with no
    Z: in inference, or where the first layer itself compiles unfused. In
    training through the chain it is the chained operator."""
    torch._dynamo.reset()
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    fused = tga.fuse_linear_act(copy.deepcopy(eager)).to(device=device, dtype=torch.bfloat16)
    x = torch.randn(64, 16, device=device, dtype=torch.bfloat16)
    calls, _ = _graph_calls(fused, x, grad)
    chained = tga._policy.chain_pays(x, fused[0].weight, fused[0].bias, "gelu", any_size=True, b_is_weight=True)
    if grad and chained:
        assert calls.count("gemm_act.gemm_act_chained.default") == 2, calls
        assert "<built-in function linear>" not in calls
    else:
        assert calls.count("<built-in function linear>") == 1, calls
        assert not any("chained" in c for c in calls), calls


def test_emptying_an_empty_chain_link_writes_nothing():
    """Each write to a _ChainLink under torch.compile is a side effect that
    Dynamo replays after the graph on every call; a layer that finds its
    link empty leaves it alone."""
    from torch_gemm_act.chain import _ChainLink

    class CountingLink(_ChainLink):
        __slots__ = ()
        writes = 0

        def __setattr__(self, name, value):
            type(self).writes += 1
            super().__setattr__(name, value)

    link = CountingLink()
    CountingLink.writes = 0
    assert link.take(torch.ones(1)) is None
    link.clear()
    assert CountingLink.writes == 0
    y = torch.ones(2)
    link.put(y, y, None, "gelu", 0.0)
    assert link.take(y) == (y, None, "gelu", 0.0) and link.y is None


def test_no_graph_break():
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(_fn)(torch.randn(4, 8), torch.randn(3, 8), torch.randn(3))
    assert explanation.graph_break_count == 0


@requires_cuda
def test_cuda_graphs_reduce_overhead():
    torch._dynamo.reset()
    model = tga.LinearAct(64, 64, activation="gelu").cuda()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(32, 64, device="cuda")
    for _ in range(3):  # warm-up runs, then graph replays
        out = compiled(x)
    assert_close(out, F.gelu(F.linear(x, model.weight, model.bias)), torch.float32)


def _autocast_matches_linear(device_type, dtype):
    x = torch.randn(8, 16, device=device_type, requires_grad=True)
    w = torch.randn(12, 16, device=device_type, requires_grad=True)
    bias = torch.randn(12, device=device_type, requires_grad=True)
    with torch.autocast(device_type, dtype=dtype):
        ours = tga.linear_act(x, w, bias, "relu")
        theirs = F.relu(F.linear(x, w, bias))
    assert ours.dtype == theirs.dtype == dtype
    assert_close(ours, theirs, dtype)
    ours.float().sum().backward()
    assert x.grad.dtype == w.grad.dtype == bias.grad.dtype == torch.float32
    # float64 is left alone by autocast, as for F.linear.
    with torch.autocast(device_type, dtype=dtype):
        y64 = tga.linear_act(x.double(), w.double(), bias.double(), "relu")
    assert y64.dtype == torch.float64


def test_autocast_cpu():
    _autocast_matches_linear("cpu", torch.bfloat16)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_cuda(dtype):
    _autocast_matches_linear("cuda", dtype)


def test_eager_formula_traces_in_one_graph():
    """What exact fp32 / fp64 on CUDA compile to (functional._eager_formula):
    one graph, every activation, eager's numerics."""
    from torch_gemm_act.functional import _eager_formula
    a, b, bias, c = torch.randn(5, 8), torch.randn(8, 6), torch.randn(6), torch.randn(5, 6)
    for activation in tga.ACTIVATIONS:
        def f(a, b, bias, c):
            return _eager_formula(a, b, bias, c, activation, 1.5, 0.5, 0.2, True)
        y, z = torch.compile(f, fullgraph=True, backend="eager")(a, b, bias, c)
        y_ref, z_ref = tga.gemm_act(a, b, bias, c, activation=activation, alpha=1.5, beta=0.5,
                                    negative_slope=0.2, return_preact=True)
        torch.testing.assert_close(z, z_ref)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)

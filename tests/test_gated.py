"""The gated activations: gemm_glu / gated_linear_act, its operators (glu,
glu_backward) and the modules, against float64 references and eager
PyTorch (two Linears, the activation, the product)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import torch_gemm_act as tga
from torch_gemm_act import _policy
from conftest import OpNames, requires_cuda
from reference import assert_close, torch_twin

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere

GATED = list(tga.GATED)


def _operands(m, k, n, dtype, device, bias, requires_grad=False):
    scale = 1.0 / k ** 0.5
    a = torch.randn(m, k, dtype=torch.float64)
    wg, wu = (torch.randn(n, k, dtype=torch.float64) * scale for _ in range(2))
    bg, bu = (torch.randn(n, dtype=torch.float64) if bias else None for _ in range(2))

    def to(t):
        return None if t is None else t.to(device=device, dtype=dtype).requires_grad_(requires_grad)
    a, wg, wu, bg, bu = map(to, (a, wg, wu, bg, bu))
    return a, wg, wu, bg, bu


def _reference64(a, wg, wu, bg, bu, activation, negative_slope=0.01):
    d = [None if t is None else t.detach().double().cpu() for t in (a, wg, wu, bg, bu)]
    g = F.linear(d[0], d[1], d[3])
    u = F.linear(d[0], d[2], d[4])
    return torch_twin(tga.GATED[activation], negative_slope)(g) * u, torch.cat([g, u], -1)


_close = assert_close


@pytest.mark.parametrize("activation", GATED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_gated_linear_act_matches_float64(device, activation, dtype, bias):
    a, wg, wu, bg, bu = _operands(67, 40, 24, dtype, device, bias)
    y, h = tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation=activation, return_preact=True)
    y_ref, h_ref = _reference64(a, wg, wu, bg, bu, activation)
    assert y.shape == (67, 24) and h.shape == (67, 48) and y.dtype == dtype
    _close(y, y_ref, dtype)
    _close(h, h_ref, dtype)
    _close(tga.gated_linear_act(a, wg, wu, bg, bu, activation), y_ref, dtype)


@pytest.mark.parametrize("n", [8, 13, 64])
def test_gemm_glu_b_layouts_batches_and_odd_widths(device, n):
    # b row-major [K, N] and a weight's transpose; a with two leading
    # dimensions; N a multiple of the 16-byte width or not.
    a = torch.randn(3, 5, 32, device=device)
    bg, bu = torch.randn(32, n, device=device) / 6, torch.randn(n, 32, device=device).t() / 6
    y = tga.gemm_glu(a, bg, bu, activation="geglu")
    ref = F.gelu(a.double() @ bg.double()) * (a.double() @ bu.double())
    assert y.shape == (3, 5, n)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", GATED)
def test_gemm_glu_gradcheck(activation):
    a, wg, wu, bg, bu = _operands(6, 5, 4, torch.float64, "cpu", True, requires_grad=True)

    def f(a, wg, wu, bg, bu):
        return tga.gated_linear_act(a, wg, wu, bg, bu, activation)
    assert torch.autograd.gradcheck(f, (a, wg, wu, bg, bu))


@pytest.mark.parametrize("activation", GATED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_backward_matches_eager(device, activation, dtype):
    """Every gradient against float64, the activation's derivative taken at
    the forward's own H (in 16 bits a gate value next to relu's kink may
    round to the other side: H itself is checked by the forward's test)."""
    a, wg, wu, bg, bu = _operands(50, 32, 24, dtype, device, True, requires_grad=True)
    gy = torch.randn(50, 24, device=device, dtype=dtype)
    leaves = (a, wg, wu, bg, bu)
    y, h = tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation=activation, return_preact=True)
    y.backward(gy)
    got = [t.grad.clone() for t in leaves]
    g, u = (part.detach().double().cpu().requires_grad_(True) for part in h.chunk(2, -1))
    (torch_twin(tga.GATED[activation])(g) * u).backward(gy.double().cpu())
    d = [t.detach().double().cpu() for t in leaves]
    ref = [g.grad @ d[1] + u.grad @ d[2], g.grad.t() @ d[0], u.grad.t() @ d[0], g.grad.sum(0), u.grad.sum(0)]
    for name, got_, ref_ in zip(("a", "w_gate", "w_up", "b_gate", "b_up"), got, ref):
        _close(got_, ref_, dtype, normwise=True)


def test_gemm_glu_preact_gradient_flows(device):
    # A loss on H as well as Y: both reach the operands.
    a, wg, wu, bg, bu = _operands(9, 8, 6, torch.float64, device, True, requires_grad=True)
    y, h = tga.gemm_glu(a, wg.t(), wu.t(), bg, bu, activation="swiglu", return_preact=True)
    (y.sum() + (h ** 2).sum()).backward()
    d = [t.detach().clone().requires_grad_(True) for t in (a, wg, wu, bg, bu)]
    g, u = F.linear(d[0], d[1], d[3]), F.linear(d[0], d[2], d[4])
    ((F.silu(g) * u).sum() + (torch.cat([g, u], -1) ** 2).sum()).backward()
    for t, r in zip((a, wg, wu, bg, bu), d):
        torch.testing.assert_close(t.grad, r.grad)


def test_gemm_glu_opcheck(device):
    a, wg, wu, bg, bu = _operands(7, 16, 8, torch.float32, device, True, requires_grad=True)
    for store in (False, True):
        torch.library.opcheck(torch.ops.gemm_act.gemm_glu.default, (a, wg.t(), wu.t(), bg, bu, "silu", 0.01, store))
    h = torch.randn(5, 16, device=device)
    torch.library.opcheck(torch.ops.gemm_act.glu.default, (h, "gelu", 0.01))
    torch.library.opcheck(torch.ops.gemm_act.glu_backward.default, (torch.randn(5, 8, device=device), h, "gelu", 0.01))


def test_gemm_glu_errors_say_what_was_given():
    a, w = torch.randn(4, 8), torch.randn(8, 6)
    with pytest.raises(ValueError, match="unknown gated activation 'silu'; expected one of: swiglu"):
        tga.gemm_glu(a, w, w, activation="silu")
    with pytest.raises(ValueError, match=r"b_gate and b_up must both be 2-D \[K, N\] of one shape"):
        tga.gemm_glu(a, w, torch.randn(8, 5))
    with pytest.raises(ValueError, match=r"cannot be multiplied .*K = 7"):
        tga.gemm_glu(a, torch.randn(7, 6), torch.randn(7, 6))
    with pytest.raises(ValueError, match="bias_up must be 1-D with N = 6 elements, got shape"):
        tga.gemm_glu(a, w, w, None, torch.randn(5))
    with pytest.raises(TypeError, match="every operand must have a's dtype and device"):
        tga.gemm_glu(a, w, w.double())
    with pytest.raises(ValueError, match="an even size"):
        torch.ops.gemm_act.glu(torch.randn(3, 5), "silu", 0.01)
    with pytest.raises(ValueError, match="2-D tensor"):
        tga.gated_linear_act(a, torch.randn(6), w.t())


def test_gated_linear_act_under_autocast(device):
    a, wg, wu, _, _ = _operands(16, 32, 8, torch.float32, device, False)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = tga.gated_linear_act(a, wg, wu)
    assert y.dtype == torch.bfloat16
    _close(y, _reference64(a, wg, wu, None, None, "swiglu")[0], torch.bfloat16)


class _LlamaMLP(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_gated_module_is_two_linears(device):
    torch.manual_seed(0)
    module = tga.GatedLinearAct(16, 24, bias=True, activation="geglu_tanh").to(device)
    assert list(module.state_dict()) == ["gate_proj.weight", "gate_proj.bias", "up_proj.weight", "up_proj.bias"]
    torch.manual_seed(0)
    twins = [nn.Linear(16, 24).to(device) for _ in range(2)]
    for ours, theirs in zip((module.gate_proj, module.up_proj), twins):
        torch.testing.assert_close(ours.weight, theirs.weight)  # nn.Linear's initialisation
    x = torch.randn(10, 16, device=device)
    expected = (F.gelu(F.linear(x, module.gate_proj.weight, module.gate_proj.bias), approximate="tanh")
                * F.linear(x, module.up_proj.weight, module.up_proj.bias))
    torch.testing.assert_close(module(x), expected, rtol=1e-5, atol=1e-5)
    copied = copy.deepcopy(module)
    assert copied.gate_proj.up is copied.up_proj
    with torch.no_grad():
        copied.up_proj.weight.zero_()
        copied.up_proj.bias.zero_()
    assert copied(x).abs().max() == 0 and module(x).abs().max() > 0


def test_gated_module_compiles_without_graph_break():
    module = tga.GatedLinearAct(16, 24)
    x = torch.randn(10, 16, requires_grad=True)
    compiled = torch.compile(module, backend="aot_eager", fullgraph=True)
    y = compiled(x)
    torch.testing.assert_close(y, module(x))
    y.sum().backward()
    assert x.grad is not None and module.gate_proj.weight.grad is not None


@requires_cuda
def test_glu_pass_misaligned_views_cuda():
    # h a view that starts off a 16-byte boundary: the pass takes the narrow path.
    base = torch.randn(9 * 64 + 1, device="cuda", dtype=torch.bfloat16)
    h = base[1:].view(9, 64)
    y = torch.ops.gemm_act.glu(h, "silu", 0.01)
    ref = F.silu(h[:, :32].double()) * h[:, 32:].double()
    torch.testing.assert_close(y.double(), ref, rtol=1e-2, atol=1e-2)


def _assert_same_step(eager, fused, x):
    """The same output and parameter gradients, in fp32."""
    y_e, y_f = eager(x), fused(x)
    torch.testing.assert_close(y_f, y_e, rtol=1e-5, atol=1e-5)
    gy = torch.randn_like(y_e)
    y_e.backward(gy)
    y_f.backward(gy)
    for (name, p_e), p_f in zip(eager.named_parameters(), fused.parameters()):
        torch.testing.assert_close(p_f.grad, p_e.grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("act", [nn.SiLU, nn.ReLU])
def test_fuse_linear_act_fuses_a_gated_mlp_whole(device, act):
    torch.manual_seed(0)
    eager = _LlamaMLP(16, 32).to(device)
    eager.act_fn = act()
    fused, report = tga.fuse_linear_act(copy.deepcopy(eager), report=True)
    assert report.fused == [("gate_proj * up_proj", "act_fn", "swiglu" if act is nn.SiLU else "reglu")]
    assert isinstance(fused.gate_proj, tga.LinearGate) and isinstance(fused.up_proj, tga.LinearUp)
    assert fused.gate_proj.up is fused.up_proj and isinstance(fused.act_fn, nn.Identity)
    assert list(fused.state_dict()) == list(eager.state_dict())
    assert fused.gate_proj.weight is dict(fused.named_parameters())["gate_proj.weight"]
    _assert_same_step(eager, fused, torch.randn(2, 9, 16, device=device))


class _UpUsedTwice(_LlamaMLP):
    def forward(self, x):
        up = self.up_proj(x)
        return self.down_proj(self.act_fn(self.gate_proj(x)) * up) + up.sum()


def test_fuse_leaves_the_product_where_up_is_used_elsewhere():
    fused, report = tga.fuse_linear_act(_UpUsedTwice(16, 32), report=True)
    # Only the gate projection and its activation, as for any pair.
    assert report.fused == [("gate_proj", "act_fn", "silu")], str(report)
    assert type(fused.up_proj) is nn.Linear


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("fused_kernel", [False, True])
def test_fused_gated_mlp_compiles_without_graph_break(monkeypatch, fused_kernel, training):
    """The fused module's forward, unchanged, multiplies the gate's output by
    what LinearUp returns: Dynamo traces that in one graph across batch
    sizes. In inference where the fused kernel runs (rule compiles_to_glu;
    the kernel pretended here, the CPU operator computing the same) the graph
    calls gemm_glu; in training, and where no fused kernel runs, the
    unfused formula."""
    monkeypatch.setattr(_policy, "hopper_fused", lambda x: fused_kernel)
    # Rows symbolic (dynamic=True): the operator decides when it runs,
    # whatever the bound, and no guard on them recompiles.
    monkeypatch.setattr(_policy, "FUSED_GLU_MIN_ROWS", 10 ** 6)
    torch.manual_seed(0)
    eager = _LlamaMLP(16, 32)
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fused, backend=counter, fullgraph=True, dynamic=True)
    for batch in (3, 7):
        x = torch.randn(batch, 16)
        if training:
            _assert_same_step(eager, compiled, x)
        else:
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1
    ops = {str(n.target) for g in counter.graphs for n in g.graph.nodes}
    assert any("gemm_glu" in op for op in ops) == (fused_kernel and not training), ops


class _PackedGlu(nn.Module):
    """timm's GluMlp: one Linear's output split in two, one half gated."""

    def __init__(self, act=nn.Sigmoid, gate_last=True, bias=True, half_used_elsewhere=False):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 64, bias=bias), act(), nn.Linear(32, 16)
        self.gate_last, self.half_used_elsewhere = gate_last, half_used_elsewhere

    def forward(self, x):
        x1, x2 = self.fc1(x).chunk(2, dim=-1)
        y = x1 * self.act(x2) if self.gate_last else self.act(x1) * x2
        return self.fc2(y) + (x1.sum() if self.half_used_elsewhere else 0)


@pytest.mark.parametrize("act,gate_last,bias,gated", [(nn.Sigmoid, True, True, "glu"),
                                                      (nn.SiLU, False, True, "swiglu"),
                                                      (nn.GELU, True, False, "geglu")])
def test_fuse_linear_act_fuses_a_packed_gated_mlp(device, act, gate_last, bias, gated):
    torch.manual_seed(0)
    eager = _PackedGlu(act, gate_last, bias).to(device)
    fused, report = tga.fuse_linear_act(copy.deepcopy(eager), report=True)
    gate_index = 1 if gate_last else 0
    assert report.fused == [(f"fc1 (packed: gate half {gate_index})", "act", gated)], str(report)
    assert isinstance(fused.fc1, tga.LinearPackedGlu) and isinstance(fused.act, tga.PackedGluActivation)
    assert fused.fc1.gate_index == gate_index
    assert list(fused.state_dict()) == list(eager.state_dict())
    _assert_same_step(eager, fused, torch.randn(2, 9, 16, device=device))


def _backward_nodes(t):
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return [node.name() for node in seen]


@pytest.mark.parametrize("gate_index", [0, 1])
def test_packed_glu_weight_gradient_comes_from_one_split(gate_index, device):
    """The halves are one split of each parameter: its backward writes the
    packed gradient once (no zero-filled gradient per slice, then a sum),
    the gradient of the unfused formula."""
    module = tga.LinearPackedGlu(16, 24, gate_index=gate_index).to(device)
    x = torch.randn(5, 16, device=device)
    (y,) = [t for t in module(x).chunk(2, dim=-1) if isinstance(t, torch.Tensor)]
    names = _backward_nodes(y)
    assert "SliceBackward0" not in names and names.count("SplitBackward0") == 2, names
    y.sum().backward()
    w, b = (p.detach().clone().requires_grad_() for p in (module.weight, module.bias))
    first, second = F.linear(x, w, b).chunk(2, dim=-1)
    gate, up = (first, second) if gate_index == 0 else (second, first)
    (F.silu(gate) * up).sum().backward()
    torch.testing.assert_close(module.weight.grad, w.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.bias.grad, b.grad, rtol=1e-5, atol=1e-5)


def test_fuse_leaves_a_packed_mlp_whose_half_is_used_elsewhere():
    eager = _PackedGlu(half_used_elsewhere=True)
    fused, report = tga.fuse_linear_act(copy.deepcopy(eager), report=True)
    assert report.fused == [] and type(fused.fc1) is nn.Linear, str(report)


def test_fused_packed_mlp_compiles_without_graph_break():
    """Under torch.compile the packed Linear returns its output and the
    activation's slot gates it: the unfused forward, in one graph."""
    torch.manual_seed(0)
    eager = _PackedGlu(nn.SiLU, gate_last=False)
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    compiled = torch.compile(fused, backend="aot_eager", fullgraph=True, dynamic=True)
    for batch in (3, 7):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-5)


def test_packed_glu_module_errors():
    with pytest.raises(ValueError, match="out_features must be even and gate_index 0 or 1, got out_features=7"):
        tga.LinearPackedGlu(4, 7)
    with pytest.raises(ValueError, match="splits only as chunk\\(2, dim=-1\\), got chunk\\(3, dim=-1\\)"):
        tga.LinearPackedGlu(4, 8)(torch.randn(2, 4)).chunk(3, dim=-1)
    with pytest.raises(TypeError, match="got LinearAct"):
        tga.LinearPackedGlu.from_linear(tga.LinearAct(4, 8))


@pytest.mark.shipped_policy
@pytest.mark.parametrize("packed", [False, True])
def test_fused_gated_mlp_on_the_cpu_runs_atens_ops(packed):
    """On the CPU the fused gated modules run the ops of the modules they
    replaced (the gated operator's CPU kernel is the reference, slower than
    ATen's), and compute what those compute bit for bit, forward and
    backward."""
    eager = (_PackedGlu(nn.SiLU, gate_last=True) if packed else _LlamaMLP(16, 24)).double()
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    assert any(isinstance(m, (tga.LinearPackedGlu, tga.LinearGate)) for m in fused.modules())
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    with OpNames() as calls:
        y = fused(x)
    assert not any(name.startswith("gemm_act") for name in calls.names), calls.names
    want = eager(x)
    assert torch.equal(y, want)
    gy = torch.randn_like(y)
    params = list(fused.parameters())
    for g, w in zip(torch.autograd.grad(y, [x] + params, gy),
                    torch.autograd.grad(want, [x] + list(eager.parameters()), gy)):
        assert torch.equal(g, w)

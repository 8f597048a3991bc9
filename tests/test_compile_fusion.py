"""enable_compile_fusion: torch.compile of an unchanged model runs the fused
operator for its Linear -> activation pairs, forward and backward, with the
numerics of fusing the modules by hand, no graph break and no recompile
across batch sizes; the switch turns it off again."""

import copy

import pytest
import torch
import transformers
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import torch_gemm_act as tga
from conftest import requires_cuda
from torch_gemm_act import _policy, compile_fusion

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = [pytest.mark.operator_everywhere, pytest.mark.usefixtures("no_compile_caches")]


class _Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(),
                                 nn.Linear(32, 24), nn.GELU(approximate="tanh"), nn.Linear(24, 24),
                                 nn.LeakyReLU(0.2), nn.Linear(24, 8))
        self.side = nn.Linear(8, 8)

    def forward(self, x):
        h = self.net(x)
        s = self.side(h)  # its output also feeds the residual: left alone
        return torch.nn.functional.silu(s) + s


def _same_step(compiled, by_hand, x):
    """The compiled model's output and input gradient are the hand-fused one's."""
    x = x.requires_grad_()
    x_hand = x.detach().clone().requires_grad_()
    y, y_hand = compiled(x), by_hand(x_hand)
    torch.testing.assert_close(y, y_hand, rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(y)
    y.backward(grad)
    y_hand.backward(grad)
    torch.testing.assert_close(x.grad, x_hand.grad, rtol=1e-5, atol=1e-6)


def test_compiled_model_runs_the_fused_operator(fusion):
    torch.manual_seed(0)
    model = _Mlp()
    by_hand = tga.fuse_linear_act(copy.deepcopy(model))
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for batch in (3, 5, 9):
        _same_step(compiled, by_hand, torch.randn(batch, 16))
    # net's gelu, relu and tanh-gelu pairs. Not side -> silu (side's output
    # feeds the residual too), nor leaky_relu: with dynamic=True Dynamo keeps
    # its slope as a graph value, which the operator's float argument cannot take.
    assert fusion.fused == 3
    # Each pair chained to the Linear after it, as fuse_linear_act chains them.
    assert fusion.chained == 3
    assert counter.frame_count == 1  # no graph break, no recompile across batch sizes
    for (name, p), p_hand in zip(model.named_parameters(), by_hand.parameters()):
        torch.testing.assert_close(p.grad, p_hand.grad, rtol=1e-5, atol=1e-6, msg=name)


class _DropoutMlp(nn.Module):
    """timm's Mlp: fc1 -> act -> drop1 -> norm (an identity) -> fc2."""

    def __init__(self, p):
        super().__init__()
        self.fc1, self.act, self.drop1 = nn.Linear(16, 32), nn.GELU(), nn.Dropout(p)
        self.norm, self.fc2 = nn.Identity(), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.norm(self.drop1(self.act(self.fc1(x)))))


@pytest.mark.parametrize("p, training, chained", [(0.0, True, 1), (0.5, False, 1), (0.5, True, 0)])
def test_chain_through_a_dropout_that_passes_its_input(fusion, p, training, chained):
    """The pass chains a pair to the Linear after a dropout that passes its
    input on (p = 0, or not training) and computes what the unfused model
    does; a dropout that drops, it leaves between them."""
    torch.manual_seed(0)
    model = _DropoutMlp(p).train(training)
    reference = copy.deepcopy(model)
    x = torch.randn(6, 16)
    compiled = torch.compile(model, fullgraph=True)
    torch.manual_seed(1)
    y = compiled(x)
    assert fusion.fused == 1 and fusion.chained == chained
    if chained:  # the dropout's own randomness aside, the unfused model's step
        torch.testing.assert_close(y, reference(x), rtol=1e-5, atol=1e-6)
        y.sum().backward()
        reference(x).sum().backward()
        for (name, q), q_ref in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(q.grad, q_ref.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_inference_and_transformers_activation(fusion):
    t = transformers
    from transformers.models.bert.modeling_bert import BertIntermediate
    torch.manual_seed(0)
    layer = BertIntermediate(t.BertConfig(hidden_size=32, intermediate_size=64)).eval()
    compiled = torch.compile(layer, fullgraph=True)
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-6)
    assert fusion.fused == 1 and fusion.chained == 0  # no backward, nothing to chain


def test_the_switch_turns_it_off_and_keeps_a_pass_set_before():
    calls = []

    class Other(torch._inductor.custom_graph_pass.CustomGraphPass):
        def __call__(self, graph):
            calls.append(len(graph.nodes))

        def uuid(self):
            return "other"

    other = Other()
    torch._inductor.config.pre_grad_custom_pass = other
    try:
        tga.enable_compile_fusion()
        assert compile_fusion._compile_fusion_enabled()
        torch._dynamo.reset()
        torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), fullgraph=True)(torch.randn(2, 4))
        assert calls and torch._inductor.config.pre_grad_custom_pass.fused == 1
        tga.enable_compile_fusion(False)
        assert torch._inductor.config.pre_grad_custom_pass is other
        assert not compile_fusion._compile_fusion_enabled()
    finally:
        torch._inductor.config.pre_grad_custom_pass = None
        torch._dynamo.reset()


def test_a_plain_function_set_before_runs_first():
    """A pass set before as a plain function (no uuid): it still runs, and
    Inductor is told the pair cannot be cached (uuid None), not an error."""
    calls = []
    torch._inductor.config.pre_grad_custom_pass = lambda graph: calls.append(len(graph.nodes))
    try:
        tga.enable_compile_fusion()
        fusion_pass = torch._inductor.config.pre_grad_custom_pass
        assert fusion_pass.uuid() is None
        torch._dynamo.reset()
        with torch._inductor.config.patch(fx_graph_cache=False):
            torch.compile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), fullgraph=True)(torch.randn(2, 4))
        assert calls and fusion_pass.fused == 1
    finally:
        tga.enable_compile_fusion(False)
        torch._inductor.config.pre_grad_custom_pass = None
        torch._dynamo.reset()


def test_addmm_with_a_bias_per_column_only(fusion):
    """torch.addmm(b, x, w), as transformers' Conv1D computes, is fused when b
    is a bias per column; with a full [M, N] input (a C) it is left."""
    torch.manual_seed(0)
    w, bias, c = torch.randn(16, 8), torch.randn(8), torch.randn(4, 8)

    def f(x):
        return torch.relu(torch.addmm(bias, x, w)) + torch.relu(torch.addmm(c, x, w))

    x = torch.randn(4, 16)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x), rtol=1e-5, atol=1e-6)
    assert fusion.fused == 1


def _llama_mlp(hidden, intermediate):
    from transformers.models.llama.modeling_llama import LlamaMLP
    return LlamaMLP(transformers.LlamaConfig(hidden_size=hidden, intermediate_size=intermediate,
                                             num_attention_heads=2, num_key_value_heads=2))


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("fused_kernel", [False, True])
def test_gated_mlp_compiles_to_gemm_glu_where_it_pays(fusion, monkeypatch, fused_kernel, training):
    """transformers' LlamaMLP, unchanged: in inference where the fused gated
    kernel runs (rule compiles_to_glu; the kernel pretended here, the
    CPU operator computing the same) the gate, its activation, the up
    projection and the product become one gemm_glu; in training, and where
    no fused kernel runs, neither the product nor its gate -> activation
    pair becomes our operator (Inductor builds the same two GEMMs and one
    pass itself). Numerics as eager, one graph across batch sizes."""
    monkeypatch.setattr(_policy, "hopper_fused", lambda x: fused_kernel)
    # Rows symbolic (dynamic=True): the operator decides when it runs,
    # whatever the bound, and no guard on them recompiles.
    monkeypatch.setattr(_policy, "FUSED_GLU_MIN_ROWS", 10 ** 6)
    torch.manual_seed(0)
    mlp = _llama_mlp(16, 32)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(mlp, backend=counter, fullgraph=True, dynamic=True)
    for batch in (3, 6):
        x = torch.randn(batch, 5, 16)
        if training:
            _same_step(compiled, mlp, x)
        else:
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), mlp(x), rtol=1e-5, atol=1e-6)
    glu = fused_kernel and not training
    assert (fusion.fused, fusion.glu, fusion.gated) == ((0, 1, 0) if glu else (0, 0, 1))
    assert counter.frame_count == 1


@pytest.mark.parametrize("batch,glu", [(3, False), (4, True)])
def test_gated_mlp_compiles_to_gemm_glu_from_its_rows(fusion, monkeypatch, batch, glu):
    """With static shapes the pass takes gemm_glu only from the rows at which
    its fused kernel runs (FUSED_GLU_MIN_ROWS, pretended 20 here): below,
    Inductor's own GEMMs and pass."""
    monkeypatch.setattr(_policy, "hopper_fused", lambda x: True)
    monkeypatch.setattr(_policy, "FUSED_GLU_MIN_ROWS", 20)
    torch.manual_seed(0)
    mlp = _llama_mlp(16, 32)
    x = torch.randn(batch, 5, 16)  # 15 or 20 rows
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(mlp, fullgraph=True, dynamic=False)(x), mlp(x),
                                   rtol=1e-5, atol=1e-6)
    assert (fusion.glu, fusion.gated) == ((1, 0) if glu else (0, 1))


@requires_cuda
def test_gated_mlp_compiles_to_gemm_glu_cuda(fusion):
    """LlamaMLP in bf16 on the GPU: in inference gemm_glu where the fused
    kernel runs (Hopper, from its rows), Inductor's own kernels elsewhere
    and in training; output and every gradient against a float64 copy of
    the model."""
    torch.manual_seed(0)
    mlp = _llama_mlp(64, 96).cuda()
    reference = copy.deepcopy(mlp).double()
    model = copy.deepcopy(mlp).to(torch.bfloat16)
    rows = _policy.FUSED_GLU_MIN_ROWS or 30
    x = torch.randn(rows, 64, device="cuda", dtype=torch.float64)
    with torch.no_grad():
        y_ref = reference(x)
        y = torch.compile(model, fullgraph=True)(x.to(torch.bfloat16))
    torch.testing.assert_close(y.double(), y_ref, rtol=2e-2, atol=2e-2 * y_ref.abs().max().item())
    hopper = torch.cuda.get_device_capability() == (9, 0) and _policy.FUSED_GLU_MIN_ROWS is not None
    assert (fusion.glu, fusion.gated) == ((1, 0) if hopper else (0, 1))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for batch in (3, 6):
        x = torch.randn(batch, 5, 64, device="cuda", dtype=torch.float64)
        y_ref = reference(x)
        y = compiled(x.to(torch.bfloat16).requires_grad_())
        torch.testing.assert_close(y.double(), y_ref, rtol=2e-2, atol=2e-2 * y_ref.abs().max().item())
        grad = torch.randn_like(y_ref)
        y.backward(grad.to(torch.bfloat16))
        y_ref.backward(grad)
    for (name, p), p_ref in zip(compiled.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.double(), p_ref.grad, rtol=2e-2,
                                   atol=2e-2 * p_ref.grad.abs().max().item(), msg=name)
    assert (fusion.glu, fusion.gated) == ((1, 1) if hopper else (0, 2))


def test_gated_product_left_when_up_is_used_elsewhere(fusion):
    torch.manual_seed(0)
    gate, up = nn.Linear(8, 12), nn.Linear(8, 12)

    def f(x):
        u = up(x)
        return torch.nn.functional.silu(gate(x)) * u + u

    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x), rtol=1e-5, atol=1e-6)
    assert fusion.fused == 1 and fusion.gated == 0  # gate -> silu as a pair; the product stays


@requires_cuda
def test_exact_fp32_on_cuda_compiles_as_eager_cuda(fusion):
    """Exact fp32 on CUDA: the operator would run the library's cuBLAS GEMM,
    as eager does, so under torch.compile neither the pass nor a hand-fused
    module puts it in the graph, and Inductor fuses the rest itself. With
    TF32 allowed the pass fuses again."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).cuda()
    by_hand = tga.fuse_linear_act(copy.deepcopy(mlp))
    x = torch.randn(4, 16, device="cuda")
    assert not torch.backends.cuda.matmul.allow_tf32
    graphs = []

    def record(gm, inputs):
        graphs.append(gm)
        return gm.forward
    torch.testing.assert_close(torch.compile(mlp, fullgraph=True)(x), mlp(x))
    assert fusion.fused == 0
    torch.testing.assert_close(torch.compile(by_hand, backend=record, fullgraph=True)(x), mlp(x))
    ops = {str(n.target) for g in graphs for n in g.graph.nodes}
    assert not any("gemm_act" in op for op in ops), ops
    torch._dynamo.reset()
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with torch.no_grad():  # relu in training is left to Inductor anyway (below)
            torch.compile(copy.deepcopy(mlp), fullgraph=True)(x)
        assert fusion.fused == 1
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


@requires_cuda
@pytest.mark.parametrize("activation", [nn.ReLU, nn.GELU])
def test_relu_in_training_compiles_as_eager_cuda(activation, fusion):
    """In training, an activation whose derivative comes from Y (relu) is
    left to Inductor by the pass and by a hand-fused module alike, and gets
    the operator again in inference; GELU keeps the operator in training."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 128), activation(), nn.Linear(128, 32)).cuda().to(torch.bfloat16)
    by_hand = tga.fuse_linear_act(copy.deepcopy(mlp))
    x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    graphs = []

    def record(gm, inputs):
        graphs.append(gm)
        return gm.forward
    y = torch.compile(by_hand, backend=record, fullgraph=True)(x)
    torch.testing.assert_close(y, mlp(x), rtol=2e-2, atol=2e-2)
    ops = {str(n.target) for g in graphs for n in g.graph.nodes}
    relu = activation is nn.ReLU
    assert any("gemm_act" in op for op in ops) != relu, ops
    torch.compile(copy.deepcopy(mlp), fullgraph=True)(x)
    assert fusion.fused == (0 if relu else 1)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(copy.deepcopy(mlp), fullgraph=True)(x)
    assert fusion.fused == (1 if relu else 2)


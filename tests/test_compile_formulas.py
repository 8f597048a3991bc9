"""The compile pass on what models write: activations spelled out in
arithmetic (transformers' GELU formulas), found by their values; Conv1D's
addmm between reshapes; whole transformers GPT-2 blocks fused and chained
as fuse_linear_act fuses them."""

import copy
import math

import pytest
import torch
import transformers
from torch import nn
from transformers import activations as hf

import torch_gemm_act as tga
from conftest import requires_cuda

pytestmark = [pytest.mark.operator_everywhere, pytest.mark.usefixtures("no_compile_caches")]


class _Formula(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


# (formula, the activation it is, or None: not one of ours)
FORMULAS = {
    "NewGELUActivation": (hf.NewGELUActivation(), "gelu_tanh"),
    "FastGELUActivation": (hf.FastGELUActivation(), "gelu_tanh"),
    "AccurateGELUActivation": (hf.AccurateGELUActivation(), "gelu_tanh"),
    "erf_gelu": (_Formula(lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))), "gelu"),
    "swish": (_Formula(lambda x: x * torch.sigmoid(x)), "silu"),
    "QuickGELUActivation": (hf.QuickGELUActivation(), None),
    "gelu_then_double": (_Formula(lambda x: 2 * hf.NewGELUActivation()(x)), "gelu_tanh"),
    "tanh_of_a_third": (_Formula(lambda x: torch.tanh(x / 3)), None),
}


@pytest.mark.parametrize("name", list(FORMULAS))
def test_formula_fuses_as_its_activation(fusion, name):
    """Linear -> formula, training: fused as the activation it computes (and
    only then), with the numerics of the module fused by hand with that
    activation; a formula that is none of ours is left as written."""
    formula, activation = FORMULAS[name]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), formula, nn.Linear(32, 8))
    x = torch.randn(6, 16, requires_grad=True)
    y = torch.compile(model, fullgraph=True)(x)
    y.backward(torch.ones_like(y))
    x_ref = x.detach().clone().requires_grad_()
    y_ref = model(x_ref)
    y_ref.backward(torch.ones_like(y_ref))
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
    assert (fusion.formulas, fusion.fused) == ((1, 1) if activation else (0, 0))


def test_formula_whose_step_is_used_elsewhere_is_left(fusion):
    """A formula one of whose steps is read outside it stays as written."""
    def f(x):
        cube = torch.pow(x, 3.0)
        gelu = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * cube)))
        return gelu + cube.mean()

    lin = nn.Linear(8, 8)
    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(lambda x: f(lin(x)), fullgraph=True)(x), f(lin(x)))
    assert (fusion.formulas, fusion.fused) == (0, 0)


class _AutocastValues(torch.fx.Interpreter):
    """Runs a traced graph on the CPU with the dtypes CUDA's bf16 autocast
    gives (GEMMs listed in ``low`` in bf16, ``pow`` in fp32), each node's
    value kept as Dynamo keeps it (meta "example_value")."""

    def __init__(self, gm, low):
        super().__init__(gm)
        self.low = low

    def run_node(self, n):
        value = super().run_node(n)
        n.meta["example_value"] = value
        return value

    def call_function(self, target, args, kwargs):
        if target is torch.addmm and self.low.pop(0):
            args = tuple(a.to(torch.bfloat16) for a in args)
        elif target is torch.pow:
            args = (args[0].float(), *args[1:])
        return super().call_function(target, args, kwargs)


_NEW_GELU = hf.NewGELUActivation().forward  # GPT-2's formula, traced through


def _conv1d_mlp(x, w1, b1, w2, b2):
    h = torch.addmm(b1, x.view(-1, 16), w1).view(2, 3, 24)
    return torch.addmm(b2, _NEW_GELU(h).view(-1, 24), w2)


def _conv1d_mlp_reading_the_formula(x, w1, b1, w2, b2):
    h = _NEW_GELU(torch.addmm(b1, x.view(-1, 16), w1).view(2, 3, 24))
    return torch.addmm(b2, h.view(-1, 24), w2), h.sum()


@pytest.mark.parametrize("model, low, formulas", [
    (_conv1d_mlp, [True, True], 1),                       # both GEMMs in bf16: read as gelu_tanh in bf16
    (_conv1d_mlp, [True, False], 0),                      # the reader computes in fp32: left as written
    (_conv1d_mlp_reading_the_formula, [True, True], 0),   # the fp32 values read elsewhere: left
    (_conv1d_mlp, [False, False], 1),                     # no autocast: fp32 throughout, as before
])
def test_formula_upcast_by_autocast(model, low, formulas):
    """Under CUDA's autocast, GPT-2's GELU formula on a bf16 Conv1D output
    comes out fp32 (autocast runs pow in fp32). It is read as gelu_tanh in
    bf16 only where GEMMs that autocast runs in bf16 are all that read it,
    which round its fp32 values to bf16 first; the graph's output is then
    eager's (emulated here on the CPU: CUDA's autocast needs a GPU)."""
    from torch_gemm_act import _canonical, compile_fusion
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 16), torch.randn(16, 24), torch.randn(24), torch.randn(24, 8), torch.randn(8))
    gm = torch.fx.symbolic_trace(model)
    want = _AutocastValues(gm, list(low)).run(*inputs)
    found = _canonical.canonicalize(gm.graph, lambda n: compile_fusion._gemm_of(n) is not None)
    gm.recompile()
    assert found == formulas
    got = _AutocastValues(gm, list(low)).run(*inputs)
    for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1.6e-2, atol=1e-2)
    calls = [n for n in gm.graph.nodes if n.target is torch.nn.functional.gelu]
    assert len(calls) == formulas
    if formulas and low[0]:
        # the call and the reshape after it hold bf16, the GEMM's dtype
        assert [n.meta["example_value"].dtype for n in (calls[0], *calls[0].users)] == [torch.bfloat16] * 2


def _gpt2(layers=2):
    config = transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=4, vocab_size=64, n_positions=32,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.parametrize("training", [False, True])
def test_gpt2_compiles_fused_and_chained(fusion, training):
    """transformers' GPT-2, unchanged: each block's Conv1D (addmm between
    reshapes) -> NewGELUActivation fused, and in training chained to c_proj,
    as fuse_linear_act fuses and chains the modules; loss and every
    gradient as the hand-fused model's."""
    torch.manual_seed(0)
    model = _gpt2()
    by_hand = tga.fuse_linear_act(copy.deepcopy(model))
    ids = torch.randint(64, (2, 12))
    compiled = torch.compile(model)
    if not training:
        with torch.no_grad():
            torch.testing.assert_close(compiled(input_ids=ids).logits, by_hand(input_ids=ids).logits,
                                       rtol=1e-5, atol=1e-5)
        assert (fusion.formulas, fusion.fused, fusion.chained) == (2, 2, 0)
        return
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    loss_hand = by_hand(input_ids=ids, labels=ids).loss
    loss_hand.backward()
    torch.testing.assert_close(loss, loss_hand, rtol=1e-5, atol=1e-6)
    for (name, p), p_hand in zip(model.named_parameters(), by_hand.parameters()):
        torch.testing.assert_close(p.grad, p_hand.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert (fusion.formulas, fusion.fused, fusion.chained) == (2, 2, 2)


def test_conv1d_formula_with_dynamic_rows(fusion):
    """Conv1D -> NewGELUActivation -> Conv1D with the rows dynamic (as
    automatic dynamic shapes make them): one compilation, fused and chained
    at every row count, the reshapes' symbolic sizes read as sizes."""
    from transformers.pytorch_utils import Conv1D
    torch.manual_seed(0)
    model = nn.Sequential(Conv1D(24, 16), hf.NewGELUActivation(), Conv1D(8, 24))
    by_hand = tga.fuse_linear_act(copy.deepcopy(model))
    compiled = torch.compile(model)
    for rows in (5, 9, 17):
        x = torch.randn(rows, 16, requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        x_hand = x.detach().clone().requires_grad_()
        y, y_hand = compiled(x), by_hand(x_hand)
        torch.testing.assert_close(y, y_hand, rtol=1e-5, atol=1e-5)
        y.sum().backward()
        y_hand.sum().backward()
        torch.testing.assert_close(x.grad, x_hand.grad, rtol=1e-5, atol=1e-5)
    assert (fusion.formulas, fusion.fused, fusion.chained) == (1, 1, 1)


def test_reshape_read_by_other_ops_is_kept(fusion):
    """A reshape back to the GEMM's shape is dropped only where GEMMs alone
    read it; read by anything else, it stays (the values are the same
    either way)."""
    lin1, lin2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def f(x):
        h = torch.relu(lin1(x.view(-1, 8))).view(2, 3, 16)
        return lin2(h.view(-1, 16)), h.view(-1, 16).sum()

    x = torch.randn(2, 3, 8)
    got, want = torch.compile(f, fullgraph=True)(x), f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert fusion.fused == 1


@requires_cuda
def test_gpt2_compiles_fused_cuda(fusion):
    """GPT-2 in bf16 on the GPU: the pass fuses every block's MLP; the loss
    and the embedding's gradient as close to a float64 copy as eager's."""
    torch.manual_seed(0)
    model = _gpt2(layers=3).cuda()
    reference = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    eager = copy.deepcopy(model)
    ids = torch.randint(64, (4, 32), device="cuda")
    results = {}
    for name, m in (("eager", eager), ("compiled", torch.compile(model)), ("reference", reference)):
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        results[name] = (loss.double(), m.transformer.wte.weight.grad.double()) if name != "compiled" else \
            (loss.double(), model.transformer.wte.weight.grad.double())
    assert fusion.fused == 3 and fusion.formulas == 3
    for i in range(2):
        ref = results["reference"][i]
        scale = ref.abs().max()
        err = {n: ((results[n][i] - ref).abs().max() / scale).item() for n in ("eager", "compiled")}
        assert err["compiled"] <= 2 * err["eager"] + 1e-3, err


@requires_cuda
def test_gpt2_under_autocast_cuda(fusion):
    """GPT-2 with fp32 weights under bf16 autocast, on the GPU: the GEMMs
    compute in bf16 (policy.computes_in), so the pass fuses and chains every
    block's MLP as in a bf16 model, and the hand-fused model chains in eager
    mode and compiled; loss and the embedding's gradient as close to a
    float64 copy as eager's (under autocast) is."""
    torch.manual_seed(0)
    model = _gpt2(layers=3).cuda()
    reference = copy.deepcopy(model).double()
    by_hand = tga.fuse_linear_act(copy.deepcopy(model))
    ids = torch.randint(64, (4, 32), device="cuda")

    def step(m, cast=True):
        with torch.autocast("cuda", torch.bfloat16, enabled=cast):
            loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        grad = tga_unwrapped(m).transformer.wte.weight.grad.double()
        return loss.double(), grad

    ref = step(reference, cast=False)
    results = {"eager": step(copy.deepcopy(model)), "by_hand": step(copy.deepcopy(by_hand)),
               "by_hand_compiled": step(torch.compile(copy.deepcopy(by_hand))),
               "pass": step(torch.compile(model))}
    assert (fusion.formulas, fusion.fused, fusion.chained) == (3, 3, 3)
    for i in range(2):
        scale = ref[i].abs().max()
        err = {n: ((r[i] - ref[i]).abs().max() / scale).item() for n, r in results.items()}
        assert all(e <= 2 * err["eager"] + 1e-3 for e in err.values()), err


def tga_unwrapped(m):
    return getattr(m, "_orig_mod", m)

"""fuse_linear_act's residual outputs: a module whose forward is exactly
norm(r + dropout(linear(x))) becomes a ResidualOutput (the sum in one
gemm_dropout_add); anything else is left as it was."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_act as tga
from conftest import requires_cuda

transformers = pytest.importorskip("transformers")

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


class _Out(nn.Module):
    """BERT's output module, or a variant of it."""

    def __init__(self, k=16, n=24, p=0.25, norm=True, branch_first=True, conv1d=False, extra=False):
        super().__init__()
        self.dense = transformers.pytorch_utils.Conv1D(n, k) if conv1d else nn.Linear(k, n)
        self.dropout = nn.Dropout(p)
        self.norm = nn.LayerNorm(n) if norm else None
        self.branch_first, self.extra = branch_first, extra

    def forward(self, hidden_states, input_tensor):
        h = self.dropout(self.dense(hidden_states))
        if self.extra:
            h = h * 2
        h = h + input_tensor if self.branch_first else input_tensor + h
        return self.norm(h) if self.norm is not None else h


class _Block(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x, r):
        return self.out(x, r)


def _seeded_mask(shape, p, device, seed):
    """The factors linear_dropout_add draws after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    drawn = torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device=device)
    ones = torch.ones(shape, dtype=torch.float64)
    return torch.ops.gemm_act.dropout_scale(ones, p, drawn.cpu()).to(device)


def test_bert_outputs_become_residual_outputs_with_their_state():
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, vocab_size=50)
    model = transformers.BertModel(config)
    before = model.state_dict()
    fused, report = tga.fuse_linear_act(copy.deepcopy(model), report=True)
    paths = sorted(path for path, _ in report.residuals)
    assert paths == sorted(f"encoder.layer.{i}.{name}" for i in range(2) for name in ("output", "attention.output"))
    assert type(fused.encoder.layer[0].output).__name__ == "ResidualOutput"
    assert "residual encoder.layer.0.output" in str(report)
    after = fused.state_dict()
    assert list(after) == list(before)
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    ids = torch.randint(0, 50, (2, 12))
    model.eval(), fused.eval()
    with torch.no_grad(), tga.testing.override(operator_everywhere=True):
        torch.testing.assert_close(fused(ids).last_hidden_state, model(ids).last_hidden_state,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("conv1d", [False, True])
@pytest.mark.parametrize("branch_first", [False, True])
@pytest.mark.parametrize("keywords", [False, True])
def test_the_sum_takes_the_mask_and_the_gradients_of_the_operator(device, conv1d, branch_first, keywords):
    p = 0.25
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tol = dict(rtol=1e-5, atol=1e-5) if device == "cpu" else dict(rtol=2e-2, atol=2e-2)
    torch.manual_seed(0)
    out = _Out(p=p, norm=False, branch_first=branch_first, conv1d=conv1d).to(device=device, dtype=dtype)
    block = tga.fuse_linear_act(_Block(copy.deepcopy(out)))
    assert type(block.out).__name__ == "ResidualOutput"
    x = torch.randn(3, 40, 16, device=device, dtype=dtype, requires_grad=True)
    r = torch.randn(3, 40, 24, device=device, dtype=dtype, requires_grad=True)
    with tga.testing.override(operator_everywhere=True):
        torch.manual_seed(7)
        y = block.out(hidden_states=x, input_tensor=r) if keywords else block(x, r)
    mask = _seeded_mask((120, 24), p, device, 7).reshape(3, 40, 24)
    x64, r64 = x.detach().double().requires_grad_(), r.detach().double().requires_grad_()
    w, b = out.dense.weight.detach().double(), out.dense.bias.detach().double()
    z64 = x64 @ w + b if conv1d else F.linear(x64, w, b)
    want = r64 + z64 * mask
    torch.testing.assert_close(y.double(), want, **tol)
    g = torch.randn_like(y)
    y.backward(g)
    want.backward(g.double())
    torch.testing.assert_close(x.grad.double(), x64.grad, **tol)
    torch.testing.assert_close(r.grad.double(), r64.grad, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_a_residual_of_another_shape_takes_the_replaced_forward(device):
    torch.manual_seed(0)
    out = _Out(p=0.0, norm=True).to(device)
    block = tga.fuse_linear_act(_Block(copy.deepcopy(out)))
    x, r = torch.randn(2, 5, 16, device=device), torch.randn(24, device=device)  # broadcast
    with tga.testing.override(operator_everywhere=True):
        torch.testing.assert_close(block(x, r), out(x, r))


def test_a_residual_of_another_dtype_outside_autocast_takes_the_replaced_forward():
    torch.manual_seed(0)
    out = _Out(p=0.5, norm=False)
    block = tga.fuse_linear_act(_Block(copy.deepcopy(out)))
    x, r = torch.randn(3, 16), torch.randn(3, 24, dtype=torch.float64)
    with tga.testing.override(operator_everywhere=True):
        torch.manual_seed(1)
        y = block(x, r)
    torch.manual_seed(1)
    want = out(x, r)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, want, rtol=0, atol=0)


def test_a_tensor_subclass_takes_the_replaced_forward(monkeypatch):
    from torch_gemm_act import _fuse_residual

    class Tagged(torch.Tensor):
        pass

    class NoOperator:
        def __getattr__(self, name):
            raise AssertionError(f"the operator {name} was called")

    torch.manual_seed(0)
    out = _Out(p=0.5, norm=False)
    block = tga.fuse_linear_act(_Block(copy.deepcopy(out)))
    monkeypatch.setattr(_fuse_residual, "ops", NoOperator())
    x, r = torch.randn(3, 16), torch.randn(3, 24)
    with tga.testing.override(operator_everywhere=True):
        torch.manual_seed(1)
        y = block(x.as_subclass(Tagged), r)
    torch.manual_seed(1)
    torch.testing.assert_close(y.as_subclass(torch.Tensor), out(x, r), rtol=0, atol=0)


@pytest.mark.parametrize("variant, why", [
    (dict(extra=True), "an op between the dropout and the sum"),
    ("hooked", "a forward hook on the Linear"),
    ("three", "a third argument"),
    ("buffer", "a buffer of its own"),
])
def test_anything_else_is_left(variant, why):
    out = _Out(**variant) if isinstance(variant, dict) else _Out()
    if variant == "hooked":
        out.dense.register_forward_hook(lambda *a: None)
    if variant == "buffer":
        out.register_buffer("step", torch.zeros(()))
    if variant == "three":
        class Three(_Out):
            def forward(self, hidden_states, input_tensor, scale):
                return super().forward(hidden_states, input_tensor) * scale
        out = Three()
    block = tga.fuse_linear_act(_Block(out))
    assert block.out is out, why


def test_forward_hooks_of_the_replaced_module_move():
    seen = []
    out = _Out(p=0.0)
    out.register_forward_hook(lambda mod, args, y: seen.append(y.shape))
    block, report = tga.fuse_linear_act(_Block(out), report=True)
    assert type(block.out).__name__ == "ResidualOutput" and report.hooks_moved == ["out"]
    block(torch.randn(2, 16), torch.randn(2, 24))
    assert seen == [torch.Size([2, 24])]


def test_compiles_in_one_graph_as_the_replaced_forward():
    torch.manual_seed(0)
    out = _Out(p=0.0).eval()
    block = tga.fuse_linear_act(_Block(copy.deepcopy(out)))
    x, r = torch.randn(4, 16), torch.randn(4, 24)
    torch.testing.assert_close(torch.compile(block, fullgraph=True)(x, r), out(x, r), rtol=1e-5, atol=1e-5)


def test_without_dropout_the_sum_is_the_replaced_forwards(monkeypatch):
    """Rule fuses_residual: the operator only with dropout on."""
    from torch_gemm_act import _fuse_residual, _policy

    x = torch.randn(2, 16)
    with tga.testing.override(operator_everywhere=True):
        assert _policy.fuses_residual(x, 24, 0.1) and not _policy.fuses_residual(x, 24, 0.0)
    assert not _policy.fuses_residual(x, 24, 0.1)  # cpu_atens

    class NoOperator:
        def __getattr__(self, name):
            raise AssertionError(f"the operator {name} was called")

    torch.manual_seed(0)
    out = _Out(p=0.5)
    block = tga.fuse_linear_act(_Block(copy.deepcopy(out)))
    monkeypatch.setattr(_fuse_residual, "ops", NoOperator())
    r = torch.randn(2, 24)
    with tga.testing.override(operator_everywhere=True):
        block.eval(), out.eval()
        torch.testing.assert_close(block(x, r), out(x, r), rtol=0, atol=0)
        block.train()
        block.out.dropout.p = 0.0
        torch.testing.assert_close(block(x, r), out(x, r), rtol=0, atol=0)

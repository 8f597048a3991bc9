"""enable_compile_fusion(lm_loss=True): a compiled cross-entropy of a
Linear's logits runs linear_cross_entropy, forward and backward, with the
loss's own value and gradients; where the logits are used elsewhere, or the
loss is one it does not compute, Inductor keeps it."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import torch_gemm_act as tga
from conftest import requires_cuda

pytestmark = pytest.mark.usefixtures("no_compile_caches")


@pytest.fixture
def loss_fusion(no_compile_caches):
    torch._dynamo.reset()
    tga.enable_compile_fusion(lm_loss=True)
    try:
        yield torch._inductor.config.pre_grad_custom_pass
    finally:
        tga.enable_compile_fusion(False)
        torch._dynamo.reset()


def _inputs(dtype=torch.float64, batch=3, length=5, width=8, vocab=37, bias=True):
    g = torch.Generator().manual_seed(batch * 100 + length)
    h = torch.randn(batch, length, width, dtype=dtype, generator=g, requires_grad=True)
    w = torch.randn(vocab, width, dtype=dtype, generator=g, requires_grad=True)
    b = torch.randn(vocab, dtype=dtype, generator=g, requires_grad=True) if bias else None
    t = torch.randint(vocab, (batch, length), generator=g)
    t[0, :2] = -100
    return h, w, b, t


def _cross_entropy(h, w, b, t):
    z = F.linear(h, w, b)
    return F.cross_entropy(z.view(-1, z.size(-1)), t.view(-1), label_smoothing=0.2)


def _upcast(h, w, b, t):  # transformers' causal-LM loss: the logits in fp32, then flattened
    z = F.linear(h, w, b).float()
    return F.cross_entropy(z.view(-1, z.size(-1)), t.view(-1), ignore_index=-100, reduction="sum")


def _nll(h, w, b, t):
    return F.nll_loss(F.log_softmax(F.linear(h, w, b), dim=-1).flatten(0, 1), t.flatten(), reduction="none")


def _softcap(h, w, b, t):  # Gemma 2's head
    z = F.linear(h, w, b)
    z = torch.tanh(z / 30.0) * 30.0
    return F.cross_entropy(z.reshape(-1, z.shape[-1]), t.reshape(-1))


class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm_head = nn.Linear(8, 37, dtype=torch.float64)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, h, t):
        return self.loss(self.lm_head(h).flatten(0, 1), t.flatten())


def _grads(loss, *tensors):
    return torch.autograd.grad(loss.sum(), [x for x in tensors if x is not None])


@pytest.mark.parametrize("fn,dtype", [(_cross_entropy, torch.float64), (_upcast, torch.float32),
                                      (_nll, torch.float64), (_softcap, torch.float64)])
def test_a_loss_over_a_linear_becomes_linear_cross_entropy(loss_fusion, fn, dtype):
    h, w, b, t = _inputs(dtype)
    loss = torch.compile(fn, fullgraph=True)(h, w, b, t)
    assert loss_fusion.losses == 1
    expected = fn(h, w, b, t)
    assert loss.dtype == expected.dtype and loss.shape == expected.shape
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, expected, **tol)
    for got, want in zip(_grads(loss, h, w, b), _grads(expected, h, w, b)):
        torch.testing.assert_close(got, want, **tol)


def test_a_module_head_and_loss_across_batch_sizes_compile_once(loss_fusion):
    torch.manual_seed(0)
    model = _Head()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    frames = None
    for batch in (2, 3, 6):
        h, _, _, t = _inputs(batch=batch)
        loss = compiled(h, t)
        frames = frames or counter.frame_count
        expected = model(h, t)
        torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
        for got, want in zip(_grads(loss, h, *model.lm_head.parameters()),
                             _grads(expected, h, *model.lm_head.parameters())):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # One graph, fused once, not compiled again for another batch size.
    assert counter.frame_count == frames and loss_fusion.losses == 1


def test_the_scaled_gradient_traced_at_a_symbolic_size_adds_no_guard():
    """The backward's scaling, traced by AOT autograd (where torch may not set
    its compiling flag), must not guard on the token count: a guard there
    compiles the step again for every batch size."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
    from torch_gemm_act.cross_entropy import _scaled
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    grad = mode.from_tensor(torch.randn(6, 8, dtype=torch.float64), source=ConstantSource("grad"),
                            symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2))
    with mode:
        out = _scaled(grad, torch.tensor(2.0, dtype=torch.float64), torch.float32)
    assert out.dtype == torch.float32 and out.shape == grad.shape
    assert env.guards == []


def test_a_transformers_step_that_returns_the_loss_alone(loss_fusion):
    """A compiled step over an unchanged GPT-2 that returns its loss, not its
    logits: the head's Linear and ForCausalLMLoss are one graph's, fused."""
    import transformers as t
    torch.manual_seed(0)
    model = t.GPT2LMHeadModel(t.GPT2Config(n_layer=1, n_embd=32, n_head=4, n_positions=32, vocab_size=301,
                                           bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                           attn_pdrop=0.0, attn_implementation="eager")).train()
    # Unset, transformers 5.24 logs a warning choosing the loss, which breaks the graph there.
    model.loss_type = "ForCausalLM"
    ids = torch.randint(301, (2, 17))
    labels = torch.where(torch.rand(ids.shape) < 0.2, -100, ids)

    def step(ids, labels):
        return model(input_ids=ids, labels=labels).loss
    loss = torch.compile(step)(ids, labels)
    assert loss_fusion.losses == 1
    expected = step(ids, labels)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    params = [model.lm_head.weight, model.transformer.h[0].mlp.c_fc.weight]
    for got, want in zip(_grads(loss, *params), _grads(expected, *params)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def _escapes(h, w, b, t):  # the logits are returned too: they must exist
    z = F.linear(h, w, b)
    return F.cross_entropy(z.view(-1, z.size(-1)), t.view(-1)), z


def _weighted(h, w, b, t):
    z = F.linear(h, w, b)
    return F.cross_entropy(z.view(-1, z.size(-1)), t.view(-1), weight=torch.ones(z.size(-1), dtype=z.dtype))


def _probabilities(h, w, b, t):
    z = F.linear(h, w, b)
    return F.cross_entropy(z.view(-1, z.size(-1)), torch.softmax(z.detach().view(-1, z.size(-1)) * 0.5, -1))


def _classes_second(h, w, b, t):  # [batch, vocab, length]: the class dimension is not the last
    return F.cross_entropy(F.linear(h, w, b).transpose(1, 2), t)


def _downcast(h, w, b, t):  # float64 logits made fp32 first: not the loss this operator computes
    z = F.linear(h, w, b).float()
    return F.cross_entropy(z.view(-1, z.size(-1)), t.view(-1))


def _log_probs_capped(h, w, b, t):  # a softcap on log-probabilities, not on logits
    z = F.log_softmax(F.linear(h, w, b), dim=-1)
    return F.nll_loss((torch.tanh(z / 30.0) * 30.0).view(-1, z.size(-1)), t.view(-1))


def _autocast(h, w, b, t):  # the Linear under autocast: its output is not in its inputs' dtype
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = F.linear(h, w, b)
    return F.cross_entropy(z.float().view(-1, z.size(-1)), t.view(-1))


@pytest.mark.parametrize("fn,dtype", [(_escapes, torch.float64), (_weighted, torch.float64),
                                      (_probabilities, torch.float64), (_classes_second, torch.float64),
                                      (_downcast, torch.float64), (_log_probs_capped, torch.float64),
                                      (_autocast, torch.float32)])
def test_left_to_inductor_where_it_is_not_that_loss(loss_fusion, fn, dtype):
    h, w, b, t = _inputs(dtype)
    out = torch.compile(fn, fullgraph=True)(h, w, b, t)
    expected = fn(h, w, b, t)
    assert loss_fusion.losses == 0
    out, expected = (out[0], expected[0]) if isinstance(out, tuple) else (out, expected)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_only_where_asked(no_compile_caches):
    torch._dynamo.reset()
    tga.enable_compile_fusion()
    try:
        fusion = torch._inductor.config.pre_grad_custom_pass
        h, w, b, t = _inputs()
        torch.compile(_cross_entropy, fullgraph=True)(h, w, b, t)
        assert fusion.losses == 0 and not fusion.lm_loss
        uuid = fusion.uuid()
        tga.enable_compile_fusion(lm_loss=True)  # the same pass, now asked
        assert torch._inductor.config.pre_grad_custom_pass is fusion and fusion.lm_loss
        assert fusion.uuid() != uuid  # Inductor's caches tell the two apart
        torch._dynamo.reset()
        torch.compile(_cross_entropy, fullgraph=True)(h, w, b, t)
        assert fusion.losses == 1
    finally:
        tga.enable_compile_fusion(False)
        torch._dynamo.reset()


def _per_token(h, w, b, t, softcap, upcast):
    z = F.linear(h, w, b)
    if softcap:
        z = torch.tanh(z / 30.0) * 30.0
    z = z.float() if upcast else z
    return F.cross_entropy(z.view(-1, z.size(-1)), t.view(-1), reduction="none")


def _rms(a, b):
    return (a.double() - b.double()).pow(2).mean().sqrt().item()


@requires_cuda
@pytest.mark.parametrize("softcap", [False, True])
def test_a_bf16_head_is_as_close_to_float64_as_eager_cuda(loss_fusion, softcap):
    """Each token's loss and each gradient element as far from float64 as
    eager's, by root mean square over them (one element's error, or a sum's,
    is one draw of a rounding: a bar it sets would be luck)."""
    h, w, b, t = (x.cuda() for x in _inputs(torch.bfloat16, 8, 512, 64, 1000))
    h, w, b = (x.detach().requires_grad_() for x in (h, w, b))
    loss = torch.compile(_per_token)(h, w, b, t, softcap, True)
    assert loss_fusion.losses == 1
    theirs = _per_token(h, w, b, t, softcap, True)
    h64, w64, b64 = (x.detach().double().requires_grad_() for x in (h, w, b))
    ref = _per_token(h64, w64, b64, t, softcap, False)
    ref_grads = _grads(ref, h64, w64, b64)
    errors = [[_rms(out, ref)] + [_rms(g, r) for g, r in zip(_grads(out, h, w, b), ref_grads)]
              for out in (loss, theirs)]
    ours, eager = errors
    for got, bar in zip(ours, eager):
        assert got <= 1.5 * bar, (ours, eager)

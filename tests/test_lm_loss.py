"""fuse_lm_loss: transformers' causal LMs and BERT's masked LM, their
training loss through linear_cross_entropy: loss and every parameter's
gradient as the model's own (float64), logits not returned in training,
every other call the model's own; models it cannot route are refused by
name."""

import copy

import pytest
import torch
import transformers

import torch_gemm_act as tga
from torch_gemm_act import _policy

from conftest import DEVICES

SMALL = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=None)


def _models():
    t = transformers
    return {
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=300,
                                                        n_positions=64, bos_token_id=0, eos_token_id=0,
                                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**SMALL)),
        "qwen2": lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**SMALL)),
        "gemma2": lambda: t.Gemma2ForCausalLM(t.Gemma2Config(**SMALL, head_dim=8, final_logit_softcapping=3.0)),
    }


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    # Several chunks at test sizes; the roads, never eager's ops (rule ce_eager).
    monkeypatch.setattr(_policy, "ce_chunk", lambda tokens, width, vocab, element_size: 128)
    monkeypatch.setattr(_policy, "ce_eager", lambda tokens, vocab, element_size: False)


@pytest.mark.parametrize("name", list(_models()))
@pytest.mark.parametrize("num_items", [False, True])
def test_training_loss_and_gradients_as_the_model_computes(name, num_items):
    torch.manual_seed(0)
    model = _models()[name]().double().train()  # dropout off in every config: one computation
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    ids = torch.randint(300, (2, 11))
    labels = ids.clone()
    labels[0, :3] = -100
    extra = {"num_items_in_batch": torch.tensor(15)} if num_items else {}
    want = model(input_ids=ids, labels=labels, **extra)
    got = fused(input_ids=ids, labels=labels, **extra)
    assert got.logits is None and got.loss.dtype == want.loss.dtype
    # transformers computes its loss from fp32 logits (its ForCausalLMLoss
    # upcasts, and here downcasts float64): fp32's agreement is the bar.
    torch.testing.assert_close(got.loss, want.loss, rtol=2e-6, atol=1e-7)
    want.loss.backward()
    got.loss.backward()
    for (n, p), q in zip(model.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-7, msg=n)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_eager_road_is_the_models_loss(monkeypatch, name):
    """Where rule ce_eager holds, a bf16 causal LM's fused loss is the
    model's own computation (fp32 logits' cross-entropy), bit for bit."""
    monkeypatch.setattr(_policy, "ce_eager", lambda tokens, vocab, element_size: True)
    torch.manual_seed(0)
    model = _models()[name]().bfloat16().train()
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    ids = torch.randint(300, (2, 11))
    want = model(input_ids=ids, labels=ids)
    got = fused(input_ids=ids, labels=ids)
    assert got.logits is None and got.loss.dtype == want.loss.dtype == torch.float32
    assert torch.equal(got.loss, want.loss)
    want.loss.backward()
    got.loss.backward()
    for (n, p), q in zip(model.named_parameters(), fused.parameters()):
        assert torch.equal(q.grad, p.grad), n


def test_other_calls_are_the_models_own():
    torch.manual_seed(0)
    model = _models()["llama"]().double()
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    ids = torch.randint(300, (2, 7))
    model.eval()
    fused.eval()
    for kwargs in ({}, {"labels": ids}):  # eval mode: logits and loss, as the model's
        want, got = model(input_ids=ids, **kwargs), fused(input_ids=ids, **kwargs)
        torch.testing.assert_close(got.logits, want.logits)
    fused.train()
    with torch.no_grad():
        assert fused(input_ids=ids, labels=ids).logits is not None
    assert fused(ids).logits is not None  # no labels
    # A copy's forward is the copy's own.
    clone = copy.deepcopy(fused).train()
    clone.lm_head.weight.data.zero_()
    out = clone(input_ids=ids, labels=ids)
    assert out.logits is None  # the routed loss, of the copy's zeroed head: uniform over the vocabulary
    torch.testing.assert_close(out.loss, torch.log(torch.tensor(300.0)))


def test_compiles(monkeypatch):
    torch.manual_seed(0)
    model = _models()["gpt2"]().train()
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    ids = torch.randint(300, (2, 9))
    loss = torch.compile(fused)(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(loss, model(input_ids=ids, labels=ids).loss, rtol=1e-5, atol=1e-5)


def _bert_config(layers=2):
    return transformers.BertConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                                   intermediate_size=64, vocab_size=300, max_position_embeddings=64,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _masked_labels(ids, share):
    return torch.where(torch.rand(ids.shape, device=ids.device) < share, ids, -100)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("share", [0.3, 0.0, 1.0])  # some tokens labelled, none (a NaN loss), all
def test_masked_lm_loss_and_gradients_as_the_model_computes(device, share):
    model = transformers.BertForMaskedLM(_bert_config()).to(device, torch.float64).train()
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    ids = torch.randint(300, (3, 13), device=device)
    labels = _masked_labels(ids, share)
    want = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    got = fused(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    assert got.logits is None and got.loss.dtype == want.loss.dtype
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-12, atol=1e-12, equal_nan=True)
    want.loss.backward()
    got.loss.backward()
    for (n, p), q in zip(model.named_parameters(), fused.parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-9, atol=1e-12, msg=n)


def test_masked_lm_compiles():
    model = transformers.BertForMaskedLM(_bert_config()).train()
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    compiled = torch.compile(fused)
    for _ in range(2):  # another count of labelled rows: the head runs outside the graph
        ids = torch.randint(300, (2, 9))
        labels = _masked_labels(ids, 0.4)
        torch.testing.assert_close(compiled(input_ids=ids, labels=labels).loss,
                                   model(input_ids=ids, labels=labels).loss, rtol=1e-5, atol=1e-5)


def test_masked_lm_other_calls_are_the_models_own():
    model = transformers.BertForMaskedLM(_bert_config(1)).double().train()
    fused = tga.fuse_lm_loss(copy.deepcopy(model))
    ids = torch.randint(300, (2, 7))
    labels = _masked_labels(ids, 0.5)
    with torch.no_grad():
        got, want = fused(input_ids=ids, labels=labels), model(input_ids=ids, labels=labels)
    torch.testing.assert_close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss)
    as_tuple = fused(input_ids=ids, labels=labels, return_dict=False)
    assert isinstance(as_tuple, tuple) and as_tuple[1].shape == (2, 7, 300)


def test_refuses_what_it_cannot_route():
    t = transformers
    roberta = t.RobertaForMaskedLM(t.RobertaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                   intermediate_size=64, vocab_size=100))
    with pytest.raises(ValueError, match="model_type 'roberta'"):
        tga.fuse_lm_loss(roberta)
    # Other heads on a routed base model have other losses too.
    with pytest.raises(ValueError, match="BertForPreTraining, not the masked LM BertForMaskedLM"):
        tga.fuse_lm_loss(t.BertForPreTraining(_bert_config(1)))
    gpt2 = t.GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=100, bos_token_id=0, eos_token_id=0)
    with pytest.raises(ValueError, match="GPT2DoubleHeadsModel, not the causal LM GPT2LMHeadModel"):
        tga.fuse_lm_loss(t.GPT2DoubleHeadsModel(gpt2))
    with pytest.raises(ValueError, match="Linear is not: its model_type None"):
        tga.fuse_lm_loss(torch.nn.Linear(3, 3))

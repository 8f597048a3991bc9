"""fuse_lm_loss: a transformers causal LM's training loss through
linear_cross_entropy, its logits ([batch, sequence, vocabulary]) never
written.

The model keeps its modules and parameters; its forward is bound anew on
the instance. A call with ``labels`` in training (``model.training`` and
grad mode on) runs the base model, then the loss as transformers'
ForCausalLMLoss computes it (labels shifted by one, ``ignore_index``,
``shift_labels``, ``num_items_in_batch``; Gemma 2's final softcap), and
returns the model's output with ``logits=None``. Any other call (no
labels, eval mode, no grad, ``logits_to_keep``, more than one positional
argument) is the model's own forward, logits included.
"""

import dataclasses
import types

import torch
from torch import nn

from .cross_entropy import _loss_and_lse

__all__ = ["fuse_lm_loss"]

# Model types whose causal LM computes lm_head(hidden) (and, where the config
# says, the final softcap) and takes ForCausalLMLoss: no other logit scaling.
_PLAIN_HEADS = frozenset(("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"))
# Config attributes that scale the logits some other way: such a model stays as it is.
_OTHER_SCALING = ("logit_scale", "logits_scaling", "output_multiplier_scale")
_LOSS_ONLY = ("num_items_in_batch", "ignore_index", "shift_labels")


def _why_not(model):
    """Why model's loss cannot be routed, or None."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _PLAIN_HEADS:
        return f"its model_type {model_type!r} is not one of {', '.join(sorted(_PLAIN_HEADS))}"
    if type(getattr(model, "lm_head", None)) is not nn.Linear:
        return "it has no nn.Linear lm_head"
    if getattr(model, "base_model", model) is model:
        return "it has no base model under its head"
    scaling = [name for name in _OTHER_SCALING if getattr(config, name, None) not in (None, 1, 1.0)]
    if scaling:
        return f"its config scales the logits ({', '.join(scaling)})"
    return None


def fuse_lm_loss(model):
    """Routes, in place, the training loss of a transformers causal LM
    (GPT-2, Llama, Mistral, Qwen 2/3, Gemma 1/2, Phi-3) through
    linear_cross_entropy; returns ``model``. In training with ``labels``
    the output's ``logits`` is None; every other call is unchanged."""
    why = _why_not(model)
    if why is not None:
        raise ValueError(f"fuse_lm_loss: expected a transformers causal LM whose loss is lm_head(hidden) and "
                         f"ForCausalLMLoss; {type(model).__name__} is not: {why}")
    if getattr(model, "_lm_loss_fused", False):
        return model

    def forward(self, *args, labels=None, **kwargs):
        if labels is None or len(args) > 1 or not (self.training and torch.is_grad_enabled()) \
                or kwargs.get("logits_to_keep", 0) not in (0, None) or kwargs.get("return_dict") is False:
            return type(self).forward(self, *args, labels=labels, **kwargs)  # the class's own
        kwargs.pop("logits_to_keep", None)
        loss_args = {name: kwargs.pop(name) for name in _LOSS_ONLY if name in kwargs}
        out = self.base_model(*args, **kwargs)
        loss = _causal_lm_loss(self, out[0], labels, **loss_args)
        cls = _output_class(out)
        fields = {f.name for f in dataclasses.fields(cls)} - {"loss", "logits"}
        return cls(loss=loss, logits=None, **{k: v for k, v in out.items() if k in fields})

    model.forward = types.MethodType(forward, model)
    model._lm_loss_fused = True
    return model


def _causal_lm_loss(model, hidden, labels, num_items_in_batch=None, ignore_index=-100, shift_labels=None):
    """transformers' ForCausalLMLoss of lm_head(hidden), the logits never written."""
    if shift_labels is None:
        shift_labels = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    head = model.lm_head
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss, _ = _loss_and_lse(hidden, head.weight, shift_labels.to(hidden.device), head.bias, ignore_index, reduction,
                            0.0, getattr(model.config, "final_logit_softcapping", None))
    loss = loss.float()  # transformers upcasts the logits: its loss is fp32
    if num_items_in_batch is not None:
        loss = loss / (num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch)
                       else num_items_in_batch)
    return loss


def _output_class(base_output):
    """The causal LM's output class for its base model's output."""
    from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions, CausalLMOutputWithPast
    crossed = "cross_attentions" in {f.name for f in dataclasses.fields(type(base_output))}
    return CausalLMOutputWithCrossAttentions if crossed else CausalLMOutputWithPast

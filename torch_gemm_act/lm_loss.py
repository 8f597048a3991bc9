"""fuse_lm_loss: a transformers language model's training loss through
linear_cross_entropy, its logits ([batch, sequence, vocabulary]) never
returned, and held whole only where linear_cross_entropy runs eager's ops.

The model keeps its modules and parameters; its forward is bound anew on
the instance. A call with ``labels`` in training (``model.training`` and
grad mode on) runs the base model, then the loss as the model computes it,
and returns the model's output with ``logits=None``:
- a causal LM: transformers' ForCausalLMLoss (labels shifted by one,
  ``ignore_index``, ``shift_labels``, ``num_items_in_batch``; Gemma 2's
  final softcap);
- BERT's masked LM: CrossEntropyLoss over the labelled tokens, the head
  (its transform, then the decoder) run on those rows alone. Their count
  is data: finding them synchronises with the GPU once, and under
  torch.compile the head runs outside the graph.
Any other call (no labels, eval mode, no grad, ``logits_to_keep``, more
than one positional argument, ``return_dict=False``) is the model's own
forward, logits included.
"""

import dataclasses
import types

import torch
from torch import nn

from .cross_entropy import _loss_and_lse, linear_cross_entropy

__all__ = ["fuse_lm_loss"]

# Model types whose causal LM computes lm_head(hidden) (and, where the config
# says, the final softcap) and takes ForCausalLMLoss: no other logit scaling.
_CAUSAL = frozenset(("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"))
# Model types whose masked LM computes cls.predictions (transform, then a
# Linear decoder) and takes CrossEntropyLoss(ignore_index=-100).
_MASKED = frozenset(("bert",))
# Config attributes that scale the logits some other way: such a model stays as it is.
_OTHER_SCALING = ("logit_scale", "logits_scaling", "output_multiplier_scale")
_LOSS_ONLY = ("num_items_in_batch", "ignore_index", "shift_labels")


def _kind(model):
    """("causal" or "masked", None), or (None, why model's loss cannot be routed)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in _CAUSAL | _MASKED:
        return None, f"its model_type {model_type!r} is not one of {', '.join(sorted(_CAUSAL | _MASKED))}"
    from transformers.models.auto import modeling_auto  # a model of these types comes from transformers
    kind, names = (("causal", modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) if model_type in _CAUSAL else
                   ("masked", modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES))
    if type(model).__name__ != names.get(model_type):
        # Another head on the same base (GPT2DoubleHeadsModel, BertForPreTraining) has other losses too.
        return None, f"it is a {type(model).__name__}, not the {kind} LM {names.get(model_type)}"
    head = (getattr(model, "lm_head", None) if kind == "causal" else
            getattr(getattr(getattr(model, "cls", None), "predictions", None), "decoder", None))
    if type(head) is not nn.Linear:
        return None, "its head's last layer is not an nn.Linear"
    if getattr(model, "base_model", model) is model:
        return None, "it has no base model under its head"
    scaling = [name for name in _OTHER_SCALING if getattr(config, name, None) not in (None, 1, 1.0)]
    if scaling:
        return None, f"its config scales the logits ({', '.join(scaling)})"
    return kind, None


def fuse_lm_loss(model):
    """Routes, in place, the training loss of a transformers causal LM
    (GPT-2, Llama, Mistral, Qwen 2/3, Gemma 1/2, Phi-3) or of BERT's masked
    LM through linear_cross_entropy; returns ``model``. In training with
    ``labels`` the output's ``logits`` is None; every other call is
    unchanged."""
    kind, why = _kind(model)
    if why is not None:
        raise ValueError(f"fuse_lm_loss: expected a transformers causal LM whose loss is lm_head(hidden) and "
                         f"ForCausalLMLoss, or BERT's masked LM; {type(model).__name__} is not: {why}")
    if getattr(model, "_lm_loss_fused", False):
        return model

    def forward(self, *args, labels=None, **kwargs):
        if labels is None or len(args) > 1 or not (self.training and torch.is_grad_enabled()) \
                or kwargs.get("logits_to_keep", 0) not in (0, None) or kwargs.get("return_dict") is False:
            return type(self).forward(self, *args, labels=labels, **kwargs)  # the class's own
        if kind == "masked":
            kwargs.pop("return_dict", None)
            out = self.base_model(*args, return_dict=True, **kwargs)
            return _masked_output(loss=_masked_lm_loss(self, out[0], labels), logits=None,
                                  hidden_states=out.hidden_states, attentions=out.attentions)
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


@torch.compiler.disable  # the labelled rows' count is data: no graph of fixed shapes holds it
def _masked_lm_loss(model, hidden, labels):
    """BERT's masked-LM loss, CrossEntropyLoss over the labelled tokens, from
    those rows alone: the head's transform and decoder never see the rest."""
    head = model.cls.predictions
    labels = labels.to(hidden.device).reshape(-1)
    rows = (labels != -100).nonzero().squeeze(1)  # the step's one synchronisation
    picked = head.transform(hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows))
    return linear_cross_entropy(picked, head.decoder.weight, labels.index_select(0, rows), head.decoder.bias)


def _causal_lm_loss(model, hidden, labels, num_items_in_batch=None, ignore_index=-100, shift_labels=None):
    """transformers' ForCausalLMLoss of lm_head(hidden), through linear_cross_entropy's roads."""
    if shift_labels is None:
        shift_labels = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    head = model.lm_head
    reduction = "sum" if num_items_in_batch is not None else "mean"
    # transformers upcasts the logits: its loss is fp32.
    loss, _ = _loss_and_lse(hidden, head.weight, shift_labels.to(hidden.device), head.bias, ignore_index, reduction,
                            0.0, getattr(model.config, "final_logit_softcapping", None), loss_dtype=torch.float32)
    loss = loss.float()
    if num_items_in_batch is not None:
        loss = loss / (num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch)
                       else num_items_in_batch)
    return loss


def _masked_output(**fields):
    from transformers.modeling_outputs import MaskedLMOutput
    return MaskedLMOutput(**fields)


def _output_class(base_output):
    """The causal LM's output class for its base model's output."""
    from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions, CausalLMOutputWithPast
    crossed = "cross_attentions" in {f.name for f in dataclasses.fields(type(base_output))}
    return CausalLMOutputWithCrossAttentions if crossed else CausalLMOutputWithPast

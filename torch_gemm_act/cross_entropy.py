"""linear_cross_entropy: F.cross_entropy(hidden @ weight.T + bias, target)
and its gradients without the logits ([tokens, vocabulary]) held whole,
except where eager's ops are faster (rule ce_eager): a language model's
head and its loss as one operator.

The chunked path (every device): the vocabulary in chunks (rule
ce_chunk), each chunk's logits a GEMM in the inputs' dtype, as F.linear
writes them, the loop over chunks one operator per pass
(linear_ce_chunks_forward and _backward, in C++). The forward folds each
chunk into each row's running log-sum-exp, the target's logit and, with
label smoothing, the logits' sum
(the operator ce_chunk_forward, one read of the chunk, fp32 sums); it saves
the log-sum-exp. The backward computes each chunk's logits again, writes
over them softmax - onehot (with smoothing, softcap, ignore_index and the
incoming gradient; ce_chunk_backward) and feeds that to two GEMMs: the
chunk's rows of weight's gradient, whole, and hidden's gradient, summed
over chunks in fp32. Nothing synchronises with the GPU.

The rows road (rule ce_rows: in training, a mean or summed loss, where it
fits in what compiled eager holds): the tokens in blocks, each over the whole
vocabulary, so that each row's log-sum-exp precedes its gradient; the
forward computes the loss and every gradient (linear_ce_rows: per block the
logits, hidden's rows of gradient and weight's share, summed in fp32) and
the backward scales them by the incoming gradient, rounding once. Three
GEMM passes to the chunks' four.

Eager's ops (rule ce_eager: a gradient wanted, an aligned vocabulary, the
logits small): F.linear and F.cross_entropy, the logits held as eager holds
them; there neither road is as fast.
"""

import contextlib
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._subclasses.fake_tensor import is_fake

from . import _policy
from .ops import _is_dtensor
from .ops import linear_ce_chunks_backward as _CHUNKS_BACKWARD, linear_ce_chunks_forward as _CHUNKS_FORWARD
from .ops import linear_ce_rows as _ROWS

__all__ = ["linear_cross_entropy", "LinearCrossEntropy"]

_REDUCTIONS = ("none", "mean", "sum")
_AUTOCAST_CASTS = (torch.float32, torch.float16, torch.bfloat16)  # what autocast casts for F.linear


def _accumulates_in(dtype):
    """fp32, or float64 for float64 inputs: the sums' dtype."""
    return torch.promote_types(dtype, torch.float32)


@torch.library.custom_op("gemm_act::linear_cross_entropy", mutates_args=())
def _forward(hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor], ignore_index: int,
             reduction: int, label_smoothing: float, softcap: float, chunk: int) -> tuple[Tensor, Tensor]:
    valid = target != ignore_index
    _check_targets(target, valid, weight.shape[0])
    lse, target_logit, logit_sum = _sums(hidden, label_smoothing)
    _CHUNKS_FORWARD(hidden, weight, bias, target, chunk, softcap, lse, target_logit, logit_sum)
    return _loss(lse, target_logit, logit_sum, valid, weight.shape[0], reduction, label_smoothing), lse


def _sums(hidden, label_smoothing):
    """Each row's running log-sum-exp, target logit and (label smoothing)
    logit sum, before the first chunk or block."""
    acc = dict(device=hidden.device, dtype=_accumulates_in(hidden.dtype))
    tokens = hidden.shape[0]
    logit_sum = torch.zeros(tokens, **acc) if label_smoothing else None
    return torch.full((tokens,), -math.inf, **acc), torch.zeros(tokens, **acc), logit_sum


def _loss(lse, target_logit, logit_sum, valid, vocab, reduction, label_smoothing):
    loss = lse - (1.0 - label_smoothing) * target_logit
    if logit_sum is not None:
        loss = loss - label_smoothing * logit_sum / vocab
    loss = torch.where(valid, loss, 0.0)
    if reduction == 1:
        loss = loss.sum() / valid.sum()
    elif reduction == 2:
        loss = loss.sum()
    return loss


def _check_targets(target, valid, vocab):
    """A target outside [0, vocab) that is not ignore_index: an IndexError on
    the CPU, as F.cross_entropy raises; on CUDA an asynchronous device
    assert, as F.cross_entropy's own kernel gives (no synchronisation)."""
    bad = valid & ((target < 0) | (target >= vocab))
    if target.is_cuda:
        torch._assert_async(~bad.any(), "linear_cross_entropy: a target is out of bounds [0, vocab)")
    elif bad.any():
        first = target[bad][0].item()
        raise IndexError(f"linear_cross_entropy: target {first} is out of bounds for a vocabulary of {vocab}")


@_forward.register_fake
def _(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap, chunk):
    acc = _accumulates_in(hidden.dtype)
    return hidden.new_empty(target.shape if reduction == 0 else (), dtype=acc), hidden.new_empty(target.shape, dtype=acc)


@torch.library.custom_op("gemm_act::linear_cross_entropy_backward", mutates_args=())
def _backward(grad: Tensor, hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor], lse: Tensor,
              ignore_index: int, reduction: int, label_smoothing: float, softcap: float, chunk: int,
              needs: list[bool]) -> tuple[Tensor, Tensor, Tensor]:
    tokens = hidden.shape[0]
    valid = target != ignore_index
    # The incoming gradient per row: mean divides by the rows that count.
    acc = _accumulates_in(hidden.dtype)
    scale = grad.to(acc) / valid.sum() if reduction == 1 else grad.to(acc)
    scale = torch.where(valid, scale.expand(tokens), 0.0).contiguous()
    grad_hidden = torch.zeros(hidden.shape, dtype=acc, device=hidden.device) if needs[0] else None
    # Written in place by the chunks' passes: contiguous, whatever the parameters' strides.
    grad_weight = torch.empty_like(weight, memory_format=torch.contiguous_format) if needs[1] else None
    grad_bias = torch.empty_like(bias, memory_format=torch.contiguous_format) if needs[2] and bias is not None else None
    _CHUNKS_BACKWARD(hidden, weight, bias, target, lse, scale, chunk, label_smoothing, softcap,
                     grad_hidden, grad_weight, grad_bias)
    return (grad_hidden.to(hidden.dtype) if grad_hidden is not None else hidden.new_empty(0),
            grad_weight if grad_weight is not None else hidden.new_empty(0),
            grad_bias if grad_bias is not None else hidden.new_empty(0))


@_backward.register_fake
def _(grad, hidden, weight, target, bias, lse, ignore_index, reduction, label_smoothing, softcap, chunk, needs):
    return (torch.empty_like(hidden) if needs[0] else hidden.new_empty(0),
            torch.empty_like(weight) if needs[1] else hidden.new_empty(0),
            torch.empty_like(bias) if needs[2] and bias is not None else hidden.new_empty(0))


def _setup_context(ctx, inputs, output):
    hidden, weight, target, bias, *args = inputs
    ctx.save_for_backward(hidden, weight, target, bias, output[1])
    ctx.mark_non_differentiable(output[1])  # the log-sum-exp comes back without a gradient, as on the rows road
    ctx.set_materialize_grads(False)
    ctx.args = args  # the forward's chunks among them: the backward's logits round as the forward's did


def _autograd(ctx, grad_loss, grad_lse):
    hidden, weight, target, bias, lse = ctx.saved_tensors
    needs = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[3]]
    gh, gw, gb = _backward(grad_loss, hidden, weight, target, bias, lse, *ctx.args, needs)
    return (gh if needs[0] else None, gw if needs[1] else None, None, gb if needs[2] else None) + (None,) * len(ctx.args)


_forward.register_autograd(_autograd, setup_context=_setup_context)


@torch.library.custom_op("gemm_act::linear_cross_entropy_rows", mutates_args=())
def _rows_forward(hidden: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor], ignore_index: int,
                  reduction: int, label_smoothing: float, softcap: float, rows: int,
                  needs: list[bool]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The rows road's forward: the loss (mean or sum), the log-sum-exp, and
    the gradients of hidden, weight and bias for an incoming gradient of 1,
    summed in fp32 (float64 for float64 inputs), each where `needs` says."""
    valid = target != ignore_index
    _check_targets(target, valid, weight.shape[0])
    lse, target_logit, logit_sum = _sums(hidden, label_smoothing)
    acc = dict(device=hidden.device, dtype=lse.dtype)
    # mean: each row that counts takes 1 / their number (none: a NaN loss and zero gradients, as PyTorch's).
    share = 1.0 / valid.sum().to(lse.dtype) if reduction == 1 else torch.ones((), **acc)
    scale = torch.where(valid, share, 0.0)
    grad_hidden = torch.empty(hidden.shape, **acc) if needs[0] else None
    # Over the padded vocabulary: that GEMM then runs aligned; the backward takes the first rows.
    rows_w = _policy.padded_vocab(weight.shape[0], hidden.element_size())
    grad_weight = torch.empty(rows_w, weight.shape[1], **acc) if needs[1] else None
    grad_bias = torch.empty(weight.shape[0], **acc) if needs[2] and bias is not None else None
    _ROWS(hidden, weight, bias, target, scale, rows, label_smoothing, softcap, lse, target_logit, logit_sum,
          grad_hidden, grad_weight, grad_bias)
    loss = _loss(lse, target_logit, logit_sum, valid, weight.shape[0], reduction, label_smoothing)
    return (loss, lse) + tuple(g if g is not None else hidden.new_empty(0, dtype=lse.dtype)
                               for g in (grad_hidden, grad_weight, grad_bias))


@_rows_forward.register_fake
def _(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap, rows, needs):
    acc = _accumulates_in(hidden.dtype)
    shapes = (hidden.shape, (_policy.padded_vocab(weight.shape[0], hidden.element_size()), weight.shape[1]),
              weight.shape[:1] if bias is not None else (0,))
    return (hidden.new_empty((), dtype=acc), hidden.new_empty(target.shape, dtype=acc)) + tuple(
        hidden.new_empty(shape if need else (0,), dtype=acc) for shape, need in zip(shapes, needs))


def _rows_setup_context(ctx, inputs, output):
    hidden, weight, target, bias, *_ = inputs
    ctx.save_for_backward(*output[2:])
    ctx.dtypes = hidden.dtype, weight.dtype, bias.dtype if bias is not None else None
    ctx.vocab = weight.shape[0]
    ctx.mark_non_differentiable(output[1], *output[2:])
    ctx.set_materialize_grads(False)  # else the backward gets zeros the size of each gradient for them


# Elements per piece of a gradient scaled in eager mode: each piece's product is a temporary.
_SCALED_PIECE = 1 << 24


def _scaled(grad, g, dtype):
    """grad * g computed in grad's dtype and rounded once to dtype. In eager
    mode piece by piece, so that no product of the whole (an fp32 weight
    gradient's size) is ever held; compiled, Inductor makes it one kernel.
    A traced backward is compiled whether or not torch's compiling flag is
    set there: a loop over its symbolic size would guard on that size."""
    if torch.compiler.is_compiling() or is_fake(grad):
        return (grad * g).to(dtype)
    out = torch.empty(grad.shape, dtype=dtype, device=grad.device)
    flat, into = grad.reshape(-1), out.view(-1)
    for i in range(0, flat.numel(), _SCALED_PIECE):
        torch.mul(flat[i:i + _SCALED_PIECE], g, out=into[i:i + _SCALED_PIECE])
    return out


def _rows_autograd(ctx, grad_loss, *_):
    grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
    grads = grad_hidden, grad_weight[:ctx.vocab], grad_bias
    g = grad_loss.to(grad_hidden.dtype)
    needs = ctx.needs_input_grad[:2] + ctx.needs_input_grad[3:4]
    out = [_scaled(grad, g, dtype) if need else None for grad, dtype, need in zip(grads, ctx.dtypes, needs)]
    return (out[0], out[1], None, out[2]) + (None,) * 6


_rows_forward.register_autograd(_rows_autograd, setup_context=_rows_setup_context)


def linear_cross_entropy(hidden, weight, target, bias=None, *, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, softcap=None, return_lse=False):
    """``F.cross_entropy(F.linear(hidden, weight, bias), target, ...)`` and its
    gradients without the logits held whole, except where eager's ops are
    faster: with a gradient wanted, where a row of logits is a whole number
    of 16-byte units and all of them take less than 1 GiB, it is those ops.

    hidden: [..., D]; weight: [V, D]; target: hidden's leading shape, class
    indices (ignore_index rows count nowhere); bias: [V] or None. With
    ``softcap``, the logits pass through ``softcap * tanh(logits / softcap)``
    first (Gemma 2's head). ``reduction`` as F.cross_entropy's ("none" keeps
    target's shape). With ``return_lse``, also each row's log-sum-exp of the
    (softcapped) logits, fp32 (float64 for float64 inputs), target's shape,
    without a gradient (as if detached: no gradient flows back through it).
    DTensor operands (a vocabulary-parallel head, weight Shard(0)) are
    gathered whole on every rank, their gradients returned to their shards:
    correct, but the loss is not split over the ranks.
    """
    loss, lse = _loss_and_lse(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap,
                              with_lse=return_lse)
    # F.cross_entropy's dtype: the logits' (hidden's), fp32 under autocast.
    autocast = torch.is_autocast_enabled(hidden.device.type) and hidden.dtype != torch.float64
    loss = loss.to(torch.float32 if autocast else hidden.dtype)
    return (loss, lse) if return_lse else loss


def _loss_and_lse(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap, with_lse=False,
                  loss_dtype=None):
    """linear_cross_entropy's checks and road: the loss in fp32 (float64 for
    float64 inputs), and the log-sum-exp, or None where eager's ops ran
    (rule ce_eager, only without `with_lse`; the logits cast up to
    `loss_dtype`, the dtype of the loss being replaced, where given)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"linear_cross_entropy: reduction must be one of {', '.join(_REDUCTIONS)}, "
                         f"got {reduction!r}")
    for name, t in (("hidden", hidden), ("weight", weight), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"linear_cross_entropy: {name} must be a tensor, got {type(t).__name__}")
    hidden, weight, target, bias = (_gathered(t) for t in (hidden, weight, target, bias))
    if hidden.dim() < 1 or weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy: expected hidden [..., D] and weight [V, D], got hidden "
                         f"{tuple(hidden.shape)} and weight {tuple(weight.shape)}")
    if weight.shape[0] == 0:
        raise ValueError("linear_cross_entropy: weight has no rows; expected a vocabulary of at least one class")
    if tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"linear_cross_entropy: target must have hidden's leading shape "
                         f"{tuple(hidden.shape[:-1])}, got {tuple(target.shape)}")
    if target.dtype not in (torch.int64, torch.int32) or target.is_floating_point():
        raise TypeError(f"linear_cross_entropy: target must hold class indices (int64), got {target.dtype}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"linear_cross_entropy: bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    device_type = hidden.device.type
    autocast = torch.is_autocast_enabled(device_type)
    dtype = torch.get_autocast_dtype(device_type) if autocast else hidden.dtype
    if autocast:
        # As autocast runs F.linear (in its dtype) and F.cross_entropy (fp32):
        # the floating operands cast once here, forward and backward then in one dtype.
        hidden, weight, bias = (t.to(dtype) if t is not None and t.dtype in _AUTOCAST_CASTS else t
                                for t in (hidden, weight, bias))
    if hidden.dtype != weight.dtype or (bias is not None and bias.dtype != weight.dtype):
        raise TypeError("linear_cross_entropy: hidden, weight and bias must share a dtype" +
                        (f" (or cast to autocast's {dtype})" if autocast else "") +
                        f", got {hidden.dtype}, {weight.dtype}" + (f", {bias.dtype}" if bias is not None else ""))
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"linear_cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"linear_cross_entropy: softcap must be positive or None, got {softcap}")
    lead = target.shape
    width = hidden.shape[-1]
    tokens = hidden.numel() // width if width else 0
    args = (int(ignore_index), _REDUCTIONS.index(reduction), float(label_smoothing), float(softcap or 0.0))
    needs = [_policy.needs_grad(t) for t in (hidden, weight, bias)]
    if not with_lse and any(needs) and _policy.ce_eager(tokens, weight.shape[0], hidden.dtype.itemsize):
        loss = _eager(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap, loss_dtype)
        return loss.to(_accumulates_in(hidden.dtype)), None
    rows = _policy.ce_rows(tokens, width, weight.shape[0], hidden.dtype.itemsize,
                           _accumulates_in(hidden.dtype).itemsize) if reduction != "none" and any(needs) else 0
    flat = (hidden.reshape(-1, width), weight, target.reshape(-1).long(), bias)
    with torch.autocast(device_type, enabled=False) if autocast else contextlib.nullcontext():
        if rows:
            loss, lse, *_ = _rows_forward(*flat, *args, rows, needs)
        else:
            loss, lse = _forward(*flat, *args, _policy.ce_chunk(tokens, width, weight.shape[0], hidden.dtype.itemsize))
    return (loss.reshape(lead) if reduction == "none" else loss), lse.reshape(lead)


def _eager(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap, loss_dtype):
    """Rule ce_eager's road: F.linear, the softcap, F.cross_entropy, as eager
    mode runs them (the operands already in autocast's dtype; the loss, under
    autocast, in fp32), the logits cast up to `loss_dtype` first where given."""
    logits = F.linear(hidden, weight, bias)
    if loss_dtype is not None:
        logits = logits.to(torch.promote_types(logits.dtype, loss_dtype))
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1).long(), ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing).reshape(
        target.shape if reduction == "none" else ())


def _gathered(t):
    """A DTensor as the whole tensor on every rank, its gradient going back
    to its shards: a vocabulary-parallel head (weight Shard(0)) computes the
    whole loss on each rank, correct but not split over the ranks."""
    return t.full_tensor() if _is_dtensor(t) else t


class LinearCrossEntropy(nn.Linear):
    """An nn.Linear from hidden states to a vocabulary whose forward(hidden,
    target) returns the cross-entropy of its logits against target, not
    holding the logits whole (linear_cross_entropy); its parameters, init
    and state_dict are nn.Linear's."""

    def __init__(self, in_features, vocab_size, bias=False, device=None, dtype=None, *, ignore_index=-100,
                 reduction="mean", label_smoothing=0.0, softcap=None):
        super().__init__(in_features, vocab_size, bias=bias, device=device, dtype=dtype)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing, self.softcap = label_smoothing, softcap

    def forward(self, hidden, target):
        return linear_cross_entropy(hidden, self.weight, target, self.bias, ignore_index=self.ignore_index,
                                    reduction=self.reduction, label_smoothing=self.label_smoothing,
                                    softcap=self.softcap)

    def extra_repr(self):
        return super().extra_repr() + f", reduction={self.reduction!r}" + \
            (f", softcap={self.softcap}" if self.softcap else "")

"""The compile pass's LM-loss rewrite (enable_compile_fusion(lm_loss=True)):
``F.cross_entropy(F.linear(h, w, b) ..., target, ...)``, or
``F.nll_loss(F.log_softmax(...), ...)``, in the graph Dynamo captured,
becomes linear_cross_entropy where the logits are used by the loss alone.

Between the Linear and the loss the logits may pass through views that keep
the vocabulary as their last dimension (``view(-1, V)``, ``reshape``,
``flatten``), casts up to fp32 (``.float()``; the chunked path's sums are
fp32 already) and a softcap, ``c * tanh(z / c)``; each of these nodes used
by the next alone. The loss must take 2-D logits [N, V] and class indices
[N], without class weights; its other arguments must be constants. Where
the Linear runs under autocast (its output's dtype not its inputs') the
pair is left to Inductor.
"""

import operator

import torch
import torch.nn.functional as F

from ._canonical import _arg, _value
from .cross_entropy import _loss_and_lse

__all__ = []

_REDUCTIONS = ("none", "mean", "sum")
_VIEWS = {"view", "reshape", "flatten", "contiguous"}
_CASTS = {"float", "to", "type"}
_UP_TO_FP32 = (torch.float16, torch.bfloat16)  # what a cast to fp32 holds exactly


def _constant(value):
    return not isinstance(value, torch.fx.Node)


def _lm_loss(hidden, weight, bias, target, ignore_index, reduction, label_smoothing, softcap, dtype):
    """What the rewritten graph calls: linear_cross_entropy on hidden's rows,
    the loss in the dtype the captured loss had."""
    with torch.autocast(hidden.device.type, enabled=False):
        loss, _ = _loss_and_lse(hidden.reshape(-1, hidden.shape[-1]), weight, target, bias, ignore_index,
                                reduction, label_smoothing, softcap, loss_dtype=dtype)
    return loss.to(dtype)


def _loss_of(node):
    """(the loss's input node, target node, whether it takes log-probabilities,
    ignore_index, reduction, label_smoothing) of a supported loss call, else None."""
    if node.op != "call_function" or node.target not in (F.cross_entropy, F.nll_loss):
        return None
    log_probs = node.target is F.nll_loss
    names = ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
    defaults = (None, None, -100, None, "mean", 0.0)
    if log_probs:
        names, defaults = names[:-1], defaults[:-1]
    loss_input = node.args[0] if node.args else node.kwargs.get("input")
    target = _arg(node, 1, "target", None)
    values = [_arg(node, 2 + i, name, default) for i, (name, default) in enumerate(zip(names, defaults))]
    options = dict(zip(names, values))
    if not isinstance(loss_input, torch.fx.Node) or not isinstance(target, torch.fx.Node):
        return None
    if not all(map(_constant, values)) or options["weight"] is not None or options["size_average"] is not None \
            or options["reduce"] is not None or options["reduction"] not in _REDUCTIONS:
        return None
    smoothing = options.get("label_smoothing", 0.0)
    if not isinstance(options["ignore_index"], int) or not isinstance(smoothing, (int, float)):
        return None
    return loss_input, target, log_probs, options["ignore_index"], options["reduction"], float(smoothing)


def _log_softmax_cast(node):
    """The dtype ``log_softmax(x, dim=-1)`` (function or method) computes in
    (None: x's own); False where node is not such a call."""
    if node.op == "call_function" and node.target in (F.log_softmax, torch.log_softmax):
        dtype_at = 3 if node.target is F.log_softmax else 2
    elif node.op == "call_method" and node.target == "log_softmax":
        dtype_at = 2
    else:
        return False
    x, dim = node.args[0], _arg(node, 1, "dim", None)
    value = _value(x) if isinstance(x, torch.fx.Node) else None
    if value is None or dim not in (-1, value.dim() - 1):
        return False
    return _arg(node, dtype_at, "dtype", None)


def _cast_to(node):
    """The dtype a cast call converts to (None where it is not one)."""
    if node.op != "call_method" or node.target not in _CASTS:
        return None
    if node.target == "float":
        return torch.float32 if len(node.args) == 1 and not node.kwargs else None
    dtype = node.args[1] if len(node.args) == 2 and not node.kwargs else node.kwargs.get("dtype")
    return dtype if isinstance(dtype, torch.dtype) and len(node.args) + len(node.kwargs) == 2 else None


def _softcap_of(node):
    """(z, c, its three nodes) of ``c * tanh(z / c)`` ending at node, else None."""
    if node.op != "call_function" or node.target not in (operator.mul, torch.mul) or len(node.args) != 2:
        return None
    t, c = node.args if isinstance(node.args[0], torch.fx.Node) else node.args[::-1]
    if not isinstance(t, torch.fx.Node) or not isinstance(c, (int, float)) or c <= 0 or len(t.users) != 1:
        return None
    if t.op != "call_function" or t.target is not torch.tanh or len(t.args) != 1:
        return None
    d = t.args[0]
    if not isinstance(d, torch.fx.Node) or len(d.users) != 1 or d.op != "call_function" or \
            d.target not in (operator.truediv, torch.div) or d.kwargs or len(d.args) != 2 or d.args[1] != c:
        return None
    return d.args[0], float(c), [node, t, d]


def _linear_through(node, vocab, log_probs):
    """(linear node, softcap, nodes passed) where node is F.linear's output
    passed through views, casts up, at most one softcap and, where the loss
    takes log-probabilities, one log_softmax, each used by the next alone;
    else None."""
    passed, softcap, log_softmax = [], None, False
    while True:
        value = _value(node)
        if value is None or value.dim() < 1 or value.shape[-1] != vocab:
            return None
        if node.op == "call_function" and node.target is torch._C._nn.linear:
            return (node, softcap, passed) if log_softmax == log_probs else None
        if len(node.users) != 1:
            return None
        # A softcap caps logits: where the loss takes log-probabilities, only before their log_softmax.
        found = _softcap_of(node) if softcap is None and log_softmax == log_probs else None
        if found is not None:
            node, softcap, nodes = found
            passed += nodes
            continue
        if not node.args or not isinstance(node.args[0], torch.fx.Node) or _value(node.args[0]) is None:
            return None
        source = _value(node.args[0])
        dtype = _cast_to(node)
        normalises = _log_softmax_cast(node) if log_probs and not log_softmax else False
        if normalises is not False:
            log_softmax = True
            dtype = normalises
        if dtype is not None:
            if dtype != source.dtype and not (dtype == torch.float32 and source.dtype in _UP_TO_FP32):
                return None
        elif normalises is False and not ((node.op == "call_method" and node.target in _VIEWS) or
                                          (node.op == "call_function" and node.target in (torch.flatten,
                                                                                          torch.reshape))):
            return None
        passed.append(node)
        node = node.args[0]


def fuse_losses(graph):
    """Rewrites graph in place; returns the losses fused."""
    fused = 0
    for loss_node in list(graph.nodes):
        found = _loss_of(loss_node)
        if found is None:
            continue
        loss_input, target, log_probs, ignore_index, reduction, smoothing = found
        input_value, target_value, loss_value = _value(loss_input), _value(target), _value(loss_node)
        if input_value is None or target_value is None or loss_value is None or input_value.dim() != 2 or \
                target_value.dim() != 1 or target_value.is_floating_point():
            continue
        through = _linear_through(loss_input, input_value.shape[-1], log_probs)
        if through is None:
            continue
        linear, softcap, passed = through
        x, w = linear.args[0], _arg(linear, 1, "weight", None)
        bias = _arg(linear, 2, "bias", None)
        values = [_value(v) for v in (x, w, bias) if v is not None]
        out = _value(linear)
        if any(v is None for v in values) or len(values) != (3 if bias is not None else 2) or \
                len(linear.users) != 1 or \
                any(v.dtype != out.dtype or type(v) is not type(out) for v in values) or \
                _value(w).dim() != 2 or type(out).__name__ == "DTensor":
            continue
        with graph.inserting_before(loss_node):
            new = graph.call_function(_lm_loss, (x, w, bias, target, ignore_index, reduction, smoothing,
                                                 softcap, loss_value.dtype))
        new.meta.update(loss_node.meta)
        loss_node.replace_all_uses_with(new)
        # What the loss alone used, from the loss back to the Linear.
        for node in [loss_node] + passed + [linear]:
            graph.erase_node(node)
        fused += 1
    return fused

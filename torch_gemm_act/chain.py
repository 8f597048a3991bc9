"""The MLP backward fused across layers: Linear -> activation -> Linear.

In training, the second layer's input gradient dY1 = dZ2 @ W2 only ever
meets the first layer's activation derivative: dZ1 = dY1 * act'(Z1). The
chained operator (``gemm_act_chained``) computes the second layer's forward
as ``gemm_act`` does, and in its backward writes dZ1 directly, with act'
applied in the epilogue of the GEMM that computes it (``gemm_dact``), so
dY1 never goes to memory and back, and sums dZ1 over its rows in the same
epilogue: the first layer's bias gradient, which the chained operator
returns itself (the first layer, called with ``z_feeds_chain``, leaves the
gradient arriving on Z1 out of its own bias sum). The first layer then
receives dZ1 as the gradient of its pre-activation Z1 and runs no
activation pass or bias sum of its own.

Two modules take part: the first layer publishes (Y1, Z1) on a link it
shares with the second, which takes Z1 when its input *is* that Y1. Nothing
else depends on the hand-over: when the second layer's input is anything
else (or the first layer did not publish), both compute and differentiate
as they would alone. ``fuse_linear_act`` sets the links where the model's
data flow shows Y1 feeding only the second Linear and act' needs Z1
(rule ``links``, torch_gemm_act._policy); ``linear_act_linear`` is the same
computation as a function.
"""

import copy

import torch
from torch import nn

from . import ops
from ._policy import chain_pays
from .activations import GELU, IDENTITY
from .functional import _gemm_act_of_weight, _stores_preact, gemm_act

__all__ = ["linear_act_linear"]


class _ChainLink:
    """What one fused layer hands the next: its output Y, pre-activation Z
    and activation, until the next layer takes them. ``through``: the
    modules between the two, dropouts and identities, which pass Y on
    unchanged (the same values; a hook on each, _PassOn, hands the link
    their output): a dropout only with p = 0 or in eval mode; otherwise
    nothing is published."""

    __slots__ = ("y", "z", "bias", "activation", "negative_slope", "through")

    def __init__(self, through=()):
        self.through = tuple(through)
        self._empty()

    def open(self):
        """Whether Y can reach the next layer unchanged."""
        return all(not isinstance(m, nn.Dropout) or not m.training or m.p == 0 for m in self.through)

    def clear(self):
        # An empty link is left unwritten: under torch.compile every write
        # is a side effect replayed after the graph on each call.
        if self.y is not None:
            self._empty()

    def _empty(self):
        self.y = self.z = self.bias = None
        self.activation, self.negative_slope = IDENTITY, 0.0

    def put(self, y, z, bias, activation, negative_slope):
        """Y, its Z and the bias Z includes, of a layer called with z_feeds_chain."""
        self.y, self.z, self.bias = y, z, bias
        self.activation, self.negative_slope = activation, negative_slope

    def take(self, x):
        """(Z, bias, activation, slope) when x is the published Y, else None; the link is empty after."""
        found = (self.z, self.bias, self.activation, self.negative_slope) if self.y is x else None
        self.clear()
        return found

    def __deepcopy__(self, memo):
        # What it holds belongs to one forward; the modules are the copy's.
        # In the memo before them: their hooks (_PassOn) hold this link.
        new = _ChainLink.__new__(_ChainLink)
        memo[id(self)] = new
        new.through = copy.deepcopy(self.through, memo)
        new._empty()
        return new

    def pass_through_modules(self):
        """Hooks each module between the two layers with _PassOn (once)."""
        for module in self.through:
            for key, hook in list(module._forward_hooks.items()):
                if isinstance(hook, _PassOn):
                    del module._forward_hooks[key]
            module.register_forward_hook(_PassOn(self))

    def __getstate__(self):
        return self.through

    def __setstate__(self, through):
        # One module or None: what a link pickled before it held a tuple.
        self.through = (through,) if isinstance(through, nn.Module) else tuple(through or ())
        self._empty()


class _PassOn:
    """A forward hook on a module between two chained layers: where the
    module's input is the published Y, its output is the Y the next layer
    looks for. In eager mode an open dropout returns its input itself; traced
    by torch.compile its output can be a new tensor of the same values."""

    def __init__(self, link):
        self.link = link

    def __call__(self, module, args, output):
        link = self.link
        if link.y is not None and args and args[0] is link.y:
            link.y = output


def _chained_gemm(x, b, bias, activation, negative_slope, link_in=None, link_out=None, any_size=False,
                 b_is_weight=False):
    """act(x @ b + bias) for a layer on a chain: taking the layer before's Z
    (and bias) from ``link_in`` when x is its output, publishing its own on
    ``link_out`` where that pays (rule chain_pays). With ``b_is_weight``, b is a
    module's weight [N, K] and the GEMM's operand its transpose, taken in
    C++ on the direct path (ops.gemm_act)."""
    source = link_in.take(x) if link_in is not None else None
    publish = link_out is not None and link_out.open() and chain_pays(x, b, bias, activation, any_size,
                                                                       b_is_weight)
    if source is None and not publish:
        if b_is_weight:
            return _gemm_act_of_weight(x, b, bias, activation, negative_slope)
        return gemm_act(x, b, bias, activation=activation, negative_slope=negative_slope)
    x_preact, x_bias, x_activation, x_slope = source if source is not None else (None, None, IDENTITY, 0.0)
    store = publish or _stores_preact(x, b, bias, None, activation, False)
    y, z = ops.gemm_act_chained(x, x_preact, x_bias, x_activation, float(x_slope), b, bias, None, activation, 1.0,
                                0.0, float(negative_slope), store, publish, b_is_weight)
    if publish:
        link_out.put(y, z, bias, activation, negative_slope)
    return y


def linear_act_linear(x, weight1, bias1, weight2, bias2=None, activation=GELU, negative_slope=0.01):
    """``F.linear(act(F.linear(x, weight1, bias1)), weight2, bias2)``, the
    weights as nn.Linear's ([out, in]), in two fused GEMMs whose backward is
    fused across the two layers where the fused kernel runs (the
    activation's derivative applied in the epilogue of the GEMM that
    computes the first layer's input gradient: fp16/bf16 on Hopper for
    activations whose derivative needs Z, and the CPU), whatever the size;
    elsewhere the two layers' own backward."""
    for name, w in (("weight1", weight1), ("weight2", weight2)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"linear_act_linear: {name} must be a 2-D tensor [out_features, in_features], "
                             f"got {shape}")
    link = _ChainLink()
    y1 = _chained_gemm(x, weight1.t(), bias1, activation, negative_slope, link_out=link, any_size=True)
    return _chained_gemm(y1, weight2.t(), bias2, IDENTITY, 0.01, link_in=link)

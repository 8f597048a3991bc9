"""fuse_linear_act's residual outputs: a module whose whole forward is
``norm(r + dropout(linear(x)))`` (the dropout and the norm may be absent,
the sum's operands in either order) takes gemm_dropout_add for the sum:
transformers' BertSelfOutput, BertOutput and ViTOutput among them, which
are handed the residual as an argument. A block that adds the residual in
its own longer forward (GPT-2's, Llama's, timm's) is not this.

The module is read by tracing its forward with its children as leaves,
then replaced in its parent's slot by a ResidualOutput that holds the same
children under the same names (state_dict keys and values stay as they
were) and takes the same arguments."""

import inspect
import operator

import torch
from torch import nn

from . import ops
from ._policy import PLAIN, fuses_residual
from .functional import _dropout_seed

_ADDS = (operator.add, torch.add)


class ResidualOutput(nn.Module):
    """``norm(residual + dropout(linear(x)))`` with the sum in one operator
    (gemm_dropout_add: the GEMM and one pass, the mask drawn again in the
    backward), made by fuse_linear_act from a module whose forward computes
    exactly that. It holds that module's children under their names and
    takes its arguments, (x, residual) in the order its forward named them.

    Where the operator is not the road (rule fuses_residual; a residual of
    another shape than the sum, or of another dtype outside autocast, which
    the operator does not promote; a tensor subclass among the operands, a
    tensor-parallel DTensor say, whose rules the operator has not), it
    computes the replaced forward's own ops."""

    def __init__(self, original, linear, dropout, norm, arg_names, x_first, branch_first):
        super().__init__()
        for name, child in original.named_children():
            self.add_module(name, child)
        self.training = original.training
        self._linear, self._dropout, self._norm = linear, dropout, norm
        self._arg_names, self._x_first, self._branch_first = arg_names, x_first, branch_first
        self._signature = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                             for n in arg_names])
        self._replaced = type(original).__qualname__

    def extra_repr(self):
        return f"replaces={self._replaced}"

    def forward(self, *args, **kwargs):
        if kwargs or len(args) != 2:
            bound = self._signature.bind(*args, **kwargs)
            args = tuple(bound.arguments[n] for n in self._arg_names)
        x, r = args if self._x_first else args[::-1]
        linear = self._modules[self._linear]
        dropout = self._modules[self._dropout] if self._dropout is not None else None
        p = dropout.p if dropout is not None and dropout.training else 0.0
        weight, bias = linear.weight, linear.bias
        n = weight.shape[0] if isinstance(linear, nn.Linear) else weight.shape[1]
        if self._fuses(x, r, n, p) and type(weight) in PLAIN and (bias is None or type(bias) in PLAIN):
            b = weight.t() if isinstance(linear, nn.Linear) else weight
            y = ops.gemm_dropout_add(x, b, bias, r, p, _dropout_seed(x.device, p))
        else:
            branch = linear(x)
            if dropout is not None:
                branch = dropout(branch)
            y = branch + r if self._branch_first else r + branch
        return self._modules[self._norm](y) if self._norm is not None else y

    @staticmethod
    def _fuses(x, r, n, p):
        return type(x) in PLAIN and type(r) in PLAIN and x.dim() >= 1 and \
            r.shape == (*x.shape[:-1], n) and r.device == x.device and \
            (r.dtype == x.dtype or torch.is_autocast_enabled(x.device.type)) and fuses_residual(x, n, p)


def match(module, graph, is_linear, hooked):
    """ResidualOutput's arguments for module (traced as graph, children as
    leaves) where its forward is a residual output, else None. is_linear:
    whether a child is a Linear-like module fuse_linear_act takes; hooked:
    whether a module has forward hooks, which the fused sum would skip."""
    params = list(inspect.signature(inspect.unwrap(type(module).forward)).parameters.values())[1:]
    if len(params) != 2 or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or
                               p.default is not p.empty for p in params):
        return None
    if any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False)):
        return None  # state of its own, which the replacement would not hold
    children = dict(module.named_children())
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    calls = [n for n in nodes if n.op not in ("placeholder", "output")]
    if len(placeholders) != 2 or nodes[-1].op != "output" or not 2 <= len(calls) <= 4:
        return None
    if any(len(n.users) != 1 for n in placeholders + calls):
        return None

    def child_call(node, arg):
        ok = node.op == "call_module" and node.args == (arg,) and not node.kwargs
        return children.get(node.target) if ok else None

    it = iter(calls)
    lin = next(it)
    if lin.args[:1] == (placeholders[0],):
        x, r = placeholders
    else:
        r, x = placeholders
    linear = child_call(lin, x)
    if linear is None or not is_linear(linear) or hooked(linear):
        return None
    branch, node = lin, next(it)
    dropout = None
    if child_call(node, lin) is not None and type(children[node.target]) is nn.Dropout:
        dropout, branch, node = node.target, node, next(it, None)
        if hooked(children[dropout]):
            return None
    if node is None or node.op != "call_function" or node.target not in _ADDS or node.kwargs or \
            set(node.args) != {branch, r} or len(node.args) != 2:
        return None
    add, norm = node, next(it, None)
    if norm is not None and (child_call(norm, add) is None or next(it, None) is not None):
        return None
    if nodes[-1].args != ((norm or add),):
        return None
    return dict(linear=lin.target, dropout=dropout, norm=norm.target if norm is not None else None,
                arg_names=tuple(p.name for p in params), x_first=x is placeholders[0],
                branch_first=add.args[0] is branch)


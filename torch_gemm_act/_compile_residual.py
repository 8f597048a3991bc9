"""The compile pass's residual branches: ``r + F.dropout(F.linear(x, w, b))``
(or ``addmm`` and a view, transformers' Conv1D; the dropout may be absent
or pass its input on), either operand order, becomes one gemm_dropout_add
where rule compiles_dropout_add says it pays. The Linear's output must be
read by nothing else, and the residual must have the sum's shape (no
broadcast)."""

import operator

import torch

from ._canonical import _arg, _value
from ._policy import compiles_dropout_add, needs_grad

_ADDS = (operator.add, torch.add)
_GEMM_DROPOUT_ADD = torch.ops.gemm_act.gemm_dropout_add.default


def _only_user(node):
    return next(iter(node.users)) if len(node.users) == 1 else None


def _dropout_p(node):
    """p of an F.dropout call that is not in place (0 where it passes its
    input on: not training), else None."""
    if node.op != "call_function" or node.target is not torch.nn.functional.dropout:
        return None
    args = dict(zip(("input", "p", "training", "inplace"), node.args), **node.kwargs)
    p, training = args.get("p", 0.5), args.get("training", True)
    if args.get("inplace", False) is not False or not isinstance(p, (int, float)) or not isinstance(training, bool):
        return None
    return float(p) if training else 0.0


def _branch(node, gemm_of):
    """(gemm node, (x, w, bias, transposed), view node or None, p) where node
    is a Linear's output, through a view of it (Conv1D's) and a dropout,
    each the only reader of what it reads; else None."""
    p, view = 0.0, None
    dropout_p = _dropout_p(node)
    if dropout_p is not None:
        p, node = dropout_p, _arg(node, 0, "input", None)
        if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
            return None
    if node.op == "call_method" and node.target in ("view", "reshape") and len(node.users) == 1:
        view, node = node, node.args[0]
        if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
            return None
    gemm = gemm_of(node)
    if gemm is None or len(node.users) != 1:
        return None
    return node, gemm, view, p


def fuse_residuals(graph, gemm_of):
    """Rewrites graph in place; returns the residual branches fused.
    ``gemm_of``: the pass's reader of a Linear's GEMM (x, w, bias,
    b_needs_transpose)."""
    fused = 0
    for add in list(graph.nodes):
        if add.op != "call_function" or add.target not in _ADDS or len(add.args) != 2 or add.kwargs:
            continue
        for branch_node, residual in (add.args, reversed(add.args)):
            if not isinstance(branch_node, torch.fx.Node) or not isinstance(residual, torch.fx.Node):
                continue
            found = _branch(branch_node, gemm_of)
            if found is None:
                continue
            gemm_node, (x, w, bias, transpose), view, p = found
            out_value, r_value, x_value = _value(add), _value(residual), _value(x)
            if not all(isinstance(v, torch.Tensor) for v in (out_value, r_value, x_value)) or \
                    r_value.shape != out_value.shape:
                continue
            if not compiles_dropout_add(x_value, p, needs_grad(x_value, _value(w), _value(bias), r_value)):
                continue
            _replace(graph, add, branch_node, gemm_node, view, x, w, bias, transpose, residual, p, x_value.device)
            fused += 1
            break
    return fused


def _replace(graph, add, branch_node, gemm_node, view, x, w, bias, transpose, residual, p, device):
    with graph.inserting_before(add):
        b = graph.call_function(torch.t, (w,)) if transpose else w
        # The residual as the GEMM's rows: Conv1D's addmm takes x [M, K] and is viewed after.
        r = graph.call_function(torch.flatten, (residual, 0, -2)) if view is not None else residual
        if p > 0:
            seed = graph.call_function(torch.randint, (-2 ** 63, 2 ** 63 - 1, ()),
                                       {"dtype": torch.int64, "device": device})
        else:
            seed = graph.call_function(torch.zeros, ((),), {"dtype": torch.int64, "device": device})
        y = graph.call_function(_GEMM_DROPOUT_ADD, (x, b, bias, r, p, seed))
        if view is not None:
            y = graph.call_method("view_as", (y, residual))
    y.meta.update(add.meta)
    add.replace_all_uses_with(y)
    graph.erase_node(add)
    node = branch_node
    while node is not None:  # the dropout, the view and the GEMM, each now unread
        nxt = node.args[0] if node is not gemm_node else None
        graph.erase_node(node)
        node = nxt if isinstance(nxt, torch.fx.Node) and not nxt.users else None

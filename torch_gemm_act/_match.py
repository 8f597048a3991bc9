"""The one matcher of what this project fuses, over a torch.fx graph.

Its patterns: a *pair*, a GEMM whose output feeds only an activation; a
*gated* MLP, ``act(gate(x)) * up(x)``; a *packed* one, ``x1, x2 =
fc(x).chunk(2, dim=-1)`` then ``x1 * act(x2)`` or ``act(x1) * x2``; and the
*consumer* a pair's output alone feeds (for a chain). fuse_linear_act reads
a module's forward traced with its children as leaves, where a GEMM and an
activation are module calls; the compile pass reads the graph Dynamo
captured, where they are function calls. Each passes a reader that says
what one node is (``gemm``, ``activation``, ``called_once``,
``passes_through``); how the nodes must connect is judged here, once.
"""

import dataclasses
import operator

import torch
import torch.fx

from .activations import _GATED_BY_GATE

__all__ = []

_PRODUCTS = (operator.mul, torch.mul)


@dataclasses.dataclass(frozen=True)
class Gemm:
    """A GEMM call in the graph: ``node``, its input ``x`` (a node; None where
    it takes more than one input), ``weight`` and ``bias`` as the reader
    holds them, the weight's shape, whether the weight is ``[N, K]`` (an
    nn.Linear's or F.linear's; False: ``[K, N]``, Conv1D's or addmm's), and
    whether it may be one of a gated MLP's projections."""

    node: torch.fx.Node
    x: object
    weight: object
    bias: object
    weight_shape: tuple
    n_by_k: bool
    gatable: bool


@dataclasses.dataclass(frozen=True)
class Pair:
    gemm: Gemm
    act_node: torch.fx.Node
    activation: str
    slope: float


def _describe(node):
    """A graph node's call, as a reader of the model's code would name it."""
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return f".{node.target}()"
    return str(node.target)


def pair(act_node, reader):
    """The Pair act_node ends; a reason (a str) where act_node is an
    activation call on a GEMM's output that cannot fuse; else None."""
    act = reader.activation(act_node)
    source = act_node.args[0] if act_node.args else None
    gemm = reader.gemm(source) if act is not None and isinstance(source, torch.fx.Node) else None
    if gemm is None:
        return None
    if isinstance(act, str):
        return act
    if len(source.users) != 1:
        others = sorted(_describe(u) for u in source.users if u is not act_node)
        return f"the Linear's output is used by {', '.join(others)} as well"
    if not (reader.called_once(source) and reader.called_once(act_node)):
        return "the Linear or the activation is called more than once in the forward"
    return Pair(gemm, act_node, *act)


def _other_factor(node):
    """y where node's output is used only by ``node * y`` (or ``y * node``)."""
    if len(node.users) != 1:
        return None
    (product,) = node.users
    if product.op != "call_function" or product.target not in _PRODUCTS or len(product.args) != 2 \
            or product.kwargs:
        return None
    return product.args[1] if product.args[0] is node else product.args[0]


def gated_up(p, reader):
    """The up projection's Gemm where the pair p's activation output is used
    only by its product with ``up(x)``: the activation one with a gated form,
    both GEMMs gatable, on the same x, with weights of one shape, up called
    once and its output used by that product alone; else None."""
    if p.activation not in _GATED_BY_GATE or not p.gemm.gatable or p.gemm.x is None:
        return None
    up_node = _other_factor(p.act_node)
    if not isinstance(up_node, torch.fx.Node) or up_node is p.gemm.node:
        return None
    up = reader.gemm(up_node)
    if up is None or not up.gatable or up.x is not p.gemm.x or len(up_node.users) != 1 \
            or not reader.called_once(up_node) or up.weight_shape is None or up.weight_shape != p.gemm.weight_shape:
        return None
    return up


def packed_glu(act_node, reader):
    """(the GEMM, the gate's half, the gated form) where act_node gates one
    half of a gatable GEMM's output split by ``chunk(2, dim=-1)`` and
    multiplies the other, nothing else using either half or the GEMM's
    output, the GEMM and the activation called once; else None."""
    act = reader.activation(act_node)
    if not isinstance(act, tuple) or act[0] not in _GATED_BY_GATE or not reader.called_once(act_node):
        return None
    gate_half = act_node.args[0]
    if not (isinstance(gate_half, torch.fx.Node) and gate_half.op == "call_function"
            and gate_half.target is operator.getitem and len(gate_half.users) == 1):
        return None
    split, gate_index = gate_half.args
    if not (isinstance(split, torch.fx.Node) and split.op == "call_method" and split.target == "chunk"
            and len(split.users) == 2 and type(gate_index) is int and gate_index in (0, 1)):
        return None
    args = dict(zip(("input", "chunks", "dim"), split.args), **split.kwargs)
    if args.get("chunks") != 2 or args.get("dim") != -1 or not isinstance(args.get("input"), torch.fx.Node):
        return None
    gemm = reader.gemm(args["input"])
    if gemm is None or not gemm.gatable or len(gemm.node.users) != 1 or not reader.called_once(gemm.node) \
            or gemm.weight_shape[0] % 2:
        return None
    up_half = _other_factor(act_node)
    if not (isinstance(up_half, torch.fx.Node) and up_half.op == "call_function"
            and up_half.target is operator.getitem and up_half.args == (split, 1 - gate_index)
            and len(up_half.users) == 1):
        return None
    return gemm, gate_index, _GATED_BY_GATE[act[0]]


def _sole_call(node, reader):
    """The call that alone uses node's output and is called only there; else None."""
    if len(node.users) != 1:
        return None
    (user,) = node.users
    return user if reader.called_once(user) else None


def consumer(node, reader):
    """(the call that alone uses node's output, the calls between them): each
    call between one the reader says passes its input through (a dropout, an
    identity module), taking the output before it alone; else None."""
    passed = []
    user, source = _sole_call(node, reader), node
    while user is not None and reader.passes_through(user, source):
        passed.append(user)
        user, source = _sole_call(user, reader), user
    return None if user is None else (user, tuple(passed))

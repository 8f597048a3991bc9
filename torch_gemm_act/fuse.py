"""fuse_linear_act: every Linear whose output feeds only a supported
activation, fused with it into one module, wherever the pair sits.

Which pairs qualify is read from the code's data flow: each module that has
a Linear-like child and an activation child is traced with torch.fx, its
children as leaves, and a pair is fused where the activation is called once,
on the Linear's output and nothing else, and the Linear is called once and
its output used by nothing else. The Linear's slot then holds the fused
module (sharing the Linear's parameters, so state_dict keys and values stay
as they were) and the activation's slot nn.Identity, so the module's own
forward, unchanged, computes the same thing in one kernel. A module whose
forward cannot be traced keeps its pairs and says why in the report.

A gated MLP, ``act(gate(x)) * up(x)`` (Llama, Mistral, Qwen, Gemma, T5's
gated layers), fuses whole: the gate's slot holds a LinearGate that
computes the product in one operator, the up projection's slot a LinearUp
(its parameters; it returns what leaves the product as the gate's output),
the activation's slot nn.Identity. So does one whose two projections are
one Linear's output split in two, ``x1, x2 = fc(x).chunk(2, dim=-1)`` then
``x1 * act(x2)`` or ``act(x1) * x2`` (timm's GluMlp): the Linear's slot
holds a LinearPackedGlu, the activation's a PackedGluActivation.
"""

import dataclasses
import inspect
import logging
import operator

import torch.fx
from torch import nn

from .activations import ACTIVATION_MODULES, GATED_BY_GATE, IDENTITY, from_module, qualified_class_name
from ._policy import links
from .chain import ChainLink
from .gated_modules import LinearGate, LinearPackedGlu, LinearUp, PackedGluActivation
from .modules import Conv1DAct, LinearAct

__all__ = ["fuse_linear_act", "FusionReport"]

_log = logging.getLogger(__name__)

# transformers' Conv1D (GPT-2's projections): a Linear with its weight stored
# [in, out], found by where its class lives so transformers is not imported.
_CONV1D = "transformers.pytorch_utils.Conv1D"


@dataclasses.dataclass
class FusionReport:
    """What fuse_linear_act did: ``fused``, one (linear path, activation
    path, activation) per pair; ``left``, one (path, reason) per pair or
    module it left as it was."""

    fused: list = dataclasses.field(default_factory=list)
    left: list = dataclasses.field(default_factory=list)
    # Linears whose forward hooks (a tensor-parallel plan's, say) now run on
    # the fused module: a forward hook there sees the activation's output.
    hooks_moved: list = dataclasses.field(default_factory=list)
    # (first, second): a fused pair whose output feeds only the second
    # Linear; their backward is fused across the two (torch_gemm_act.chain).
    chained: list = dataclasses.field(default_factory=list)

    def __str__(self):
        lines = [f"fuse_linear_act: fused {len(self.fused)} pair(s), left {len(self.left)}"]
        lines += [f"  fused {lin} -> {act} ({name})" for lin, act, name in self.fused]
        lines += [f"  chained {first} -> {second} (backward fused across them)"
                  for first, second in self.chained]
        lines += [f"  left  {path}: {why}" for path, why in self.left]
        lines += [f"  hooks of {path} moved to its fused module" for path in self.hooks_moved]
        return "\n".join(lines)


def fuse_linear_act(model, *, report=False):
    """Fuses, in place, every nn.Linear (or transformers Conv1D) whose output
    feeds only a supported activation module, in an nn.Sequential or in any
    module's forward (see the module docstring). Returns ``model``, or
    ``(model, FusionReport)`` with ``report=True``; the report is also
    logged (logger ``torch_gemm_act.fuse``, level INFO)."""
    result = FusionReport()
    for path, module in list(model.named_modules()):
        _fuse_children(path, module, result)
    _log.info("%s", result)
    return (model, result) if report else model


def _join(*parts):
    return ".".join(p for p in parts if p)


def _linear_kind(module):
    """'linear' or 'conv1d' for what can be fused, else None."""
    if type(module) is nn.Linear:
        return "linear"
    if qualified_class_name(module) == _CONV1D:
        return "conv1d"
    return None


def _is_activation(module):
    if isinstance(module, nn.MultiheadAttention):  # defined beside the activations, but not one
        return False
    return from_module(module) is not None or type(module).__module__ in ACTIVATION_MODULES


def _fuse_children(path, parent, result):
    children = dict(parent.named_children())
    linears = {name for name, m in children.items() if _linear_kind(m)}
    acts = {name for name, m in children.items() if _is_activation(m)}
    if not linears or not acts:
        return
    if type(parent).forward is nn.Module.forward:
        # A container (ModuleList, ModuleDict): the module that owns it calls
        # its children, and its pairs are not one forward's to judge.
        result.left.append((path or "(model)", "a container without a forward of its own; its "
                                               "Linear -> activation pairs stay"))
        return
    try:
        graph = _trace(parent)
    except Exception as e:  # noqa: BLE001 - any failure to trace leaves the module as it is
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        result.left.append((path or "(model)", f"its forward could not be traced ({type(e).__name__}: "
                                               f"{reason[:120]}); its Linear -> activation pairs stay"))
        return
    calls = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls.setdefault(node.target, []).append(node)
    fused_pairs = []
    for act_name in sorted(acts):
        for act_node in calls.get(act_name, []):
            source = act_node.args[0] if act_node.args else None
            packed = _packed_glu(act_node, calls, children)
            if packed is not None:
                lin_node, gate_index, gated = packed
                lin_path, act_path = _join(path, lin_node.target), _join(path, act_name)
                parent._modules[lin_node.target] = LinearPackedGlu.from_linear(
                    children[lin_node.target], gated, gate_index)
                parent._modules[act_name] = PackedGluActivation(children[act_name])
                result.fused.append((f"{lin_path} (packed: gate half {gate_index})", act_path, gated))
                continue
            if not (isinstance(source, torch.fx.Node) and source.op == "call_module" and source.target in linears):
                continue
            why = _why_not(source, act_node, calls, children)
            lin_path, act_path = _join(path, source.target), _join(path, act_name)
            if why:
                result.left.append((f"{lin_path} -> {act_path}", why))
                continue
            activation, slope = from_module(children[act_name])
            linear = children[source.target]
            up_node = _gated_up(source, act_node, calls, children)
            if up_node is not None and activation in GATED_BY_GATE:
                up = LinearUp.from_linear(children[up_node.target])
                parent._modules[source.target] = LinearGate.from_linear(linear, up, GATED_BY_GATE[activation])
                parent._modules[up_node.target] = up
                parent._modules[act_name] = nn.Identity()
                result.fused.append((f"{lin_path} * {_join(path, up_node.target)}", act_path,
                                     GATED_BY_GATE[activation]))
                continue
            fused = (LinearAct.from_linear(linear, activation, slope) if _linear_kind(linear) == "linear"
                     else Conv1DAct.from_conv1d(linear, activation, slope))
            if _move_forward_hooks(linear, fused):
                result.hooks_moved.append(lin_path)
            parent._modules[source.target] = fused
            parent._modules[act_name] = nn.Identity()
            result.fused.append((lin_path, act_path, activation))
            fused_pairs.append((source.target, act_node))
    for first, act_node in fused_pairs:
        _chain(path, parent, first, act_node, calls, result)


def _other_factor(act_node):
    """y where act_node's output is used only by ``act_node * y`` (or
    ``y * act_node``, Python's operator); else None."""
    if len(act_node.users) != 1:
        return None
    (product,) = act_node.users
    if product.op != "call_function" or product.target is not operator.mul or len(product.args) != 2 \
            or product.kwargs:
        return None
    return product.args[1] if product.args[0] is act_node else product.args[0]


def _gated_up(gate_node, act_node, calls, children):
    """The up projection's call where act(gate(x)) is used only by
    ``act(gate(x)) * up(x)``, up an nn.Linear called once, on gate's input,
    its output used by that product alone, and neither Linear with forward
    hooks (a parallel plan's conversions stay with the Linear); else None."""
    up = _other_factor(act_node)
    if not (isinstance(up, torch.fx.Node) and up.op == "call_module" and up is not gate_node):
        return None
    up_module = children.get(up.target)
    gate_module = children[gate_node.target]
    if type(up_module) is not nn.Linear or type(gate_module) is not nn.Linear:
        return None
    if up.args != gate_node.args or up.kwargs or gate_node.kwargs or len(up.users) != 1 \
            or len(calls[up.target]) != 1 or up_module.weight.shape != gate_module.weight.shape:
        return None
    if any(getattr(m, name, None) for m in (up_module, gate_module) for name in _FORWARD_HOOKS):
        return None
    return up


def _packed_glu(act_node, calls, children):
    """(the Linear's call, the gate's half, the gated form) where act_node
    gates one half of a Linear's output split by ``chunk(2, dim=-1)`` and
    multiplies the other, nothing else using either half or the Linear's
    output, and the Linear (a plain nn.Linear without forward hooks) and the
    activation are called once; else None."""
    act = children[act_node.target]
    found = from_module(act)
    if found is None or found[0] not in GATED_BY_GATE or len(act_node.args) != 1 or act_node.kwargs \
            or len(calls[act_node.target]) != 1:
        return None
    gate_half = act_node.args[0]
    if not (isinstance(gate_half, torch.fx.Node) and gate_half.op == "call_function"
            and gate_half.target is operator.getitem and len(gate_half.users) == 1):
        return None
    split, gate_index = gate_half.args
    if not (isinstance(split, torch.fx.Node) and split.op == "call_method" and split.target == "chunk"
            and len(split.users) == 2 and gate_index in (0, 1) and type(gate_index) is int):
        return None
    args = dict(zip(("input", "chunks", "dim"), split.args), **split.kwargs)
    if args.get("chunks") != 2 or args.get("dim") not in (-1,):
        return None
    lin_node = args["input"]
    if not (isinstance(lin_node, torch.fx.Node) and lin_node.op == "call_module" and len(lin_node.users) == 1
            and len(calls.get(lin_node.target, ())) == 1):
        return None
    linear = children.get(lin_node.target)
    if type(linear) is not nn.Linear or linear.out_features % 2 \
            or any(getattr(linear, name, None) for name in _FORWARD_HOOKS):
        return None
    up_half = _other_factor(act_node)
    if not (isinstance(up_half, torch.fx.Node) and up_half.op == "call_function"
            and up_half.target is operator.getitem and up_half.args == (split, 1 - gate_index)
            and len(up_half.users) == 1):
        return None
    return lin_node, gate_index, GATED_BY_GATE[found[0]]


def _only_call(node, calls):
    """The module call that alone uses node's output, with it alone; or None."""
    if len(node.users) != 1:
        return None
    (user,) = node.users
    if user.op != "call_module" or user.args != (node,) or user.kwargs or len(calls.get(user.target, ())) != 1:
        return None
    return user


def _chain(path, parent, first, act_node, calls, result):
    """Links the fused pair `first` to the Linear its activation's output
    feeds, where it feeds that Linear alone and nothing else, directly or
    through a dropout (the link then opens only while the dropout passes its
    input through), and the activation is one that chains (rule links)."""
    if not links(parent._modules[first].activation):
        return
    node = _only_call(act_node, calls)
    through = None
    if node is not None and isinstance(parent._modules[node.target], nn.Dropout):
        through = parent._modules[node.target]
        node = _only_call(node, calls)
    if node is None:
        return
    second = parent._modules[node.target]
    if not isinstance(second, (LinearAct, Conv1DAct)):
        kind = _linear_kind(second)
        if kind is None:
            return
        fused = (LinearAct.from_linear(second, IDENTITY) if kind == "linear"
                 else Conv1DAct.from_conv1d(second, IDENTITY))
        if _move_forward_hooks(second, fused):
            result.hooks_moved.append(_join(path, node.target))
        parent._modules[node.target] = second = fused
    link = ChainLink(through)
    parent._modules[first]._chain_out = link
    second._chain_in = link
    result.chained.append((_join(path, first), _join(path, node.target)))


_FORWARD_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                  "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _move_forward_hooks(linear, fused):
    """Gives fused the Linear's forward hooks (parallelize_module's input and
    output conversions among them); whether there were any."""
    moved = False
    for name in _FORWARD_HOOKS:
        hooks = getattr(linear, name, None)
        if hooks:
            getattr(fused, name).update(hooks)
            moved = True
    return moved


def _why_not(lin_node, act_node, calls, children):
    """Why the pair cannot be fused, or None when it can."""
    act = children[act_node.target]
    if from_module(act) is None:
        return f"{qualified_class_name(act)} is not an activation this project computes"
    if len(act_node.args) != 1 or act_node.kwargs:
        return "the activation takes more than the Linear's output"
    if len(lin_node.users) != 1:
        others = sorted(_describe(u) for u in lin_node.users if u is not act_node)
        return f"the Linear's output is used by {', '.join(others)} as well"
    if len(calls[lin_node.target]) != 1 or len(calls[act_node.target]) != 1:
        return "the Linear or the activation is called more than once in the forward"
    return None


def _describe(node):
    """A graph node's call, as a reader would name it."""
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return f".{node.target}()"
    return str(node.target)


class _ChildrenAsLeaves(torch.fx.Tracer):
    """Traces one module's own forward: every submodule call is a leaf."""

    def __init__(self, root):
        super().__init__()
        self._root = root

    def is_leaf_module(self, m, module_qualified_name):
        return m is not self._root

    def create_args_for_root(self, root_fn, is_module, concrete_args=None):
        return super().create_args_for_root(_named_args_only(inspect.unwrap(root_fn)), is_module, concrete_args)


def _named_args_only(fn):
    """fn without its *args and **kwargs (fx would pass them as one proxy,
    which a forward that unpacks them cannot take); they stay empty."""
    params = inspect.signature(fn).parameters
    named = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(named) == len(params):
        return fn
    call = ", ".join(named[:1] + [f"{n}={n}" for n in named[1:]])
    scope = {"_fn": fn}
    exec(f"def forward({', '.join(named)}):\n    return _fn({call})\n", scope)  # noqa: S102 - names from a signature
    return scope["forward"]


def _trace(module):
    """The fx graph of module's forward, with each argument that has a default
    held at it (the path a plain call takes)."""
    params = list(inspect.signature(inspect.unwrap(type(module).forward)).parameters.items())[1:]
    concrete = {n: p.default for n, p in params
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is not p.empty}
    return _ChildrenAsLeaves(module).trace(module, concrete_args=concrete)

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

A module whose whole forward is ``norm(r + dropout(linear(x)))``, the
residual handed to it (transformers' BertSelfOutput, BertOutput,
ViTOutput), becomes a ResidualOutput in its parent's slot: the sum in one
gemm_dropout_add (torch_gemm_act._fuse_residual).

A fused pair whose output feeds one Linear alone, directly or through
Dropout and Identity children, chains to it (torch_gemm_act.chain): each
module between gets a forward hook that hands the chain its output.
"""

import dataclasses
import inspect
import logging

import torch.fx
from torch import nn

from . import _fuse_residual, _match
from .activations import _ACTIVATION_MODULES, _GATED_BY_GATE, IDENTITY, _from_module, _qualified_class_name
from ._policy import links
from .chain import _ChainLink
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
    # (path, replaced class): a residual output whose sum is now one operator.
    residuals: list = dataclasses.field(default_factory=list)

    def __str__(self):
        lines = [f"fuse_linear_act: fused {len(self.fused)} pair(s) and {len(self.residuals)} residual "
                 f"output(s), left {len(self.left)}"]
        lines += [f"  fused {lin} -> {act} ({name})" for lin, act, name in self.fused]
        lines += [f"  chained {first} -> {second} (backward fused across them)"
                  for first, second in self.chained]
        lines += [f"  residual {path} ({cls}): r + dropout(linear(x)) in one operator"
                  for path, cls in self.residuals]
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
    for path, module in list(model.named_modules()):
        _fuse_residual_outputs(path, module, result)
    _log.info("%s", result)
    return (model, result) if report else model


def _join(*parts):
    return ".".join(p for p in parts if p)


def _linear_kind(module):
    """'linear' or 'conv1d' for what can be fused, else None."""
    if type(module) is nn.Linear:
        return "linear"
    if _qualified_class_name(module) == _CONV1D:
        return "conv1d"
    return None


def _is_activation(module):
    if isinstance(module, nn.MultiheadAttention):  # defined beside the activations, but not one
        return False
    return _from_module(module) is not None or type(module).__module__ in _ACTIVATION_MODULES


class _ModuleCalls:
    """The matcher's reader (torch_gemm_act._match) of one module's forward
    traced with its children as leaves: a GEMM is a call of a Linear-like
    child, an activation a call of an activation child, a pass-through a
    call of a Dropout or Identity child."""

    def __init__(self, children, graph):
        self.children = children
        self.calls = {}
        for node in graph.nodes:
            if node.op == "call_module":
                self.calls.setdefault(node.target, []).append(node)

    def _module(self, node):
        return self.children.get(node.target) if node.op == "call_module" else None

    def gemm(self, node):
        module = self._module(node)
        kind = _linear_kind(module)
        if kind is None:
            return None
        x = node.args[0] if len(node.args) == 1 and not node.kwargs else None
        gatable = kind == "linear" and not _has_forward_hooks(module)
        return _match.Gemm(node, x, module.weight, module.bias, tuple(module.weight.shape), kind == "linear",
                           gatable)

    def activation(self, node):
        module = self._module(node)
        if module is None or not _is_activation(module):
            return None
        found = _from_module(module)
        if found is None:
            return f"{_qualified_class_name(module)} is not an activation this project computes"
        if len(node.args) != 1 or node.kwargs:
            return "the activation takes more than the Linear's output"
        return found

    def called_once(self, node):
        return node.op != "call_module" or len(self.calls.get(node.target, ())) == 1

    def passes_through(self, node, source):
        return isinstance(self._module(node), (nn.Dropout, nn.Identity)) and node.args == (source,) \
            and not node.kwargs


def _fuse_children(path, parent, result):
    children = dict(parent.named_children())
    if not any(_linear_kind(m) for m in children.values()) or not any(map(_is_activation, children.values())):
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
    reader = _ModuleCalls(children, graph)
    fused_pairs = []
    for act_name in sorted(name for name, m in children.items() if _is_activation(m)):
        act_path = _join(path, act_name)
        for act_node in reader.calls.get(act_name, []):
            packed = _match.packed_glu(act_node, reader)
            if packed is not None:
                gemm, gate_index, gated = packed
                lin_path = _join(path, gemm.node.target)
                parent._modules[gemm.node.target] = LinearPackedGlu.from_linear(
                    children[gemm.node.target], gated, gate_index)
                parent._modules[act_name] = PackedGluActivation(children[act_name])
                result.fused.append((f"{lin_path} (packed: gate half {gate_index})", act_path, gated))
                continue
            found = _match.pair(act_node, reader)
            if found is None:
                continue
            if isinstance(found, str):
                result.left.append((f"{_join(path, act_node.args[0].target)} -> {act_path}", found))
                continue
            lin_name = found.gemm.node.target
            lin_path, linear = _join(path, lin_name), children[lin_name]
            up = _match.gated_up(found, reader)
            if up is not None:
                gated = _GATED_BY_GATE[found.activation]
                up_module = LinearUp.from_linear(children[up.node.target])
                parent._modules[lin_name] = LinearGate.from_linear(linear, up_module, gated)
                parent._modules[up.node.target] = up_module
                parent._modules[act_name] = nn.Identity()
                result.fused.append((f"{lin_path} * {_join(path, up.node.target)}", act_path, gated))
                continue
            fused = (LinearAct.from_linear(linear, found.activation, found.slope) if found.gemm.n_by_k
                     else Conv1DAct.from_conv1d(linear, found.activation, found.slope))
            if _move_forward_hooks(linear, fused):
                result.hooks_moved.append(lin_path)
            parent._modules[lin_name] = fused
            parent._modules[act_name] = nn.Identity()
            result.fused.append((lin_path, act_path, found.activation))
            fused_pairs.append((lin_name, act_node))
    for first, act_node in fused_pairs:
        _chain(path, parent, first, act_node, reader, result)


def _chain(path, parent, first, act_node, reader, result):
    """Links the fused pair `first` to the Linear its activation's output
    feeds, where it feeds that Linear alone and nothing else, directly or
    through dropouts and identity modules (the link then opens only while
    each passes its input through), and the activation is one that chains
    (rule links)."""
    if not links(parent._modules[first].activation):
        return
    found = _match.consumer(act_node, reader)
    if found is None:
        return
    node, passed = found
    if node.op != "call_module" or node.args != ((passed or (act_node,))[-1],) or node.kwargs:
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
    link = _ChainLink(tuple(parent._modules[p.target] for p in passed))
    link.pass_through_modules()
    parent._modules[first]._chain_out = link
    second._chain_in = link
    result.chained.append((_join(path, first), _join(path, node.target)))


def _fuse_residual_outputs(path, parent, result):
    """Each child of parent whose forward is a residual output becomes a
    ResidualOutput (a child that cannot be traced is not one)."""
    for name, child in list(parent.named_children()):
        if type(child).forward is nn.Module.forward or not any(map(_linear_kind, child.children())):
            continue
        try:
            graph = _trace(child)
        except Exception:  # noqa: BLE001 - not traceable: not a residual output
            continue
        found = _fuse_residual.match(child, graph, _linear_kind, _has_forward_hooks)
        if found is None:
            continue
        fused = _fuse_residual.ResidualOutput(child, **found)
        if _move_forward_hooks(child, fused):
            result.hooks_moved.append(_join(path, name))
        parent._modules[name] = fused
        result.residuals.append((_join(path, name), _qualified_class_name(child)))


_FORWARD_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                  "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _has_forward_hooks(module):
    return any(getattr(module, name, None) for name in _FORWARD_HOOKS)


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

"""enable_compile_fusion: torch.compile of an unchanged model runs this
project's operator for every Linear -> activation it captures.

A graph pass registered as Inductor's pre-grad custom pass (the graph
Dynamo captured, before AOTAutograd) replaces ``F.linear(x, w, b)`` (what an
inlined nn.Linear is) or ``torch.addmm(b, x, w)`` (transformers' Conv1D)
whose only user is a supported activation with ``gemm_act``; AOTAutograd
then traces the operator's own backward, so forward and backward are both
the fused ones, with the same numerics as fusing the modules by hand. A
pair whose pre-activation is used elsewhere too is left alone. A pair whose
output feeds one Linear alone is chained to it, as fuse_linear_act chains
modules (torch_gemm_act.chain). A gated MLP's ``act(F.linear(x, w_gate)) *
F.linear(x, w_up)`` becomes one ``gemm_glu`` where the gated operator pays
under compile (rule compiles_to_glu: in inference where its fused
kernel runs); elsewhere it is left to Inductor whole. Asked for
(``lm_loss=True``), a language model's loss over a Linear's logits becomes
linear_cross_entropy (torch_gemm_act._compile_loss).
"""

import operator

import torch
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._subclasses.fake_tensor import FakeTensor

from . import _canonical, _compile_loss, _match, _policy
from ._canonical import _arg, _value
from .activations import IDENTITY, _from_call
from ._policy import PLAIN as _PLAIN, chains, compiles_as_eager as _compiles_as_eager, \
    compiles_to_glu as _compiles_to_glu, needs_grad as _needs_grad
from .functional import _stores_preact

__all__ = ["enable_compile_fusion"]

def _activation_of(node):
    """(activation, negative_slope) of an activation call on one tensor, else
    None (the calls are the activation table's: activations._from_call)."""
    if node.op not in ("call_function", "call_method") or not node.args:
        return None
    return _from_call(node.target, node.args[1:], node.kwargs)


def _gemm_of(node):
    """(x, w, bias, b_needs_transpose) of F.linear(x, w, b) or addmm(b, x, w), else None."""
    if node.op != "call_function":
        return None
    if node.target is torch._C._nn.linear:
        x, w = node.args[0], _arg(node, 1, "weight", None)
        return x, w, _arg(node, 2, "bias", None), True
    if node.target is torch.addmm and len(node.args) == 3 and not node.kwargs:
        bias, x, w = node.args
        # A bias per column (Conv1D's); a full [M, N] input is a C, not a bias.
        value = _value(bias)
        if isinstance(value, torch.Tensor) and value.dim() == 1:
            return x, w, bias, False
    return None


class _CapturedCalls:
    """The matcher's reader (torch_gemm_act._match) of the graph Dynamo
    captured: a GEMM is F.linear or addmm with a bias per column, an
    activation a supported activation call; every call is its own."""

    @staticmethod
    def gemm(node):
        found = _gemm_of(node)
        if found is None:
            return None
        x, w, bias, n_by_k = found
        shape = getattr(_value(w), "shape", None)
        return _match.Gemm(node, x, w, bias, tuple(shape) if shape is not None else None, n_by_k, n_by_k)

    activation = staticmethod(_activation_of)

    @staticmethod
    def called_once(node):
        return True

    @staticmethod
    def passes_through(node, source):
        """A dropout of source that passes it through: p = 0 or not training."""
        if node.op != "call_function" or node.target is not torch.nn.functional.dropout:
            return False
        args = dict(zip(("input", "p", "training", "inplace"), node.args), **node.kwargs)
        return args.get("input") is source and args.get("inplace", False) is False and \
            (args.get("p", 0.5) == 0 or args.get("training", True) is False)


_PLAIN_VALUES = _PLAIN | {FakeTensor}  # plain tensors, as captured
_GEMM_ACT = torch.ops.gemm_act.gemm_act.default
_CHAINED = torch.ops.gemm_act.gemm_act_chained.default
_GEMM_GLU = torch.ops.gemm_act.gemm_glu.default


def _fuse_graph(graph):
    """Rewrites graph in place; returns (pairs fused, gated MLPs fused, gated
    MLPs left to Inductor, pairs chained to the Linear after them, formulas
    read as their activation)."""
    formulas = _canonical.canonicalize(graph, lambda node: _gemm_of(node) is not None)
    pairs = []  # (gemm_act node, its Y node, activation, slope, x's example value, needs grad)
    glu = gated = 0
    for act_node in list(graph.nodes):
        found = _match.pair(act_node, _CapturedCalls)
        if not isinstance(found, _match.Pair):
            continue
        gemm_node, activation, slope = found.gemm.node, found.activation, found.slope
        x, w, bias, transpose = found.gemm.x, found.gemm.weight, found.gemm.bias, found.gemm.n_by_k
        x_value, w_value, bias_value = map(_value, (x, w, bias))
        needs_grad = _needs_grad(x_value, w_value, bias_value)
        if _compiles_as_eager(x_value, activation, needs_grad):
            continue  # left to Inductor, as the functional API leaves it (rule compiles_as_eager)
        up = _match.gated_up(found, _CapturedCalls)
        if up is not None:
            up_values = map(_value, (up.weight, up.bias))
            if _compiles_to_glu(x_value, _needs_grad(x_value, w_value, bias_value, *up_values)):
                _fuse_gated(graph, found, up)
                glu += 1
            else:
                gated += 1  # left whole to Inductor
            continue
        # Z where the backward needs it, as gemm_act decides from the tensors
        # the graph was captured with.
        store = _stores_preact(x_value, w_value, bias_value, None, activation, False)
        with graph.inserting_before(act_node):
            b = graph.call_function(torch.t, (w,)) if transpose else w
            out = graph.call_function(torch.ops.gemm_act.gemm_act.default,
                                      (x, b, bias, None, activation, 1.0, 0.0, slope, store))
            y = graph.call_function(operator.getitem, (out, 0))
        y.meta.update(act_node.meta)
        act_node.replace_all_uses_with(y)
        graph.erase_node(act_node)
        graph.erase_node(gemm_node)
        pairs.append((out, y, activation, slope, x_value, needs_grad))
    # Last first: a pair that is both the second layer of one chain and the
    # first of the next has its Z stored before its own node is replaced.
    chained = sum(_chain(graph, *pair) for pair in reversed(pairs))
    return len(pairs), glu, gated, chained, formulas


def _fuse_gated(graph, found, up):
    """Replaces act(F.linear(x, w_gate, b_gate)) * F.linear(x, w_up, b_up)
    (the pair `found` and its gated_up match `up`) with gemm_glu, which
    takes the gate's activation."""
    (product,) = found.act_node.users
    gate = found.gemm
    with graph.inserting_before(product):
        b_gate_t = graph.call_function(torch.t, (gate.weight,))
        b_up_t = graph.call_function(torch.t, (up.weight,))
        out = graph.call_function(_GEMM_GLU, (gate.x, b_gate_t, b_up_t, gate.bias, up.bias, found.activation,
                                              0.01, False))
        y = graph.call_function(operator.getitem, (out, 0))
    y.meta.update(product.meta)
    product.replace_all_uses_with(y)
    for node in (product, found.act_node, gate.node, up.node):
        graph.erase_node(node)


def _chain(graph, out, y, activation, slope, x_value, needs_grad):
    """Where Y feeds one Linear alone (directly, or through dropouts that
    pass it on: p = 0 or not training), chains them as fuse_linear_act does
    (chain.py): the layer stores Z for the chain (_head), and the Linear's
    GEMM (fused with its own activation or not) becomes gemm_act_chained,
    its input's gradient going to Z and the layer's bias gradient coming
    from it. Not without a backward, nor where the layer would not chain
    (rule chains: the fused kernel's dtypes and GPU; on CUDA not for an
    activation whose derivative comes from Y). Unlike a module, no size
    threshold: compiled, the chain adds no host time. Returns whether it
    chained."""
    # Plain tensors only (as captured: fake ones): a DTensor keeps the
    # operators it has sharding strategies for.
    found = _match.consumer(y, _CapturedCalls) if needs_grad else None
    if found is None or type(x_value) not in _PLAIN_VALUES or not chains(x_value, activation):
        return False
    user, passed = found
    source = (passed or (y,))[-1]  # what the Linear reads: y, or y through dropouts that pass it on
    if user.op == "call_function" and user.target is _CHAINED and user.args[0] is source and user.args[1] is None:
        # The next pair's first layer, made a chain's head already: its input is chained too.
        with graph.inserting_before(user):
            z, bias = _head(graph, out)
        args = list(user.args)
        args[0:5] = [y, z, bias, activation, slope]
        user.args = tuple(args)
        _erase_unused(graph, passed)
        return True
    if user.op == "call_function" and user.target is _GEMM_ACT and user.args[0] is source:
        b, bias2, c, act2, alpha, beta, slope2, store2 = user.args[1:]
        if c is not None:
            return False
        with graph.inserting_before(user):
            z, bias = _head(graph, out)
            new = graph.call_function(_CHAINED, (y, z, bias, activation, slope, b, bias2, None, act2,
                                                 alpha, beta, slope2, store2, False))
    else:
        gemm = _gemm_of(user)
        if gemm is None or gemm[0] is not source:
            return False
        _, w, bias2, transpose = gemm
        with graph.inserting_before(user):
            z, bias = _head(graph, out)
            b = graph.call_function(torch.t, (w,)) if transpose else w
            new_out = graph.call_function(_CHAINED, (y, z, bias, activation, slope, b, bias2, None, "none",
                                                     1.0, 0.0, 0.01, False, False))
            new = graph.call_function(operator.getitem, (new_out, 0))
    new.meta.update(user.meta)
    user.replace_all_uses_with(new)
    graph.erase_node(user)
    _erase_unused(graph, passed)
    return True


def _erase_unused(graph, passed):
    """The dropouts a chain now goes around, last first, where nothing else reads them."""
    for node in reversed(passed):
        if not node.users:
            graph.erase_node(node)


def _head(graph, out):
    """(Z, bias) of the layer `out` (a gemm_act node, or the gemm_act_chained
    one that chained its input), made a chain's head: Z stored and its
    gradient left out of the layer's own bias gradient (z_feeds_chain), which
    the chained layer after it returns."""
    if out.target is _GEMM_ACT:
        x, b, bias, c, act, alpha, beta, slope, _ = out.args
        with graph.inserting_before(out):
            head = graph.call_function(_CHAINED, (x, None, None, IDENTITY, 0.0, b, bias, c, act, alpha, beta,
                                                  slope, True, True))
        head.meta.update(out.meta)
        out.replace_all_uses_with(head)
        graph.erase_node(out)
    else:
        head, args = out, list(out.args)
        bias = args[6]
        args[12] = args[13] = True  # store_preact, z_feeds_chain
        out.args = tuple(args)
    return graph.call_function(operator.getitem, (head, 1)), bias


class _FusionPass(CustomGraphPass):
    def __init__(self, previous, lm_loss=False):
        self.previous = previous  # a pass that was set before; it still runs, first
        self.lm_loss = lm_loss    # whether LM losses become linear_cross_entropy
        self.losses = 0           # LM losses fused so far
        self.fused = 0            # pairs fused so far, for the tests
        self.chained = 0          # of them, chained to the Linear after them
        self.glu = 0              # gated MLPs made one gemm_glu
        self.gated = 0            # gated MLPs left whole to Inductor
        self.formulas = 0         # activations written as arithmetic, read as their call

    def __call__(self, graph):
        if self.previous is not None:
            self.previous(graph)
        if self.lm_loss:
            self.losses += _compile_loss.fuse_losses(graph)
        fused, glu, gated, chained, formulas = _fuse_graph(graph)
        self.formulas += formulas
        self.fused += fused
        self.chained += chained
        self.glu += glu
        self.gated += gated

    def uuid(self):
        previous = None
        if self.previous is not None:
            if not callable(getattr(self.previous, "uuid", None)):
                return None  # a plain function before this pass: Inductor caches nothing it passes through
            previous = self.previous.uuid()
            if previous is None:
                return None
        # The pass and the rules it applies, and the testing switch they read.
        files = (__file__, _policy.__file__, _canonical.__file__, _match.__file__, _compile_loss.__file__)
        return (get_hash_for_files(files), _policy._operator_everywhere, self.lm_loss, previous)


def enable_compile_fusion(enabled=True, *, lm_loss=False):
    """With ``enabled``, every later ``torch.compile`` (Inductor) fuses the
    Linear -> activation pairs it captures into this project's operator;
    ``False`` restores the pass that was there before. With ``lm_loss``, also
    ``F.cross_entropy`` (or ``nll_loss(log_softmax)``) of a Linear's logits
    that nothing else uses becomes linear_cross_entropy: the logits never
    held whole, at the cost of a second pass of the head's GEMM (see the
    README's numbers), so only where asked, as fuse_lm_loss is. A pass
    already set as Inductor's ``pre_grad_custom_pass`` keeps running, before
    this one. A function or module compiled before the call keeps the code
    it was compiled to (``torch.compiler.reset()`` compiles it again);
    Dynamo also reuses a compilation for an identical copy of a model
    compiled before."""
    current = inductor_config.pre_grad_custom_pass
    if enabled:
        if isinstance(current, _FusionPass):
            current.lm_loss = bool(lm_loss)
        else:
            inductor_config.pre_grad_custom_pass = _FusionPass(current, bool(lm_loss))
    elif isinstance(current, _FusionPass):
        inductor_config.pre_grad_custom_pass = current.previous


def _compile_fusion_enabled():
    return isinstance(inductor_config.pre_grad_custom_pass, _FusionPass)

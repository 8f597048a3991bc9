"""A captured graph put in the form the matcher reads, around each GEMM's
output (compile pass only; a module trace needs none of it):

- an activation spelled out in arithmetic (transformers' NewGELUActivation,
  FastGELUActivation, ``x * torch.sigmoid(x)``) becomes its one call. It is
  found by its values: the nodes that compute a function of the GEMM's
  output alone are evaluated in float64 and compared with each activation
  of the table; one that agrees to far below fp32's rounding is that
  activation. Under CUDA's autocast a formula on a bf16/fp16 GEMM output
  comes out fp32 (autocast runs ``pow`` in fp32); it is read as the call in
  the GEMM's dtype only where every reader is a GEMM that autocast runs in
  that dtype, which casts the fp32 values back first: exact;
- a reshape between the GEMM and its activation (Conv1D's ``view`` back to
  [batch, tokens, N]) moves after the activation, which is elementwise;
- reshapes that lead from a tensor back to its own shape, read only by
  GEMMs (Conv1D's ``view`` and the next Conv1D's ``view(-1, N)``), are
  dropped: the GEMM reads the tensor itself.
"""

import contextlib
import operator

import torch
import torch.fx
from torch.utils._python_dispatch import _disable_current_modes

from .activations import _PYTORCH, _USES_SLOPE, IDENTITY, _from_call

__all__ = []

_NN = torch.nn.functional
# The arithmetic an activation's formula is written in: functions, and Tensor
# methods by name.
_ARITHMETIC = frozenset((operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pow,
                         torch.add, torch.sub, torch.mul, torch.div, torch.pow, torch.neg, torch.tanh,
                         torch.sigmoid, torch.erf, torch.exp, torch.sqrt, torch.rsqrt, _NN.tanh, _NN.sigmoid,
                         torch.special.erf, torch.special.expit))
_ARITHMETIC_METHODS = frozenset(("add", "sub", "mul", "div", "pow", "neg", "tanh", "sigmoid", "erf", "exp",
                                 "sqrt", "rsqrt", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__",
                                 "__rmul__", "__truediv__", "__pow__", "__neg__"))
_RESHAPE_METHODS = frozenset(("view", "reshape"))
# A formula's nodes after its input, at most (formulas are written in one expression).
_FORMULA_NODES = 24
# Points the formula and each activation are compared at, and how closely:
# far below fp32's rounding (FastGELU's 0.7978845608 for sqrt(2/pi) agrees).
_POINTS = torch.cat((torch.linspace(-12, 12, 4801, dtype=torch.float64),
                     torch.tensor([-60.0, -30.0, 30.0, 60.0, 0.0], dtype=torch.float64)))
_RTOL, _ATOL = 1e-7, 1e-9


def _value(node):
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _arg(node, index, name, default):
    """A call node's argument, given by position or by name."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _nodes_in(args):
    found = []
    torch.fx.node.map_arg(args, found.append)
    return found


def _is_arithmetic(node):
    if node.op == "call_function":
        return node.target in _ARITHMETIC
    return node.op == "call_method" and node.target in _ARITHMETIC_METHODS


def _is_reshape(node):
    """A view or reshape of one tensor to a shape (sizes, symbolic ones
    included; not a dtype view)."""
    if node.op == "call_method" and node.target in _RESHAPE_METHODS or \
            node.op == "call_function" and node.target is torch.reshape:
        before, after = _value(node.args[0]) if node.args else None, _value(node)
        sizes = _nodes_in((node.args[1:], node.kwargs))
        return isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor) and before.dtype == after.dtype \
            and not any(isinstance(_value(n), torch.Tensor) or _value(n) is None for n in sizes)
    return False


def _same_shape(a, b):
    """Whether nodes a and b hold tensors known to be of one shape, without
    adding a guard (symbolic sizes compare where they are known equal)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    va, vb = _value(a), _value(b)
    if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)) or va.dim() != vb.dim():
        return False
    return all(x is y or statically_known_true(x == y) for x, y in zip(va.shape, vb.shape))


def _sole_user(node):
    return next(iter(node.users)) if len(node.users) == 1 else None


def canonicalize(graph, is_gemm):
    """Rewrites graph in place around each node ``is_gemm`` accepts; returns
    how many formulas became one activation call."""
    formulas = 0
    for gemm in [n for n in graph.nodes if is_gemm(n)]:
        out = gemm
        reshape = _sole_user(gemm)
        if reshape is not None and _is_reshape(reshape):
            out = reshape
        formulas += _replace_formula(graph, out, is_gemm)
        _sink_reshape(graph, gemm)
    for node in list(graph.nodes):
        if node.graph is graph and _is_reshape(node):
            _drop_round_trip(graph, node, is_gemm)
    return formulas


def _replace_formula(graph, x, is_gemm):
    """Where the nodes after x compute an activation of x alone, replaces
    them with its call; returns 1 if it did, else 0."""
    cone = []
    inside = {x}
    node = x.next
    for _ in range(_FORMULA_NODES):
        if node.op == "output":
            break
        inputs = _nodes_in((node.args, node.kwargs))
        if _is_arithmetic(node) and inputs and all(i in inside for i in inputs):
            cone.append(node)
            inside.add(node)
        node = node.next
    for end in cone:  # the first complete formula
        part = _ancestors(end, x)
        if not set(x.users) <= part or any(set(n.users) - part for n in part if n is not end):
            continue
        upcast = getattr(_value(end), "dtype", None) != getattr(_value(x), "dtype", None)
        readers = _upcast_readers(end, _value(x).dtype, is_gemm) if upcast else []
        if readers is None:
            continue
        activation = _identify(x, end, [n for n in cone if n in part])
        if activation is None:
            continue
        target, kwargs = _PYTORCH[activation].calls[0], dict(_PYTORCH[activation].attrs)
        with graph.inserting_before(end):
            call = graph.call_function(target, (x,), kwargs)
        call.meta.update(end.meta)
        if upcast:  # the call and the reshapes up to its GEMMs hold x's dtype
            for n in (call, *readers):
                n.meta["example_value"] = _retyped(_value(n), _value(x).dtype)
        end.replace_all_uses_with(call)
        for n in reversed([n for n in cone if n in part]):
            graph.erase_node(n)
        return 1
    return 0


def _upcast_readers(end, dtype, is_gemm):
    """The reshapes between end (an fp32 formula on a tensor of dtype, fp16
    or bf16) and the GEMMs that read it, where every reader is a GEMM that
    computes in dtype (autocast's cast: the GEMM's own value is dtype), through
    reshapes only; else None."""
    if dtype not in (torch.float16, torch.bfloat16) or getattr(_value(end), "dtype", None) != torch.float32:
        return None
    reshapes, todo = [], list(end.users)
    while todo:
        user = todo.pop()
        if _is_reshape(user):
            reshapes.append(user)
            todo += user.users
        elif not (is_gemm(user) and getattr(_value(user), "dtype", None) == dtype):
            return None
    return reshapes if end.users else None


def _retyped(value, dtype):
    """value (a captured example: fake or real) as dtype."""
    mode = getattr(value, "fake_mode", None)
    with _disable_current_modes(), (mode if mode is not None else contextlib.nullcontext()):
        return value.to(dtype)


def _ancestors(end, x):
    """end and the nodes between x and it."""
    found, todo = set(), [end]
    while todo:
        n = todo.pop()
        if n is x or n in found:
            continue
        found.add(n)
        todo += _nodes_in((n.args, n.kwargs))
    return found


def _identify(x, end, nodes):
    """The activation the nodes (ending at end) compute of x, by their values;
    None where none of the table's agrees, or the result is not x's shape."""
    if not _same_shape(x, end):
        return None
    with _disable_current_modes(), torch.no_grad():
        env = {x: _POINTS}

        def get(a):
            return torch.fx.node.map_arg(a, env.__getitem__)

        try:
            for n in nodes:
                args, kwargs = get(n.args), get(n.kwargs)
                env[n] = n.target(*args, **kwargs) if n.op == "call_function" else \
                    getattr(args[0], n.target)(*args[1:], **kwargs)
        except Exception:  # noqa: BLE001  an expression of another kind: no activation of ours
            return None
        got = env[end]
        if not isinstance(got, torch.Tensor) or got.shape != _POINTS.shape or got.dtype != torch.float64:
            return None
        for name, want in _table_values().items():
            if torch.allclose(got, want, rtol=_RTOL, atol=_ATOL):
                return name
    return None


_TABLE_VALUES = {}


def _table_values():
    """name -> the activation at _POINTS, for those that take no slope."""
    if not _TABLE_VALUES:
        for name, form in _PYTORCH.items():
            if name != IDENTITY and name not in _USES_SLOPE:
                _TABLE_VALUES[name] = form.twin(**form.attrs)(_POINTS)
    return _TABLE_VALUES


def _sink_reshape(graph, gemm):
    """gemm -> reshape -> activation becomes gemm -> activation -> reshape."""
    reshape = _sole_user(gemm)
    if reshape is None or not _is_reshape(reshape):
        return
    act = _sole_user(reshape)
    if act is None or act.args[0] is not reshape or \
            _from_call(act.target, act.args[1:], act.kwargs) is None or _nodes_in((act.args[1:], act.kwargs)):
        return
    with graph.inserting_after(act):
        moved = graph.create_node(reshape.op, reshape.target, (act, *reshape.args[1:]), dict(reshape.kwargs))
    moved.meta.update(act.meta)
    act.replace_all_uses_with(moved, delete_user_cb=lambda user: user is not moved)
    act.args = (gemm, *act.args[1:])
    act.meta.update({k: v for k, v in gemm.meta.items() if k in ("example_value", "val", "tensor_meta")})
    graph.erase_node(reshape)


def _drop_round_trip(graph, node, is_gemm):
    """node (a reshape) read only by GEMMs, at the end of reshapes from a
    tensor of its own shape: the GEMMs read that tensor."""
    if not node.users or not all(is_gemm(user) for user in node.users):
        return
    source = node.args[0]
    while isinstance(source, torch.fx.Node) and _is_reshape(source):
        source = source.args[0]
    if not _same_shape(source, node):
        return
    chain = node.args[0]
    node.replace_all_uses_with(source)
    graph.erase_node(node)
    while isinstance(chain, torch.fx.Node) and chain is not source and not chain.users:
        up = chain.args[0]
        graph.erase_node(chain)
        chain = up

"""The functional API: gemm_act and linear_act, their gated forms gemm_glu
and gated_linear_act, and a block's output projection with its dropout and
residual, linear_dropout_add."""

import torch

from . import ops
from .ops import _is_dtensor
from ._policy import compiles_as_eager as _compiles_as_eager, compiles_to_glu as _compiles_to_glu, \
    needs_grad as _needs_grad
from .activations import GELU, _GRAD_FROM_OUTPUT, IDENTITY, _USES_SLOPE, _gate_activation, _twin

__all__ = ["gemm_act", "linear_act", "gemm_glu", "gated_linear_act", "linear_dropout_add", "explain"]


def gemm_act(a, b, bias=None, c=None, *, activation=IDENTITY, alpha=1.0, beta=0.0,
             negative_slope=0.01, return_preact=False):
    """Y = act(alpha * a @ b + beta * c + bias) in one fused GEMM.

    a: [..., K]; b: [K, N] with any strides (``weight.t()`` goes in without a
    copy); c: like the output [..., N]; bias: a scalar, per column ((N,) or
    (1, N)) or per row ((M, 1) or a.shape[:-1] + (1,)). All share one dtype
    and device. With ``return_preact=True`` returns (Y, Z) where Z is the
    pre-activation. As in ``torch.addmm``, c is not read when beta == 0.
    """
    # The operator checks every argument (csrc/checks.cpp); nothing is re-checked here.
    if torch.compiler.is_compiling() and _compiles_as_eager(a, activation, _needs_grad(a, b, bias, c)):
        return _eager_formula(a, b, bias, c, activation, alpha, beta, negative_slope, return_preact)
    y, z = ops.gemm_act(a, b, bias, c, activation, float(alpha), float(beta), float(negative_slope),
                        _stores_preact(a, b, bias, c, activation, return_preact))
    return (y, z) if return_preact else y


def _gemm_act_of_weight(x, weight, bias, activation, negative_slope):
    """``gemm_act(x, weight.t(), bias, ...)`` for a module's weight [N, K]
    (ops.gemm_act's b_is_weight: the transpose taken in C++, in training
    one backward node taking the weight itself)."""
    if torch.compiler.is_compiling():  # gemm_act's compiled road (rule compiles_as_eager)
        return gemm_act(x, weight.t(), bias, activation=activation, negative_slope=negative_slope)
    store_preact = _stores_preact(x, weight, bias, None, activation, False)
    return ops.gemm_act(x, weight, bias, None, activation, 1.0, 0.0, float(negative_slope), store_preact, True)[0]


def _eager_formula(a, b, bias, c, activation, alpha, beta, negative_slope, return_preact):
    z = torch.matmul(a, b)
    if alpha != 1.0:
        z = alpha * z
    if c is not None and beta != 0.0:
        z = z + beta * c
    if bias is not None:
        z = z + bias
    y = _twin(activation, negative_slope)(z)
    return (y, z) if return_preact else y


def _stores_preact(a, b, bias, c, activation, return_preact):
    # Z is written only when asked for or when the backward needs it.
    if return_preact:
        return True
    return activation not in _GRAD_FROM_OUTPUT and _needs_grad(a, b, bias, c)


def explain(a, b, bias=None, c=None, *, activation=IDENTITY, alpha=1.0, beta=0.0,
            negative_slope=0.01, return_preact=False):
    """What ``gemm_act`` with the same arguments would run here, as a short
    description (backend, kernel configuration), computing nothing; after
    " | ", the rule of each backend before it that declined the case, by the
    name docs/MEASUREMENTS.md measures it under (e.g. ``sm90 declined:
    few_rows (more than 128 and at most 768 rows)``).

    ``explain(layer, x)``, with a LinearAct or Conv1DAct: what ``layer(x)``
    would run in eager mode, and the rule of torch_gemm_act._policy that
    chose it (ATen's ops where the layer is host-bound or on the CPU).

    It follows gemm_act exactly: autocast's casts, whether Z is stored (grad
    mode and ``requires_grad``), PyTorch's matmul precision setting and
    torch_gemm_act.testing's overrides.
    """
    if isinstance(a, torch.nn.Module):
        if not hasattr(a, "_explain") or not isinstance(b, torch.Tensor):
            raise TypeError(f"explain: expected gemm_act's arguments, or a LinearAct or Conv1DAct and its input; "
                            f"got {type(a).__name__} and {type(b).__name__}")
        return a._explain(b)
    store_preact = _stores_preact(a, b, bias, c, activation, return_preact)
    device = a.device.type if isinstance(a, torch.Tensor) else "cpu"
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)

        def cast(t):
            # As autocast casts gemm_act's operands (csrc/autocast.cpp).
            return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and \
                t.dtype != torch.float64 else t
        a, b, bias, c = (cast(t) for t in (a, b, bias, c))
    return ops.explain(a, b, bias, c, activation, float(alpha), float(beta), float(negative_slope),
                       store_preact)


def linear_act(x, weight, bias=None, activation=GELU, negative_slope=0.01):
    """act(F.linear(x, weight, bias)) in one kernel; weight is [N, K] as in nn.Linear."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"linear_act: weight must be a 2-D tensor [out_features, in_features], got {shape}")
    return _gemm_act_of_weight(x, weight, bias, activation, negative_slope)


SWIGLU = "swiglu"


def gemm_glu(a, b_gate, b_up, bias_gate=None, bias_up=None, *, activation=SWIGLU, negative_slope=0.01,
             return_preact=False):
    """Y = act(a @ b_gate + bias_gate) * (a @ b_up + bias_up): a gated MLP's
    two projections and its gate as one operator.

    a: [..., K]; b_gate, b_up: [K, N] with any strides (``weight.t()`` goes in
    without a copy); biases (N,) or None. ``activation``: a gated form, one of
    ``torch_gemm_act.GATED`` (swiglu, geglu, geglu_tanh, reglu, glu). With
    ``return_preact=True`` returns (Y, H), H = [gate, up] pre-activations
    side by side ([..., 2N]).
    """
    gate = _gate_activation(activation)
    compiled_unfused = torch.compiler.is_compiling() and not _compiles_to_glu(
        a, _needs_grad(a, b_gate, b_up, bias_gate, bias_up))
    if compiled_unfused or _is_dtensor(a) or _is_dtensor(b_gate):
        # Compiled where the fused kernel does not pay (_compiles_to_glu), and
        # on DTensors (no sharding strategy yet), the projections and the
        # product run as they run unfused.
        g, u = (torch.matmul(a, b) if bias is None else torch.matmul(a, b) + bias
                for b, bias in ((b_gate, bias_gate), (b_up, bias_up)))
        y = _twin(gate, negative_slope)(g) * u
        return (y, torch.cat([g, u], -1)) if return_preact else y
    # A slope no gate reads stays a constant: under torch.compile(dynamic=True)
    # Dynamo would make the default a symbolic float, guarded and recompiled.
    slope = float(negative_slope) if gate in _USES_SLOPE else 0.01
    y, h = ops.gemm_glu(a, b_gate, b_up, bias_gate, bias_up, gate, slope, bool(return_preact))
    return (y, h) if return_preact else y


def gated_linear_act(x, gate_weight, up_weight, gate_bias=None, up_bias=None, activation=SWIGLU):
    """``act(F.linear(x, gate_weight, gate_bias)) * F.linear(x, up_weight, up_bias)``
    in one operator (a Llama-style MLP's gate_proj, act_fn and up_proj);
    weights [N, K] as in nn.Linear."""
    for name, w in (("gate_weight", gate_weight), ("up_weight", up_weight)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"gated_linear_act: {name} must be a 2-D tensor [out_features, in_features], "
                             f"got {shape}")
    return gemm_glu(x, gate_weight.t(), up_weight.t(), gate_bias, up_bias, activation=activation)


def linear_dropout_add(input, weight, bias, residual, p=0.5, training=True):
    """``residual + F.dropout(F.linear(input, weight, bias), p, training)``:
    the GEMM, then one pass that applies the mask and adds the residual (no
    mask kept for the backward, which draws it again); weight is [N, K] as
    in nn.Linear, residual the output's shape. On Hopper a kernel that
    applies the mask in the GEMM's epilogue exists, chosen only where the
    testing switch names it (rule dropout_forced).

    The mask is this project's (csrc/dropout.h: counter-based, drawn again by
    the backward rather than stored), not PyTorch's: each call draws a seed
    from PyTorch's generator on the input's device, so ``torch.manual_seed``
    makes a run repeatable and CUDA graphs replay fresh masks. A kept element
    is scaled by 2^32 / round((1 - p) * 2^32), 1 / (1 - p) to within 2^-32
    relative. Without ``training``, or with p = 0, no element is dropped.
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"linear_dropout_add: weight must be a 2-D tensor [out_features, in_features], got {shape}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"linear_dropout_add: p is the probability of dropping an element, in [0, 1]; got {p}")
    p = float(p) if training else 0.0
    return ops.gemm_dropout_add(input, weight.t(), bias, residual, p, _dropout_seed(input.device, p))


def _dropout_seed(device, p):
    """A fresh seed from PyTorch's generator on ``device`` (where p > 0; a
    zero otherwise, which no mask reads)."""
    if p == 0.0:
        return torch.zeros((), dtype=torch.int64, device=device)
    return torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device=device)

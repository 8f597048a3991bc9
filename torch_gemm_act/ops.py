"""The one door from Python into the operators: one entry per operator
(gemm_act, gemm_act_chained, gemm_glu, gemm_dropout_add, explain, and
linear_cross_entropy's chunk passes), their torch.ops handles and
fake (meta) kernels. Their autograd is registered in C++ (csrc/autograd.cpp,
csrc/gated_autograd.cpp, csrc/dropout_autograd.cpp)."""

import torch

from . import _C  # loading it registers the operators
from ._policy import PLAIN

__all__ = []  # the package's own door


def _direct(a, b, activation):
    """Whether an operator can be entered through _C, which calls it without
    torch.ops' argument matching (host time): on plain tensors, outside
    torch.compile (which cannot trace into _C) and torch-function modes
    (which only torch.ops honours)."""
    return (type(a) in PLAIN and type(b) in PLAIN and type(activation) is str
            and not torch.compiler.is_compiling() and not torch._C._is_torch_function_mode_enabled())


def _is_dtensor(t):
    # By name: torch.distributed may be absent from a build.
    return type(t).__name__ == "DTensor"


def _register_dtensor(a, b):
    if _is_dtensor(a) or _is_dtensor(b):
        from . import dtensor  # noqa: F401  (its sharding strategies, registered on first use)


def gemm_act(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact, b_is_weight=False):
    """(Y, Z) of the gemm_act operator. With ``b_is_weight``, b is a module's
    weight [N, K] and the operand its transpose, taken in C++ on the direct
    path, where in training the backward node takes the weight itself as
    its edge (csrc/autograd.h)."""
    if _direct(a, b, activation):
        return _C.gemm_act(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact, b_is_weight)
    _register_dtensor(a, b)
    return _GEMM_ACT(a, b.t() if b_is_weight else b, bias, c, activation, alpha, beta, negative_slope,
                       store_preact)


def gemm_act_chained(a, a_preact, a_bias, a_activation, a_negative_slope, b, bias, c, activation, alpha, beta,
                     negative_slope, store_preact, z_feeds_chain, b_is_weight=False):
    """(Y, Z) of the gemm_act_chained operator (schema.cpp); b_is_weight as
    for gemm_act."""
    args = (a, a_preact, a_bias, a_activation, a_negative_slope, b, bias, c, activation, alpha, beta,
            negative_slope, store_preact, z_feeds_chain)
    if _direct(a, b, activation):
        return _C.gemm_act_chained(*args, b_is_weight)
    _register_dtensor(a, b)
    if b_is_weight:
        args = args[:5] + (b.t(),) + args[6:]
    return _GEMM_ACT_CHAINED(*args)


_GEMM_ACT = torch.ops.gemm_act.gemm_act.default
_GEMM_ACT_CHAINED = torch.ops.gemm_act.gemm_act_chained.default
explain = torch.ops.gemm_act.explain.default
gemm_glu = torch.ops.gemm_act.gemm_glu.default
ce_chunk_forward = torch.ops.gemm_act.ce_chunk_forward.default
ce_chunk_backward = torch.ops.gemm_act.ce_chunk_backward.default
linear_ce_chunks_forward = torch.ops.gemm_act.linear_ce_chunks_forward.default
linear_ce_chunks_backward = torch.ops.gemm_act.linear_ce_chunks_backward.default
linear_ce_rows = torch.ops.gemm_act.linear_ce_rows.default
gemm_dropout_add = torch.ops.gemm_act.gemm_dropout_add.default
dropout_add = torch.ops.gemm_act.dropout_add.default
dropout_scale = torch.ops.gemm_act.dropout_scale.default


@torch.library.register_fake("gemm_act::gemm_act")
def _gemm_act_fake(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact):
    torch._check(a.dim() >= 1, lambda: "gemm_act: a must have at least 1 dimension")
    torch._check(b.dim() == 2, lambda: f"gemm_act: b must be 2-D [K, N], got {tuple(b.shape)}")
    torch._check(
        a.shape[-1] == b.shape[0],
        lambda: f"gemm_act: a {tuple(a.shape)} and b {tuple(b.shape)} cannot be multiplied",
    )
    out_shape = (*a.shape[:-1], b.shape[1])
    y = a.new_empty(out_shape)
    z = a.new_empty(out_shape) if store_preact else a.new_empty(0)
    return y, z


@torch.library.register_fake("gemm_act::activation_backward")
def _activation_backward_fake(grad_y, saved, bias, activation, negative_slope):
    torch._check(saved.shape == grad_y.shape, lambda: "gemm_act: saved must have grad_y's shape")
    grad_bias = grad_y.new_empty(bias.shape) if bias is not None else grad_y.new_empty(0)
    return torch.empty_like(grad_y, memory_format=torch.contiguous_format), grad_bias


@torch.library.register_fake("gemm_act::activation_backward_")
def _activation_backward_in_place_fake(grad_y, saved, bias, activation, negative_slope):
    torch._check(saved.shape == grad_y.shape, lambda: "gemm_act: saved must have grad_y's shape")
    return grad_y.new_empty(bias.shape) if bias is not None else grad_y.new_empty(0)


@torch.library.register_fake("gemm_act::zero_pad")
def _zero_pad_fake(src, rows, cols):
    torch._check(src.dim() == 2 and src.shape[0] <= rows and src.shape[1] <= cols,
                 lambda: f"zero_pad: expected a 2-D src of at most {rows} x {cols} elements, got {tuple(src.shape)}")
    return src.new_empty((rows, cols))


@torch.library.register_fake("gemm_act::gemm_dact")
def _gemm_dact_fake(grad, b, saved, bias, activation, alpha, negative_slope):
    torch._check(b.dim() == 2, lambda: f"gemm_dact: b must be 2-D [K, N], got {tuple(b.shape)}")
    out_shape = (*grad.shape[:-1], b.shape[1])
    torch._check(tuple(saved.shape) == out_shape, lambda: "gemm_dact: saved must have the shape of grad @ b")
    return grad.new_empty(out_shape), (grad.new_empty(bias.shape) if bias is not None else grad.new_empty(0))


@torch.library.register_fake("gemm_act::gemm_act_chained")
def _gemm_act_chained_fake(a, a_preact, a_bias, a_activation, a_negative_slope, b, bias, c, activation,
                           alpha, beta, negative_slope, store_preact, z_feeds_chain):
    torch._check(a_preact is None or a_preact.shape == a.shape,
                 lambda: "gemm_act_chained: a_preact must have a's shape")
    return _gemm_act_fake(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact)


@torch.library.register_fake("gemm_act::bias_grad")
def _bias_grad_fake(grad, bias):
    return grad.new_empty(bias.shape)


def _glu_out_shape(h, name):
    torch._check(h.dim() >= 1 and h.shape[-1] % 2 == 0,
                 lambda: f"{name}: h must hold the gate and up projections side by side in its last "
                         f"dimension (an even size), got shape {tuple(h.shape)}")
    return (*h.shape[:-1], h.shape[-1] // 2)


@torch.library.register_fake("gemm_act::glu")
def _glu_fake(h, activation, negative_slope):
    return h.new_empty(_glu_out_shape(h, "glu"))


@torch.library.register_fake("gemm_act::glu_backward")
def _glu_backward_fake(grad_y, h, activation, negative_slope):
    torch._check(tuple(grad_y.shape) == _glu_out_shape(h, "glu_backward"),
                 lambda: "glu_backward: grad_y must have h's shape with its last dimension halved")
    return h.new_empty(h.shape)


@torch.library.register_fake("gemm_act::gemm_glu")
def _gemm_glu_fake(a, b_gate, b_up, bias_gate, bias_up, activation, negative_slope, store_preact):
    torch._check(b_gate.dim() == 2 and tuple(b_gate.shape) == tuple(b_up.shape),
                 lambda: f"gemm_glu: b_gate and b_up must both be 2-D [K, N] of one shape, got "
                         f"{tuple(b_gate.shape)} and {tuple(b_up.shape)}")
    torch._check(a.dim() >= 1 and a.shape[-1] == b_gate.shape[0],
                 lambda: f"gemm_glu: a {tuple(a.shape)} and b_gate {tuple(b_gate.shape)} cannot be multiplied")
    n = b_gate.shape[1]
    y = a.new_empty((*a.shape[:-1], n))
    h = a.new_empty((*a.shape[:-1], 2 * n)) if store_preact else a.new_empty(0)
    return y, h


@torch.library.register_fake("gemm_act::ce_chunk_forward")
def _ce_chunk_forward_fake(z, target, v0, softcap, lse, target_logit, logit_sum):
    return None


@torch.library.register_fake("gemm_act::ce_chunk_backward")
def _ce_chunk_backward_fake(z, target, lse, scale, v0, vocab, label_smoothing, softcap):
    return None


@torch.library.register_fake("gemm_act::linear_ce_chunks_forward")
def _linear_ce_chunks_forward_fake(hidden, weight, bias, target, chunk, softcap, lse, target_logit, logit_sum):
    return None


@torch.library.register_fake("gemm_act::linear_ce_chunks_backward")
def _linear_ce_chunks_backward_fake(hidden, weight, bias, target, lse, scale, chunk, label_smoothing, softcap,
                                    grad_hidden, grad_weight, grad_bias):
    return None


@torch.library.register_fake("gemm_act::linear_ce_rows")
def _linear_ce_rows_fake(hidden, weight, bias, target, scale, rows, label_smoothing, softcap, lse, target_logit,
                         logit_sum, grad_hidden, grad_weight, grad_bias):
    return None


@torch.library.register_fake("gemm_act::dropout_add")
def _dropout_add_fake(z, residual, p, seed):
    torch._check(residual.shape == z.shape, lambda: f"dropout_add: residual must have z's shape "
                                                    f"{tuple(z.shape)}, got {tuple(residual.shape)}")
    return z.new_empty(z.shape)


@torch.library.register_fake("gemm_act::dropout_scale")
def _dropout_scale_fake(grad, p, seed):
    return grad.new_empty(grad.shape)


@torch.library.register_fake("gemm_act::gemm_dropout_add")
def _gemm_dropout_add_fake(a, b, bias, residual, p, seed):
    torch._check(a.dim() >= 1 and b.dim() == 2 and a.shape[-1] == b.shape[0],
                 lambda: f"gemm_dropout_add: expected a [..., K] and b [K, N], got a {tuple(a.shape)} and b "
                         f"{tuple(b.shape)}")
    out_shape = (*a.shape[:-1], b.shape[1])
    torch._check(tuple(residual.shape) == out_shape,
                 lambda: f"gemm_dropout_add: residual must have the output's shape {out_shape}, got "
                         f"{tuple(residual.shape)}")
    # Under autocast a residual of another dtype promotes the result (csrc/dropout_add.cpp).
    return residual.new_empty(out_shape, dtype=torch.promote_types(a.dtype, residual.dtype))

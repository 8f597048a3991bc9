"""Fake (meta) kernels and autograd for the C++ operators under torch.ops.gemm_act."""

import torch

from . import _C  # noqa: F401  (loading it registers the operators)
from .activations import GRAD_FROM_OUTPUT

gemm_act_op = torch.ops.gemm_act.gemm_act.default
activation_backward_op = torch.ops.gemm_act.activation_backward.default


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


def _setup_context(ctx, inputs, output):
    a, b, bias, c, activation, alpha, beta, negative_slope, store_preact = inputs
    y, z = output
    ctx.activation = activation
    ctx.alpha = alpha
    ctx.beta = beta
    ctx.negative_slope = negative_slope
    ctx.store_preact = store_preact
    ctx.a_shape = a.shape
    saved = y if activation in GRAD_FROM_OUTPUT else (z if store_preact else None)
    # c is kept only for the rare recomputation of Z below (a reference, no copy).
    ctx.save_for_backward(a, b, saved, bias, c if saved is None else None)
    # An output that received no gradient (Z, unless the user asked for it and
    # used it) comes to the backward as None instead of a tensor of zeros,
    # which would cost a fill, a dZ pass and an add as large as Y.
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_y, grad_z):
    a, b, saved, bias, c = ctx.saved_tensors
    need_a, need_b, need_bias, need_c = ctx.needs_input_grad[:4]
    bias_for_grad = bias if need_bias else None
    grad_pre = grad_bias = None
    if grad_y is not None:
        if saved is None:
            # The op was called directly with store_preact=False for an activation
            # whose derivative needs Z (gemm_act() never does this): recompute Z.
            saved, _ = gemm_act_op(a, b, bias, c, "none", ctx.alpha, ctx.beta, 0.0, False)
        grad_pre, grad_bias = activation_backward_op(
            grad_y, saved, bias_for_grad, ctx.activation, ctx.negative_slope
        )
    if grad_z is not None and ctx.store_preact:  # else Z is an empty placeholder
        # Z was returned to the user and used: its gradient adds to dZ (and dbias).
        grad_pre_z, grad_bias_z = activation_backward_op(grad_z, grad_z, bias_for_grad, "none", 0.0)
        if grad_pre is None:
            grad_pre, grad_bias = grad_pre_z, grad_bias_z
        else:
            grad_pre = grad_pre + grad_pre_z
            grad_bias = grad_bias + grad_bias_z if need_bias else grad_bias
    if grad_pre is None:  # neither output received a gradient
        return (None,) * 9

    n = b.shape[1]
    grad_pre_2d = grad_pre.reshape(-1, n)
    grad_a = grad_b = grad_c = None
    if need_a:
        grad_a = torch.mm(grad_pre_2d, b.t()).reshape(ctx.a_shape)
        if ctx.alpha != 1.0:
            grad_a = grad_a * ctx.alpha
    if need_b:
        grad_b = torch.mm(a.reshape(grad_pre_2d.shape[0], b.shape[0]).t(), grad_pre_2d)
        if ctx.alpha != 1.0:
            grad_b = grad_b * ctx.alpha
    if need_c:
        grad_c = grad_pre * ctx.beta
    return grad_a, grad_b, (grad_bias if need_bias else None), grad_c, None, None, None, None, None


torch.library.register_autograd("gemm_act::gemm_act", _backward, setup_context=_setup_context)

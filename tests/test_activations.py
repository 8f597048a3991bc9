"""The activation code (csrc/activations.h) against PyTorch's own modules,
forward and derivative, including NaN, +-inf and signed zeros."""

import pytest
import torch

from reference import ACTIVATIONS, apply_activation, assert_close, torch_twin

SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0]


def _inputs(dtype, device):
    z = torch.cat([torch.tensor(SPECIAL, dtype=torch.float64), torch.randn(245, dtype=torch.float64) * 4])
    return z.reshape(16, 16).to(dtype).to(device)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_forward_matches_torch_module(activation, dtype, device):
    z = _inputs(dtype, device)
    ours = apply_activation(z, activation, 0.2)
    theirs = torch_twin(activation, 0.2)(z.double())
    assert ours.dtype == dtype
    assert_close(ours, theirs, dtype)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_derivative_matches_torch_autograd(activation, dtype, device):
    from torch_gemm_act.activations import GRAD_FROM_OUTPUT

    z = _inputs(dtype, device)
    z64 = z.double().requires_grad_()
    y64 = torch_twin(activation, 0.2)(z64)
    grad_y = torch.randn_like(z64)
    (expected,) = torch.autograd.grad(y64, z64, grad_y)
    # The backward op takes Y or Z, as the forward saves it.
    saved = apply_activation(z, activation, 0.2) if activation in GRAD_FROM_OUTPUT else z
    grad_z, grad_bias = torch.ops.gemm_act.activation_backward(
        grad_y.to(dtype), saved, None, activation, 0.2)
    assert grad_bias.numel() == 0
    # Low-precision Y (e.g. tanh near +-1) loses digits in 1 - y^2: compare
    # against the derivative evaluated at the stored y, as PyTorch does.
    if dtype in (torch.float16, torch.bfloat16) and activation in ("tanh", "sigmoid"):
        y_stored = torch_twin(activation)(z.double()).to(dtype).double()
        deriv = 1 - y_stored**2 if activation == "tanh" else y_stored * (1 - y_stored)
        expected = grad_y.to(dtype).double() * deriv
    assert_close(grad_z, expected, dtype)

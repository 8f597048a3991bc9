"""One test per root cause the differential fuzz (tests/fuzz.py) found,
named after what was wrong; docs/DESIGN.md's "Numerics" says where each
one was."""

import pytest
import torch

import torch_gemm_act as tga
from conftest import requires_cuda


def _rel_err(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("activation", ["none", "gelu", "relu"])
def test_row_bias_of_an_nd_input_has_a_gradient(device, activation):
    # A bias per row given as (M, 1) for an input [d0, d1, K] (M = d0 * d1)
    # is not PyTorch's broadcast: its gradient was summed with at::sum_to,
    # which raised on the CPU and for traced tensors.
    a = torch.randn(9, 1, 16, device=device, requires_grad=True)
    b = torch.randn(16, 8, device=device)
    bias = torch.randn(9, 1, device=device, requires_grad=True)
    y = tga.gemm_act(a, b, bias, activation=activation)
    g = torch.randn_like(y)
    (grad_bias,) = torch.autograd.grad(y, bias, g)
    z = (a.detach().double().reshape(9, 16) @ b.double() + bias.detach().double())
    z.requires_grad_()
    act = tga.activations.twin(activation)
    (dz,) = torch.autograd.grad(act(z), z, g.double().reshape(9, 8))
    assert grad_bias.shape == bias.shape
    assert _rel_err(grad_bias, dz.sum(1, keepdim=True)) < 1e-5


def test_fp32_bias_gradient_of_a_cancelling_sum(device):
    # fp32 bias gradients are summed in double: a float running sum over
    # many rows of cancelling terms lost digits PyTorch's pairwise sum keeps.
    torch.manual_seed(0)
    rows, cols = 65536, 3
    grad = torch.randn(rows, cols, dtype=torch.float64) + 1000.0
    grad[rows // 2:] -= 2000.0  # the sum cancels to about sqrt(rows)
    grad = grad.float().to(device)
    for bias in (torch.zeros(cols, device=device), torch.zeros((), device=device)):
        got = torch.ops.gemm_act.bias_grad(grad, bias)
        ref = grad.double().sum(0) if bias.dim() else grad.double().sum()
        ours = _rel_err(got, ref)
        theirs = _rel_err(grad.sum(0) if bias.dim() else grad.sum(), ref)
        assert ours <= max(3 * theirs, 1e-6), (ours, theirs)

"""weight_bias_grad: a layer's weight and bias gradients from dZ in one GEMM
(cuBLASLt's BGRADA / BGRADB epilogue on CUDA where it takes the case), and
the identity layer's backward that uses it."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_gemm_act as tga
from reference import TOL, make_bias

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("shape", [(512, 128, 192), (37, 19, 45), (1, 8, 16)])
@pytest.mark.parametrize("bias_kind", ["column", "none", "scalar", "row"])
def test_weight_bias_grad_matches_reference(dtype, transposed, shape, bias_kind, device):
    m, k, n = shape
    grad = torch.randn(m, n, dtype=dtype, device=device)
    a = torch.randn(m, k, dtype=dtype, device=device)
    bias = make_bias(bias_kind, (m, n), dtype, device)
    with tga.testing.override(poison_outputs=True):
        grad_b, grad_bias = torch.ops.gemm_act.weight_bias_grad(grad, a, bias, transposed)
    expected = a.double().cpu().t() @ grad.double().cpu()  # [K, N]
    expected = expected.t() if transposed else expected
    rtol, atol = TOL[dtype]
    scale = m ** 0.5  # sums of randn products grow as sqrt(M)
    assert grad_b.dtype == dtype and grad_b.shape == expected.shape
    torch.testing.assert_close(grad_b.double().cpu(), expected, rtol=rtol, atol=atol * scale * 8)
    if bias is None:
        assert grad_bias.numel() == 0
    else:
        assert grad_bias.dtype == dtype and grad_bias.shape == bias.shape
        torch.testing.assert_close(grad_bias.double().cpu(), grad.double().cpu().sum_to_size(bias.shape),
                                   rtol=rtol, atol=atol * scale * 8)


@pytest.mark.parametrize("transposed", [True, False])
def test_weight_bias_grad_opcheck(transposed, device):
    grad = torch.randn(64, 24, device=device)
    a = torch.randn(64, 16, device=device)
    torch.library.opcheck(torch.ops.gemm_act.weight_bias_grad.default, (grad, a, torch.zeros(24, device=device),
                                                                        transposed))


def test_weight_bias_grad_rejects_what_it_cannot_take(device):
    grad, a = torch.randn(8, 4, device=device), torch.randn(8, 3, device=device)
    with pytest.raises(ValueError, match=r"expected grad \[M, N\] and a \[M, K\] \(2-D, one M\), got grad "
                                         r"\[8, 4\] and a \[7, 3\]"):
        torch.ops.gemm_act.weight_bias_grad(grad, a[:7], None, True)
    with pytest.raises(TypeError, match="expected a to have the dtype of grad"):
        torch.ops.gemm_act.weight_bias_grad(grad, a.double(), None, True)
    with pytest.raises(ValueError, match="bias"):
        torch.ops.gemm_act.weight_bias_grad(grad, a, torch.zeros(5, device=device), True)


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("layout", ["weight", "conv1d"])
def test_identity_layer_gets_its_bias_grad_from_the_weight_gemm(layout, device):
    """A layer without activation: its backward computes dW and the bias's
    gradient in one weight_bias_grad, no bias_grad pass over gY; the
    gradients are eager's."""
    dtype = torch.float32
    x = torch.randn(33, 16, dtype=dtype, device=device, requires_grad=True)
    w = torch.randn(24, 16, dtype=dtype, device=device, requires_grad=True)
    bias = torch.randn(24, dtype=dtype, device=device, requires_grad=True)
    b = w.t() if layout == "weight" else w.detach().t().contiguous().requires_grad_()
    gy = torch.randn(33, 24, dtype=dtype, device=device)
    y = tga.gemm_act(x, b, bias)
    log = _OpLog()
    with log:
        got = torch.autograd.grad(y, (x, b, bias), gy)
    assert "gemm_act.weight_bias_grad" in log.names and "gemm_act.bias_grad" not in log.names, log.names
    expected = torch.autograd.grad(torch.addmm(bias, x, b), (x, b, bias), gy)
    assert got[1].stride() == b.stride()  # dB in b's layout: AccumulateGrad keeps it as it is
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)

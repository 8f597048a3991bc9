"""weight_bias_grad: a layer's weight and bias gradients from one read of dZ
(cuBLASLt's BGRAD epilogues on CUDA for fp16/bf16; the GEMM and bias_grad
elsewhere), and the layer backward that uses it."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import TOL

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
op = torch.ops.gemm_act.weight_bias_grad


def _operands(m, n, k, dtype, device, row_pad=0):
    # row_pad > 0: rows of a longer than K (a column slice), as a view of a wider tensor.
    grad = torch.randn(m, n, dtype=torch.float64).to(dtype).to(device)
    a = torch.randn(m, k + row_pad, dtype=torch.float64).to(dtype).to(device)[:, :k]
    bias = torch.randn(n, dtype=dtype, device=device)
    return grad, a, bias


def _check(grad, a, bias, transposed, weight, grad_bias):
    g64, a64 = grad.double().cpu(), a.double().cpu()
    expected_w = g64.t() @ a64 if transposed else a64.t() @ g64
    assert weight.shape == expected_w.shape and weight.dtype == grad.dtype
    assert grad_bias.shape == bias.shape and grad_bias.dtype == bias.dtype
    rtol, atol = TOL[grad.dtype]
    scale = grad.shape[0] ** 0.5  # sums of M products of randn grow as sqrt(M)
    torch.testing.assert_close(weight.double().cpu(), expected_w, rtol=rtol, atol=atol * scale * 4)
    torch.testing.assert_close(grad_bias.double().cpu(), g64.sum(0), rtol=rtol, atol=atol * scale * 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("shape", [(512, 384, 256), (37, 19, 45), (1, 8, 16), (4096, 64, 128)])
def test_weight_bias_grad_matches_reference(dtype, transposed, shape, device):
    grad, a, bias = _operands(*shape, dtype, device)
    _check(grad, a, bias, transposed, *op(grad, a, bias, transposed))


@pytest.mark.parametrize("transposed", [True, False])
def test_weight_bias_grad_strided_input(transposed, device):
    grad, a, bias = _operands(300, 200, 64, torch.bfloat16, device, row_pad=8)
    assert not a.is_contiguous()
    _check(grad, a, bias, transposed, *op(grad, a, bias, transposed))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_weight_bias_grad_is_deterministic(dtype, device):
    grad, a, bias = _operands(8192, 768, 256, dtype, device)
    first = op(grad, a, bias, True)
    for _ in range(3):
        again = op(grad, a, bias, True)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_weight_bias_grad_checks_inputs(device):
    grad, a, bias = _operands(16, 8, 4, torch.float32, device)
    with pytest.raises(ValueError, match=r"grad \[M, N\] and a \[M, K\], got grad \[16, 8\] and a \[15, 4\]"):
        op(grad, a[:15], bias, True)
    with pytest.raises(ValueError, match=r"bias of shape \[8\] \(grad's columns\), got \[7\]"):
        op(grad, a, bias[:7], True)
    with pytest.raises(TypeError, match="expected a to have the dtype of grad"):
        op(grad, a.double(), bias, True)


def test_opcheck_weight_bias_grad(device):
    for dtype in (torch.float32, torch.bfloat16):
        grad, a, bias = _operands(64, 48, 32, dtype, device)
        torch.library.opcheck(op.default, (grad, a, bias, True))
        torch.library.opcheck(op.default, (grad, a, bias, False))


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("through", ["identity", "preact"])
def test_layer_backward_sums_the_bias_with_the_weight(through, device):
    # The identity's dZ is gY, and a gradient arriving on Z (as the chained
    # layer's input gradient does) is dZ itself: the bias sum comes from the
    # weight gradient's op instead of a second read of dZ.
    x = torch.randn(64, 32, dtype=torch.float64, device=device, requires_grad=True)
    w = (torch.randn(48, 32, dtype=torch.float64, device=device) / 32 ** 0.5).requires_grad_()
    bias = torch.randn(48, dtype=torch.float64, device=device, requires_grad=True)
    activation = "none" if through == "identity" else "gelu"
    y, z = tga.gemm_act(x, w.t(), bias, activation=activation, return_preact=True)
    out = y if through == "identity" else z
    grad_out = torch.randn_like(out)
    log = _OpLog()
    with log:
        grads = torch.autograd.grad(out, (x, w, bias), grad_out)
    assert "gemm_act.weight_bias_grad" in log.ops and "gemm_act.bias_grad" not in log.ops, log.ops
    expected = (grad_out @ w, grad_out.t() @ x, grad_out.sum(0))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("transposed", [True, False])
def test_weight_bias_grad_fuses_the_bias_sum_cuda(dtype, transposed):
    # cuBLASLt's BGRAD epilogue: no separate bias reduction (ours is named
    # gemm_act::gpu::backward::...) runs.
    grad, a, bias = _operands(2048, 768, 256, dtype, "cuda")
    op(grad, a, bias, transposed)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        op(grad, a, bias, transposed)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert kernels and not any("backward" in name for name in kernels), kernels

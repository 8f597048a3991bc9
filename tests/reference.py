"""Float64 references: torch's matmul, and the activation from csrc/activations.h."""

import torch
import torch.nn.functional as F

import torch_gemm_act  # noqa: F401  (registers torch.ops.gemm_act)

ACTIVATIONS = torch_gemm_act.ACTIVATIONS


def torch_twin(activation, negative_slope=0.01):
    """The PyTorch module each activation reproduces (nn.Identity for none)."""
    return torch_gemm_act.activations._torch_module(activation, negative_slope)


# Tolerances per dtype (rtol, atol) for outputs of order one.
TOL = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

BIAS_KINDS = ("none", "scalar", "column", "row")


def make_bias(kind, out_shape, dtype, device, requires_grad=False):
    """A bias of the given kind for an output of shape [..., N]."""
    n, lead = out_shape[-1], tuple(out_shape[:-1])
    shape = {"none": None, "scalar": (), "column": (n,), "row": (*lead, 1)}[kind]
    if shape is None:
        return None
    return torch.randn(shape, dtype=dtype, device=device).requires_grad_(requires_grad)


def apply_activation(z, activation, negative_slope=0.01):
    """act(z) with the project's own activation code (a K = 0 GEMM: act(1 * C))."""
    lead, n = z.shape[:-1], z.shape[-1]
    y, _ = torch.ops.gemm_act.gemm_act(z.new_empty(*lead, 0), z.new_empty(0, n), None, z,
                                       activation, 1.0, 1.0, negative_slope, False)
    return y


def preactivation64(a, b, bias=None, c=None, alpha=1.0, beta=0.0):
    """alpha * a @ b + beta * c + bias in float64 on the CPU, output [..., N]."""
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    z = alpha * (a64 @ b64)
    if c is not None and beta != 0.0:
        z = z + beta * c.detach().double().cpu()
    if bias is not None:
        bias64 = bias.detach().double().cpu()
        n = z.shape[-1]
        if bias64.numel() == 1:
            z = z + bias64.reshape(())
        elif bias64.shape[-1] == n and bias64.numel() == n:
            z = z + bias64.reshape(n)
        else:
            z = (z.reshape(-1, n) + bias64.reshape(-1, 1)).reshape(z.shape)
    return z


def reference64(a, b, bias=None, c=None, activation="none", alpha=1.0, beta=0.0, negative_slope=0.01):
    """(Y, Z) in float64 on the CPU."""
    z = preactivation64(a, b, bias, c, alpha, beta)
    return apply_activation(z, activation, negative_slope), z


def assert_close(actual, expected, dtype, normwise=False):
    """Elementwise within the dtype's tolerance; with normwise, atol a
    fraction of the largest expected element (for a gradient summed over
    many rows, which cancels in places)."""
    rtol, atol = TOL[dtype]
    if normwise:
        atol *= max(1.0, expected.detach().abs().max().item())
    torch.testing.assert_close(actual.detach().double().cpu(), expected.detach().double().cpu(),
                               rtol=rtol, atol=atol, equal_nan=True)


def random_operands(m, k, n, dtype, device, requires_grad=False):
    """a [m, k], weight [n, k] scaled so outputs are of order one."""
    scale = 1.0 / max(k, 1) ** 0.5
    a = (torch.randn(m, k, dtype=torch.float64) * 1.0).to(dtype).to(device)
    w = (torch.randn(n, k, dtype=torch.float64) * scale).to(dtype).to(device)
    return a.requires_grad_(requires_grad), w.requires_grad_(requires_grad)


def linear_act_eager(x, weight, bias, activation, negative_slope=0.01):
    return torch_twin(activation, negative_slope)(F.linear(x, weight, bias))

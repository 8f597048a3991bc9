"""One test per root cause the differential fuzz (tests/fuzz.py) found,
named after what was wrong; docs/DESIGN.md's "Numerics" says where each
one was."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

import torch_gemm_act as tga
from conftest import requires_cuda, skip_unless_built
from torch_gemm_act import _policy


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
    act = tga.activations._twin(activation)
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


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_library_adds_split_k_partial_sums_in_fp32_cuda(monkeypatch, dtype):
    # PyTorch allows cuBLAS to add split-K partial sums in fp16 / bf16 by
    # default; the library's cuBLASLt calls followed that, and a short wide
    # problem's pre-activation missed by an ulp of the partial sums: tanh of
    # it by many of Y's ulps.
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", True)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", True)
    a = torch.randn(22, 2056, device="cuda", dtype=dtype)
    b = torch.randn(64, 2056, device="cuda", dtype=dtype).t()
    bias = torch.randn(64, device="cuda", dtype=dtype)
    z64 = a.double() @ b.double() * 1.7 + bias.double()
    for backend in tga.testing.cuda_backends():
        with tga.testing.override(cuda_backend=backend):
            y, z = tga.gemm_act(a, b, bias, activation="tanh", alpha=1.7, return_preact=True)
        # One rounding of z: half an ulp of its magnitude, with room for the fp32 sum.
        ulp = torch.finfo(dtype).eps * z64.abs().clamp_min(torch.finfo(dtype).tiny)
        assert ((z.double() - z64).abs() <= ulp + 1e-4 * z64.abs().max()).all(), backend
        assert ((y.double() - torch.tanh(z64)).abs() <= 2 * ulp.clamp(max=torch.finfo(dtype).eps) + 1e-3).all(), backend


ACTIVATIONS = tga.ACTIVATIONS


def _backends(device):
    return tga.testing.cuda_backends() if device == "cuda" else ["cpu"]


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_nan_and_inf_propagate_as_pytorchs(device, activation):
    # cuBLASLt's RELU epilogue turned NaN into 0 where torch.relu keeps it.
    # The activation of PyTorch's own preact in float64: PyTorch's float32
    # and bf16 CPU GELU answers +inf with NaN in its AVX-512 loop (and +inf
    # element by element, or on other CPUs).
    dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if device == "cuda" else [])
    for dtype in dtypes:
        a = torch.randn(48, 40, device=device, dtype=dtype)
        a[3, 5], a[7, 0], a[11, 39] = float("nan"), float("inf"), -float("inf")
        b = torch.randn(40, 24, device=device, dtype=dtype) / 8
        bias = torch.randn(24, device=device, dtype=dtype)
        twin = tga.activations._twin(activation)
        expected = twin(torch.addmm(bias, a, b).double())
        for backend in _backends(device):
            with tga.testing.override(cuda_backend=backend) if device == "cuda" else contextlib.nullcontext():
                for preact in (False, True):
                    out = tga.gemm_act(a, b, bias, activation=activation, return_preact=preact)
                    y = out[0] if preact else out
                    for kind in (torch.isnan, torch.isposinf, torch.isneginf):
                        assert torch.equal(kind(y), kind(expected)), (backend, dtype, preact, kind.__name__)


def test_c_gradient_at_beta_zero_is_zero(device):
    # At beta == 0 the forward does not read C; its gradient was 0 * dZ, NaN
    # where dZ is.
    a = torch.randn(6, 5, device=device, requires_grad=True)
    b = torch.randn(5, 4, device=device)
    c = torch.randn(6, 4, device=device, requires_grad=True)
    y = tga.gemm_act(a, b, None, c, activation="gelu", beta=0.0)
    grad = torch.randn_like(y)
    grad[2, 1] = float("nan")
    (grad_c,) = torch.autograd.grad(y, c, grad)
    assert torch.equal(grad_c, torch.zeros_like(c))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_library_rounds_the_preactivation_once_cuda(dtype):
    # Where cuBLASLt's epilogue cannot take the call (here a bias per row),
    # the library wrote the GEMM's result in the storage type and the pass
    # added the bias to it: 1024 + 1.5 rounded to 1024 first, minus 1024, gave
    # 0 for 1.5.
    a = torch.tensor([[1024.0, 1.5]] * 4, device="cuda", dtype=dtype)
    b = torch.ones(2, 3, device="cuda", dtype=dtype)
    bias = torch.full((4, 1), -1024.0, device="cuda", dtype=dtype)
    with tga.testing.override(cuda_backend="library"):
        y, z = tga.gemm_act(a, b, bias, activation="gelu", return_preact=True)
    assert torch.equal(z, torch.full_like(z, 1.5))


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_fp32_tanh_and_sigmoid_round_as_pytorchs(device, activation, monkeypatch):
    # Their backward reads Y, where 1 - y^2 and y (1 - y) near +-1 keep none of
    # the digits of an error in y; the float forms were ~16 ulps off.
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    z = torch.linspace(-12, 12, 4097, device=device, dtype=torch.float32)[:, None]
    one = torch.ones(1, 1, device=device)
    expected = getattr(torch, activation)(z.double()).float()
    for backend in _backends(device):
        if backend in ("sm90", "sm80"):
            continue  # fp32 there is TF32 (sm90) or not taken (sm80)
        with tga.testing.override(cuda_backend=backend) if device == "cuda" else contextlib.nullcontext():
            y = tga.gemm_act(z, one, activation=activation)
        ulp = torch.finfo(torch.float32).eps * expected.abs().clamp_min(torch.finfo(torch.float32).tiny)
        assert ((y - expected).abs() <= 2 * ulp).all(), backend


@requires_cuda
def test_simt_fp32_sums_a_long_k_as_accurately_as_cublas_cuda():
    # One fp32 chain over a long K read 3x cuBLAS's error; the SIMT kernel now
    # sums groups of k-steps apart.
    torch.manual_seed(0)
    a = torch.randn(64, 16384, device="cuda")
    b = torch.randn(16384, 96, device="cuda")
    ref = a.double() @ b.double()
    cublas = _rel_err((a @ b).float(), ref)
    assert not torch.backends.cuda.matmul.allow_tf32
    skip_unless_built("simt")
    with tga.testing.override(cuda_backend="simt"):
        ours = _rel_err(tga.gemm_act(a, b), ref)
    assert ours <= 3 * cublas, (ours, cublas)  # the fuzz's bar


def _lm_loss_rms_from_float64(h, w, b, t):
    """Root mean squares from float64 of each token's loss and each gradient
    element (hidden, weight, bias): (linear_cross_entropy's, eager's F.linear
    + F.cross_entropy, whose loss is in the logits' dtype as ours is)."""
    leaves = [x.detach().requires_grad_() for x in (h, w, b)]
    exact = [x.detach().double().requires_grad_() for x in (h, w, b)]

    def grads(loss, xs):
        return torch.autograd.grad(loss.sum(), xs)

    ref = F.cross_entropy(F.linear(*exact), t, reduction="none")
    ref_grads = grads(ref, exact)
    eager = F.cross_entropy(F.linear(*leaves), t, reduction="none")
    ours = tga.linear_cross_entropy(leaves[0], leaves[1], t, leaves[2], reduction="none")

    def rms(a, r):
        return (a.double() - r).pow(2).mean().sqrt().item()
    return [[rms(out, ref)] + [rms(g, r) for g, r in zip(grads(out, leaves), ref_grads)] for out in (ours, eager)]


@requires_cuda
@pytest.mark.parametrize("chunk", [None, 128])
def test_lm_loss_chunk_adds_its_bias_before_rounding_cuda(monkeypatch, chunk):
    # A chunk's logits took the bias as a broadcast 2-D C, which PyTorch
    # copies in and cuBLAS adds after the product's rounding: bf16 logits
    # rounded twice, the loss and gradients further from float64 than eager's
    # (by root mean square: one element's error is one draw; the numbers in
    # docs/MEASUREMENTS.md). Unscaled bf16, the rule's chunk and 128-column chunks.
    if chunk is not None:
        monkeypatch.setattr(_policy, "ce_chunk", lambda tokens, width, vocab, element_size: chunk)
    g = torch.Generator().manual_seed(70)
    h, w, b = (torch.randn(*shape, generator=g).to("cuda", torch.bfloat16)
               for shape in ((4096, 64), (1000, 64), (1000,)))
    t = torch.randint(1000, (4096,), generator=g)
    t[::9] = -100
    ours, eager = _lm_loss_rms_from_float64(h, w, b, t.cuda())
    for name, got, bar in zip(("loss", "grad_hidden", "grad_weight", "grad_bias"), ours, eager):
        assert got <= 1.2 * bar, f"{name}: RMS from float64 {got:.4g}, eager's {bar:.4g} (ours {ours}, eager {eager})"

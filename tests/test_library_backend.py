"""The library backend's cuBLASLt fused epilogues, forced, on the cases they
match: each must compute exactly our activation (cuBLASLt's GELU is the tanh
form: in exact fp32 the erf form would miss by up to ~1e-3), write Z where
asked, and give the same Y whether Z is stored or not."""

import itertools

import pytest
import torch

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import TOL, random_operands, reference64

# relu and gelu_tanh fused by cuBLASLt, the others through its bias epilogue and the pass.
CASES = list(itertools.product(("none", "relu", "gelu_tanh", "gelu", "silu"), (False, True), (False, True),
                               (False, True)))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("activation,with_bias,with_c,preact", CASES)
def test_cublaslt_epilogues_cuda(dtype, activation, with_bias, with_c, preact):
    m, k, n = 100, 136, 200
    a, w = random_operands(m, k, n, dtype, "cuda")
    b = w.t()
    bias = torch.randn(n, dtype=dtype, device="cuda") if with_bias else None
    # A row-major C with a padded leading dimension.
    c = torch.randn(m, n + 8, dtype=dtype, device="cuda")[:, :n] if with_c else None
    alpha, beta = (0.5, -1.5) if with_c else (1.25, 0.0)
    with tga.testing.override(cuda_backend="library"):
        plan = tga.explain(a, b, bias, c, activation=activation, alpha=alpha, beta=beta,
                           return_preact=preact)
        assert plan.startswith("library: cuBLASLt matmul with epilogue "), plan
        out = tga.gemm_act(a, b, bias, c, activation=activation, alpha=alpha, beta=beta,
                           return_preact=preact)
        y_alone = tga.gemm_act(a, b, bias, c, activation=activation, alpha=alpha, beta=beta)
    y, z = out if preact else (out, None)
    assert torch.equal(y, y_alone), plan
    y_ref, z_ref = reference64(a, b, bias, c, activation, alpha, beta)
    rtol, atol = TOL[dtype]
    for got, ref in ((y, y_ref), (z, z_ref)):
        if got is not None:
            torch.testing.assert_close(got.double().cpu(), ref, rtol=rtol, atol=atol * 3, msg=plan)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=["fp64", "fp32", "bf16"])
def test_gemm_then_pass_with_every_term_cuda(dtype):
    """The fallback path: torch.mm into Z's memory, then the pass (erf GELU,
    a row bias, a transposed C, Z stored)."""
    m, k, n = 67, 45, 131
    a, w = random_operands(m, k, n, dtype, "cuda")
    bias = torch.randn(m, 1, dtype=dtype, device="cuda")
    c = torch.randn(n, m, dtype=dtype, device="cuda").t()
    with tga.testing.override(cuda_backend="library"):
        assert tga.explain(a, w.t(), bias, c, activation="gelu", beta=0.5).startswith(
            "library: cuBLAS's GEMM, then one epilogue pass")
        y, z = tga.gemm_act(a, w.t(), bias, c, activation="gelu", alpha=-0.75, beta=0.5,
                            return_preact=True)
    y_ref, z_ref = reference64(a, w.t(), bias, c, "gelu", -0.75, 0.5)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(z.double().cpu(), z_ref, rtol=rtol, atol=atol * 3)
    torch.testing.assert_close(y.double().cpu(), y_ref, rtol=rtol, atol=atol * 3)

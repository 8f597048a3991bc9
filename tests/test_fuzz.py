"""The differential fuzz (tests/fuzz.py) in the suite: a fixed-seed slice
of every route on the CPU (CI), and on a GPU a slice of every CUDA backend
and route. The device runs it at full size with a fresh seed from the
command line (scripts/device_check.sh, step fuzz)."""

import pytest
import torch

import fuzz
from conftest import requires_cuda, skip_unless_built

# The shipped policy stays: the fuzz itself forces the fused operator where a
# route's case asks for it (fuzz._fused_everywhere).

SEED = 20261129

# Cases per route on the CPU. Under torch.compile the CPU takes eager's formula
# (rule compiles_as_eager): the compile route runs on the GPU only.
CPU_CASES = {"gemm_act": 300, "linear_act": 40, "linear_module": 40, "conv1d": 25, "fuse_mlp": 40,
             "gemm_glu": 30, "gated_linear_act": 25, "gated_module": 25, "packed_glu": 25,
             "linear_cross_entropy": 60, "fuse_lm_loss": 30, "compile_lm_loss": 16, "linear_dropout_add": 60}
CUDA_CASES = 150


def _run(route, backend, cases):
    lines = []
    ran, failures, unconfirmed = fuzz.run(route, backend, cases, SEED, log=lines.append)
    assert ran == cases
    assert not failures and not unconfirmed, "\n".join(lines)


@pytest.mark.parametrize("route", sorted(CPU_CASES))
def test_fuzz_cpu(route):
    _run(route, "cpu", CPU_CASES[route])


@requires_cuda
@pytest.mark.parametrize("backend", fuzz.CUDA_BACKENDS)
def test_fuzz_gemm_act_cuda(backend):
    skip_unless_built(backend)
    _run("gemm_act", backend, CUDA_CASES)


@requires_cuda
@pytest.mark.parametrize("route", sorted(set(fuzz.ROUTES) - {"gemm_act"}))
def test_fuzz_route_cuda(route):
    _run(route, "rule", CUDA_CASES)


def test_fuzz_draws_are_reproducible():
    # A failure's replay line names only the case's seed: the draw must be a
    # function of it.
    for route in fuzz.ROUTES:
        for seed in (1, 2 ** 40 + 7):
            assert fuzz.draw(route, seed, "cpu").p == fuzz.draw(route, seed, "cpu").p


def test_fuzz_catches_a_wrong_result(monkeypatch):
    # The fuzz can fail: an operator off by a tenth is caught.
    import torch_gemm_act.ops as ops
    real = ops.gemm_act

    class Off:
        def __call__(self, *args):
            y, z = real(*args)
            return y * 1.1, z

    monkeypatch.setattr(ops, "gemm_act", Off(), raising=True)
    lines = []
    ran, failures, _ = fuzz.run("gemm_act", "cpu", 40, SEED, log=lines.append)
    assert len(failures) > 10, "\n".join(lines)


def test_fuzz_catches_a_mask_that_is_not_the_defined_one(monkeypatch):
    # The dropout route checks the mask element for element: one drawn from
    # another seed fails wherever an element is dropped.
    import torch_gemm_act.ops as ops
    real = ops.gemm_dropout_add

    def other_seed(a, b, bias, residual, p, seed):
        return real(a, b, bias, residual, p, seed + 1)

    monkeypatch.setattr(ops, "gemm_dropout_add", other_seed)
    lines = []
    ran, failures, _ = fuzz.run("linear_dropout_add", "cpu", 60, SEED, log=lines.append)
    assert len(failures) > 10, "\n".join(lines)


def test_fuzz_precision_shows_a_rounding_each_case_lets_pass(monkeypatch):
    # A relative error of 2^-7 (one to two bf16 ulps) on every bf16 output
    # element, a random sign each, passes each case's bar (3 x PyTorch's
    # error, or the dtype's floor) but not the run's median
    # (fuzz_check.Precision); unchanged, the median is below PyTorch's (the
    # epilogue rounds once).
    import fuzz_check
    import torch_gemm_act.ops as ops
    real = ops.gemm_act

    def run():
        precision = fuzz_check.Precision()
        ran, failures, unconfirmed = fuzz.run("gemm_act", "cpu", 300, SEED, log=lambda line: None,
                                              precision=precision)
        ratio, cases = precision.medians(fuzz.PRECISION_CASES)[("bfloat16", "out0")]
        return failures, ratio

    failures, ratio = run()
    assert not failures and ratio < fuzz.PRECISION_RATIO, ratio

    class Rounded:
        def __call__(self, *args):
            y, z = real(*args)
            if y.dtype != torch.bfloat16:
                return y, z
            sign = torch.where(torch.rand(y.shape, generator=torch.Generator().manual_seed(0)) < 0.5, -1.0, 1.0)
            return (y.float() * (1 + sign * 2.0 ** -7)).to(y.dtype), z

    monkeypatch.setattr(ops, "gemm_act", Rounded(), raising=True)
    failures, ratio = run()
    assert not failures and ratio >= fuzz.PRECISION_RATIO, ratio


@pytest.mark.parametrize("route,seed", [("linear_module", 48721486061494), ("conv1d", 202513794867969)])
def test_fuzz_non_finite_outputs_as_float64s_pass(route, seed):
    # A -inf weight into GELU: PyTorch's own fp32/bf16 GELU on an AVX-512 CPU
    # gives NaN for +inf where float64's (and ours) give +inf; such an output
    # passes where each element is as PyTorch's or as float64's.
    assert fuzz.main(["--route", route, "--backend", "cpu", "--replay", str(seed)]) == 0

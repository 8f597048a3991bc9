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
             "linear_cross_entropy": 60, "fuse_lm_loss": 30, "compile_lm_loss": 16}
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

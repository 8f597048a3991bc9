"""compute-sanitizer over every CUDA kernel (tests/sanitize_cases.py), under
the dispatch rule and with each CUDA backend forced: memcheck (no
out-of-bounds or misaligned access, no uninitialised device memory read)
and racecheck (no shared-memory race). Runs only where a GPU and
compute-sanitizer are present."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

import torch_gemm_act as tga

HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZER = shutil.which("compute-sanitizer")
requires_sanitizer = pytest.mark.skipif(
    not torch.cuda.is_available() or SANITIZER is None, reason="needs a CUDA GPU and compute-sanitizer")


def _sanitize(tool, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [SANITIZER, "--tool", tool, "--error-exitcode", "9", sys.executable,
         os.path.join(HERE, "sanitize_cases.py"), *args],
        capture_output=True, text=True, env=env, timeout=1800)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{tool} exit code {result.returncode}:\n{output[-6000:]}"
    summary = "RACECHECK SUMMARY: 0 hazards" if tool == "racecheck" else "ERROR SUMMARY: 0 errors"
    assert summary in output and "problems ran" in output, output[-3000:]


def _backends():
    # "rule": the dispatch rule decides. On an H100 sm90 forced is the rule
    # but for what the rule leaves to the library; its kernels are forced one
    # by one below instead.
    names = tga.testing.cuda_backends() if torch.cuda.is_available() else ()
    return ["rule"] + [b for b in names if b != "sm90"]


def _backend_args(backend):
    return () if backend == "rule" else ("--cuda-backend", backend)


@requires_sanitizer
@pytest.mark.parametrize("backend", _backends())
def test_memcheck_every_cuda_kernel_cuda(backend):
    _sanitize("memcheck", *_backend_args(backend))


@requires_sanitizer
@pytest.mark.parametrize("backend", _backends())
def test_racecheck_every_cuda_kernel_cuda(backend):
    _sanitize("racecheck", "--small", *_backend_args(backend))


def _bf16_kernels_with_z():
    if not torch.cuda.is_available():
        return []
    return sorted({k["name"] for k in tga.testing.kernels("sm90")
                   if k["dtype"] == "bf16" and k["b_layout"] == "kmajor" and k["stores_z"]})


@requires_sanitizer
@pytest.mark.parametrize("kernel", _bf16_kernels_with_z())
def test_memcheck_each_sm90_kernel_cuda(kernel):
    """Each bf16 configuration forced on every case it exists for, whatever
    the heuristic would choose."""
    _sanitize("memcheck", "--sm90-kernel", kernel)


def _sm80_bf16_kmajor_kernels():
    if not torch.cuda.is_available():
        return []
    return sorted({k["name"] for k in tga.testing.kernels("sm80")
                   if k["dtype"] == "bf16" and k["b_layout"] == "kmajor"})


@requires_sanitizer
@pytest.mark.parametrize("kernel", _sm80_bf16_kmajor_kernels())
def test_memcheck_each_sm80_kernel_cuda(kernel):
    """Each bf16 sm80 configuration forced on every case it can run."""
    _sanitize("memcheck", "--sm80-kernel", kernel)

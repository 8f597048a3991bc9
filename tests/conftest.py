import os
import zlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_gemm_act.modules
import torch_gemm_act.testing

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


class OpNames(TorchDispatchMode):
    """The ops (ATen's and ours) called under it, by overload name
    (e.g. "mm.default")."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.fixture(autouse=True, scope="session")
def _poison_outputs():
    # Outputs are filled with NaN before each kernel writes them, so an
    # element a kernel forgets to write fails the comparison.
    with torch_gemm_act.testing.override(poison_outputs=True):
        yield


@pytest.fixture(autouse=True)
def _fused_modules_at_any_size(request, monkeypatch):
    # A fused module runs ATen's ops where its layer is
    # host-bound on CUDA (functional.runs_atens_ops), and on the CPU, eager
    # or compiled (functional.cpu_atens). The tests check the fused
    # operator through the modules at small sizes and on the CPU, so there
    # it runs everywhere, except in tests marked host_bound_policy, which
    # check the rule itself.
    if request.node.get_closest_marker("host_bound_policy") is None:
        monkeypatch.setattr(torch_gemm_act.modules, "runs_atens_ops", lambda x, n: False)
        monkeypatch.setattr(torch_gemm_act.functional, "cpu_atens", lambda x: False)
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "host_bound_policy: the fused modules' host-bound rule as it ships")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    # Fresh random data per test, reproducible from the test's name (CRC-32:
    # Python's str hash differs from process to process).
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True, scope="session")
def _full_precision_split_k():
    # PyTorch lets cuBLAS add split-K partial sums in fp16 / bf16 by default
    # (F.linear's, and so the library backend's, which follows the setting):
    # a rounding at the output's precision per partial sum. The tests check
    # against float64 with one rounding's tolerance, so they ask for fp32
    # partial sums.
    matmul = torch.backends.cuda.matmul
    saved = (matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction)
    matmul.allow_fp16_reduced_precision_reduction = False
    matmul.allow_bf16_reduced_precision_reduction = False
    yield
    matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction = saved


def pytest_collection_modifyitems(config, items):
    # The GPU machine runs the suite with `-k cuda` (scripts/device_check.sh):
    # a test that needs a GPU but has no "cuda" in its id would run nowhere.
    reason = requires_cuda.mark.kwargs["reason"]
    unnamed = [
        item.nodeid
        for item in items
        if "cuda" not in item.nodeid
        and any(m.name == "skipif" and m.kwargs.get("reason") == reason for m in item.iter_markers())
    ]
    if unnamed:
        raise pytest.UsageError(f"tests that need a GPU must have 'cuda' in their id: {unnamed}")


def pytest_report_header(config):
    backend = torch_gemm_act.testing._C.testing_overrides()[0]
    return [f"torch_gemm_act from {os.path.dirname(torch_gemm_act.__file__)}",
            f"torch_gemm_act CUDA backend: {backend or 'the dispatch rule'}"]

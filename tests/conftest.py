import os
import zlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
def _operator_everywhere(request):
    # Tests run the shipped policy, which runs a fused module's layer as
    # ATen's ops where it is host-bound on CUDA and on the CPU
    # (torch_gemm_act._policy). The module tests (their files marked
    # operator_everywhere) check the operators through the modules at small
    # sizes and on the CPU, so there the operators run everywhere, but in
    # the tests of the rules themselves (marked shipped_policy).
    marked = request.node.get_closest_marker("operator_everywhere") is not None
    if not marked or request.node.get_closest_marker("shipped_policy") is not None:
        yield
        return
    with torch_gemm_act.testing.override(operator_everywhere=True):
        yield


def pytest_configure(config):
    config.addinivalue_line("markers", "operator_everywhere: the fused modules run the operators at any size "
                                       "and on the CPU (the shipped policy runs ATen's ops there)")
    config.addinivalue_line("markers", "shipped_policy: in an operator_everywhere file, the policy as it ships")


def sm90_configs(op):
    """The sm90 configurations of `op` ("gemm_act", "gemm_dact", "gemm_glu")
    this build compiles, by name, to parametrize a test over (none without a
    GPU, where those tests skip)."""
    if not HAS_CUDA:
        return []
    return sorted({k["name"] for k in torch_gemm_act.testing.kernels("sm90", op=op)})


def skip_unless_built(backend):
    """Skips a test of a CUDA backend that this build left out (setup.py:
    sm80 and simt are built only when asked for)."""
    if backend not in ("rule", "tuned", "cpu") and backend not in torch_gemm_act.testing.cuda_backends():
        pytest.skip(f"this build has no {backend} backend (setup.py builds sm80 and simt when asked)")


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


def takes_a_preact(y):
    """Whether y's backward node has an a_preact edge: the layer took its
    input's Z from the layer before (gemm_act_chained's a_preact)."""
    fn = y.grad_fn
    return fn is not None and fn.name() == "GemmActBackward" and fn.next_functions[1][0] is not None


@pytest.fixture
def no_compile_caches():
    """Inductor's caches off: a cached compilation skips the graph passes,
    whose counts the compile-fusion tests read."""
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        yield


@pytest.fixture
def fusion(no_compile_caches):
    """enable_compile_fusion() for the test, Dynamo reset around it; the pass
    (its counts)."""
    import torch_gemm_act
    torch._dynamo.reset()
    torch_gemm_act.enable_compile_fusion()
    try:
        yield torch._inductor.config.pre_grad_custom_pass
    finally:
        torch_gemm_act.enable_compile_fusion(False)
        torch._dynamo.reset()

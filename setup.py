"""Builds torch_gemm_act._C: CUDA kernels when nvcc is found, CPU-only otherwise.

Environment:
  TORCH_CUDA_ARCH_LIST  archs to build for (default "8.0;9.0")
  MAX_JOBS              parallel compile jobs (ninja)
  GEMM_ACT_CPU_ONLY=1   skip the CUDA kernels even when nvcc is present
"""

import glob
import os

from setuptools import find_packages, setup

# torch guesses CUDA_HOME from nvcc's folder; with nvcc in /usr/local/bin that
# guess (/usr/local) has no CUDA headers, so prefer the toolkit's own folder.
if "CUDA_HOME" not in os.environ and os.path.exists("/usr/local/cuda/bin/nvcc"):
    os.environ["CUDA_HOME"] = "/usr/local/cuda"

from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(ROOT, "csrc")


def _sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(CSRC, pattern), recursive=True))


def _want_cuda():
    if os.environ.get("GEMM_ACT_CPU_ONLY", "0") == "1":
        return False
    return CUDA_HOME is not None and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))


def _extension():
    cxx_flags = ["-O3"]  # the C++ standard comes from torch (C++17 or C++20 by version)
    cpu_sources = _sources("*.cpp") + _sources("cpu/**/*.cpp")
    if not _want_cuda():
        return CppExtension("torch_gemm_act._C", cpu_sources, include_dirs=[CSRC],
                            extra_compile_args={"cxx": cxx_flags})
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    nvcc_flags = ["-O3", "--expt-relaxed-constexpr", "-lineinfo",
                  "-DGEMM_ACT_WITH_CUDA"]
    return CUDAExtension(
        "torch_gemm_act._C",
        cpu_sources + _sources("cuda/*.cu") + _sources("cuda/simt/*.cu") + _sources("cuda/backward/*.cu"),
        include_dirs=[CSRC],
        define_macros=[("GEMM_ACT_WITH_CUDA", None)],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )


setup(
    name="torch_gemm_act",
    version="0.1.0",
    description="Fused GEMM + bias + activation for PyTorch (CPU and CUDA)",
    packages=find_packages(include=["torch_gemm_act", "torch_gemm_act.*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.9",
    install_requires=["torch>=2.5"],
)

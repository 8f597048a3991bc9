"""Builds torch_gemm_act._C: CUDA kernels when nvcc is found, CPU-only otherwise.

Environment:
  TORCH_CUDA_ARCH_LIST  archs to build for (default "8.0;9.0")
  MAX_JOBS              parallel compile jobs (ninja)
  GEMM_ACT_CPU_ONLY=1   skip the CUDA kernels even when nvcc is present
  GEMM_ACT_NO_SM90=1    skip the Hopper (sm_90a) tensor-core kernels
  GEMM_ACT_CUTLASS_INCLUDE  CUTLASS headers for them (else .deps/cutlass/include,
                        else the `nvidia-cutlass` wheel's cutlass_library/source/include)
  GEMM_ACT_SM90_SWEEP=1 also the sweep's candidate configurations (bench/sm90_sweep.py)

`python setup.py build_sm90_objects --build-temp DIR [--cxx11-abi 0|1]` compiles
only the sm_90a kernel objects (most of a CUDA build's time; they need no
PyTorch) into DIR/sm90, stamped with the csrc tree they came from, so that a
build on another machine with the same DIR reuses them
(scripts/device_check.sh does when the stamp matches).
"""

import concurrent.futures
import glob
import importlib.util
import os
import subprocess
import sys

from setuptools import Command, find_packages, setup

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


def _want_sm90():
    if os.environ.get("GEMM_ACT_NO_SM90", "0") == "1":
        return False
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "8.0;9.0").replace(" ", ";").split(";")
    return any(a.startswith("9.0") for a in archs)


def _cutlass_include():
    candidates = [os.environ.get("GEMM_ACT_CUTLASS_INCLUDE"), os.path.join(ROOT, ".deps", "cutlass", "include")]
    # The nvidia-cutlass wheel ships the headers inside cutlass_library; find
    # the folder without importing it (its Python side needs more packages).
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.submodule_search_locations:
        candidates += [os.path.join(p, "source", "include") for p in spec.submodule_search_locations]
    for path in candidates:
        if path and os.path.exists(os.path.join(path, "cute", "tensor.hpp")):
            return path
    raise RuntimeError(
        "torch_gemm_act: the Hopper kernels need CUTLASS's headers and none were found. "
        "Install them with `pip install nvidia-cutlass` (or point GEMM_ACT_CUTLASS_INCLUDE at a "
        "CUTLASS include folder), or build without them with GEMM_ACT_NO_SM90=1."
    )


def _sm90_sweep_flags():
    """GEMM_ACT_SM90_SWEEP=1 compiles extra tile configurations (bf16, none and
    gelu only) for bench/sm90_sweep.py to measure; never for a release build."""
    return ["-DGEMM_ACT_SM90_SWEEP"] if os.environ.get("GEMM_ACT_SM90_SWEEP", "0") == "1" else []


def _compile_sm90_objects(build_temp, abi=None):
    """The sm_90a kernels (csrc/cuda/sm90/sm90_inst_*.cu): compiled here, for
    sm_90a only and without torch's flags, then linked in as objects. `abi`:
    the libstdc++ ABI of the torch they will link with (default: this one's)."""
    include = _cutlass_include()
    if abi is None:
        abi = int(__import__("torch")._C._GLIBCXX_USE_CXX11_ABI)
    headers = glob.glob(os.path.join(CSRC, "cuda", "sm90", "*.h*")) + glob.glob(os.path.join(CSRC, "*.h"))
    newest_header = max(os.path.getmtime(h) for h in headers)
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
    host = ["-ccbin", os.environ["CXX"]] if os.environ.get("CXX") else []
    # The options that change what an object is (a sweep build compiles more
    # configurations): objects compiled with others are stale whatever their
    # time, so switching between sweep and release builds recompiles them.
    defining = [*_sm90_sweep_flags(), f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    os.makedirs(os.path.join(build_temp, "sm90"), exist_ok=True)
    flags_file = os.path.join(build_temp, "sm90", "FLAGS")
    same_flags = os.path.exists(flags_file) and open(flags_file).read().split() == defining
    jobs = []
    for src in sorted(glob.glob(os.path.join(CSRC, "cuda", "sm90", "sm90_inst_*.cu"))):
        obj = os.path.join(build_temp, "sm90", os.path.basename(src) + ".o")
        if (not same_flags or not os.path.exists(obj)
                or os.path.getmtime(obj) < max(newest_header, os.path.getmtime(src))):
            jobs.append([nvcc, *host, "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                         *defining, "-gencode", "arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC",
                         "-I", CSRC, "-I", include, "-c", src, "-o", obj])
        yield obj
    workers = max(1, int(os.environ.get("MAX_JOBS", os.cpu_count() or 1)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for cmd, result in zip(jobs, pool.map(lambda c: subprocess.run(c, capture_output=True, text=True), jobs)):
            print(" ".join(cmd[-3:]), flush=True)
            if result.returncode != 0:
                sys.stderr.write(result.stdout + result.stderr)
                raise RuntimeError(f"torch_gemm_act: nvcc failed on {cmd[-3]}")
    with open(flags_file, "w") as f:
        f.write(" ".join(defining) + "\n")


def sm90_source_id():
    """What the sm90 objects are compiled from: the git tree of csrc and the
    sweep flag; "unknown" outside a clean git checkout."""
    try:
        tree = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD:csrc"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "csrc"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if dirty:
        return "unknown"
    return f"csrc {tree} sweep={os.environ.get('GEMM_ACT_SM90_SWEEP', '0')}"


class BuildSm90Objects(Command):
    description = "compile only the sm_90a kernel objects, stamped with their source (see the docstring)"
    user_options = [
        ("build-temp=", None, "the build_ext temporary folder of the machine that will link them"),
        ("cxx11-abi=", None, "_GLIBCXX_USE_CXX11_ABI of the torch they will link with (default: this one's)"),
    ]

    def initialize_options(self):
        self.build_temp = None
        self.cxx11_abi = None

    def finalize_options(self):
        if not self.build_temp:
            raise SystemExit("build_sm90_objects: --build-temp is required")

    def run(self):
        abi = None if self.cxx11_abi is None else int(self.cxx11_abi)
        objects = list(_compile_sm90_objects(self.build_temp, abi))
        with open(os.path.join(self.build_temp, "sm90", "SOURCE"), "w") as f:
            f.write(sm90_source_id() + "\n")
        print(f"{len(objects)} objects in {os.path.join(self.build_temp, 'sm90')}: {sm90_source_id()}")


class BuildExtensionWithSm90(BuildExtension):
    def build_extensions(self):
        for ext in self.extensions:
            if ("GEMM_ACT_WITH_SM90", None) in ext.define_macros:
                ext.extra_objects = list(_compile_sm90_objects(self.build_temp))
        super().build_extensions()


def _extension():
    cxx_flags = ["-O3"]  # the C++ standard comes from torch (C++17 or C++20 by version)
    cpu_sources = _sources("*.cpp") + _sources("cpu/**/*.cpp")
    if not _want_cuda():
        return CppExtension("torch_gemm_act._C", cpu_sources, include_dirs=[CSRC],
                            extra_compile_args={"cxx": cxx_flags})
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    nvcc_flags = ["-O3", "--expt-relaxed-constexpr", "-lineinfo",
                  "-DGEMM_ACT_WITH_CUDA"]
    cuda_sources = _sources("cuda/*.cu") + _sources("cuda/simt/*.cu") + _sources("cuda/backward/*.cu")
    macros = [("GEMM_ACT_WITH_CUDA", None)]
    if _want_sm90():
        _cutlass_include()  # fail early, with how to get the headers
        # The entry (PyTorch side, no CUTLASS) builds here; the kernels come
        # from _compile_sm90_objects.
        cuda_sources += [s for s in _sources("cuda/sm90/*.cu") if "sm90_inst_" not in s]
        macros.append(("GEMM_ACT_WITH_SM90", None))
        nvcc_flags += ["-DGEMM_ACT_WITH_SM90", *_sm90_sweep_flags()]
    return CUDAExtension(
        "torch_gemm_act._C",
        cpu_sources + cuda_sources,
        include_dirs=[CSRC],
        define_macros=macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )


setup(
    name="torch_gemm_act",
    version="0.1.0",
    description="Fused GEMM + bias + activation for PyTorch (CPU and CUDA)",
    packages=find_packages(include=["torch_gemm_act", "torch_gemm_act.*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtensionWithSm90, "build_sm90_objects": BuildSm90Objects},
    python_requires=">=3.9",
    install_requires=["torch>=2.5"],
)

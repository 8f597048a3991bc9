"""Builds torch_gemm_act._C: CUDA kernels when nvcc is found, CPU-only otherwise.

Environment:
  TORCH_CUDA_ARCH_LIST  archs to build for (default "8.0;9.0;10.0;12.0+PTX": sm_80's
                        code runs on 8.6 and 8.9 too, and the PTX on later GPUs)
  MAX_JOBS              parallel compile jobs (ninja, and the sm90 kernels)
  GEMM_ACT_CPU_ONLY=1   skip the CUDA kernels even when nvcc is present
  GEMM_ACT_NO_SM90=1    skip the Hopper (sm_90a) tensor-core kernels
  GEMM_ACT_CUTLASS_INCLUDE  CUTLASS headers for them (else .deps/cutlass/include,
                        else the `nvidia-cutlass` wheel's cutlass_library/source/include)
  GEMM_ACT_LAB=1        also the lab's kernels (lab/README.md); never for a release build

The sm90 kernels are generated from their table (csrc/cuda/sm90/sm90_kernels.py)
into build/generated, one translation unit per configuration, dtype and B
layout, and compiled here for sm_90a only (without torch's flags) into
objects that the extension links. `python setup.py build_sm90_objects
--build-temp DIR [--cxx11-abi 0|1]` compiles only those (most of a CUDA
build's time; they need no PyTorch) into DIR/sm90, so that a build on another
machine with the same DIR reuses them: an object is reused wherever its
inputs (its source, every header it can include, the defining flags) are the
same, whatever the files' times.
"""

import concurrent.futures
import glob
import hashlib
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
LAB = os.path.join(ROOT, "lab")
GENERATED = os.path.join(ROOT, "build", "generated")
DEFAULT_CUDA_ARCHS = "8.0;9.0;10.0;12.0+PTX"


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _want_lab():
    return os.environ.get("GEMM_ACT_LAB", "0") == "1"


def _generate_sm90():
    """The sm90 kernel table header and kernel units (see the docstring)."""
    table = _load(os.path.join(CSRC, "cuda", "sm90", "sm90_kernels.py"), "sm90_kernels")
    if not _want_lab():
        return table.generate(GENERATED)
    lab = _load(os.path.join(LAB, "sm90", "lab_kernels.py"), "lab_kernels")
    return table.generate(GENERATED, lab.ROWS, lab.EXTRA_TARGETS)


def _sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(CSRC, pattern), recursive=True))


def _want_cuda():
    if os.environ.get("GEMM_ACT_CPU_ONLY", "0") == "1":
        return False
    return CUDA_HOME is not None and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))


def _want_sm90():
    if os.environ.get("GEMM_ACT_NO_SM90", "0") == "1":
        return False
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", DEFAULT_CUDA_ARCHS).replace(" ", ";").split(";")
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


def _sm90_inputs_digest(defining):
    """What every sm90 object depends on besides its own source: the headers
    it can include and the defining flags."""
    digest = hashlib.sha256(" ".join(defining).encode())
    roots = [CSRC, os.path.join(GENERATED, "cuda")] + ([LAB] if _want_lab() else [])
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "**", "*.*h"), recursive=True)):
            with open(path, "rb") as f:
                digest.update(os.path.relpath(path, ROOT).encode() + b"\0" + f.read())
    return digest


def _compile_sm90_objects(build_temp, abi=None):
    """The sm_90a kernels: generated, then compiled here for sm_90a only and
    without torch's flags, to be linked in as objects. `abi`: the libstdc++
    ABI of the torch they will link with (default: this one's). Yields the
    object paths."""
    units = _generate_sm90()
    if abi is None:
        abi = int(__import__("torch")._C._GLIBCXX_USE_CXX11_ABI)
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
    host = ["-ccbin", os.environ["CXX"]] if os.environ.get("CXX") else []
    # The options that change what an object is (the lab's build compiles
    # more rows into the shared table): part of every object's key.
    defining = [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"lab={int(_want_lab())}"]
    headers = _sm90_inputs_digest(defining)
    out_dir = os.path.join(build_temp, "sm90")
    os.makedirs(out_dir, exist_ok=True)
    jobs = []
    for src in units:
        obj = os.path.join(out_dir, os.path.basename(src) + ".o")
        key = headers.copy()
        with open(src, "rb") as f:
            key.update(f.read())
        key = key.hexdigest()
        key_file = obj + ".key"
        if not (os.path.exists(obj) and os.path.exists(key_file) and open(key_file).read() == key):
            # CUTLASS's headers are needed only where something compiles.
            includes = ["-I", CSRC, "-I", GENERATED, "-I", _cutlass_include()]
            includes += ["-I", LAB] if _want_lab() else []
            jobs.append(([nvcc, *host, "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                          defining[0], "-gencode", "arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC",
                          *includes, "-c", src, "-o", obj], key_file, key))
        yield obj
    workers = max(1, int(os.environ.get("MAX_JOBS", os.cpu_count() or 1)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        runs = pool.map(lambda job: subprocess.run(job[0], capture_output=True, text=True), jobs)
        for (cmd, key_file, key), result in zip(jobs, runs):
            print(" ".join(cmd[-3:]), flush=True)
            if result.returncode != 0:
                sys.stderr.write(result.stdout + result.stderr)
                raise RuntimeError(f"torch_gemm_act: nvcc failed on {cmd[-3]}")
            with open(key_file, "w") as f:
                f.write(key)


class BuildSm90Objects(Command):
    description = "compile only the sm_90a kernel objects (see the docstring)"
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
        print(f"{len(objects)} objects in {os.path.join(self.build_temp, 'sm90')}")


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
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_CUDA_ARCHS)
    nvcc_flags = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
    # Every CUDA source but the sm90 family's, whose entry (PyTorch side,
    # no CUTLASS) builds here only with its kernels, which come from
    # _compile_sm90_objects.
    sm90 = os.path.join("csrc", "cuda", "sm90") + os.sep
    cuda_sources = [s for s in _sources("cuda/**/*.cpp") + _sources("cuda/**/*.cu") if not s.startswith(sm90)]
    macros = [("GEMM_ACT_WITH_CUDA", None)]
    include_dirs = [CSRC]
    if _want_sm90():
        _generate_sm90()  # the table header the entry includes
        cuda_sources += _sources("cuda/sm90/*.cpp") + _sources("cuda/sm90/*.cu")
        macros.append(("GEMM_ACT_WITH_SM90", None))
        include_dirs.append(GENERATED)
    defines = [f"-D{name}" for name, _ in macros]
    return CUDAExtension(
        "torch_gemm_act._C",
        cpu_sources + cuda_sources,
        include_dirs=include_dirs,
        define_macros=macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags + defines},
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

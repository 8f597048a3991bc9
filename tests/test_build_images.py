"""The built extension holds code for every arch its build list names
(cuobjdump --list-elf / --list-ptx), and with the default list that is
sm_80 (which also runs on 8.6 and 8.9), sm_90a (the Hopper kernels),
sm_100 and sm_120, plus sm_120 PTX for later GPUs. Needs no GPU: it runs in
CI, on the build it made."""

import glob
import os
import shutil
import subprocess

import pytest

import torch_gemm_act
from torch_gemm_act import _C

DEFAULT_ARCH_LIST = "8.0;9.0;10.0;12.0+PTX"


def _cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    # The nvidia-cuda-cuobjdump wheel (scripts/setup.sh installs it).
    import nvidia
    for base in nvidia.__path__:
        for path in glob.glob(os.path.join(base, "*", "bin", "cuobjdump")):
            return path
    return None


def _extension():
    return _C.__file__


def _listed(flag):
    result = subprocess.run([_cuobjdump(), flag, _extension()], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _expected(arch_list):
    """(SASS archs, PTX archs) the list asks for: "9.0" gives sm_90 (and the
    Hopper kernels' sm_90a), "12.0+PTX" also compute_120."""
    sass, ptx = set(), set()
    for item in arch_list.replace(" ", ";").split(";"):
        if not item:
            continue
        number = item.replace("+PTX", "").replace(".", "")
        sass.add(f"sm_{number}")
        if item.endswith("+PTX"):
            ptx.add(f"sm_{number}")
    return sass, ptx


pytestmark = pytest.mark.skipif(not _C.cuda_arch_list(), reason="a CPU-only build has no CUDA images")


def test_cuobjdump_is_available():
    assert _cuobjdump() is not None, "cuobjdump not found: scripts/setup.sh installs nvidia-cuda-cuobjdump"


def test_every_listed_arch_has_code():
    elf, ptx = _listed("--list-elf"), _listed("--list-ptx")
    sass, want_ptx = _expected(_C.cuda_arch_list())
    for arch in sass:
        assert f".{arch}." in elf, f"no {arch} code in {_extension()}:\n{elf[:2000]}"
    for arch in want_ptx:
        assert f".{arch}." in ptx, f"no {arch} PTX in {_extension()}:\n{ptx[:2000]}"
    if "sm_90" in sass and torch_gemm_act.testing.kernels("sm90"):
        assert ".sm_90a." in elf, "the Hopper kernels were not built for sm_90a"


def test_default_build_covers_ampere_to_blackwell():
    if _C.cuda_arch_list() != DEFAULT_ARCH_LIST:
        pytest.skip(f"built for {_C.cuda_arch_list()!r}, not the default list")
    elf, ptx = _listed("--list-elf"), _listed("--list-ptx")
    for arch in ("sm_80", "sm_90a", "sm_100", "sm_120"):
        assert f".{arch}." in elf, f"no {arch} code:\n{elf[:2000]}"
    assert ".sm_120." in ptx

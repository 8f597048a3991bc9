"""The one switch for tests and measurements (csrc/testing.h).

    with torch_gemm_act.testing.override(cuda_backend="simt"):
        ...   # every CUDA forward runs on the SIMT kernel
    with torch_gemm_act.testing.override(cuda_backend=""):
        ...   # the dispatch rule decides again (whatever the environment forced)
    with torch_gemm_act.testing.override(sm90_kernel="pingpong_128x128_c1x2"):
        ...   # every sm90 launch uses that configuration (an error where it cannot run)
    with torch_gemm_act.testing.override(cuda_backend="sm80", sm80_kernel="mma_128x256x32_s4"):
        ...   # likewise for the Ampere-class family
    with torch_gemm_act.testing.override(sm90_swizzle=8):
        ...   # sm90 launches take the tiles in bands of 8 clusters (0: the heuristic's band)
    with torch_gemm_act.testing.override(poison_outputs=True):
        ...   # outputs are NaN before each kernel writes them
    with torch_gemm_act.testing.override(operator_everywhere=True):
        ...   # the fused modules run the operators at every size and on the CPU
              # (the rules host_bound and cpu_atens of torch_gemm_act._policy off)

Outside a test, TORCH_GEMM_ACT_BACKEND=<name> in the environment forces the
CUDA backend for a whole process (read once, when the extension loads).
"""

import contextlib

from . import _C, _policy

__all__ = ["cuda_backends", "kernels", "override", "SM90_SWIZZLES"]


def cuda_backends():
    """The CUDA forward backends, in the order the dispatch rule tries them."""
    return _C.cuda_backends()


def kernels(family=None, op="gemm_act"):
    """The kernel configurations this build compiled: a tuple of dicts with
    family, name, dtype, b_layout, stores_z, op and c_source (how the
    epilogue reads C: "gmem" element-wise, "tma" through TMA), from the
    families' tables. ``op``: the operator they compute ("gemm_act",
    "gemm_dact", "gemm_glu"; None: any)."""
    rows = (dict(zip(("family", "name", "dtype", "b_layout", "stores_z", "op", "c_source"), k)) for k in _C.kernels())
    return tuple(r for r in rows if (family is None or r["family"] == family) and
                 (op is None or r["op"] == op))


SM90_SWIZZLES = (0, 1, 2, 4, 8)  # the bands CUTLASS's tile scheduler takes; 0: the heuristic's


@contextlib.contextmanager
def override(*, cuda_backend=None, sm90_kernel=None, sm80_kernel=None, sm90_swizzle=None, poison_outputs=None,
             operator_everywhere=None):
    """Forces what is given (None keeps the current setting) inside the block."""
    previous = _C.testing_overrides()
    everywhere = _policy._operator_everywhere
    if sm90_swizzle is not None and sm90_swizzle not in SM90_SWIZZLES:
        raise ValueError(f"sm90_swizzle must be one of {', '.join(map(str, SM90_SWIZZLES))}, got {sm90_swizzle!r}")
    if cuda_backend not in (None, "") and cuda_backend not in cuda_backends():
        raise ValueError(f"no CUDA backend {cuda_backend!r} in this build; expected one of "
                         f"{', '.join(cuda_backends()) or '(none: a CPU-only build)'}")
    for family, kernel in (("sm90", sm90_kernel), ("sm80", sm80_kernel)):
        names = sorted({k["name"] for k in kernels(family, op=None)})
        if kernel is not None and kernel not in names:
            raise ValueError(f"no {family} kernel configuration {kernel!r} in this build; expected one "
                             f"of {', '.join(names) or '(none)'}")
    backend, kernel90, poison, kernel80, swizzle = previous
    _C.set_testing_overrides(
        backend if cuda_backend is None else cuda_backend,
        kernel90 if sm90_kernel is None else sm90_kernel,
        poison if poison_outputs is None else bool(poison_outputs),
        kernel80 if sm80_kernel is None else sm80_kernel,
        swizzle if sm90_swizzle is None else int(sm90_swizzle))
    if operator_everywhere is not None:
        _policy._operator_everywhere = bool(operator_everywhere)
    try:
        yield
    finally:
        _C.set_testing_overrides(*previous)
        _policy._operator_everywhere = everywhere

"""The lab's rows of the sm90 table (csrc/cuda/sm90/sm90_kernels.py): kernels
measured against the release ones and not kept, compiled only in a build with
GEMM_ACT_LAB=1 (then forced with torch_gemm_act.testing.override, e.g. by
bench/kernel_sweep.py). They never run unless forced."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "sm90_kernels", os.path.join(os.path.dirname(__file__), "..", "..", "csrc", "cuda", "sm90", "sm90_kernels.py"))
sm90 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sm90)

ROTATING = dict(assembly=1, header="sm90/rotating_assembly.cuh")

ROWS = (
    # The rotating kernel: N math warpgroups, a tile each, the activation
    # computed before the turn-taking store.
    sm90.Sm90Config("rotating2_128x128_c1x2", "pingpong", (128, 128), (1, 2), (64, 64), (sm90.BF16_K,),
                    extra={"kMathWarpgroups": 2}, **ROTATING),
    sm90.Sm90Config("rotating3_128x96_c1x2", "pingpong", (128, 96), (1, 2), (64, 32), (sm90.BF16_K,),
                    extra={"kMathWarpgroups": 3}, **ROTATING),
    sm90.Sm90Config("rotating3_64x192_c1x2", "pingpong", (64, 192), (1, 2), (64, 32), (sm90.BF16_K,),
                    extra={"kMathWarpgroups": 3}, **ROTATING),
    # gemm_dact with the ping-pong schedule, for short K as the forward's.
    sm90.Sm90Config("pingpong_128x128_c1x2_dact", "pingpong", (128, 128), (1, 2), (64, sm90.ROW),
                    (sm90.BF16_N,), stores_z=False, op="gemm_dact", header="cuda/sm90/sm90_dact_kernel.cuh"),
)

# The no-Z cooperative kernel for bf16 too (fp32 has it in every build).
EXTRA_TARGETS = {"cooperative_128x256_c1x2_noz": (sm90.BF16_K,)}

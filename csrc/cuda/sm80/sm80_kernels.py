"""The sm80 family's kernel configurations, declared once, and the generator
that turns them into C++ at build time (setup.py calls `generate`).

Each row is a configuration named by what it is: mma.sync, CTA tile M x N,
K per pipeline stage, stages. Every configuration gives each warp a 64 x 64
output tile, so the tile fixes the warp count; its shared memory is its
stages of A and B (the epilogue reuses it). Its targets are the (dtype, B
layout) pairs it is compiled for, each one translation unit holding one
kernel per activation. The generated `sm80_kernel_table.h` gives the
entry, the heuristic and the kernels the rows, and the compiled extension
lists them to Python (`torch_gemm_act.testing.kernels("sm80")`).
"""

import importlib.util
import os
from dataclasses import dataclass

_spec = importlib.util.spec_from_file_location(
    "gemm_act_codegen", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "codegen.py"))
codegen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(codegen)

DTYPES = {"f16": "F16", "bf16": "BF16"}
LAYOUTS = {"kmajor": "KMajor", "nmajor": "NMajor"}
BF16_K, BF16_N, F16_K, F16_N = ("bf16", "kmajor"), ("bf16", "nmajor"), ("f16", "kmajor"), ("f16", "nmajor")


@dataclass(frozen=True)
class Sm80Config:
    name: str
    tile: tuple    # CTA tile (M, N)
    tile_k: int    # K per pipeline stage
    stages: int
    targets: tuple  # ((dtype, b layout), ...)
    # What the kernel computes: "gemm_act" (the forward) or "gemm_glu" (a
    # gated MLP's projections and gate: sm80_kernel.cuh with kGlu).
    op: str = "gemm_act"


CONFIGS = (
    # Fits sm_86/89's 99 KiB of shared memory per block; every dtype and layout.
    Sm80Config("mma_128x256x32_s4", (128, 256), 32, 4, (BF16_K, BF16_N, F16_K, F16_N)),
    # Four warps: two CTAs share an SM, one's epilogue beside the other's MMAs.
    Sm80Config("mma_128x128x32_s4", (128, 128), 32, 4, (BF16_K,)),
    # Half the barriers per MMA of K = 32; needs sm_80/90's larger opt-in.
    Sm80Config("mma_128x256x64_s3", (128, 256), 64, 3, (BF16_K,)),
    # gemm_glu: the default tile over both weights' columns (K-major:
    # nn.Linear's weights).
    Sm80Config("mma_128x256x32_s4_glu", (128, 256), 32, 4, (BF16_K, F16_K), op="gemm_glu"),
)

# op: (launcher, X-macro listing its kernels).
OPS = {"gemm_act": ("launch_kernel", "GEMM_ACT_SM80_FOR_EACH_KERNEL"),
       "gemm_glu": ("launch_glu_kernel", "GEMM_ACT_SM80_FOR_EACH_GLU_KERNEL")}

GENERATED = "Generated from csrc/cuda/sm80/sm80_kernels.py by setup.py; do not edit."


def table_header(rows=CONFIGS):
    configs = " \\\n".join(f"  X({r.name}, {r.tile[0]}, {r.tile[1]}, {r.tile_k}, {r.stages})" for r in rows)
    lists = "\n".join(
        f"// X(configuration, Dtype, BLayout) for every compiled {op} kernel: one unit each.\n"
        f"#define {macro}(X) \\\n" +
        " \\\n".join(f"  X({r.name}, {DTYPES[d]}, {LAYOUTS[l]})" for r in rows if r.op == op for d, l in r.targets) +
        "\n"
        for op, (_, macro) in OPS.items())
    return f"""// {GENERATED}
#pragma once

// X(name, tile M, tile N, tile K, stages) for every configuration.
#define GEMM_ACT_SM80_FOR_EACH_CONFIG(X) \\
{configs}

{lists}"""


def kernel_unit(r, dtype, layout):
    spec = f"KernelConfig::{r.name}, Dtype::{DTYPES[dtype]}, BLayout::{LAYOUTS[layout]}"
    return f"""// {GENERATED}
// {r.name} for {dtype} with a {layout} B: one kernel per activation (the bias
// kind is dispatched at launch). Compile for sm_80 and later; see sm80_kernel.cuh.
#include "cuda/sm80/sm80_launch_template.cuh"

namespace gemm_act {{
namespace sm80 {{

#define GEMM_ACT_SM80_INSTANTIATE(e, name, from_y, slope) \\
  template cudaError_t {OPS[r.op][0]}<{spec}, Activation::e>(const GemmActParams&, cudaStream_t);
GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_SM80_INSTANTIATE)
#undef GEMM_ACT_SM80_INSTANTIATE

}}  // namespace sm80
}}  // namespace gemm_act
"""


def generate(out_dir):
    """Writes out_dir/cuda/sm80/sm80_kernel_table.h and one .cu per kernel
    target under out_dir/cuda/sm80/kernels/, removing stale ones; returns
    the .cu paths."""
    names = [r.name for r in CONFIGS]
    if len(set(names)) != len(names):
        raise ValueError(f"sm80 configurations named twice: {names}")
    base = os.path.join(out_dir, "cuda", "sm80")
    codegen.write(os.path.join(base, "sm80_kernel_table.h"), table_header())
    return codegen.write_units(os.path.join(base, "kernels"), {
        f"sm80_{r.name}_{dtype}_{layout}.cu": kernel_unit(r, dtype, layout)
        for r in CONFIGS for dtype, layout in r.targets})

"""The sm90 family's kernel configurations, declared once, and the generator
that turns them into C++ at build time (setup.py calls `generate`).

Each row is a configuration named by what it is: schedule, CTA tile, K depth
per pipeline stage (k2: two 128-byte swizzle rows, else one), cluster,
shared-memory store buffers (s1: one each for Y and Z), noz where it
has no Z store at all, and tmac where C comes through TMA. Its targets are the (dtype, B layout) pairs it is
compiled for; each target is one small translation unit holding one kernel
per activation, so the build runs them in parallel. The generated header
`sm90_kernel_table.h` gives the entry and the heuristic (C++) the names,
and the compiled extension lists them to Python
(`torch_gemm_act.testing.kernels()`), so no number or copy of this table
exists anywhere else. Why each configuration exists: docs/DESIGN.md, "sm90
configurations".
"""

import importlib.util
import os
from dataclasses import dataclass, field, replace

_spec = importlib.util.spec_from_file_location(
    "gemm_act_codegen", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "codegen.py"))
codegen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(codegen)

ROW = 0  # an epilogue subtile one 128-byte swizzle row wide (64 fp16/bf16, 32 fp32 elements)

DTYPES = {"f16": "F16", "bf16": "BF16", "f32": "F32"}
LAYOUTS = {"kmajor": "KMajor", "nmajor": "NMajor"}
SCHEDULES = {"cooperative": "Cooperative", "pingpong": "Pingpong"}

F16_K, BF16_K, F32_K = ("f16", "kmajor"), ("bf16", "kmajor"), ("f32", "kmajor")
F16_N, BF16_N = ("f16", "nmajor"), ("bf16", "nmajor")


@dataclass(frozen=True)
class Sm90Config:
    name: str
    schedule: str                 # "cooperative" or "pingpong"
    tile: tuple                   # CTA tile (M, N)
    cluster: tuple                # (M, N)
    epilogue_tile: tuple          # subtile (M, N); N = ROW: one swizzle row
    targets: tuple                # ((dtype, b layout), ...)
    k_swizzle_rows: int = 1       # K per pipeline stage, in swizzle rows
    store_stages: int = 0         # buffers each for Y and Z; 0: CUTLASS's builder's choice
    stores_z: bool = True
    # How the epilogue reads C: "gmem", each thread its own elements straight
    # from global memory (any strides, no shared memory); "tma", the producer
    # warp loads each subtile of C into shared memory while the consumers run
    # the tile's mainloop (C contiguous rows aligned to 16 bytes only).
    source: str = "gmem"
    # What the kernel computes: "gemm_act" (the forward), "gemm_dact" (the
    # input gradient through the layer before's activation,
    # sm90_dact_kernel.cuh) or "gemm_glu" (a gated MLP's projections and
    # gate, sm90_glu_kernel.cuh).
    op: str = "gemm_act"
    # How the kernel is put together: KernelAssembly<assembly> in `header`.
    assembly: int = 0
    header: str = "cuda/sm90/sm90_kernel.cuh"
    extra: dict = field(default_factory=dict)  # more ConfigSpec constants, for other assemblies


CONFIGS = (
    # The best mainloop for long K and the fastest epilogue (all 256 consumer
    # threads run it); the default for fp16/bf16.
    Sm90Config("cooperative_128x256_c1x2", "cooperative", (128, 256), (1, 2), (128, ROW),
               (BF16_K, F16_K, BF16_N, F16_N)),
    # TF32: a stage holds K = 32 only; one store buffer each for Y and Z
    # leaves room for a fourth stage.
    Sm90Config("cooperative_128x256_c1x2_s1", "cooperative", (128, 256), (1, 2), (128, ROW),
               (F32_K,), store_stages=1),
    # TF32 without Z: no Z buffers, a fourth stage and Y's two buffers.
    Sm90Config("cooperative_128x256_c1x2_noz", "cooperative", (128, 256), (1, 2), (128, ROW),
               (F32_K,), stores_z=False),
    # Where it needs fewer waves of tiles than 128x256.
    Sm90Config("cooperative_256x128_c2x1", "cooperative", (256, 128), (2, 1), (128, 32),
               (BF16_K, F16_K)),
    # Wide N, short K, and small M.
    Sm90Config("pingpong_128x128_c1x2", "pingpong", (128, 128), (1, 2), (64, ROW),
               (BF16_K, F16_K, F32_K)),
    # 64 < M <= 128.
    Sm90Config("pingpong_128x64_c1x2", "pingpong", (128, 64), (1, 2), (64, 32), (BF16_K, F16_K)),
    # M <= 64.
    Sm90Config("pingpong_64x128_k2_c1x1", "pingpong", (64, 128), (1, 1), (64, 32),
               (BF16_K, F16_K), k_swizzle_rows=2),
    # The residual form Linear(x) + bias + residual: C loaded by TMA, hidden
    # behind the mainloop, at the default tile and at ping-pong's.
    Sm90Config("cooperative_128x256_c1x2_tmac", "cooperative", (128, 256), (1, 2), (128, ROW),
               (BF16_K, F16_K), source="tma"),
    Sm90Config("pingpong_128x128_c1x2_tmac", "pingpong", (128, 128), (1, 2), (64, ROW),
               (BF16_K, F16_K), source="tma"),
    # gemm_dact, the MLP backward's fused dZ1 = (dZ2 @ W2) * act'(Z1): the
    # forward's default tile; an nn.Linear's W2 is the N-major B, Conv1D's
    # the K-major one.
    Sm90Config("cooperative_128x256_c1x2_dact", "cooperative", (128, 256), (1, 2), (128, ROW),
               (BF16_N, F16_N, BF16_K, F16_K), stores_z=False, op="gemm_dact",
               header="cuda/sm90/sm90_dact_kernel.cuh"),
    # gemm_glu's fused forward (inference), both weights read K-major where
    # they are (nn.Linear's), no Z: the forward's default tile, forced only.
    Sm90Config("cooperative_128x256_c1x2_glu", "cooperative", (128, 256), (1, 2), (128, ROW),
               (BF16_K, F16_K), stores_z=False, op="gemm_glu",
               header="cuda/sm90/sm90_glu_kernel.cuh"),
    # Its ping-pong twin, the rule's (glu_pingpong): one consumer's epilogue
    # beside the other's mainloop.
    Sm90Config("pingpong_128x128_c1x2_glu", "pingpong", (128, 128), (1, 2), (64, ROW),
               (BF16_K, F16_K), stores_z=False, op="gemm_glu",
               header="cuda/sm90/sm90_glu_kernel.cuh"),
    # gemm_dropout_add, residual + dropout(Linear(x) + bias), the mask drawn
    # in the epilogue: ping-pong's tmac tile, the residual's fastest up to
    # K = 3072 (rule tma_source); nn.Linear's weight is the K-major B,
    # Conv1D's the N-major one.
    Sm90Config("pingpong_128x128_c1x2_drop", "pingpong", (128, 128), (1, 2), (64, ROW),
               (BF16_K, F16_K, BF16_N, F16_N), stores_z=False, source="tma", op="gemm_dropout_add",
               header="cuda/sm90/sm90_dropout_kernel.cuh"),
)

# op: (its KernelOp enumerator, launcher, X-macro listing its kernels).
OPS = {"gemm_act": ("GemmAct", "launch_kernel", "GEMM_ACT_SM90_FOR_EACH_KERNEL"),
       "gemm_dact": ("GemmDact", "launch_dact_kernel", "GEMM_ACT_SM90_FOR_EACH_DACT_KERNEL"),
       "gemm_glu": ("GemmGlu", "launch_glu_kernel", "GEMM_ACT_SM90_FOR_EACH_GLU_KERNEL"),
       "gemm_dropout_add": ("GemmDropoutAdd", "launch_dropout_kernel", "GEMM_ACT_SM90_FOR_EACH_DROPOUT_KERNEL")}
# The ops whose kernels have no activation: one kernel a unit (Activation::None).
NO_ACTIVATION = ("gemm_dropout_add",)

GENERATED = "Generated from csrc/cuda/sm90/sm90_kernels.py by setup.py; do not edit."


def rows_with(extra_rows=(), extra_targets=None):
    """The table with extra rows and targets added (an experiment branch's)."""
    rows = list(CONFIGS) + list(extra_rows)
    names = [r.name for r in rows]
    if len(set(names)) != len(names):
        raise ValueError(f"sm90 configurations named twice: {sorted(n for n in names if names.count(n) > 1)}")
    for name, targets in (extra_targets or {}).items():
        i = names.index(name)
        rows[i] = replace(rows[i], targets=tuple(rows[i].targets) + tuple(targets))
    for r in rows:
        tma_ops, tma_only = ("gemm_act", "gemm_dropout_add"), ("gemm_dropout_add",)
        if not (r.source == "gmem" and r.op not in tma_only or r.source == "tma" and r.op in tma_ops):
            raise ValueError(f"{r.name}: source {r.source!r}; expected 'gmem', or 'tma' for a gemm_act row "
                             f"('tma' always for gemm_dropout_add)")
        if r.op not in OPS:
            raise ValueError(f"{r.name}: no such op {r.op!r}; expected one of {sorted(OPS)}")
        for dtype, layout in r.targets:
            if dtype not in DTYPES or layout not in LAYOUTS or (dtype == "f32" and layout != "kmajor"):
                raise ValueError(f"{r.name}: no such target ({dtype}, {layout})")
        tma_twin(r, rows)
    return rows


def _spec(r):
    g = (r.tile[0], r.tile[1], r.k_swizzle_rows, r.cluster[0], r.cluster[1])
    lines = [
        f"template <>\nstruct ConfigSpec<KernelConfig::{r.name}> {{",
        f"  static constexpr Schedule kSchedule = Schedule::{SCHEDULES[r.schedule]};",
        f"  static constexpr TileGeometry kGeometry{{{', '.join(map(str, g))}}};",
        f"  static constexpr int kEpilogueM = {r.epilogue_tile[0]}, kEpilogueN = {r.epilogue_tile[1]};",
        f"  static constexpr int kStoreStages = {r.store_stages};",
        f"  static constexpr bool kStoresZ = {'true' if r.stores_z else 'false'};",
        f"  static constexpr bool kSourceTma = {'true' if r.source == 'tma' else 'false'};",
        f"  static constexpr int kAssembly = {r.assembly};",
    ]
    lines += [f"  static constexpr int {k} = {v};" for k, v in r.extra.items()]
    return "\n".join(lines + ["};"])


def _switch(fn, ret, rows, expr, default):
    cases = "\n".join(f"    case KernelConfig::{r.name}:\n      return {expr(r)};" for r in rows)
    return (f"constexpr {ret} {fn}(KernelConfig c) {{\n  switch (c) {{\n{cases}\n  }}\n"
            f"  return {default};\n}}")


def tma_twin(r, rows):
    """The name of r's twin that loads C through TMA (rule tma_source; the
    heuristic finds it by the same name, config_tma_twin): the row named
    r.name + "_tmac", where there is one; r's own name otherwise."""
    twin = next((t for t in rows if t.name == f"{r.name}_tmac"), None)
    if twin is None or r.source != "gmem":
        return r.name
    if twin.source != "tma" or twin.op != r.op or not set(twin.targets) <= set(r.targets):
        raise ValueError(f"{twin.name}: source {twin.source!r}, op {twin.op!r}, targets {twin.targets}; a tmac "
                         f"twin has source 'tma', {r.name}'s op {r.op!r} and a subset of its targets {r.targets}")
    return twin.name


def table_header(rows):
    kernels = [(r, d, l) for r in rows for d, l in r.targets]
    enumerators = "\n".join(f"  {r.name} = {i}," for i, r in enumerate(rows))
    compiled = " ||\n         ".join(
        f"(c == KernelConfig::{r.name} && d == Dtype::{DTYPES[d]} && l == BLayout::{LAYOUTS[l]})"
        for r, d, l in kernels)
    x_macros = [
        f"// X(configuration, Dtype, BLayout) for every compiled {op} kernel.\n#define {macro}(X)" +
        "".join(f" \\\n  X({r.name}, {DTYPES[d]}, {LAYOUTS[l]})" for r, d, l in kernels if r.op == op) +
        "\n"
        for op, (_, _, macro) in OPS.items()]
    ops = "\n".join(f"  {enumerator}," for enumerator, _, _ in OPS.values())
    parts = [
        f"// {GENERATED}",
        "#pragma once\n\n#include \"cuda/sm90/sm90_types.h\"\n",
        "namespace gemm_act {\nnamespace sm90 {\n",
        f"enum class KernelConfig : int {{\n{enumerators}\n}};\n",
        f"// The operator a configuration's kernels compute.\nenum class KernelOp : int {{\n{ops}\n}};\n",
        f"constexpr int kNumKernelConfigs = {len(rows)};\n",
        "\n\n".join(_spec(r) for r in rows) + "\n",
        _switch("config_name", "const char*", rows, lambda r: f'"{r.name}"', '"?"') + "\n",
        _switch("tile_geometry", "TileGeometry", rows,
                lambda r: f"ConfigSpec<KernelConfig::{r.name}>::kGeometry", "TileGeometry{}") + "\n",
        _switch("config_stores_z", "bool", rows,
                lambda r: f"ConfigSpec<KernelConfig::{r.name}>::kStoresZ", "false") + "\n",
        _switch("config_source_tma", "bool", rows,
                lambda r: f"ConfigSpec<KernelConfig::{r.name}>::kSourceTma", "false") + "\n",
        _switch("config_op", "KernelOp", rows, lambda r: f"KernelOp::{OPS[r.op][0]}", "KernelOp::GemmAct") + "\n",
        "constexpr const char* op_name(KernelOp op) {\n  switch (op) {\n" +
        "".join(f'    case KernelOp::{e}:\n      return "{name}";\n' for name, (e, _, _) in OPS.items()) +
        '  }\n  return "?";\n}\n',
        "// Whether configuration c is compiled for dtype d and B layout l.",
        f"constexpr bool is_compiled(KernelConfig c, Dtype d, BLayout l) {{\n  return {compiled};\n}}\n",
        *x_macros,
        "}  // namespace sm90\n}  // namespace gemm_act\n",
    ]
    return "\n".join(parts)


def kernel_unit(r, dtype, layout):
    spec = f"KernelConfig::{r.name}, Dtype::{DTYPES[dtype]}, BLayout::{LAYOUTS[layout]}"
    launcher = OPS[r.op][1]
    if r.op in NO_ACTIVATION:
        what = "its one kernel (no activation)"
        body = f"template LaunchResult {launcher}<{spec}, Activation::None>(const LaunchArgs&);\n"
    else:
        what = "one kernel per activation"
        body = (f"#define GEMM_ACT_SM90_INSTANTIATE(e, name, from_y, slope) \\\n"
                f"  template LaunchResult {launcher}<{spec}, Activation::e>(const LaunchArgs&);\n"
                "GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_SM90_INSTANTIATE)\n#undef GEMM_ACT_SM90_INSTANTIATE\n")
    return f"""// {GENERATED}
// {r.name} for {dtype} with a {layout} B: {what}. Compile
// for sm_90a only (see sm90_kernel.cuh).
#include "{r.header}"

namespace gemm_act {{
namespace sm90 {{

{body}
}}  // namespace sm90
}}  // namespace gemm_act
"""


def compile_check_rows(rows):
    """The rows of a compile-check build: for each (op, schedule), the first
    row's first target, so that every kernel header and schedule compiles;
    the other rows keep no targets."""
    seen, out = set(), []
    for r in rows:
        kind = (r.op, r.schedule)
        out.append(replace(r, targets=tuple(r.targets[:1]) if kind not in seen and r.targets else ()))
        if r.targets:
            seen.add(kind)
    return out


def generate(out_dir, extra_rows=(), extra_targets=None, compile_check=False):
    """Writes out_dir/cuda/sm90/sm90_kernel_table.h and one .cu per kernel
    target under out_dir/cuda/sm90/kernels/, removing stale ones; returns
    the .cu paths. With compile_check, only compile_check_rows' targets."""
    rows = rows_with(extra_rows, extra_targets)
    if compile_check:
        rows = compile_check_rows(rows)
    base = os.path.join(out_dir, "cuda", "sm90")
    codegen.write(os.path.join(base, "sm90_kernel_table.h"), table_header(rows))
    return codegen.write_units(os.path.join(base, "kernels"), {
        f"sm90_{r.name}_{dtype}_{layout}.cu": kernel_unit(r, dtype, layout)
        for r in rows for dtype, layout in r.targets})

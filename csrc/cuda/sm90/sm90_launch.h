// The seam between the sm90 entry (sm90_gemm_act.cu, which sees PyTorch) and
// the kernel instantiations (sm90_inst_*.cu, which see CUTLASS and nothing of
// PyTorch, so each compiles without parsing the ATen headers).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {

// Storage type of A, B, C, bias, Y and Z (all equal); fp32 accumulation.
// F32 multiplies on the TF32 tensor cores (only when PyTorch's matmul
// precision setting allows TF32, as for torch.mm).
enum class Dtype : int { F16 = 0, BF16 = 1, F32 = 2 };

// How B [K, N] is laid out: KMajor is column-major, b_stride_k == 1 (the
// weight.t() of an nn.Linear: a "TN" GEMM); NMajor is row-major, b_stride_n == 1.
// F32 has KMajor only: wgmma reads TF32 operands K-major only.
enum class BLayout : int { KMajor = 0, NMajor = 1 };

// Where the persistent scheduler walks the tile grid first (CUTLASS's
// RasterOrderOptions, spelled out so this header needs no CUTLASS).
enum class Raster : int { Heuristic = 0, AlongM = 1, AlongN = 2 };

// The tile configurations compiled for every (dtype, B layout, activation);
// sm90_heuristic.h says which one a problem gets.
enum class KernelConfig : int {
  // 128x256x64 CTA tile, both consumer warpgroups on one tile (64x256 each),
  // cluster 1x2: the best mainloop for long K and the fastest epilogue
  // throughput (all 256 consumer threads run it at once).
  kCooperative128x256 = 0,
  // 128x128 tile (K = one swizzle row per stage) per consumer warpgroup, the
  // two warpgroups alternating, so one's epilogue overlaps the other's
  // mainloop; cluster 1x2. Twice the tiles: better for small M and for wide
  // N or short K. Compiled for fp16/bf16 and fp32 (TF32) with column-major B
  // (the nn.Linear case); row-major B runs cooperative.
  kPingpong128x128 = 1,
  // The ping-pong kernel with 128x64 tiles, for 64 < M <= 128: each CTA
  // streams two or more 64-column slices of the weight, so one tile's
  // epilogue overlaps the next one's loads instead of ending the launch
  // (the MMA's shared-memory reads per flop, worse than 128x128's, do not
  // matter where the weight read is the whole cost). Compiled where
  // ping-pong is.
  kPingpong128x64 = 13,
  // The ping-pong kernel with 64x128 tiles, K = 128 per pipeline stage and
  // no cluster, for M <= 64 (inference with a few tokens): the weight
  // streams through as many CTAs as with 128x128 tiles, with half the
  // wasted MMA rows; each stage holds two 128-byte swizzle rows of the
  // weight, so a TMA load moves twice the bytes; and with 16 rows of A
  // there is nothing worth multicasting. Compiled where ping-pong is.
  kPingpong64x128K128 = 22,
  // The cooperative kernel with 256x128 tiles (128x128 per warpgroup) and a
  // cluster of 2x1 sharing the B tile: a slightly weaker mainloop than
  // 128x256 (2-3%), taken where it needs fewer waves of tiles, e.g. where
  // N is a little above a multiple of 256 (8191x4095x4097: 8 waves instead
  // of 9). Compiled where ping-pong is.
  kCooperative256x128 = 4,
  // The 128x256 cooperative kernel without Z's shared-memory store buffers,
  // which leaves room for a fourth pipeline stage; takes only cases that
  // store no Z. Compiled for fp32 (TF32), whose stages hold K = 32 only;
  // for bf16 in sweep builds.
  kCooperative128x256NoZ = 25,
#ifdef GEMM_ACT_SM90_SWEEP
  // Candidates measured by bench/sm90_sweep.py in a build with
  // GEMM_ACT_SM90_SWEEP=1 (bf16, column-major B). Numbers 2, 3, 5-12, 14,
  // 18-21, 23, 24 and 26 were epilogue-subtile, store-buffer, cluster, tile
  // and K-depth variants of the tiles above, kernels without the Z store
  // and stores straight from the registers, measured no better
  // (bench/results/*_sweep.log) and retired.
  // The rotating kernel (sm90_rotating_kernel.cuh), every activation: N math
  // warpgroups with an MxN tile each, the activation computed before the
  // turn-taking store.
  kRotating2x128x128 = 15,
  kRotating3x128x96 = 16,
  kRotating3x64x192 = 17,
#endif
};

// The shape of each configuration's work: the CTA tile (M x N), its depth
// along K in 128-byte shared-memory swizzle rows (64 fp16/bf16 or 32 fp32
// elements each), and the cluster of CTAs. Written here only: the kernels'
// configurations (sm90_gemm_act_kernel.cuh) and the heuristic
// (sm90_heuristic.h) both read this table.
struct TileGeometry {
  int tile_m, tile_n, k_swizzle_rows, cluster_m, cluster_n;
};

constexpr TileGeometry tile_geometry(KernelConfig config) {
  switch (config) {
    case KernelConfig::kPingpong128x128:
      return {128, 128, 1, 1, 2};
    case KernelConfig::kPingpong128x64:
      return {128, 64, 1, 1, 2};
    case KernelConfig::kPingpong64x128K128:
      return {64, 128, 2, 1, 1};
    case KernelConfig::kCooperative256x128:
      return {256, 128, 1, 2, 1};
    case KernelConfig::kCooperative128x256NoZ:
      return {128, 256, 1, 1, 2};
#ifdef GEMM_ACT_SM90_SWEEP
    case KernelConfig::kRotating2x128x128:
      return {128, 128, 1, 1, 2};
    case KernelConfig::kRotating3x128x96:
      return {128, 96, 1, 1, 2};
    case KernelConfig::kRotating3x64x192:
      return {64, 192, 1, 1, 2};
#endif
    case KernelConfig::kCooperative128x256:
    default:
      return {128, 256, 1, 1, 2};
  }
}

inline bool is_rotating(KernelConfig config) {
#ifdef GEMM_ACT_SM90_SWEEP
  return config == KernelConfig::kRotating2x128x128 || config == KernelConfig::kRotating3x128x96 ||
         config == KernelConfig::kRotating3x64x192;
#else
  return (void)config, false;
#endif
}

// Everything a kernel launch needs beyond the op's parameters. Filled by the
// entry after it checked that the case is one TMA can take.
struct LaunchArgs {
  const GemmActParams* params = nullptr;
  int device = 0;
  int sm_count = 0;
  KernelConfig config = KernelConfig::kCooperative128x256;
  int max_swizzle = 1;  // grouped rasterisation: bands of 1, 2, 4 or 8 clusters
  Raster raster = Raster::Heuristic;
  // Device memory for the kernel's workspace (zero bytes for the persistent
  // scheduler used today; the hook is here so a stream-K or split-K variant
  // needs no change of interface). Must stay valid until the kernel ran on
  // `stream`, which holds for the caching allocator on the current stream.
  void* (*alloc_workspace)(void* ctx, size_t bytes) = nullptr;
  void* alloc_ctx = nullptr;
  cudaStream_t stream = nullptr;
};

enum class LaunchStatus : int {
  kOk = 0,
  kNotImplementable,  // CUTLASS's can_implement said no: nothing was launched
  kUnknownConfig,     // la.config is not compiled for this case: nothing was launched
  kError,             // a CUDA error; cudaGetLastError() was read into `error`
};

struct LaunchResult {
  LaunchStatus status = LaunchStatus::kOk;
  cudaError_t error = cudaSuccess;
  const char* what = "";  // which step failed
};

// One entry per (dtype, B layout, activation), instantiating its configs;
// bias kind, C and Z are run-time.
template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_gemm_act(const LaunchArgs& args);

#define GEMM_ACT_SM90_FOR_EACH_ACT(X, DT, BL) \
  X(DT, BL, ::gemm_act::Activation::None)     \
  X(DT, BL, ::gemm_act::Activation::ReLU)     \
  X(DT, BL, ::gemm_act::Activation::LeakyReLU) \
  X(DT, BL, ::gemm_act::Activation::Tanh)     \
  X(DT, BL, ::gemm_act::Activation::Sigmoid)  \
  X(DT, BL, ::gemm_act::Activation::GELU)     \
  X(DT, BL, ::gemm_act::Activation::GELUTanh) \
  X(DT, BL, ::gemm_act::Activation::SiLU)

#define GEMM_ACT_SM90_EXTERN(DT, BL, ACT) \
  extern template LaunchResult launch_gemm_act<DT, BL, ACT>(const LaunchArgs&);

GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_EXTERN, Dtype::F16, BLayout::KMajor)
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_EXTERN, Dtype::BF16, BLayout::KMajor)
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_EXTERN, Dtype::F16, BLayout::NMajor)
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_EXTERN, Dtype::BF16, BLayout::NMajor)
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_EXTERN, Dtype::F32, BLayout::KMajor)

#undef GEMM_ACT_SM90_EXTERN

}  // namespace sm90
}  // namespace gemm_act

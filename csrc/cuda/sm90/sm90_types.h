// The vocabulary of the sm90 family, without CUTLASS: what the entry, the
// heuristic and the generated kernel table (sm90_kernels.py) share.
#pragma once

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

// CUTLASS's two warp-specialised schedules: cooperative (both consumer
// warpgroups on one tile, each owning half its rows) and ping-pong (each
// warpgroup a whole tile, the two alternating, so one's epilogue overlaps
// the other's mainloop).
enum class Schedule : int { Cooperative = 0, Pingpong = 1 };

// The shape of a configuration's work: the CTA tile (M x N), its depth
// along K in 128-byte shared-memory swizzle rows (64 fp16/bf16 or 32 fp32
// elements each), and the cluster of CTAs.
struct TileGeometry {
  int tile_m, tile_n, k_swizzle_rows, cluster_m, cluster_n;
};

// A kernel configuration, by the name its row of the table has
// (sm90_kernels.py, which generates the enumerators).
enum class KernelConfig : int;

// What a configuration is: kSchedule, kGeometry, the epilogue subtile
// (kEpilogueM x kEpilogueN, 0 meaning one swizzle row), kStoreStages (shared-
// memory buffers each for Y and Z, 0: CUTLASS's builder decides), kStoresZ
// and kAssembly (which KernelAssembly puts its kernel together); generated
// for each row.
template <KernelConfig kConfig>
struct ConfigSpec;

// Puts a configuration's kernel together and launches it:
// KernelAssembly<kAssembly>::run<kConfig, kDtype, kB, kAct>(LaunchArgs).
// kCutlassAssembly is CUTLASS's kernels with this project's epilogue
// (sm90_kernel.cuh); an experiment branch may add others.
constexpr int kCutlassAssembly = 0;
template <int kAssembly>
struct KernelAssembly;

}  // namespace sm90
}  // namespace gemm_act

// Tile shapes of the SIMT GEMM, one per storage type, and the layouts derived
// from them: which output elements a thread owns, and how the shared-memory
// tiles are laid out.
//
// Block tile  BM x BN, K step BK; shared memory holds A as [BK][BM] and B as
// [BK][BN] (k-major, in the compute type, padded rows), double-buffered.
//
// Thread tile TM x TN accumulators in registers. The block's threads form a
// (BM / TM) x (BN / TN) grid; warps are kWarpRows x kWarpCols threads of it.
// A thread's TM rows are TM / kFrag groups of kFrag adjacent rows, the groups
// BM / (TM / kFrag) apart (likewise for columns), so each group is one
// 16-byte shared-memory read and a warp's reads are broadcasts or
// conflict-free:
//
//     row(i) = (i / kFrag) * kRowGroupStride + thread_row * kFrag + i % kFrag
//     col(j) = (j / kFrag) * kColGroupStride + thread_col * kFrag + j % kFrag
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/numeric.cuh"

namespace gemm_act {
namespace gpu {
namespace simt {

template <class Element_, int BM_, int BN_, int BK_, int TM_, int TN_, int kMinBlocksPerSm_ = 2>
struct SimtTileConfig {
  using Element = Element_;
  using Compute = typename Numeric<Element>::Compute;

  static constexpr int BM = BM_, BN = BN_, BK = BK_;  // block tile
  static constexpr int TM = TM_, TN = TN_;            // thread tile
  static constexpr int kThreadRows = BM / TM;
  static constexpr int kThreadCols = BN / TN;
  static constexpr int kThreads = kThreadRows * kThreadCols;

  // Adjacent rows (columns) a thread reads from shared memory at once: 16 bytes.
  static constexpr int kFrag = 16 / sizeof(Compute);
  static constexpr int kRowGroups = TM / kFrag;
  static constexpr int kColGroups = TN / kFrag;
  static constexpr int kRowGroupStride = kThreadRows * kFrag;  // = BM / kRowGroups
  static constexpr int kColGroupStride = kThreadCols * kFrag;  // = BN / kColGroups

  // A warp covers kWarpRows x kWarpCols threads of the thread grid.
  static constexpr int kWarpCols = 8;
  static constexpr int kWarpRows = 32 / kWarpCols;
  static constexpr int kWarpsAlongCols = kThreadCols / kWarpCols;

  // Shared-memory rows are padded by 16 bytes: keeps 16-byte alignment and
  // spreads the transposing stores of K-contiguous operands over the banks.
  static constexpr int kSmemPad = 16 / sizeof(Compute);
  static constexpr int kSmemLdA = BM + kSmemPad;
  static constexpr int kSmemLdB = BN + kSmemPad;
  // One buffer of each operand, in elements; two of each are in use.
  static constexpr int kSmemElemsA = BK * kSmemLdA;
  static constexpr int kSmemElemsB = BK * kSmemLdB;
  static constexpr int kSmemBytes = 2 * (kSmemElemsA + kSmemElemsB) * int(sizeof(Compute));

  // Global loads: elements per 16-byte vector in the storage type.
  static constexpr int kVecElems = 16 / sizeof(Element);

  // Blocks per SM the register budget is cut for (__launch_bounds__): two
  // blocks of 256 threads leave 128 registers a thread, one 255.
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;

  // Consecutive tile rows handed to one group of blocks (L2 reuse of B).
  static constexpr int kRasterGroupM = 8;

  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  static_assert(TM % kFrag == 0 && TN % kFrag == 0, "thread tile must be whole 16-byte fragments");
  static_assert(kThreadCols % kWarpCols == 0 && kThreadRows % kWarpRows == 0,
                "warps must tile the thread grid");
  static_assert(BK % kVecElems == 0, "BK must hold whole 16-byte vectors");
  static_assert(BM % kVecElems == 0 && BN % kVecElems == 0, "BM, BN must hold whole 16-byte vectors");
  static_assert((BM * BK) % (kThreads * kVecElems) == 0 && (BN * BK) % (kThreads * kVecElems) == 0,
                "each thread loads whole 16-byte vectors of A and B");
};

// 256 threads. float16 / bfloat16: 128 x 128 x 16 blocks, 8 x 8 per thread,
// at most 128 registers (two blocks per SM), a thread's share of a k-step one
// 16-byte vector of 8 elements (converted to float in shared memory).
// float32: the same tile at one block per SM: its two-level sum
// (simt_gemm_act_kernel.cuh) holds a second 8 x 8 of sums. float64: 128 x
// 64 x 8 blocks, 8 x 4 per thread. The tiles and BK were the fastest of
// those measured for the fallback; docs/DESIGN.md, "The SIMT family".
template <class Element>
struct SimtConfig;
template <>
struct SimtConfig<float> : SimtTileConfig<float, 128, 128, 16, 8, 8, 1> {};
template <>
struct SimtConfig<__half> : SimtTileConfig<__half, 128, 128, 16, 8, 8> {};
template <>
struct SimtConfig<__nv_bfloat16> : SimtTileConfig<__nv_bfloat16, 128, 128, 16, 8, 8> {};
template <>
struct SimtConfig<double> : SimtTileConfig<double, 128, 64, 8, 8, 4> {};

// A larger tile for large problems, where the storage type has one (none
// today); void: none.
template <class Element>
struct SimtLargeConfig {
  using type = void;
};

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

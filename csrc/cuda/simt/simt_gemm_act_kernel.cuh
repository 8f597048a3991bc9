// The SIMT GEMM + bias + activation kernel: any arch, any strides, any M, N, K.
//
// One thread block computes one BM x BN tile of the output:
//
//   mainloop   for each BK-wide k-step: A and B tiles go global -> registers
//              (OperandTileLoader; the next k-step's loads are in flight
//              while the current one is multiplied) -> shared memory (two
//              buffers, one __syncthreads per k-step); every thread
//              accumulates its TM x TN register tile with FMA (exact fp32 /
//              fp64 FMA: no TF32, no tensor cores).
//   epilogue   EpilogueBiasAct turns the accumulators into Y (and Z).
//
// Tiles are numbered along the 1-D grid.x (so M up to 2^31 fits) in groups
// of kRasterGroupM tile rows, so blocks running together share B in L2.
#pragma once

#include <cstdint>
#include <type_traits>

#include "activations.h"
#include "cuda/common/numeric.cuh"
#include "cuda/epilogue/bias_act_epilogue.cuh"
#include "cuda/simt/operand_tile_loader.cuh"
#include "cuda/simt/simt_config.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace simt {

template <class Element>
struct SimtGemmActParams {
  const Element* a = nullptr;  // [m, k], strides a_stride_m, a_stride_k
  const Element* b = nullptr;  // [k, n], strides b_stride_k, b_stride_n
  int64_t m = 0, n = 0, k = 0;
  int64_t a_stride_m = 0, a_stride_k = 0;
  int64_t b_stride_k = 0, b_stride_n = 0;
  OperandLoad a_load = OperandLoad::kScalarAlongK;
  OperandLoad b_load = OperandLoad::kScalarAlongK;
  int tiles_m = 0, tiles_n = 0;  // tiles_m * tiles_n blocks
  EpilogueParams<Element> epilogue;
};

// Block index -> (tile row, tile column), kGroupM tile rows at a time.
struct TileCoord {
  int m, n;
};

template <int kGroupM>
__device__ __forceinline__ TileCoord grouped_tile_coord(int block, int tiles_m, int tiles_n) {
  const int tiles_per_group = kGroupM * tiles_n;  // <= 8 * 2^25 (N < 2^31, BN >= 64): fits int
  const int group = block / tiles_per_group;
  const int first_m = group * kGroupM;
  const int group_rows = min(tiles_m - first_m, kGroupM);
  const int in_group = block - group * tiles_per_group;
  return {first_m + in_group % group_rows, in_group / group_rows};
}

// Which TM x TN output elements a thread owns (simt_config.cuh).
template <class Cfg>
struct ThreadTile {
  int row;  // thread row in the (BM / TM) x (BN / TN) thread grid
  int col;  // thread column

  __device__ __forceinline__ explicit ThreadTile(int tid) {
    const int warp = tid / 32, lane = tid % 32;
    row = (warp / Cfg::kWarpsAlongCols) * Cfg::kWarpRows + lane / Cfg::kWarpCols;
    col = (warp % Cfg::kWarpsAlongCols) * Cfg::kWarpCols + lane % Cfg::kWarpCols;
  }
  // Block-relative row of accumulator row i; column of accumulator column group g.
  __device__ __forceinline__ int acc_row(int i) const {
    return (i / Cfg::kFrag) * Cfg::kRowGroupStride + row * Cfg::kFrag + i % Cfg::kFrag;
  }
  __device__ __forceinline__ int acc_col_group(int g) const {
    return g * Cfg::kColGroupStride + col * Cfg::kFrag;
  }
};

__device__ __forceinline__ float fma_op(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma_op(double a, double b, double c) { return __fma_rn(a, b, c); }

// acc += As^T Bs over one k-step held in shared memory.
template <class Cfg>
__device__ __forceinline__ void multiply_k_step(const typename Cfg::Compute* smem_a,
                                                const typename Cfg::Compute* smem_b,
                                                const ThreadTile<Cfg>& tt,
                                                typename Cfg::Compute (&acc)[Cfg::TM][Cfg::TN]) {
  using Compute = typename Cfg::Compute;
  using Frag = AlignedArray<Compute, Cfg::kFrag>;
#pragma unroll
  for (int kk = 0; kk < Cfg::BK; ++kk) {
    Frag a_frag[Cfg::kRowGroups], b_frag[Cfg::kColGroups];
#pragma unroll
    for (int g = 0; g < Cfg::kRowGroups; ++g) {
      a_frag[g] = *reinterpret_cast<const Frag*>(smem_a + kk * Cfg::kSmemLdA + tt.acc_row(g * Cfg::kFrag));
    }
#pragma unroll
    for (int g = 0; g < Cfg::kColGroups; ++g) {
      b_frag[g] = *reinterpret_cast<const Frag*>(smem_b + kk * Cfg::kSmemLdB + tt.acc_col_group(g));
    }
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i) {
#pragma unroll
      for (int j = 0; j < Cfg::TN; ++j) {
        acc[i][j] = fma_op(a_frag[i / Cfg::kFrag].v[i % Cfg::kFrag], b_frag[j / Cfg::kFrag].v[j % Cfg::kFrag],
                           acc[i][j]);
      }
    }
  }
}

template <class Cfg, Activation kAct, BiasKind kBias>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    simt_gemm_act_kernel(const __grid_constant__ SimtGemmActParams<typename Cfg::Element> params) {
  using Element = typename Cfg::Element;
  using Compute = typename Cfg::Compute;
  using LoaderA = OperandTileLoader<Cfg, Cfg::BM>;
  using LoaderB = OperandTileLoader<Cfg, Cfg::BN>;
  constexpr int kSmemA = Cfg::kSmemElemsA;  // one buffer, elements
  constexpr int kSmemB = Cfg::kSmemElemsB;

  // Dynamic: the larger tiles need more than the 48 KiB a static array may take.
  extern __shared__ uint4 smem_raw[];
  Compute* const smem_a = reinterpret_cast<Compute*>(smem_raw);
  Compute* const smem_b = smem_a + 2 * kSmemA;

  const int tid = threadIdx.x;
  const TileCoord tile = grouped_tile_coord<Cfg::kRasterGroupM>(blockIdx.x, params.tiles_m, params.tiles_n);
  const int64_t m0 = static_cast<int64_t>(tile.m) * Cfg::BM;
  const int64_t n0 = static_cast<int64_t>(tile.n) * Cfg::BN;
  const ThreadTile<Cfg> tt(tid);

  Compute acc[Cfg::TM][Cfg::TN];
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = Compute(0);
  }
  // fp32 sums its k-steps in groups of kGroupSteps, each group's sum then
  // added to `total`: a two-level sum whose rounding error grows with the
  // group's length plus the number of groups, not with K. One fp32 chain
  // over a long K read 3x cuBLAS's error (whose split-K sums short runs).
  constexpr bool kTwoLevel = std::is_same_v<Element, float>;
  constexpr int kGroupSteps = 8;
  Compute total[kTwoLevel ? Cfg::TM : 1][kTwoLevel ? Cfg::TN : 1];
#pragma unroll
  for (int i = 0; i < (kTwoLevel ? Cfg::TM : 1); ++i) {
#pragma unroll
    for (int j = 0; j < (kTwoLevel ? Cfg::TN : 1); ++j) total[i][j] = Compute(0);
  }

  // ---- mainloop --------------------------------------------------------
  const int k_steps = static_cast<int>((params.k + Cfg::BK - 1) / Cfg::BK);  // 0 when K == 0
  if (k_steps > 0) {
    LoaderA load_a(params.a, m0, params.m, params.k, params.a_stride_m, params.a_stride_k, params.a_load, tid);
    LoaderB load_b(params.b, n0, params.n, params.k, params.b_stride_n, params.b_stride_k, params.b_load, tid);
    load_a.fetch();  // k-step 0 -> registers
    load_b.fetch();
    for (int step = 0; step < k_steps; ++step) {
      Compute* const stage_a = smem_a + (step & 1) * kSmemA;
      Compute* const stage_b = smem_b + (step & 1) * kSmemB;
      // This k-step -> its buffer. The buffer was last read two k-steps ago,
      // before every thread passed the previous iteration's barrier.
      load_a.store(stage_a);
      load_b.store(stage_b);
      __syncthreads();
      if (step + 1 < k_steps) {  // the next k-step's loads fly during the FMAs
        load_a.fetch();
        load_b.fetch();
      }
      multiply_k_step<Cfg>(stage_a, stage_b, tt, acc);
      if constexpr (kTwoLevel) {
        if ((step + 1) % kGroupSteps == 0 || step + 1 == k_steps) {
#pragma unroll
          for (int i = 0; i < Cfg::TM; ++i) {
#pragma unroll
            for (int j = 0; j < Cfg::TN; ++j) {
              total[i][j] += acc[i][j];
              acc[i][j] = Compute(0);
            }
          }
        }
      }
    }
  }
  if constexpr (kTwoLevel) {
#pragma unroll
    for (int i = 0; i < Cfg::TM; ++i) {
#pragma unroll
      for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = total[i][j];
    }
  }

  // ---- epilogue --------------------------------------------------------
  const EpilogueBiasAct<Element, kAct, kBias> epilogue(params.epilogue);
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
    const int64_t row = m0 + tt.acc_row(i);
#pragma unroll
    for (int g = 0; g < Cfg::kColGroups; ++g) {
      epilogue.template apply_row_segment<Cfg::kFrag>(row, n0 + tt.acc_col_group(g), &acc[i][g * Cfg::kFrag]);
    }
  }
}

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

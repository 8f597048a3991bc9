// The CuTe types of one sm80 kernel: shared-memory layouts, the cp.async
// (global -> shared) and ldmatrix (shared -> register) copies and the tiled
// mma.sync, for one row of the configuration table, dtype and B layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>  // first: the atom headers below assume it

#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <type_traits>

#include "cuda/sm80/sm80_cp_async.cuh"
#include "cuda/sm80/sm80_types.h"

namespace gemm_act {
namespace sm80 {

template <Dtype kDtype>
struct ElementTypes;

template <>
struct ElementTypes<Dtype::BF16> {
  using Cute = cute::bfloat16_t;  // what CuTe's tensors and atoms hold
  using Cuda = __nv_bfloat16;     // what the shared epilogue stores
  using MmaOp = cute::SM80_16x8x16_F32BF16BF16F32_TN;
};

template <>
struct ElementTypes<Dtype::F16> {
  using Cute = cute::half_t;
  using Cuda = __half;
  using MmaOp = cute::SM80_16x8x16_F32F16F16F32_TN;
};

template <KernelConfig kConfig, Dtype kDtype, BLayout kB>
struct KernelTraits {
  static constexpr ConfigInfo kInfo = config_info(kConfig);
  static constexpr int kTileM = kInfo.tile_m, kTileN = kInfo.tile_n, kTileK = kInfo.tile_k;
  static constexpr int kStages = kInfo.stages;
  static constexpr BLayout kBLayout = kB;

  using Element = typename ElementTypes<kDtype>::Cute;
  using CudaElement = typename ElementTypes<kDtype>::Cuda;
  using TileM = cute::Int<kTileM>;
  using TileN = cute::Int<kTileN>;
  using TileK = cute::Int<kTileK>;

  // Each warp owns a contiguous 64 x 64 block of the output tile.
  static constexpr int kWarpTile = 64;
  static constexpr int kWarpsM = kTileM / kWarpTile, kWarpsN = kTileN / kWarpTile;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static_assert(kTileM % kWarpTile == 0 && kTileN % kWarpTile == 0, "64 x 64 warp tiles");
  static_assert(kThreads == kInfo.threads, "the table's thread count");
  static_assert(kTileK == 32 || kTileK == 64, "a stage's K is one 64- or 128-byte row");

  // Shared memory, (rows, K, stage). K-major rows are BK elements (64 or 128
  // bytes); the XOR swizzle spreads the eight 16-byte rows an ldmatrix phase
  // reads, and the 16-byte cp.async writes of a quarter-warp, over all banks.
  using SmemAtomKMajor = decltype(cute::composition(
      cute::Swizzle<kTileK == 64 ? 3 : 2, 3, 3>{},
      cute::Layout<cute::Shape<cute::_8, TileK>, cute::Stride<TileK, cute::_1>>{}));
  // N-major (a row-major B): 64 N by 8 K, 128-byte rows along N.
  using SmemAtomNMajor = decltype(cute::composition(
      cute::Swizzle<3, 3, 3>{},
      cute::Layout<cute::Shape<cute::_64, cute::_8>, cute::Stride<cute::_1, cute::_64>>{}));
  using SmemLayoutA = decltype(cute::tile_to_shape(
      SmemAtomKMajor{}, cute::Shape<TileM, TileK, cute::Int<kStages>>{}));
  using SmemLayoutB = decltype(cute::tile_to_shape(
      std::conditional_t<kB == BLayout::KMajor, SmemAtomKMajor, SmemAtomNMajor>{},
      cute::Shape<TileN, TileK, cute::Int<kStages>>{}));

  static constexpr int kSmemElementsA = cute::cosize(SmemLayoutA{});
  static constexpr int kSmemBytes =
      (cute::cosize(SmemLayoutA{}) + cute::cosize(SmemLayoutB{})) * int(sizeof(Element));
  static_assert(kSmemBytes == kInfo.smem_bytes, "the table's shared-memory bytes");

  // Global -> shared: one 16-byte cp.async per thread and step, consecutive
  // threads along the contiguous dimension (coalesced 128-byte rows).
  using G2SAtom = cute::Copy_Atom<CpAsyncCgZfillBytes, Element>;
  static constexpr int kThreadsPerRowK = kTileK / 8;
  using G2SCopyKMajor = decltype(cute::make_tiled_copy(
      G2SAtom{},
      cute::Layout<cute::Shape<cute::Int<kThreads / kThreadsPerRowK>, cute::Int<kThreadsPerRowK>>,
                   cute::Stride<cute::Int<kThreadsPerRowK>, cute::_1>>{},
      cute::Layout<cute::Shape<cute::_1, cute::_8>>{}));
  using G2SCopyNMajor = decltype(cute::make_tiled_copy(
      G2SAtom{},
      cute::Layout<cute::Shape<cute::_8, cute::Int<kThreads / 8>>, cute::Stride<cute::_1, cute::_8>>{},
      cute::Layout<cute::Shape<cute::_8, cute::_1>>{}));
  using G2SCopyA = G2SCopyKMajor;
  using G2SCopyB = std::conditional_t<kB == BLayout::KMajor, G2SCopyKMajor, G2SCopyNMajor>;

  // mma.sync m16n8k16, warps kWarpsM x kWarpsN. The permutations give warp w
  // the rows 64 * (w % kWarpsM) + [0, 64) and the columns 64 * (w / kWarpsM)
  // + [0, 64) (instead of strided 16-row / 8-column slivers), so a warp can
  // stage its accumulators alone in the epilogue and store whole 128-byte
  // row segments.
  using PermM = cute::Layout<cute::Shape<cute::_16, cute::Int<kWarpsM>, cute::_4>,
                             cute::Stride<cute::_1, cute::_64, cute::_16>>;
  using PermN = cute::Layout<cute::Shape<cute::_8, cute::Int<kWarpsN>, cute::_8>,
                             cute::Stride<cute::_1, cute::_64, cute::_8>>;
  using TiledMma = cute::TiledMMA<cute::MMA_Atom<typename ElementTypes<kDtype>::MmaOp>,
                                  cute::Layout<cute::Shape<cute::Int<kWarpsM>, cute::Int<kWarpsN>, cute::_1>>,
                                  cute::Tile<PermM, PermN, cute::_16>>;

  // Shared -> registers: ldmatrix.x4 (a 16 x 16 A fragment, or two 8-column
  // B fragments, per instruction); .trans for an N-major B.
  using S2RAtomA = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, Element>;
  using S2RAtomB = std::conditional_t<kB == BLayout::KMajor, cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, Element>,
                                      cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, Element>>;
};

}  // namespace sm80
}  // namespace gemm_act

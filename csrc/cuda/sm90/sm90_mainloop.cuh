// The sm90 mainloop: CUTLASS's TMA + wgmma collective (multi-stage
// shared-memory pipeline fed by the producer warp), with as many stages as
// fit beside the epilogue's shared memory.
#pragma once

#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_types.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <class Config, class Element, BLayout kB, int kEpilogueSmemBytes>
struct GemmActMainloop {
  static_assert(!cute::is_same_v<Element, float> || kB == BLayout::KMajor,
                "wgmma reads TF32 operands K-major only");
  using LayoutA = cutlass::layout::RowMajor;  // A [M, K], K contiguous
  using LayoutB = cute::conditional_t<kB == BLayout::KMajor, cutlass::layout::ColumnMajor,
                                      cutlass::layout::RowMajor>;
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // 16 bytes

  using Collective = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, LayoutA, kAlignment,
      Element, LayoutB, kAlignment,
      float, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<kEpilogueSmemBytes>,
      typename Config::KernelSchedule>::CollectiveOp;
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

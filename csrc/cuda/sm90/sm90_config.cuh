// A configuration's row (ConfigSpec, generated from sm90_kernels.py) as the
// CUTLASS types its kernel is built from.
#pragma once

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_types.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

// Elements in one 128-byte shared-memory swizzle row: 64 fp16/bf16, 32 fp32.
template <class Element>
constexpr int kSwizzleRow = 128 * 8 / cutlass::sizeof_bits<Element>::value;

template <Schedule kSchedule>
struct ScheduleTypes;

// Cooperative: the epilogue runs on all 256 consumer threads at once.
template <>
struct ScheduleTypes<Schedule::Cooperative> {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

// Ping-pong: each consumer warpgroup's epilogue (128 threads) overlaps the
// other's mainloop.
template <>
struct ScheduleTypes<Schedule::Pingpong> {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

template <class Spec, class Element>
struct CutlassConfig {
  static constexpr TileGeometry kGeometry = Spec::kGeometry;
  static constexpr int kStoreStages = Spec::kStoreStages;
  static constexpr bool kStoresZ = Spec::kStoresZ;
  static constexpr bool kSourceTma = Spec::kSourceTma;

  using TileShape = cute::Shape<cute::Int<kGeometry.tile_m>, cute::Int<kGeometry.tile_n>,
                                cute::Int<kGeometry.k_swizzle_rows * kSwizzleRow<Element>>>;
  using ClusterShape = cute::Shape<cute::Int<kGeometry.cluster_m>, cute::Int<kGeometry.cluster_n>, cute::_1>;
  using EpilogueTile =
      cute::Shape<cute::Int<Spec::kEpilogueM>,
                  cute::Int<Spec::kEpilogueN == 0 ? kSwizzleRow<Element> : Spec::kEpilogueN>>;
  using KernelSchedule = typename ScheduleTypes<Spec::kSchedule>::Kernel;
  using EpilogueSchedule = typename ScheduleTypes<Spec::kSchedule>::Epilogue;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

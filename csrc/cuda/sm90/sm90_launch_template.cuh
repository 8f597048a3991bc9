// The sm90 launch template: a CUTLASS 3 GEMM kernel's arguments from the
// op's parameters, then what CUTLASS's device adapter would do, without it:
// can_implement, workspace, TMA descriptors, the shared-memory opt-in, and a
// cluster launch on the caller's stream.
#pragma once

#include <cstdint>
#include <mutex>

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

inline cutlass::gemm::kernel::detail::RasterOrderOptions to_cutlass(Raster r) {
  using R = cutlass::gemm::kernel::detail::RasterOrderOptions;
  switch (r) {
    case Raster::AlongM:
      return R::AlongM;
    case Raster::AlongN:
      return R::AlongN;
    default:
      return R::Heuristic;
  }
}

// Kernel::Arguments for the op's problem, with the epilogue visitor tree's
// arguments `fusion_args`; the tile order from the heuristic's choices.
template <class Kernel, BLayout kB, class Element, class FusionArguments>
typename Kernel::Arguments gemm_arguments(const LaunchArgs& la, const FusionArguments& fusion_args) {
  const GemmActParams& p = *la.params;
  using StrideA = typename Kernel::StrideA;  // (M, K, L)
  using StrideB = typename Kernel::StrideB;  // (N, K, L)
  using StrideC = typename Kernel::StrideC;
  using StrideD = typename Kernel::StrideD;  // (M, N, L)
  const StrideA stride_a{p.a_stride_m, _1{}, int64_t(0)};
  StrideB stride_b{};
  if constexpr (kB == BLayout::KMajor) {
    stride_b = StrideB{p.b_stride_n, _1{}, int64_t(0)};
  } else {
    stride_b = StrideB{_1{}, p.b_stride_k, int64_t(0)};
  }
  const StrideD stride_d{p.n, _1{}, int64_t(0)};

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = typename Kernel::ProblemShape(static_cast<int>(p.m), static_cast<int>(p.n),
                                                     static_cast<int>(p.k), 1);
  args.mainloop = {static_cast<const Element*>(p.a), stride_a, static_cast<const Element*>(p.b),
                   stride_b};
  args.epilogue = {fusion_args, nullptr, StrideC{}, static_cast<Element*>(p.y), stride_d};
  args.hw_info.device_id = la.device;
  args.hw_info.sm_count = la.sm_count;
  args.scheduler.max_swizzle_size = la.max_swizzle;
  args.scheduler.raster_order = to_cutlass(la.raster);
  return args;
}

// Checks, prepares and launches `Kernel` on `args` (see the file comment).
template <class Kernel>
LaunchResult launch_gemm(const typename Kernel::Arguments& args, const LaunchArgs& la) {
  if (!Kernel::can_implement(args)) {
    return {LaunchStatus::kNotImplementable, cudaSuccess, "can_implement"};
  }
  void* workspace = nullptr;
  const size_t workspace_bytes = Kernel::get_workspace_size(args);
  if (workspace_bytes > 0) workspace = la.alloc_workspace(la.alloc_ctx, workspace_bytes);
  if (Kernel::initialize_workspace(args, workspace, la.stream) != cutlass::Status::kSuccess) {
    return {LaunchStatus::kError, cudaGetLastError(), "initialize_workspace"};
  }
  // Builds the TMA descriptors (host side, through the driver entry point).
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);

  // More than 48 KiB of dynamic shared memory needs an opt-in, once per
  // device (the attribute lives in the device's context).
  constexpr int kSmemBytes = Kernel::SharedStorageSize;
  const void* kernel_fn = reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>);
  constexpr int kMaxDevices = 64;
  static std::once_flag smem_once[kMaxDevices];
  cudaError_t attr_error = cudaSuccess;
  auto set_smem = [&] {
    attr_error = cudaFuncSetAttribute(kernel_fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kSmemBytes);
  };
  if (la.device >= 0 && la.device < kMaxDevices) {
    std::call_once(smem_once[la.device], set_smem);
  } else {
    set_smem();
  }
  if (attr_error != cudaSuccess) {
    cudaGetLastError();
    return {LaunchStatus::kError, attr_error, "cudaFuncSetAttribute"};
  }

  using ClusterShape = typename Kernel::ClusterShape;
  const dim3 block = Kernel::get_block_shape();
  const dim3 grid = Kernel::get_grid_shape(params);
  const dim3 cluster(size<0>(ClusterShape{}), size<1>(ClusterShape{}), size<2>(ClusterShape{}));
  void* kernel_params[] = {&params};
  if (cutlass::ClusterLauncher::launch(grid, cluster, block, kSmemBytes, la.stream, kernel_fn,
                                       kernel_params) != cutlass::Status::kSuccess) {
    return {LaunchStatus::kError, cudaGetLastError(), "kernel launch"};
  }
  return {LaunchStatus::kOk, cudaSuccess, ""};
}

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

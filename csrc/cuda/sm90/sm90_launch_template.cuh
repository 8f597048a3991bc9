// The sm90 launch template: a CUTLASS 3 GEMM kernel's arguments from the
// op's parameters, then what CUTLASS's device adapter would do, without it:
// can_implement, workspace, TMA descriptors (or the parameters of an
// identical earlier launch: sm90_params_cache.cuh), the shared-memory
// opt-in, and a cluster launch on the caller's stream.
#pragma once

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_params_cache.cuh"
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
  // C's pointer and strides for the collective's TMA source path, where the kernel has one (tmac).
  using ElementC = typename Kernel::CollectiveEpilogue::ElementC;
  const ElementC* c = nullptr;
  StrideC stride_c{};
  if constexpr (!std::is_void_v<ElementC>) {
    if (p.c != nullptr) {
      c = static_cast<const ElementC*>(p.c);
      stride_c = StrideC{p.c_stride_m, _1{}, int64_t(0)};
    }
  }
  args.epilogue = {fusion_args, c, stride_c, static_cast<Element*>(p.y), stride_d};
  args.hw_info.device_id = la.device;
  args.hw_info.sm_count = la.sm_count;
  args.scheduler.max_swizzle_size = la.max_swizzle;
  args.scheduler.raster_order = to_cutlass(la.raster);
  return args;
}

// Checks, prepares and launches `Kernel` on `args` (see the file comment).
template <class Kernel>
LaunchResult launch_gemm(const typename Kernel::Arguments& args, const LaunchArgs& la) {
  using Params = typename Kernel::Params;
  static ParamsCache<Params> cache;
  const LaunchKey key = LaunchKey::of(la);
  Params params;
  if (!cache.find(key, params)) {
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
    params = Kernel::to_underlying_arguments(args, workspace);
    if (workspace_bytes == 0) cache.remember(key, params);
  }

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

  // A cluster launch, as CUTLASS's ClusterLauncher makes it but without its
  // per-launch attribute call (clusters of at most 8 CTAs are portable).
  using ClusterShape = typename Kernel::ClusterShape;
  static_assert(size(ClusterShape{}) <= 8, "a portable cluster size");
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = size<0>(ClusterShape{});
  cluster.val.clusterDim.y = size<1>(ClusterShape{});
  cluster.val.clusterDim.z = size<2>(ClusterShape{});
  cudaLaunchConfig_t config = {};
  config.gridDim = Kernel::get_grid_shape(params);
  config.blockDim = Kernel::get_block_shape();
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = la.stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  void* kernel_params[] = {&params};
  const cudaError_t launched = cudaLaunchKernelExC(&config, kernel_fn, kernel_params);
  if (launched != cudaSuccess) {
    cudaGetLastError();
    return {LaunchStatus::kError, launched, "kernel launch"};
  }
  return {LaunchStatus::kOk, cudaSuccess, ""};
}

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// Picks the backward kernel for a plan and launches it; reports its
// occupancy. Included only by the per-dtype .cu files, each of which
// instantiates these for its storage type (every activation x
// vector or scalar access, column- or row-parallel: 32 kernels).
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "activations.h"
#include "cuda/backward/activation_backward.h"
#include "cuda/backward/activation_backward_kernel.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace backward {

using BackwardKernel = void (*)(const BackwardPlan);

template <class Element, Activation kAct, BiasKind kBias, bool kVec>
BackwardKernel kernel_for() {
  if constexpr (kBias == BiasKind::PerColumn) {
    return &dact_bias_cols_kernel<Element, kAct, kVec>;
  } else {  // PerRow, Scalar and None share the row-parallel kernel
    return &dact_bias_rows_kernel<Element, kAct, kVec>;
  }
}

template <class Element>
BackwardKernel select_kernel(Activation activation, BiasKind bias_kind, bool vec) {
  BackwardKernel kernel = nullptr;
  GEMM_ACT_DISPATCH_ACTIVATION(activation,
      GEMM_ACT_DISPATCH_BIAS(bias_kind,
          kernel = vec ? kernel_for<Element, kAct, kBias, true>()
                       : kernel_for<Element, kAct, kBias, false>()));
  TORCH_INTERNAL_ASSERT(kernel != nullptr, "gemm_act: no backward kernel for activation ",
                        static_cast<int>(activation), ", bias kind ", static_cast<int>(bias_kind));
  return kernel;
}

template <class Element>
void launch_activation_backward(const BackwardPlan& plan, int64_t grid, cudaStream_t stream) {
  TORCH_INTERNAL_ASSERT(grid > 0 && grid <= INT32_MAX);
  const BackwardKernel kernel = select_kernel<Element>(plan.activation, plan.bias_kind, plan.vec);
  kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(plan);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Element>
int activation_backward_blocks_per_sm(Activation activation, BiasKind bias_kind, bool vec) {
  constexpr int kMaxDevices = 64;
  // [device][activation][bias kind][vec]; 0 = not yet known.
  static std::atomic<int> cache[kMaxDevices][kNumActivations][4][2];
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const int a = static_cast<int>(activation), b = static_cast<int>(bias_kind), v = vec ? 1 : 0;
  const bool cached =
      device >= 0 && device < kMaxDevices && a >= 0 && a < kNumActivations && b >= 0 && b < 4;
  if (cached) {
    const int known = cache[device][a][b][v].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, select_kernel<Element>(activation, bias_kind, vec), kThreads, 0));
  if (blocks < 1) blocks = 1;
  if (cached) cache[device][a][b][v].store(blocks, std::memory_order_relaxed);
  return blocks;
}

}  // namespace backward
}  // namespace gpu
}  // namespace gemm_act

// The seam between the sm90 entry (sm90_gemm_act.cpp, which sees PyTorch) and
// the kernel instantiations (generated from sm90_kernels.py: one small
// translation unit per configuration, dtype and B layout, which see CUTLASS
// and nothing of PyTorch).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "cuda/sm90/sm90_kernel_table.h"
#include "cuda/sm90/sm90_types.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {

// Everything a kernel launch needs beyond the op's parameters. Filled by the
// entry after it checked that the case is one TMA can take.
struct LaunchArgs {
  const GemmActParams* params = nullptr;
  int device = 0;
  int sm_count = 0;
  KernelConfig config{};
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
  kUnknownConfig,     // la.config cannot run this case: nothing was launched
  kError,             // a CUDA error; cudaGetLastError() was read into `error`
};

struct LaunchResult {
  LaunchStatus status = LaunchStatus::kOk;
  cudaError_t error = cudaSuccess;
  const char* what = "";  // which step failed
};

// One kernel: configuration x dtype x B layout x activation (bias kind, C and
// Z are run-time). Defined in sm90_kernel.cuh; instantiated only for the
// rows of GEMM_ACT_SM90_FOR_EACH_KERNEL, by the generated files.
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_kernel(const LaunchArgs& la);

// One gemm_dact kernel (a configuration row with op "gemm_dact"): D =
// act'(C) * alpha * A @ B, C being the saved Y or Z. Defined in
// sm90_dact_kernel.cuh; instantiated for GEMM_ACT_SM90_FOR_EACH_DACT_KERNEL.
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_dact_kernel(const LaunchArgs& la);

// One gemm_glu kernel (a configuration row with op "gemm_glu"): Y =
// act(A @ B_gate) * (A @ B_up), the weights as params.b and params.c.
// Defined in sm90_glu_kernel.cuh; instantiated for
// GEMM_ACT_SM90_FOR_EACH_GLU_KERNEL.
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_glu_kernel(const LaunchArgs& la);

// One gemm_dropout_add kernel (a configuration row with op
// "gemm_dropout_add"): Y = C + dropout(A @ B + bias), C the residual, the
// mask drawn from params.dropout_seed (dropout.h). Defined in
// sm90_dropout_kernel.cuh; instantiated for Activation::None only, for
// GEMM_ACT_SM90_FOR_EACH_DROPOUT_KERNEL.
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_dropout_kernel(const LaunchArgs& la);

}  // namespace sm90
}  // namespace gemm_act

// The definition of the seam's launch_kernel (sm80_launch.h): fills the
// kernel's parameters, opts in to its shared memory and launches it, one
// kernel per bias kind. Only the kernel units (kernels/*.cu) include this.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>

#include "activations.h"
#include "cuda/epilogue/bias_act_epilogue.cuh"
#include "cuda/sm80/sm80_config.cuh"
#include "cuda/sm80/sm80_heuristic.h"
#include "cuda/sm80/sm80_kernel.cuh"
#include "cuda/sm80/sm80_launch.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm80 {

namespace detail {

// Launches `kKernel`, one (activation, bias kind) instance of the kernel or
// of its gemm_glu form.
template <auto kKernel, class Traits>
cudaError_t launch(const KernelParams<typename Traits::CudaElement>& kp, int device,
                   cudaStream_t stream) {
  // More than 48 KiB of dynamic shared memory needs an opt-in, once per
  // device (the attribute lives in the device's context). Its result (no
  // image of this kernel for the device, say) is kept and returned on every
  // launch.
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static cudaError_t opt_in[kMaxDevices];
  auto set_smem = [&] {
    return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
  };
  cudaError_t err;
  if (device >= 0 && device < kMaxDevices) {
    std::call_once(once[device], [&] { opt_in[device] = set_smem(); });
    err = opt_in[device];
  } else {
    err = set_smem();
  }
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    return err;
  }
  kKernel<<<static_cast<unsigned>(kp.tiles_m * kp.tiles_n), Traits::kThreads, Traits::kSmemBytes, stream>>>(kp);
  return cudaGetLastError();
}

// The kernel's parameters for `p` (n: the GEMM's width) on the current
// device, or the error of querying it.
template <class Traits>
cudaError_t kernel_params(const GemmActParams& p, KernelParams<typename Traits::CudaElement>& kp,
                          int& device) {
  using Element = typename Traits::CudaElement;
  int sm_count = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const int64_t tiles_m = ceil_div(p.m, Traits::kTileM);
  const int64_t tiles_n = ceil_div(p.n, Traits::kTileN);
  // checks.cpp caps M, N and K at 2^31 - 1, so each fits an int; the grid's
  // x dimension must hold the tile count (an output of 2^45 elements would
  // be needed to exceed it).
  if (tiles_m * tiles_n > INT32_MAX) return cudaErrorInvalidConfiguration;
  kp.a = p.a;
  kp.b = p.b;
  kp.m = static_cast<int>(p.m);
  kp.n = static_cast<int>(p.n);
  kp.k = static_cast<int>(p.k);
  kp.lda = p.a_stride_m;
  kp.ldb = Traits::kBLayout == BLayout::KMajor ? p.b_stride_n : p.b_stride_k;
  kp.tiles_m = static_cast<int>(tiles_m);
  kp.tiles_n = static_cast<int>(tiles_n);
  kp.band_rows = band_rows(tiles_m, tiles_n, Traits::kTileM, Traits::kTileN, sm_count);
  kp.epi = gpu::make_epilogue_params<Element>(p);
  return cudaSuccess;
}

}  // namespace detail

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
cudaError_t launch_kernel(const GemmActParams& p, cudaStream_t stream) {
  using Traits = KernelTraits<kConfig, kDtype, kB>;
  KernelParams<typename Traits::CudaElement> kp;
  int device = 0;
  cudaError_t err = detail::kernel_params<Traits>(p, kp, device);
  if (err != cudaSuccess) return err;
  GEMM_ACT_DISPATCH_BIAS(
      p.bias_kind, err = (detail::launch<sm80_gemm_act_kernel<Traits, kAct, kBias>, Traits>(kp, device, stream)));
  return err;
}

// gemm_glu: p.b and p.c are the gate's and the up projection's weights
// (K-major, row stride b_stride_n), p.bias and p.bias_up their biases (or
// null), p.n both weights' columns, p.y Y and p.z H (or null).
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
cudaError_t launch_glu_kernel(const GemmActParams& p, cudaStream_t stream) {
  using Traits = KernelTraits<kConfig, kDtype, kB>;
  using Element = typename Traits::CudaElement;
  KernelParams<Element> kp;
  int device = 0;
  cudaError_t err = detail::kernel_params<Traits>(p, kp, device);
  if (err != cudaSuccess) return err;
  const auto* gate = static_cast<const Element*>(p.b);
  const auto* up = static_cast<const Element*>(p.c);
  kp.b = up < gate ? up : gate;
  kp.b_delta = up < gate ? gate - up : up - gate;
  kp.gate_second = up < gate;
  const auto* gate_bias = static_cast<const Element*>(p.bias);
  const auto* up_bias = static_cast<const Element*>(p.bias_up);
  kp.glu_bias[0] = kp.gate_second ? up_bias : gate_bias;
  kp.glu_bias[1] = kp.gate_second ? gate_bias : up_bias;
  return detail::launch<sm80_gemm_glu_kernel<Traits, kAct>, Traits>(kp, device, stream);
}

}  // namespace sm80
}  // namespace gemm_act

// Host launcher of the SIMT kernel: fills its parameters, picks each
// operand's load layout, sizes the grid and instantiates one kernel per
// (activation, bias kind). Included only by the per-dtype .cu files.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "activations.h"
#include "cuda/epilogue/bias_act_epilogue.cuh"
#include "cuda/simt/operand_tile_loader.cuh"
#include "cuda/simt/simt_config.cuh"
#include "cuda/simt/simt_gemm_act.h"
#include "cuda/simt/simt_gemm_act_kernel.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace simt {

template <class Cfg, Activation kAct, BiasKind kBias>
void launch_simt_kernel(const SimtGemmActParams<typename Cfg::Element>& kp, cudaStream_t stream) {
  const auto kernel = simt_gemm_act_kernel<Cfg, kAct, kBias>;
  // Beyond 48 KiB of shared memory a kernel must opt in, per device; only
  // large problems take such tiles, so one call per launch costs nothing.
  if constexpr (Cfg::kSmemBytes > (48 << 10)) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        Cfg::kSmemBytes));
  }
  const dim3 grid(static_cast<unsigned>(kp.tiles_m) * static_cast<unsigned>(kp.tiles_n));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(kp);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Cfg>
void launch_simt_config(const GemmActParams& p, cudaStream_t stream) {
  using Element = typename Cfg::Element;
  // checks.cpp caps M, N and K at 2^31 - 1; the kernel's int row/k counters rely on it.
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  TORCH_INTERNAL_ASSERT(p.m > 0 && p.n > 0 && p.k >= 0 && p.m <= kInt32Max && p.n <= kInt32Max && p.k <= kInt32Max);

  SimtGemmActParams<Element> kp;
  kp.a = static_cast<const Element*>(p.a);
  kp.b = static_cast<const Element*>(p.b);
  kp.m = p.m;
  kp.n = p.n;
  kp.k = p.k;
  kp.a_stride_m = p.a_stride_m;
  kp.a_stride_k = p.a_stride_k;
  kp.b_stride_k = p.b_stride_k;
  kp.b_stride_n = p.b_stride_n;
  // A is read as [M, K]; B as its transpose [N, K].
  kp.a_load = choose_operand_load<Element>(p.a, p.a_stride_m, p.a_stride_k, p.m, p.k);
  kp.b_load = choose_operand_load<Element>(p.b, p.b_stride_n, p.b_stride_k, p.n, p.k);

  const int64_t tiles_m = (p.m + Cfg::BM - 1) / Cfg::BM;
  const int64_t tiles_n = (p.n + Cfg::BN - 1) / Cfg::BN;
  TORCH_CHECK(tiles_m * tiles_n <= kInt32Max, "gemm_act: an output of ", p.m, " x ", p.n, " needs ",
              tiles_m * tiles_n, " thread blocks, more than one launch allows");
  kp.tiles_m = static_cast<int>(tiles_m);
  kp.tiles_n = static_cast<int>(tiles_n);
  kp.epilogue = make_epilogue_params<Element>(p);

  GEMM_ACT_DISPATCH_ACTIVATION(p.activation,
      GEMM_ACT_DISPATCH_BIAS(p.bias_kind, launch_simt_kernel<Cfg, kAct, kBias>(kp, stream)));
}

// SimtLargeConfig where the storage type has one and the problem gives every
// SM at least one of its blocks; SimtConfig otherwise.
template <class Element>
void launch_simt_gemm_act(const GemmActParams& p, cudaStream_t stream) {
  using Large = typename SimtLargeConfig<Element>::type;
  if constexpr (!std::is_void_v<Large>) {
    int device = 0, sms = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t large_tiles = ((p.m + Large::BM - 1) / Large::BM) * ((p.n + Large::BN - 1) / Large::BN);
    if (large_tiles >= sms) return launch_simt_config<Large>(p, stream);
  }
  launch_simt_config<SimtConfig<Element>>(p, stream);
}

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

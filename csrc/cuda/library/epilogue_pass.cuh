// The epilogue pass's kernel and launcher (epilogue_pass.h), instantiated
// per storage type by epilogue_pass_<dtype>.cu.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <cstdint>

#include "activations.h"
#include "cuda/library/epilogue_pass.h"
#include "cuda/library/epilogue_pass_kernels.cuh"

namespace gemm_act {
namespace gpu {
namespace library {

template <class Element, Activation kAct, BiasKind kBias, int kW>
void launch_pass_kernel(const EpilogueParams<Element>& e, const Element* acc, cudaStream_t stream) {
  launch_pass<Element, kAct, kBias, kW, PassShapeFor<Element>>(e, acc, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Element>
void launch_epilogue_pass(const GemmActParams& params, const void* acc, cudaStream_t stream) {
  constexpr int kVector = static_cast<int>(16 / sizeof(Element));
  EpilogueParams<Element> e = make_epilogue_params<Element>(params);
  const auto* src = static_cast<const Element*>(acc);
  // One row needs no n that is a multiple of kVector: its last, partial
  // segment loads and stores element by element (apply_row_segment's check).
  const auto aligned = [](const void* ptr) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (e.m == 1 && aligned(e.y) && aligned(e.z)) e.store_vector = kVector;
  // store_vector also says that n is a multiple of kVector (or there is one
  // row), so every row of acc is 16-byte aligned where acc is.
  const bool vector = e.store_vector == kVector && aligned(acc) && acc != nullptr;
  GEMM_ACT_DISPATCH_ACTIVATION(params.activation, GEMM_ACT_DISPATCH_BIAS(params.bias_kind, {
    if (vector) {
      launch_pass_kernel<Element, kAct, kBias, kVector>(e, src, stream);
    } else {
      launch_pass_kernel<Element, kAct, kBias, 1>(e, src, stream);
    }
  }));
}

}  // namespace library
}  // namespace gpu
}  // namespace gemm_act

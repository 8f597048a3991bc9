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

template <class Element, class Source, Activation kAct, BiasKind kBias, int kW>
void launch_pass_kernel(const EpilogueParams<Element>& e, const Source* acc, cudaStream_t stream) {
  launch_pass<Element, Source, kAct, kBias, kW, PassShapeFor<Element>>(e, acc, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Element, class Source>
void launch_epilogue_pass_from(const GemmActParams& params, const Source* src, cudaStream_t stream) {
  constexpr int kVector = static_cast<int>(16 / sizeof(Element));
  EpilogueParams<Element> e = make_epilogue_params<Element>(params);
  // One row needs no n that is a multiple of kVector: its last, partial
  // segment loads and stores element by element (apply_row_segment's check).
  const auto aligned = [](const void* ptr) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (e.m == 1 && aligned(e.y) && aligned(e.z)) e.store_vector = kVector;
  // store_vector also says that n is a multiple of kVector (or there is one
  // row), so every row of acc is aligned to kVector of its elements where
  // acc is.
  const bool vector = e.store_vector == kVector && src != nullptr &&
                      reinterpret_cast<uintptr_t>(src) % (kVector * sizeof(Source)) == 0;
  GEMM_ACT_DISPATCH_ACTIVATION(params.activation, GEMM_ACT_DISPATCH_BIAS(params.bias_kind, {
    if (vector) {
      launch_pass_kernel<Element, Source, kAct, kBias, kVector>(e, src, stream);
    } else {
      launch_pass_kernel<Element, Source, kAct, kBias, 1>(e, src, stream);
    }
  }));
}

template <class Element>
void launch_epilogue_pass(const GemmActParams& params, const void* acc, bool float_acc, cudaStream_t stream) {
  if constexpr (sizeof(Element) == 2) {
    if (float_acc) {
      launch_epilogue_pass_from<Element, float>(params, static_cast<const float*>(acc), stream);
      return;
    }
  }
  launch_epilogue_pass_from<Element, Element>(params, static_cast<const Element*>(acc), stream);
}

}  // namespace library
}  // namespace gpu
}  // namespace gemm_act

// The epilogue pass's kernel and launcher (epilogue_pass.h), instantiated
// per storage type by epilogue_pass_<dtype>.cu.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "activations.h"
#include "cuda/common/numeric.cuh"
#include "cuda/epilogue/bias_act_epilogue.cuh"
#include "cuda/library/epilogue_pass.h"

namespace gemm_act {
namespace gpu {
namespace library {

constexpr int kPassThreads = 256;
// Rows a thread loads before it computes any, gridDim.y apart, where the grid
// has blocks enough (kPassFullGrid) for a thread to take several: the
// loads then overlap, and a slow activation (double's erf) no longer waits
// on one load at a time.
constexpr int kPassRows = 4;
constexpr int64_t kPassFullGrid = 1024;

// Each thread takes kW adjacent columns of up to kPassRows rows at a time;
// the rows are grid-strided (past 65535 too), so no thread divides a 64-bit
// index. kW > 1 only where the epilogue stores kW elements at once
// (store_vector) and acc is 16-byte aligned.
template <class Element, Activation kAct, BiasKind kBias, int kW>
__global__ void __launch_bounds__(kPassThreads)
    epilogue_pass_kernel(const EpilogueParams<Element> p, const Element* __restrict__ acc) {
  using Num = Numeric<Element>;
  using Compute = typename Num::Compute;
  const EpilogueBiasAct<Element, kAct, kBias> epilogue(p);
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kPassThreads + threadIdx.x) * kW;
  if (col0 >= p.n) return;
  const int64_t stride = gridDim.y;
  const bool whole = col0 + kW <= p.n;
  for (int64_t row0 = blockIdx.y; row0 < p.m; row0 += stride * kPassRows) {
    Compute values[kPassRows][kW];
#pragma unroll
    for (int r = 0; r < kPassRows; ++r) {
      const int64_t row = row0 + r * stride;
      const Element* src = acc + row * p.n + col0;
      if (row >= p.m) {
#pragma unroll
        for (int j = 0; j < kW; ++j) values[r][j] = Compute(0);  // not stored: apply_row_segment skips the row
      } else if (kW > 1 && whole) {
        const auto in = *reinterpret_cast<const AlignedArray<Element, kW>*>(src);
#pragma unroll
        for (int j = 0; j < kW; ++j) values[r][j] = Num::to_compute(in.v[j]);
      } else {  // one element, or a single row's tail: the elements before n
#pragma unroll
        for (int j = 0; j < kW; ++j) values[r][j] = col0 + j < p.n ? Num::to_compute(src[j]) : Compute(0);
      }
    }
#pragma unroll
    for (int r = 0; r < kPassRows; ++r) epilogue.template apply_row_segment<kW>(row0 + r * stride, col0, values[r]);
  }
}

template <class Element, Activation kAct, BiasKind kBias, int kW>
void launch_pass_kernel(const EpilogueParams<Element>& e, const Element* acc, cudaStream_t stream) {
  const int64_t segments = (e.n + kW - 1) / kW;
  const int64_t blocks_x = (segments + kPassThreads - 1) / kPassThreads;
  // A row per block where that is all the grid has; kPassRows where the
  // grid is full without them.
  const int64_t grouped = (e.m + kPassRows - 1) / kPassRows;
  const int64_t rows = blocks_x * grouped >= kPassFullGrid ? grouped : e.m;
  const int64_t blocks_y = std::min<int64_t>(rows, std::max<int64_t>(1, 65535 / blocks_x));
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y));
  epilogue_pass_kernel<Element, kAct, kBias, kW><<<grid, kPassThreads, 0, stream>>>(e, acc);
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

// The epilogue pass's kernels and their grids, without PyTorch (the
// launcher, epilogue_pass.cuh, adds the launch check).
//
// Two kernels over a GEMM result acc [m, n] (may be Y's or Z's own memory:
// each thread reads its elements before it writes them):
//  - rows: each thread takes kW adjacent columns of up to kRows rows,
//    gridDim.y apart, loaded before any is computed (the loads overlap; a
//    slow activation, double's erf, no longer waits on one at a time);
//  - flat (m == 1: the activation alone over a dense result, flattened by
//    the caller): each thread takes kUnits vectors of kW elements,
//    kThreads vectors apart in its block's contiguous span.
// No thread divides a 64-bit index.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "activations.h"
#include "cuda/common/numeric.cuh"
#include "cuda/epilogue/bias_act_epilogue.cuh"

namespace gemm_act {
namespace gpu {
namespace library {

// How the pass splits its work. kRows applies where the grid has blocks
// enough without it (full_grid); with fewer, each thread takes one row.
template <int kThreadsArg, int kRowsArg, int kUnitsArg>
struct PassShape {
  static constexpr int kThreads = kThreadsArg;
  static constexpr int kRows = kRowsArg;
  static constexpr int kUnits = kUnitsArg;
  static constexpr int64_t kFullGrid = 1024;
};

// The shape the extension's pass runs per element size, the fastest
// measured: two rows a thread for double (its slow erf), one elsewhere
// (docs/MEASUREMENTS.md, "Kernel shapes and helpers").
template <class Element>
using PassShapeFor = std::conditional_t<sizeof(Element) == 8, PassShape<128, 2, 1>, PassShape<128, 1, 1>>;

// kW elements of acc (Source: the storage type, or fp32 for a 16-bit one) at
// col0 of a row that starts at `src`, in Element's compute type: one aligned
// vector load where the segment is whole and kW > 1, else element by element
// up to n; zeros past it (never stored).
template <class Element, class Source, int kW>
__device__ __forceinline__ void load_segment(const Source* src, int64_t col0, int64_t n,
                                             typename Numeric<Element>::Compute (&out)[kW]) {
  using Num = Numeric<Source>;
  using Compute = typename Numeric<Element>::Compute;
  if (kW > 1 && col0 + kW <= n) {
    const auto in = *reinterpret_cast<const AlignedArray<Source, kW>*>(src + col0);
#pragma unroll
    for (int j = 0; j < kW; ++j) out[j] = Num::to_compute(in.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kW; ++j) out[j] = col0 + j < n ? Num::to_compute(src[col0 + j]) : Compute(0);
  }
}

template <class Element, class Source, Activation kAct, BiasKind kBias, int kW, class Shape>
__global__ void __launch_bounds__(Shape::kThreads)
    epilogue_pass_rows_kernel(const EpilogueParams<Element> p, const Source* __restrict__ acc) {
  using Compute = typename Numeric<Element>::Compute;
  constexpr int kRows = Shape::kRows;
  const EpilogueBiasAct<Element, kAct, kBias> epilogue(p);
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * Shape::kThreads + threadIdx.x) * kW;
  if (col0 >= p.n) return;
  const int64_t stride = gridDim.y;
  for (int64_t row0 = blockIdx.y; row0 < p.m; row0 += stride * kRows) {
    Compute values[kRows][kW];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r * stride;
      if (row < p.m) {
        load_segment<Element, Source, kW>(acc + row * p.n, col0, p.n, values[r]);
      } else {
#pragma unroll
        for (int j = 0; j < kW; ++j) values[r][j] = Compute(0);  // not stored: apply_row_segment skips the row
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) epilogue.template apply_row_segment<kW>(row0 + r * stride, col0, values[r]);
  }
}

template <class Element, class Source, Activation kAct, BiasKind kBias, int kW, class Shape>
__global__ void __launch_bounds__(Shape::kThreads)
    epilogue_pass_flat_kernel(const EpilogueParams<Element> p, const Source* __restrict__ acc) {
  using Compute = typename Numeric<Element>::Compute;
  constexpr int kUnits = Shape::kUnits;
  constexpr int64_t kSpan = int64_t(Shape::kThreads) * kW;  // one vector per thread
  const EpilogueBiasAct<Element, kAct, kBias> epilogue(p);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kSpan * kUnits + int64_t(threadIdx.x) * kW;
  Compute values[kUnits][kW];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) load_segment<Element, Source, kW>(acc, first + u * kSpan, p.n, values[u]);
#pragma unroll
  for (int u = 0; u < kUnits; ++u) epilogue.template apply_row_segment<kW>(0, first + u * kSpan, values[u]);
}

// Launches the pass on `stream` (no error check: the caller's).
template <class Element, class Source, Activation kAct, BiasKind kBias, int kW, class Shape>
void launch_pass(const EpilogueParams<Element>& e, const Source* acc, cudaStream_t stream) {
  const int64_t segments = (e.n + kW - 1) / kW;
  if (e.m == 1) {
    const int64_t per_block = int64_t(Shape::kThreads) * Shape::kUnits;
    const dim3 grid(static_cast<unsigned>((segments + per_block - 1) / per_block));
    epilogue_pass_flat_kernel<Element, Source, kAct, kBias, kW, Shape><<<grid, Shape::kThreads, 0, stream>>>(e, acc);
    return;
  }
  const int64_t blocks_x = (segments + Shape::kThreads - 1) / Shape::kThreads;
  const int64_t grouped = (e.m + Shape::kRows - 1) / Shape::kRows;
  const int64_t rows = blocks_x * grouped >= Shape::kFullGrid ? grouped : e.m;
  const int64_t blocks_y = std::min<int64_t>(rows, std::max<int64_t>(1, 65535 / blocks_x));
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y));
  epilogue_pass_rows_kernel<Element, Source, kAct, kBias, kW, Shape><<<grid, Shape::kThreads, 0, stream>>>(e, acc);
}

}  // namespace library
}  // namespace gpu
}  // namespace gemm_act

// The pre-activation of the sm90 kernels, z = alpha * acc + beta * C + bias,
// written once for both places that compute it: the epilogue visitor tree
// (sm90_gemm_act_kernel.cuh) and the register epilogue of the rotating
// kernel (sm90_register_epilogue.cuh). Each term is one pass over the
// fragment behind one uniform branch, so no per-element branch splits the
// loops the activation then runs over.
#pragma once

#include <cutlass/cutlass.h>

namespace gemm_act {
namespace sm90 {

// The run-time parameters of z, uniform per launch.
struct PreactArguments {
  float alpha = 1.0f;
  float beta = 0.0f;
  bool has_c = false;
  bool has_row_bcast = false;  // bias per column or scalar (bias[n] / bias[0])
  bool has_col_bcast = false;  // bias per row (bias[m])
};

// z[i] = alpha * z[i] + beta * c_at(i) + row_at(i) + col_at(i) for the
// fragment z of N floats, in the order of the shared epilogue
// (csrc/cuda/epilogue): terms that do not exist are not added at all, so z
// is bit-for-bit alpha * acc when there is neither C nor bias (-0.0
// included). alpha == 1 (every nn.Linear) skips the multiply. One pass per
// term: fusing the bias into the alpha multiply (one FFMA) spilled
// registers.
template <int N, class Fragment, class CAt, class RowAt, class ColAt>
CUTLASS_DEVICE void add_preact_terms(Fragment& z, PreactArguments const& args, CAt&& c_at,
                                     RowAt&& row_at, ColAt&& col_at) {
  if (args.alpha != 1.0f) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) z[i] = args.alpha * z[i];
  }
  if (args.has_c) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) z[i] += args.beta * c_at(i);
  }
  if (args.has_row_bcast) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) z[i] += row_at(i);
  }
  if (args.has_col_bcast) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) z[i] += col_at(i);
  }
}

}  // namespace sm90
}  // namespace gemm_act

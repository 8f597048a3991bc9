// The pre-activation, z = alpha * acc + beta * C + bias: the one formula the
// forward kernels share (the CPU pass, the SIMT epilogue, the sm90 epilogue
// and whatever family comes next).
#pragma once

#include "act_math.h"

namespace gemm_act {

// Which terms z has, uniform per launch. At most one bias flag is set.
template <class T>
struct PreactTerms {
  T alpha = T(1);
  T beta = T(0);
  bool has_c = false;
  bool has_column_bias = false;  // bias[n], or bias[0] for a scalar bias
  bool has_row_bias = false;     // bias[m]
};

// z[i] = alpha * z[i] + beta * c_at(i) + column_bias_at(i) + row_bias_at(i)
// for the N values of `z` (the accumulators on entry), adding only the terms
// that exist: with neither C nor bias z is bit for bit alpha * acc (-0.0
// included), and alpha == 1 (every nn.Linear) skips the multiply. Each term
// is one pass over the fragment behind one uniform branch, so no
// per-element branch splits the loops the activation then runs over; fusing
// the bias into the alpha multiply (one FFMA) spilled registers in the sm90
// epilogue.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <int N, class T, class Fragment, class CAt, class ColumnBiasAt, class RowBiasAt>
GEMM_ACT_HD void add_preact_terms(Fragment& z, const PreactTerms<T>& t, CAt&& c_at,
                                  ColumnBiasAt&& column_bias_at, RowBiasAt&& row_bias_at) {
  if (t.alpha != T(1)) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < N; ++i) z[i] = t.alpha * z[i];
  }
  if (t.has_c) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < N; ++i) z[i] += t.beta * c_at(i);
  }
  if (t.has_column_bias) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < N; ++i) z[i] += column_bias_at(i);
  }
  if (t.has_row_bias) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < N; ++i) z[i] += row_bias_at(i);
  }
}

}  // namespace gemm_act

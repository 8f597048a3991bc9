// The language-model loss's passes over one chunk of logits
// (torch_gemm_act.linear_cross_entropy): the per-element math every
// backend's pass runs (cpu/ce_chunk_cpu.cpp, cuda/cross_entropy/ce_chunk.cu).
//
// z [rows, width] (row stride ld, columns contiguous) holds vocabulary
// columns [v0, v0 + width) of each row's logits, in the inputs' dtype (as
// F.linear writes them); the sums are Acc (fp32, float64 for float64). With
// softcap > 0 a logit is softcap * tanh(z / softcap) (Gemma 2's head).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "act_math.h"

namespace gemm_act {

struct CeChunkParams {
  void* z = nullptr;  // read by the forward; the backward writes dZ over it
  int64_t rows = 0, width = 0, ld = 0;
  const int64_t* target = nullptr;  // [rows] class indices (ignore_index: outside every chunk)
  int64_t v0 = 0;                   // the chunk's first vocabulary column
  int64_t vocab = 0;                // backward: the whole vocabulary's size
  double softcap = 0.0;             // 0: none
  double label_smoothing = 0.0;     // backward
  // Acc [rows] each. Forward: lse, target_logit and logit_sum (may be null)
  // updated in place. Backward: lse and scale read.
  void* lse = nullptr;
  void* target_logit = nullptr;
  void* logit_sum = nullptr;
  const void* scale = nullptr;
};

namespace ce {

GEMM_ACT_HD float exp_(float x) { return expf(x); }
GEMM_ACT_HD double exp_(double x) { return ::exp(x); }
GEMM_ACT_HD float log_(float x) { return logf(x); }
GEMM_ACT_HD double log_(double x) { return ::log(x); }
GEMM_ACT_HD float tanh_(float x) { return tanhf(x); }
GEMM_ACT_HD double tanh_(double x) { return ::tanh(x); }

template <class T>
GEMM_ACT_HD T minus_inf() {
  return -std::numeric_limits<T>::infinity();
}

// The logit a loss sees: z, or softcap * tanh(z / softcap).
template <class T>
GEMM_ACT_HD T logit(T z, T softcap) {
  return softcap > T(0) ? softcap * tanh_(z / softcap) : z;
}

// exp for the log-sum-exp's terms: on the GPU the hardware's base-2
// exponential (a few ulp; the terms that carry the sum have l - m near 0).
GEMM_ACT_HD float exp_sum_term(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return expf(x);
#endif
}
GEMM_ACT_HD double exp_sum_term(double x) { return ::exp(x); }

// A running (max m, sum s of exp(l - m)) with kCount more logits l: one
// exp per logit and one for the rescale. A NaN logit makes s NaN (and so
// the log-sum-exp); a -inf logit adds nothing.
template <int kCount, class T>
GEMM_ACT_HD void add(T& m, T& s, const T (&l)[kCount]) {
  T mx = m;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int e = 0; e < kCount; ++e) mx = l[e] > mx ? l[e] : mx;
  if (mx == minus_inf<T>()) {  // every logit so far -inf, or NaN (which no comparison takes)
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int e = 0; e < kCount; ++e) s = l[e] != l[e] ? l[e] : s;
    return;
  }
  // m below mx: s rescaled (m = -inf: s is 0, or NaN, and stays so).
  T sum = m == mx ? s : s * exp_sum_term(m - mx);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int e = 0; e < kCount; ++e) sum += exp_sum_term(l[e] - mx);
  m = mx;
  s = sum;
}

// (m, s) with another running pair folded in.
template <class T>
GEMM_ACT_HD void merge(T& m, T& s, T m2, T s2) {
  const T mx = m2 > m ? m2 : m;
  if (mx == minus_inf<T>()) {  // both empty: s and s2 are 0, or NaN
    s += s2;
    return;
  }
  // A pair below mx rescaled (m = -inf: its s is 0, or NaN, and stays so).
  const T a = m == mx ? s : s * exp_sum_term(m - mx);
  const T b = m2 == mx ? s2 : s2 * exp_sum_term(m2 - mx);
  m = mx;
  s = a + b;
}

// log(exp(a) + exp(b)), NaN if either is.
template <class T>
GEMM_ACT_HD T logaddexp(T a, T b) {
  const T mx = a > b ? a : b;
  if (mx == minus_inf<T>()) return a + b;  // -inf, or NaN where a is
  return mx + log_(exp_(a - mx) + exp_(b - mx));
}

// One logit's gradient: scale * (exp(l - lse) - smoothing / vocab - (1 -
// smoothing) at the target), times softcap's derivative 1 - (l / softcap)^2.
template <class T>
GEMM_ACT_HD T grad(T l, T lse, T scale, bool is_target, T smoothing, T inv_vocab, T softcap) {
  T g = exp_(l - lse) - smoothing * inv_vocab;
  if (is_target) g -= T(1) - smoothing;
  g *= scale;
  if (softcap > T(0)) {
    const T t = l / softcap;
    g *= T(1) - t * t;
  }
  return g;
}

}  // namespace ce
}  // namespace gemm_act

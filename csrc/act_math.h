// The scalar math that activations.h builds on, for the host and the device.
//
// Double overloads are the exact library functions (float64 is the reference
// and gradcheck's precision). Float overloads are what every fp16/bf16/fp32
// kernel runs per element in registers, and are written so the GPU code has
// no branch and no predicate per element: libdevice's erff, and IEEE division
// with its slow path, compile to predicated code that the compiler does not
// interleave across elements (one predicate register per chain, reused), so
// an epilogue of 16+ independent elements ran as one dependent chain.
#pragma once

#include <cmath>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GEMM_ACT_HD __host__ __device__ __forceinline__
#else
#define GEMM_ACT_HD inline
#endif

namespace gemm_act {

// How precisely a float activation is computed: kFloat for results stored as
// fp32, kHalf for results rounded to fp16/bf16, where a relative error below
// 5e-6 is 100x finer than the rounding (fp16's half ulp is 4.9e-4, bf16's
// 3.9e-3) and a shorter polynomial does. Double is always exact.
enum class Precision { kFloat, kHalf };

// The precision a result stored in `bytes`-wide elements needs.
constexpr Precision precision_for_bytes(unsigned long bytes) {
  return bytes <= 2 ? Precision::kHalf : Precision::kFloat;
}

namespace math {

constexpr double kLog2e = 1.44269504088896340736;  // 1 / ln 2

// a / b. On the GPU: an approximate reciprocal times a (2 ulp, no slow path);
// b beyond 2^126 gives 0 (a finite) or NaN (a infinite), the limits the
// callers (silu, sigmoid: b = 1 + exp(-z)) want anyway.
GEMM_ACT_HD float divide(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a / b;
#endif
}
GEMM_ACT_HD double divide(double a, double b) { return a / b; }

// 2^x; on the GPU one ex2 instruction, flushing results below 2^-126 to 0.
GEMM_ACT_HD float exp2_flush(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return std::exp2(x);
#endif
}
GEMM_ACT_HD double exp2_flush(double x) { return ::exp2(x); }  // nothing below 2^-126 to flush

// 1 for z > 0, 0 for z <= 0 and NaN. On the GPU one multiply by 2^127
// that flushes a subnormal z to 0 and saturates: every normal z > 0 gives 1,
// and a subnormal z > 0 gives 0, which normal_cdf turns into
// Phi(-|z|), equal to Phi(z) within 1e-38.
GEMM_ACT_HD float positive_step(float z) {
#if defined(__CUDA_ARCH__)
  float h;
  asm("mul.ftz.sat.f32 %0, %1, 0f7F000000;" : "=f"(h) : "f"(z));
  return h;
#else
  return z > 0.0f ? 1.0f : 0.0f;
#endif
}

// The standard normal CDF, Phi(z) = (1 + erf(z / sqrt 2)) / 2.
template <Precision = Precision::kFloat>
GEMM_ACT_HD double normal_cdf(double z) {
  return 0.5 * (1.0 + ::erf(z * 0.70710678118654752440));
}

// c[0] x^(N-1) + ... + c[N-1], by Horner's rule (N - 1 FMAs; the loop
// unrolls and the coefficients become immediates).
template <int N>
GEMM_ACT_HD float polynomial(float x, const float (&c)[N]) {
  float r = c[0];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 1; i < N; ++i) r = fmaf(r, x, c[i]);
  return r;
}

// tanh(x) in float without a branch (libdevice's tanhf branches between a
// polynomial and an exponential): both are computed and one is selected.
// |x| >= 0.55: (1 - e) / (1 + e) with e = 2^(-2|x| log2 e) in (0, 1], which
// neither overflows nor cancels there; below, tanh(a) = a + a^3 P(a^2)
// (least-squares fit on [0, 0.55], 2e-9 relative), where the quotient would
// cancel. Relative error below 1e-6 on the GPU (approximate ex2 and
// division). tanh(+-inf) = +-1, tanh(NaN) = NaN, tanh(-0) = -0.
GEMM_ACT_HD float tanh(float x) {
  const float a = fabsf(x);
  const float e = exp2_flush(a * float(-2 * kLog2e));
  const float quotient = divide(1.0f - e, 1.0f + e);
  const float a2 = a * a;
  const float c[] = {-6.446250714e-03f, 2.119848691e-02f, -5.388452485e-02f, 1.333290786e-01f,
                     -3.333332837e-01f};
  const float series = fmaf(a * a2, polynomial(a2, c), a);
  return copysignf(a < 0.55f ? series : quotient, x);
}
GEMM_ACT_HD double tanh(double x) { return ::tanh(x); }

// numerator / (1 + 2^v) = numerator * sigmoid(-v ln 2), without
// cancellation anywhere: sigmoid, silu and gelu_tanh in one place, with the
// callers' ln 2 folded into their constants. Float: on the GPU one ex2 and an
// approximate division (relative error ~4e-7); where 2^v overflows the
// result is +-0, its limit. Double: exact.
GEMM_ACT_HD float over_one_plus_exp2(float numerator, float v) {
  return divide(numerator, 1.0f + exp2_flush(v));
}
GEMM_ACT_HD double over_one_plus_exp2(double numerator, double v) {
  return numerator / (1.0 + ::exp2(v));
}

// numerator * sigmoid(x).
template <class T>
GEMM_ACT_HD T times_sigmoid(T numerator, T x) {
  return over_one_plus_exp2(numerator, T(-kLog2e) * x);
}

// log2 Phi(-a) for a = |z| >= 0: the exponent of the normal tail below.
// kFloat: -a^2 / (2 ln 2) + g(u), u = min(a, 6), where g is smooth and slowly
// varying: a degree-10 polynomial in t = u/3 - 1 (least-squares Chebyshev
// fit on [0, 6], float coefficients), to 4e-7 (relative, in 2^result) for
// a <= 6; beyond, g stays at g(6), 16% off at a = 7 and 2x at 13.
// kHalf: one degree-7 polynomial in a for all of it, no clamp, no shift:
// its first multiply takes |z| as an operand modifier, so a GELU for 16-bit
// results takes 11 instructions per element, the epilogue's cost on
// short-K GEMMs. A minimax fit (its script is in git history) weighted to
// where fp16 results are normal: in float arithmetic 4.5e-6 relative (in
// 2^result) for a <= 4.5, 1.8e-5 up to 6 (bf16's 1% of an ulp is 3.9e-5,
// and fp16 results are subnormal there); beyond a = 6 it keeps decaying,
// 0.01% off at 7, 0.3% at 8 and 13% at 10 (where Phi(-a) < 1e-23 and
// PyTorch's float GELU has long been 0), then 0 below 2^-126.
template <Precision kP>
GEMM_ACT_HD float log2_normal_tail(float a) {
  if constexpr (kP == Precision::kHalf) {
    const float c[] = {-1.786778398e-06f, 6.076538921e-05f, -9.249974391e-04f, 8.490202948e-03f,
                       -5.393190309e-02f, -4.584850073e-01f, -1.151245594e+00f, -9.999955297e-01f};
    return polynomial(a, c);
  } else {
    const float c[] = {-6.955044810e-04f, 8.906872245e-04f, 1.686388045e-03f, -6.136647426e-03f,
                       1.534978300e-02f,  -3.925830498e-02f, 9.222940356e-02f, -2.043862790e-01f,
                       4.580745995e-01f,  -1.225271344e+00f, -3.040806055e+00f};
    const float g = polynomial(fmaf(fminf(a, 6.0f), 1.0f / 3.0f, -1.0f), c);
    constexpr float kMinusHalfLog2e = -0.72134752044448170368f;  // -1 / (2 ln 2)
    return fmaf(a * a, kMinusHalfLog2e, g);
  }
}

// Phi(z) in float without erf and without a branch:
//   q = Phi(-|z|) = 2^log2_normal_tail(|z|),
//   Phi(z) = |h - q|,  h = [z > 0]   (1 - q for z > 0, q for z <= 0).
// Phi's relative error is q's (above), in the tail too, where
// 1 + erff(z / sqrt 2) loses every digit (PyTorch's float GELU is 0 at
// z = -6). As q is at most 1/2 (to 3e-6), h - q has Phi's magnitude, and
// the absolute value is a free operand modifier of the multiply that uses
// Phi: one instruction fewer than q + h (1 - 2q). Special values:
// Phi(+inf) = 1, Phi(-inf) = 0, Phi(NaN) = NaN, so GELU(-inf) = -inf * 0 =
// NaN as PyTorch's.
template <Precision kP = Precision::kFloat>
GEMM_ACT_HD float normal_cdf(float z) {
  const float q = exp2_flush(log2_normal_tail<kP>(fabsf(z)));
  return fabsf(positive_step(z) - q);
}

}  // namespace math
}  // namespace gemm_act

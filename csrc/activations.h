// The activations and their derivatives: the single source of truth.
//
// Every kernel (CPU epilogue, every CUDA kernel, the backward) and the tests'
// reference call these functions; nothing else re-derives a formula. Each
// activation is a type, so a kernel templated on it has no per-element branch
// on which activation runs. The formulas follow PyTorch's own kernels
// (ATen's activation code), so NaN and +-inf come out as PyTorch's do; the
// float versions compute them without per-element branches (act_math.h:
// GELU's normal CDF without erff, division without its slow path).
//
// `T` is the compute type: float for fp16/bf16/fp32 storage, double for fp64.
#pragma once

#include <type_traits>

#include "act_math.h"
#include "gemm_act.h"

namespace gemm_act {

// Constants as PyTorch writes them (M_SQRT1_2, M_2_SQRTPI, ...), spelled out
// because <cmath> does not promise the M_* macros.
struct ActConstants {
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
  static constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2/pi)
  static constexpr double kGeluTanhCubic = 0.044715;
};

// Each activation: `forward<precision>(z, slope)` and `grad(saved, slope)` =
// act'(z), where `saved` is y = act(z) when its row of
// GEMM_ACT_FOR_EACH_ACTIVATION (gemm_act.h) says grad_from_y, else z. `slope`
// is leaky_relu's negative_slope and ignored elsewhere; `precision`
// (act_math.h) lets a float forward whose result is rounded to 16 bits take
// a cheaper formula (GELU does).
template <Activation kAct>
struct Act;

template <>
struct Act<Activation::None> {
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return z; }
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T, T) { return T(1); }
};

template <>
struct Act<Activation::ReLU> {
  // `z < 0 ? 0 : z` keeps NaN (and -0.0) as torch.relu does.
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return z < T(0) ? T(0) : z; }
  // threshold_backward: y <= 0 gives 0, anything else (NaN too) passes.
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T y, T) { return y <= T(0) ? T(0) : T(1); }
};

template <>
struct Act<Activation::LeakyReLU> {
  // Valid for slope >= 0 (checked by the op): then y > 0 exactly when z > 0.
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T slope) { return z > T(0) ? z : z * slope; }
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T y, T slope) { return y > T(0) ? T(1) : slope; }
};

template <>
struct Act<Activation::Tanh> {
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return math::tanh(z); }
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T y, T) { return T(1) - y * y; }
};

template <>
struct Act<Activation::Sigmoid> {
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return math::times_sigmoid(T(1), z); }
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T y, T) { return (T(1) - y) * y; }
};

template <>
struct Act<Activation::GELU> {
  template <Precision kP = Precision::kFloat, class T>
  GEMM_ACT_HD static T cdf(T z) { return math::normal_cdf<kP>(z); }
  template <Precision kP = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return z * cdf<kP>(z); }
  // Phi(z) + z phi(z), phi(z) = 2^(-z^2 / (2 ln 2)) / sqrt(2 pi): one ex2,
  // and Phi at the result's precision. A fused backward runs this on every
  // element after its GEMM, where each instruction counts (the float Phi
  // and expf made it twice gelu_tanh's cost).
  template <Precision kP = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T z, T) {
    const T e = math::exp2_flush(z * T(-0.5 * math::kLog2e) * z);
    return z * T(ActConstants::kInvSqrt2Pi) * e + cdf<kP>(z);
  }
};

template <>
struct Act<Activation::GELUTanh> {
  // PyTorch's 0.5 z (1 + tanh(u)) is z sigmoid(2u), which has no
  // cancellation where tanh(u) is near -1 (PyTorch's float result is 0
  // there) and no branch: u = sqrt(2/pi) (z + 0.044715 z^3), and
  // sigmoid(2u) = 1 / (1 + 2^v) with v = -2u / ln 2.
  template <class T>
  GEMM_ACT_HD static T exp2_argument(T z) {
    constexpr double k1 = -2 * ActConstants::kSqrt2OverPi * math::kLog2e;
    return z * (T(k1) + T(k1 * ActConstants::kGeluTanhCubic) * z * z);
  }
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) {
    return math::over_one_plus_exp2(z, exp2_argument(z));
  }
  // d/dz z s(2u) = s + z s (1 - s) 2u', with 2u' = 2 sqrt(2/pi) (1 + 3 *
  // 0.044715 z^2) in one FMA's constants, so the sum ends in two FMAs.
  // 1 - s = 2^v s: 1 - s itself cancels where s nears 1, which z 2u' (35 at
  // z = 5) would magnify to several times PyTorch's error. fmin takes 1 where
  // 2^v overflows (inf * 0 is NaN); s is 0 there, so the term is 0 either way.
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T z, T) {
    const T e = math::exp2_flush(exp2_argument(z));
    const T s = math::divide(T(1), T(1) + e);
    constexpr double k2 = 2 * ActConstants::kSqrt2OverPi;
    const T two_du = T(k2) + T(3 * k2 * ActConstants::kGeluTanhCubic) * z * z;
    return z * s * fmin(e * s, T(1)) * two_du + s;
  }
};

template <>
struct Act<Activation::SiLU> {
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return math::times_sigmoid(z, z); }
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T grad(T z, T) {
    const T s = math::times_sigmoid(T(1), z);
    return s * (T(1) + z * (T(1) - s));
  }
};

// act(z) for a result stored as `Stored` (fp16, bf16, float, double), at the
// precision that storage needs (act_math.h). What every kernel calls.
template <Activation kAct, class Stored, class T>
GEMM_ACT_HD T activate(T z, T slope) {
  return Act<kAct>::template forward<precision_for_bytes(sizeof(Stored))>(z, slope);
}

// act'(saved) for a gradient stored as `Stored`, at the precision that
// storage needs. What every backward calls.
template <Activation kAct, class Stored, class T>
GEMM_ACT_HD T activation_grad(T saved, T slope) {
  return Act<kAct>::template grad<precision_for_bytes(sizeof(Stored))>(saved, slope);
}

// What the table (gemm_act.h) says of each activation, indexed by its enum.
struct ActivationInfo {
  const char* name;
  bool grad_from_y;  // the backward uses Y (then Z is never written)
  bool uses_slope;   // it reads negative_slope
};

inline constexpr ActivationInfo kActivationInfo[] = {
#define GEMM_ACT_INFO(e, name, from_y, slope) {name, from_y, slope},
    GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_INFO)
#undef GEMM_ACT_INFO
};

constexpr const char* activation_name(Activation act) {
  return kActivationInfo[static_cast<int>(act)].name;
}
constexpr bool grad_from_output(Activation act) {
  return kActivationInfo[static_cast<int>(act)].grad_from_y;
}
constexpr bool uses_slope(Activation act) { return kActivationInfo[static_cast<int>(act)].uses_slope; }

// Calls f(std::integral_constant<Activation, act>{}): a run-time activation
// becomes a compile-time one, once per launch.
template <class F>
void dispatch_activation(Activation act, F&& f) {
  switch (act) {
#define GEMM_ACT_DISPATCH_CASE(e, name, from_y, slope)                  \
  case Activation::e:                                                   \
    f(std::integral_constant<Activation, Activation::e>{});             \
    break;
    GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_DISPATCH_CASE)
#undef GEMM_ACT_DISPATCH_CASE
  }
}

}  // namespace gemm_act

// Runs __VA_ARGS__ (statements) with the run-time activation ACT as the
// compile-time constant `kAct`.
#define GEMM_ACT_DISPATCH_ACTIVATION(ACT, ...)                                  \
  ::gemm_act::dispatch_activation((ACT), [&](auto gemm_act_tag_) {             \
    constexpr ::gemm_act::Activation kAct = decltype(gemm_act_tag_)::value;     \
    __VA_ARGS__;                                                                \
  })

#define GEMM_ACT_CASE_BIAS(ENUM, ...)                 \
  case ENUM: {                                        \
    constexpr ::gemm_act::BiasKind kBias = ENUM;      \
    __VA_ARGS__;                                      \
    break;                                            \
  }

#define GEMM_ACT_DISPATCH_BIAS(KIND, ...)                                  \
  switch (KIND) {                                                          \
    GEMM_ACT_CASE_BIAS(::gemm_act::BiasKind::None, __VA_ARGS__)            \
    GEMM_ACT_CASE_BIAS(::gemm_act::BiasKind::Scalar, __VA_ARGS__)          \
    GEMM_ACT_CASE_BIAS(::gemm_act::BiasKind::PerColumn, __VA_ARGS__)       \
    GEMM_ACT_CASE_BIAS(::gemm_act::BiasKind::PerRow, __VA_ARGS__)          \
  }

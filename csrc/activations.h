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
// act'(z), where `saved` is y = act(z) when kGradFromOutput, else z. `slope`
// is leaky_relu's negative_slope and ignored elsewhere; `precision`
// (act_math.h) lets a float forward whose result is rounded to 16 bits take
// a cheaper formula (GELU does).
template <Activation kAct>
struct Act;

template <>
struct Act<Activation::None> {
  static constexpr bool kGradFromOutput = true;
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return z; }
  template <class T>
  GEMM_ACT_HD static T grad(T, T) { return T(1); }
};

template <>
struct Act<Activation::ReLU> {
  static constexpr bool kGradFromOutput = true;
  // `z < 0 ? 0 : z` keeps NaN (and -0.0) as torch.relu does.
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return z < T(0) ? T(0) : z; }
  // threshold_backward: y <= 0 gives 0, anything else (NaN too) passes.
  template <class T>
  GEMM_ACT_HD static T grad(T y, T) { return y <= T(0) ? T(0) : T(1); }
};

template <>
struct Act<Activation::LeakyReLU> {
  // Valid for slope >= 0 (checked by the op): then y > 0 exactly when z > 0.
  static constexpr bool kGradFromOutput = true;
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T slope) { return z > T(0) ? z : z * slope; }
  template <class T>
  GEMM_ACT_HD static T grad(T y, T slope) { return y > T(0) ? T(1) : slope; }
};

template <>
struct Act<Activation::Tanh> {
  static constexpr bool kGradFromOutput = true;
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return math::tanh(z); }
  template <class T>
  GEMM_ACT_HD static T grad(T y, T) { return T(1) - y * y; }
};

template <>
struct Act<Activation::Sigmoid> {
  static constexpr bool kGradFromOutput = true;
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return math::times_sigmoid(T(1), z); }
  template <class T>
  GEMM_ACT_HD static T grad(T y, T) { return (T(1) - y) * y; }
};

template <>
struct Act<Activation::GELU> {
  static constexpr bool kGradFromOutput = false;
  template <Precision kP = Precision::kFloat, class T>
  GEMM_ACT_HD static T cdf(T z) { return math::normal_cdf<kP>(z); }
  template <Precision kP = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return z * cdf<kP>(z); }
  template <class T>
  GEMM_ACT_HD static T grad(T z, T) {
    const T pdf = math::exp(T(-0.5) * z * z) * T(ActConstants::kInvSqrt2Pi);
    return cdf(z) + z * pdf;
  }
};

template <>
struct Act<Activation::GELUTanh> {
  static constexpr bool kGradFromOutput = false;
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
  // d/dz z s(2u) = s + 2 z s (1 - s) u'.
  template <class T>
  GEMM_ACT_HD static T grad(T z, T) {
    const T s = math::over_one_plus_exp2(T(1), exp2_argument(z));
    const T d_inner = T(ActConstants::kSqrt2OverPi) *
                      (T(1) + T(3 * ActConstants::kGeluTanhCubic) * z * z);
    return s + T(2) * z * s * (T(1) - s) * d_inner;
  }
};

template <>
struct Act<Activation::SiLU> {
  static constexpr bool kGradFromOutput = false;
  template <Precision = Precision::kFloat, class T>
  GEMM_ACT_HD static T forward(T z, T) { return math::times_sigmoid(z, z); }
  template <class T>
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

// The public name of each activation (DESIGN.md's table).
constexpr const char* activation_name(Activation act) {
  switch (act) {
    case Activation::None: return "none";
    case Activation::ReLU: return "relu";
    case Activation::LeakyReLU: return "leaky_relu";
    case Activation::Tanh: return "tanh";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
    case Activation::SiLU: return "silu";
  }
  return "?";
}
constexpr int kNumActivations = 8;

// Whether the backward can use Y instead of Z (then Z is never written).
constexpr bool grad_from_output(Activation act) {
  switch (act) {
    case Activation::GELU:
    case Activation::GELUTanh:
    case Activation::SiLU:
      return false;
    default:
      return true;
  }
}

}  // namespace gemm_act

// Turns a run-time Activation into the compile-time constant `kAct` inside
// __VA_ARGS__ (a lambda body or statement), once per kernel launch.
#define GEMM_ACT_CASE_ACTIVATION(ENUM, ...)               \
  case ENUM: {                                            \
    constexpr ::gemm_act::Activation kAct = ENUM;         \
    __VA_ARGS__;                                          \
    break;                                                \
  }

#define GEMM_ACT_DISPATCH_ACTIVATION(ACT, ...)                                       \
  switch (ACT) {                                                                     \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::None, __VA_ARGS__)              \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::ReLU, __VA_ARGS__)              \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::LeakyReLU, __VA_ARGS__)         \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::Tanh, __VA_ARGS__)              \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::Sigmoid, __VA_ARGS__)           \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::GELU, __VA_ARGS__)              \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::GELUTanh, __VA_ARGS__)          \
    GEMM_ACT_CASE_ACTIVATION(::gemm_act::Activation::SiLU, __VA_ARGS__)              \
  }

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

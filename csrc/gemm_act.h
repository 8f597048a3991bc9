// The parameter structs and enums shared by every backend and kernel.
//
// checks.cpp validates inputs and fills these; kernels trust them. All strides
// are in elements; sizes and strides are int64 so no kernel overflows on
// large tensors (checks.cpp still caps M, N, K at int32 for grid sizes).
#pragma once

#include <cstdint>

namespace gemm_act {

// Which calls copy unaligned operands into aligned buffers (the sm90
// forward's staging, the backward's padding for cuBLAS) is rule `align` of
// the rules table (torch_gemm_act/_rules.py): below its size the extra
// launches would cost a large share of so small a problem's time.
//

// The activations, one row each: enumerator, public name (the API's string),
// whether act'(z) is computed from Y (then Z is never written for the
// backward) rather than from Z, and whether it takes negative_slope. Each
// one's formula is Act<> in activations.h; the enum, the names, the
// dispatch, every kernel family's instantiations and the Python list
// (torch_gemm_act/activations.py) derive from this table.
#define GEMM_ACT_FOR_EACH_ACTIVATION(X)                      \
  /* X(enumerator, name, grad_from_y, uses_slope) */         \
  X(None, "none", true, false)                               \
  X(ReLU, "relu", true, false)                               \
  X(LeakyReLU, "leaky_relu", true, true)                     \
  X(Tanh, "tanh", true, false)                               \
  X(Sigmoid, "sigmoid", true, false)                         \
  X(GELU, "gelu", false, false)                              \
  X(GELUTanh, "gelu_tanh", false, false)                     \
  X(SiLU, "silu", false, false)

enum class Activation : int {
#define GEMM_ACT_ENUMERATOR(e, name, from_y, slope) e,
  GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_ENUMERATOR)
#undef GEMM_ACT_ENUMERATOR
};

#define GEMM_ACT_COUNT(e, name, from_y, slope) +1
constexpr int kNumActivations = 0 GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_COUNT);
#undef GEMM_ACT_COUNT

// How the bias broadcasts against the [M, N] output (docs/DESIGN.md, "Bias").
enum class BiasKind : int {
  None = 0,
  Scalar,     // (), (1,), (1, 1): one value
  PerColumn,  // (N,), (1, N): the nn.Linear case, bias[n]
  PerRow,     // (M, 1) or (..., 1): bias[m]
};

// Y[M, N] = act(alpha * A[M, K] @ B[K, N] + beta * C[M, N] + bias), and Z
// (the pre-activation) too when `z` is non-null. Y and Z are contiguous
// row-major with leading dimension N; A, B and C take any strides.
struct GemmActParams {
  void* y = nullptr;
  void* z = nullptr;  // null: do not store Z
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;     // null: no beta * C term (also when beta == 0)
  const void* bias = nullptr;  // contiguous, bias_kind says how it broadcasts
  // gemm_glu's fused kernels only (gated.h): the up projection's bias, bias
  // being the gate's; each [N / 2] contiguous, or null for none.
  const void* bias_up = nullptr;
  // gemm_dropout_add's fused kernels only (dropout.h): the seed's device
  // address (null: no dropout), T and 2^32 / T.
  const int64_t* dropout_seed = nullptr;
  uint64_t dropout_threshold = 0;
  double dropout_scale = 1.0;
  int64_t m = 0, n = 0, k = 0;
  int64_t a_stride_m = 0, a_stride_k = 0;
  int64_t b_stride_k = 0, b_stride_n = 0;
  int64_t c_stride_m = 0, c_stride_n = 0;
  double alpha = 1.0;
  double beta = 0.0;
  double negative_slope = 0.01;
  Activation activation = Activation::None;
  BiasKind bias_kind = BiasKind::None;
};

// dZ[M, N] = gY * act'(saved), where saved is Y or Z as
// grad_from_output(activation) says, and dbias = dZ reduced to the bias's
// shape. All of gY, saved and dZ are contiguous row-major [M, N]; dbias is
// contiguous with 1 (Scalar), N (PerColumn) or M (PerRow) elements.
struct ActivationBackwardParams {
  void* grad_z = nullptr;
  void* grad_bias = nullptr;  // null when bias_kind == None
  const void* grad_y = nullptr;
  const void* saved = nullptr;
  int64_t m = 0, n = 0;
  double negative_slope = 0.01;
  Activation activation = Activation::None;
  BiasKind bias_kind = BiasKind::None;
};

}  // namespace gemm_act

// A layer's gradients from the gradients of its outputs, as gemm_act's
// backward node computes them (autograd.cpp): dZ and dbias through act',
// then the operands' from dZ.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <utility>

namespace gemm_act {

inline std::optional<at::Tensor> if_defined(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The pre-activation's gradient dZ and the bias's from the outputs'
// gradients: gY through act' (the backward pass, which reduces dbias in the
// same launch), plus Z's own gradient where Z was returned and used (or, for
// a layer on a chain, is how the next layer's gradient arrives). The
// identity's dZ is gY itself: no pass and no copy. Either gradient may be
// undefined; so is dZ when both are. With z_feeds_chain, Z's gradient adds
// nothing to the bias's (the next layer returned that part itself). dZ may
// be grad_y's own memory where this backward holds its only reference.
std::pair<at::Tensor, at::Tensor> preact_grad(const at::Tensor& grad_y, const at::Tensor& grad_z,
                                              const at::Tensor& saved,
                                              const std::optional<at::Tensor>& bias,
                                              c10::string_view activation, double negative_slope,
                                              bool z_feeds_chain);

// What a layer's backward saves beyond its operands: Y or Z as the
// activation's table row says (nothing for the identity, whose dZ is gY);
// undefined where Z was needed but not stored (then recomputed).
at::Tensor saved_output(c10::string_view activation, const at::Tensor& y, const at::Tensor& z,
                        bool store_preact);

// The operand gradients of Y = act(alpha * a @ b + ...) from dZ: dB always
// as alpha * a^T dZ, in b's layout; dA as alpha * dZ b^T, or, for a layer
// whose input is chained (a = a_act(a_preact), `a_saved` the Y or Z of
// a_act's table row), d(a_preact) = act'(a_saved) * alpha * dZ b^T in one
// fused GEMM (gemm_dact), which also sums it over rows into a_bias's
// gradient where that bias is per column.
struct OperandGrads {
  at::Tensor a, a_bias;
  // dB, or, with b_transposed, dB^T: for b = weight.t() (K contiguous) the
  // GEMM writes dB^T = dZ^T A row-major, laid out like the weight, which
  // AccumulateGrad then keeps as it is instead of copying it into the
  // weight's strides.
  at::Tensor b;
  bool b_transposed = false;

  at::Tensor grad_b() const { return b_transposed ? b.t() : b; }
  // The gradient of the weight whose transpose b is.
  at::Tensor grad_weight() const { return b_transposed ? b : b.t(); }
};
struct ChainedInput {
  at::Tensor a_saved;
  std::string activation;
  double negative_slope = 0.01;
  std::optional<at::Tensor> a_bias;  // the layer before's, when its gradient is returned here
  bool need_a_bias = false;
};

OperandGrads operand_grads(const at::Tensor& grad_pre, const at::Tensor& a, const at::Tensor& b,
                           double alpha, bool need_a, bool need_b, const ChainedInput* chained);

}  // namespace gemm_act

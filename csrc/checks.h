// The operators' input checks, in one place every backend shares: each
// backend's registration (cpu/register_cpu.cpp, cuda/register_cuda.cpp) is
// gemm_act_impl / activation_backward_impl around its own function, which
// then receives valid, consistent arguments (backend_args.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "backend_args.h"
#include "gemm_act.h"

namespace gemm_act {

// The activation called `name`; a ValueError that lists the known names
// otherwise.
Activation parse_activation(std::string_view name);

// A ValueError when `act` cannot take `negative_slope`.
void check_negative_slope(Activation act, double negative_slope);

// t shaped as `sizes` (t itself where it already is: each view is a
// dispatched call, and a fused layer's forward and backward made dozens).
inline at::Tensor shaped(const at::Tensor& t, at::IntArrayRef sizes) {
  return t.sizes() == sizes ? t : t.view(sizes);
}

// Under the testing switch's poison_outputs, fills t with NaN (before a
// kernel writes it, so an element the kernel skips cannot pass a test).
void poison_if_requested(at::Tensor& t);

// Validates gemm_act's inputs and allocates Y (and Z) for the backend to fill.
GemmActArgs prepare_gemm_act(const at::Tensor& a, const at::Tensor& b,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& c, std::string_view activation,
                             double alpha, double beta, double negative_slope, bool store_preact);

// What gemm_act returns once the backend has run: (Y, Z), Z empty when not stored.
std::tuple<at::Tensor, at::Tensor> gemm_act_outputs(const GemmActArgs& args);

// Validates gemm_dact's inputs (saved must have the shape of grad @ b, a
// bias must broadcast to it) and allocates dA: the arguments as gemm_act's
// with a = grad and C = saved, and no bias (the bias is not added but summed
// into: gemm_dact_impl).
GemmActArgs prepare_gemm_dact(const at::Tensor& grad, const at::Tensor& b, const at::Tensor& saved,
                              const std::optional<at::Tensor>& bias, std::string_view activation,
                              double alpha, double negative_slope);

// gemm_dact's bias gradient: empty without a bias; `column_sums` (dA's
// column sums [N] from the kernel, in dA's dtype) shaped as the bias where
// given; else bias_grad's sum of grad_a.
at::Tensor dact_bias_grad(const at::Tensor& grad_a, const std::optional<at::Tensor>& bias,
                          const at::Tensor& column_sums);

// Validates what gemm_act_chained adds to gemm_act's arguments.
void check_chained_input(const at::Tensor& a, const std::optional<at::Tensor>& a_preact,
                         const std::optional<at::Tensor>& a_bias, std::string_view a_activation,
                         double a_negative_slope);

// Validates activation_backward's inputs and allocates dZ (and dbias).
ActivationBackwardArgs prepare_activation_backward(const at::Tensor& grad_y,
                                                   const at::Tensor& saved,
                                                   const std::optional<at::Tensor>& bias,
                                                   std::string_view activation,
                                                   double negative_slope);

// Validates activation_backward_'s inputs (and that dZ may overwrite
// grad_y) and allocates dbias; grad_z is grad_y, or its contiguous copy.
ActivationBackwardArgs prepare_activation_backward_in_place(const at::Tensor& grad_y,
                                                            const at::Tensor& saved,
                                                            const std::optional<at::Tensor>& bias,
                                                            std::string_view activation,
                                                            double negative_slope);

// Validates bias_grad's inputs and allocates dbias; no dZ (grad_z undefined,
// params.grad_z null): the backward pass of the identity, reducing only.
ActivationBackwardArgs prepare_bias_grad(const at::Tensor& grad, const at::Tensor& bias);

// Validates zero_pad's inputs: src 2-D, of at most rows x cols.
void check_zero_pad(const at::Tensor& src, int64_t rows, int64_t cols);

// The zero_pad operator of a backend whose padded copy is `Pad`.
template <at::Tensor (*Pad)(const at::Tensor&, int64_t, int64_t)>
at::Tensor zero_pad_impl(const at::Tensor& src, int64_t rows, int64_t cols) {
  check_zero_pad(src, rows, cols);
  return Pad(src, rows, cols);
}

// (dZ, dbias), dbias empty without a bias.
std::tuple<at::Tensor, at::Tensor> activation_backward_outputs(const ActivationBackwardArgs& args);

// The gemm_act operator of a backend whose kernel is `Run`.
template <void (*Run)(const GemmActArgs&)>
std::tuple<at::Tensor, at::Tensor> gemm_act_impl(const at::Tensor& a, const at::Tensor& b,
                                                 const std::optional<at::Tensor>& bias,
                                                 const std::optional<at::Tensor>& c,
                                                 c10::string_view activation, double alpha,
                                                 double beta, double negative_slope,
                                                 bool store_preact) {
  const GemmActArgs args = prepare_gemm_act(a, b, bias, c, activation, alpha, beta,
                                            negative_slope, store_preact);
  if (args.params.m > 0 && args.params.n > 0) Run(args);
  return gemm_act_outputs(args);
}

// The explain operator of a backend whose planner is `Plan`: what its
// gemm_act would run for these arguments, computing nothing.
template <std::string (*Plan)(const GemmActArgs&)>
std::string explain_impl(const at::Tensor& a, const at::Tensor& b,
                         const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
                         c10::string_view activation, double alpha, double beta,
                         double negative_slope, bool store_preact) {
  return Plan(prepare_gemm_act(a, b, bias, c, activation, alpha, beta, negative_slope,
                               store_preact));
}

// The gemm_dact operator of a backend whose kernel is `Run`, which computes
// dA and, asked for them (for a bias per column), may return dA's column
// sums [N] reduced by its kernel (else an undefined tensor).
template <at::Tensor (*Run)(const GemmActArgs&, bool column_sums)>
std::tuple<at::Tensor, at::Tensor> gemm_dact_impl(const at::Tensor& grad, const at::Tensor& b,
                                                  const at::Tensor& saved,
                                                  const std::optional<at::Tensor>& bias,
                                                  c10::string_view activation, double alpha,
                                                  double negative_slope) {
  const GemmActArgs args = prepare_gemm_dact(grad, b, saved, bias, activation, alpha, negative_slope);
  const int64_t n = args.params.n;
  const bool per_column = bias.has_value() && bias->dim() >= 1 && bias->size(-1) == n && bias->numel() == n;
  at::Tensor column_sums;
  if (args.params.m > 0 && n > 0) column_sums = Run(args, per_column);
  const at::Tensor grad_a = shaped(args.y, args.out_sizes);
  return {grad_a, dact_bias_grad(grad_a, bias, column_sums)};
}

// The activation_backward operator of a backend whose kernel is `Run`.
template <void (*Run)(const ActivationBackwardArgs&)>
std::tuple<at::Tensor, at::Tensor> activation_backward_impl(const at::Tensor& grad_y,
                                                            const at::Tensor& saved,
                                                            const std::optional<at::Tensor>& bias,
                                                            c10::string_view activation,
                                                            double negative_slope) {
  const ActivationBackwardArgs args =
      prepare_activation_backward(grad_y, saved, bias, activation, negative_slope);
  Run(args);
  return activation_backward_outputs(args);
}

// The activation_backward_ operator (dZ over grad_y; returns dbias) of a
// backend whose kernel is `Run`.
template <void (*Run)(const ActivationBackwardArgs&)>
at::Tensor activation_backward_in_place_impl(const at::Tensor& grad_y, const at::Tensor& saved,
                                             const std::optional<at::Tensor>& bias,
                                             c10::string_view activation, double negative_slope) {
  const ActivationBackwardArgs args =
      prepare_activation_backward_in_place(grad_y, saved, bias, activation, negative_slope);
  Run(args);
  if (!args.grad_z.is_same(grad_y)) grad_y.copy_(args.grad_z);
  return std::get<1>(activation_backward_outputs(args));
}

// The bias_grad operator of a backend whose kernel is `Run` (given the
// arguments of prepare_bias_grad).
template <void (*Run)(const ActivationBackwardArgs&)>
at::Tensor bias_grad_impl(const at::Tensor& grad, const at::Tensor& bias) {
  const ActivationBackwardArgs args = prepare_bias_grad(grad, bias);
  Run(args);
  return shaped(args.grad_bias, args.bias_sizes);
}

}  // namespace gemm_act

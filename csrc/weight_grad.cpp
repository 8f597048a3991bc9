// weight_bias_grad on every backend without a fused one (the CPU, Meta):
// the GEMM, then bias_grad's sum. The CUDA backend reduces the bias in the
// GEMM's epilogue where cuBLASLt can (cuda/register_cuda.cpp).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "checks.h"
#include "op_handles.h"

namespace gemm_act {

std::tuple<at::Tensor, at::Tensor> weight_bias_grad_unfused(const at::Tensor& grad, const at::Tensor& a,
                                                            const std::optional<at::Tensor>& bias,
                                                            bool transposed) {
  at::Tensor grad_b = transposed ? grad.t().mm(a) : a.t().mm(grad);
  at::Tensor grad_bias = bias.has_value() ? op::bias_grad().call(grad, *bias) : at::empty({0}, grad.options());
  return {std::move(grad_b), std::move(grad_bias)};
}

namespace {

std::tuple<at::Tensor, at::Tensor> weight_bias_grad(const at::Tensor& grad, const at::Tensor& a,
                                                    const std::optional<at::Tensor>& bias, bool transposed) {
  check_weight_bias_grad(grad, a, bias);
  return weight_bias_grad_unfused(grad, a, bias, transposed);
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("weight_bias_grad", &gemm_act::weight_bias_grad);
}

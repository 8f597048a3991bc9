// The backward of dropout_add and gemm_dropout_add, registered for the
// Autograd key: the mask drawn again from the saved seed (dropout_scale:
// dZ = gY * mask * 2^32 / T), nothing else saved but the GEMM's operands;
// then gemm_dropout_add's two GEMMs and bias sum. The residual's gradient
// is gY itself. Sizes are symbolic where they may be.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <utility>

#include "needs_autograd.h"
#include "once_differentiable.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor dropout_grad(const at::Tensor& grad, double p, const at::Tensor& seed) {
  return p > 0.0 ? op::dropout_scale().call(grad, p, seed) : grad;
}

struct DropoutAddFunction : public torch::autograd::Function<DropoutAddFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& residual, double p,
                               const at::Tensor& seed) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({seed});
    ctx->saved_data["p"] = p;
    return {op::dropout_add().call(z, residual, p, seed)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const at::Tensor seed = ctx->get_saved_variables()[0];
    const double p = ctx->saved_data["p"].toDouble();
    variable_list out(4);
    if (!grads[0].defined()) return out;
    if (ctx->needs_input_grad(0)) out[0] = dropout_grad(grads[0], p, seed);
    if (ctx->needs_input_grad(1)) out[1] = grads[0];
    return at::GradMode::is_enabled() ? once_differentiable(std::move(out)) : out;
  }
};

// b is a weight's transpose ([N, K] row-major seen as [K, N]): its gradient
// is best computed as dZ^T a, whose transpose is laid out as the weight.
bool weight_view(const at::Tensor& b) { return b.sym_stride(0) == 1 && b.sym_stride(1) != 1; }

struct GemmDropoutAddFunction : public torch::autograd::Function<GemmDropoutAddFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                               const std::optional<at::Tensor>& bias, const at::Tensor& residual, double p,
                               const at::Tensor& seed) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({a, b, bias.value_or(at::Tensor()), seed});
    ctx->saved_data["p"] = p;
    return {op::gemm_dropout_add().call(a, b, bias, residual, p, seed)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &bias = saved[2], &seed = saved[3];
    const double p = ctx->saved_data["p"].toDouble();
    at::Tensor grad_y = std::move(grads[0]);
    grads.clear();
    variable_list out(6);  // one per argument
    if (!grad_y.defined()) return out;
    // needs_input_grad counts tensor arguments only, an absent bias not among them.
    if (ctx->needs_input_grad(bias.defined() ? 3 : 2)) out[3] = grad_y;
    const bool need_bias = bias.defined() && ctx->needs_input_grad(2);
    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1) || need_bias) {
      const c10::SymInt k = b.sym_size(0), n = b.sym_size(1);
      c10::SymInt rows = 1;
      for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.sym_size(d);
      const at::Tensor dz_out = dropout_grad(grad_y, p, seed);  // the output's shape
      const at::Tensor dz = dz_out.reshape_symint({rows, n});
      if (ctx->needs_input_grad(0)) out[0] = at::mm(dz, b.t()).reshape_symint(a.sym_sizes());
      if (ctx->needs_input_grad(1)) {
        const at::Tensor a_2d = a.reshape_symint({rows, k});
        out[1] = weight_view(b) ? dz.t().mm(a_2d).t() : a_2d.t().mm(dz);
      }
      if (need_bias) out[2] = op::bias_grad().call(dz_out, bias);
    }
    return at::GradMode::is_enabled() ? once_differentiable(std::move(out)) : out;
  }
};

at::Tensor dropout_add_autograd(const at::Tensor& z, const at::Tensor& residual, double p, const at::Tensor& seed) {
  if (!needs_autograd({&z, &residual})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op::dropout_add().call(z, residual, p, seed);
  }
  return DropoutAddFunction::apply(z, residual, p, seed)[0];
}

at::Tensor gemm_dropout_add_autograd(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                                     const at::Tensor& residual, double p, const at::Tensor& seed) {
  if (!needs_autograd({&a, &b, present(bias), &residual})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op::gemm_dropout_add().call(a, b, bias, residual, p, seed);
  }
  return GemmDropoutAddFunction::apply(a, b, bias, residual, p, seed)[0];
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, Autograd, m) {
  m.impl("dropout_add", &gemm_act::dropout_add_autograd);
  m.impl("gemm_dropout_add", &gemm_act::gemm_dropout_add_autograd);
}

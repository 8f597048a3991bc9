// gemm_glu's backward (docs/DESIGN.md, "Gated activations"), registered for
// the Autograd key: from Y's gradient the gated pass writes dH, the
// gradient of both projections side by side, and the GEMMs take it from
// there: dA = dH_gate b_gate^T + dH_up b_up^T (one GEMM accumulating into
// the other), dB of both in one GEMM where both are weight.t() views, and
// the biases' from one sum of dH. Sizes are symbolic where they may be.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "needs_autograd.h"
#include "once_differentiable.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// b is a weight's transpose ([N, K] row-major seen as [K, N]): its gradient
// is best computed as dH^T a, whose transpose is laid out as the weight.
bool weight_view(const at::Tensor& b) { return b.sym_stride(0) == 1 && b.sym_stride(1) != 1; }

struct GemmGluFunction : public torch::autograd::Function<GemmGluFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b_gate,
                               const at::Tensor& b_up, const std::optional<at::Tensor>& bias_gate,
                               const std::optional<at::Tensor>& bias_up, c10::string_view activation,
                               double negative_slope, bool store_preact) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // H is what the backward reads, whether the caller asked for it or not.
    auto [y, h] = op::gemm_glu().call(a, b_gate, b_up, bias_gate, bias_up, activation,
                                      negative_slope, /*store_preact=*/true);
    ctx->save_for_backward({a, b_gate, b_up, h});
    ctx->saved_data["activation"] = std::string(activation);
    ctx->saved_data["negative_slope"] = negative_slope;
    ctx->saved_data["has_bias_gate"] = bias_gate.has_value();
    ctx->saved_data["has_bias_up"] = bias_up.has_value();
    if (store_preact) return {y, h};
    at::Tensor none = at::empty({0}, y.options());
    ctx->mark_non_differentiable({none});
    return {y, none};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b_gate = saved[1], &b_up = saved[2], &h = saved[3];
    const std::string activation = ctx->saved_data["activation"].toStringRef();
    const double negative_slope = ctx->saved_data["negative_slope"].toDouble();
    const c10::SymInt k = b_gate.sym_size(0), n = b_gate.sym_size(1);
    c10::SymInt rows = 1;
    for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.sym_size(d);
    const at::Tensor h_2d = h.reshape_symint({rows, n * 2});

    // The incoming gradients moved out of `grads` (a reference) and freed as
    // soon as dH exists, before the GEMMs, as layer_backward does.
    at::Tensor grad_y = std::move(grads[0]);
    at::Tensor grad_h_direct = grads.size() > 1 ? std::move(grads[1]) : at::Tensor();
    grads.clear();
    at::Tensor grad_h;
    if (grad_y.defined()) {
      grad_h = op::glu_backward().call(grad_y.reshape_symint({rows, n}), h_2d, activation,
                                       negative_slope);
      grad_y.reset();
    }
    if (grad_h_direct.defined() && grad_h_direct.sym_numel() != 0) {
      grad_h_direct = grad_h_direct.reshape_symint({rows, n * 2});
      grad_h = grad_h.defined() ? grad_h + grad_h_direct : grad_h_direct;
    }
    grad_h_direct.reset();
    variable_list out(8);
    if (!grad_h.defined()) return out;
    const at::Tensor grad_gate = grad_h.narrow_symint(1, 0, n), grad_up = grad_h.narrow_symint(1, n, n);
    const at::Tensor a_2d = a.reshape_symint({rows, k});
    if (ctx->needs_input_grad(0)) {
      out[0] = at::mm(grad_gate, b_gate.t()).addmm_(grad_up, b_up.t()).reshape_symint(a.sym_sizes());
    }
    const bool need_gate = ctx->needs_input_grad(1), need_up = ctx->needs_input_grad(2);
    if (need_gate && need_up && weight_view(b_gate) && weight_view(b_up)) {
      const at::Tensor grad_bt = grad_h.t().mm(a_2d);  // [2N, K]: both weights' gradients
      out[1] = grad_bt.narrow_symint(0, 0, n).t();
      out[2] = grad_bt.narrow_symint(0, n, n).t();
    } else {
      const auto grad_b = [&](const at::Tensor& b, const at::Tensor& g) {
        return weight_view(b) ? g.t().mm(a_2d).t() : a_2d.t().mm(g);
      };
      if (need_gate) out[1] = grad_b(b_gate, grad_gate);
      if (need_up) out[2] = grad_b(b_up, grad_up);
    }
    const bool bias_gate = ctx->saved_data["has_bias_gate"].toBool() && ctx->needs_input_grad(3);
    const bool bias_up = ctx->saved_data["has_bias_up"].toBool() && ctx->needs_input_grad(4);
    if (bias_gate || bias_up) {
      const at::Tensor grad_bias = grad_h.sum(0);  // [2N]
      if (bias_gate) out[3] = grad_bias.narrow_symint(0, 0, n);
      if (bias_up) out[4] = grad_bias.narrow_symint(0, n, n);
    }
    return at::GradMode::is_enabled() ? once_differentiable(std::move(out)) : out;
  }
};

std::tuple<at::Tensor, at::Tensor> gemm_glu_autograd(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact) {
  if (!needs_autograd({&a, &b_gate, &b_up, present(bias_gate), present(bias_up)})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op::gemm_glu().call(a, b_gate, b_up, bias_gate, bias_up, activation, negative_slope,
                               store_preact);
  }
  const variable_list out = GemmGluFunction::apply(a, b_gate, b_up, bias_gate, bias_up, activation,
                                                   negative_slope, store_preact);
  return {out[0], out[1]};
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, Autograd, m) {
  m.impl("gemm_glu", &gemm_act::gemm_glu_autograd);
}

// The backward of gemm_act (docs/DESIGN.md, "Backward"), registered for the
// Autograd dispatch key: in C++, so that a call with inputs that require
// grad costs about what an ATen op costs. (The same logic written in Python
// through torch.library.register_autograd added about 70 us of host time to
// every forward and more to every backward.)
//
// Everything here calls operators through the dispatcher (ours and ATen's),
// so torch.compile traces the backward as it traces ATen's, and sizes are
// symbolic where they may be.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "activations.h"
#include "gemm_act.h"
#include "checks.h"

namespace gemm_act {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The identity activation's name: the pre-activation itself, and the
// pass-through of Z's own gradient.
constexpr const char* kIdentity = activation_name(Activation::None);

using GemmActSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, c10::string_view, double, double, double, bool);
using ActivationBackwardSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view, double);

std::tuple<at::Tensor, at::Tensor> call_gemm_act(const at::Tensor& a, const at::Tensor& b,
                                                 const std::optional<at::Tensor>& bias,
                                                 const std::optional<at::Tensor>& c,
                                                 c10::string_view activation, double alpha, double beta,
                                                 double negative_slope, bool store_preact) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gemm_act::gemm_act", "")
                             .typed<GemmActSignature>();
  return op.call(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
}

std::tuple<at::Tensor, at::Tensor> call_activation_backward(const at::Tensor& grad_y,
                                                            const at::Tensor& saved,
                                                            const std::optional<at::Tensor>& bias,
                                                            c10::string_view activation,
                                                            double negative_slope) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gemm_act::activation_backward", "")
                             .typed<ActivationBackwardSignature>();
  return op.call(grad_y, saved, bias, activation, negative_slope);
}

// cuBLAS runs a GEMM whose rows are not 16-byte aligned (in bf16: K or N
// not a multiple of 8) on a much slower kernel: about 2 ms against 0.55
// for the unaligned benchmark shape's dA or dW on an H100. There the
// backward's two GEMMs run on copies whose K and N are padded with zeros to
// 16 bytes (the zeros add nothing to any sum) and their results are sliced
// back: on CUDA, for element types up to 4 bytes (float64 is left alone),
// and for problems large enough (gemm_act.h) that the copies pay.
bool pad_for_cublas(const at::Tensor& like, const c10::SymInt& m, const c10::SymInt& n,
                    const c10::SymInt& k) {
  if (!like.is_cuda() || like.element_size() > 4) return false;
  // On symbolic sizes each comparison is a guard. Divided, not multiplied:
  // M*N*K can overflow int64.
  return k > 0 && m * n >= c10::SymInt(kMinMultiplyAddsToAlign) / k;
}

// `size` rounded up to a whole number of 16-byte rows of `like`'s elements.
c10::SymInt round_up_to_16_bytes(const at::Tensor& like, const c10::SymInt& size) {
  const int64_t align = 16 / like.element_size();
  const c10::SymInt rest = size % align;
  if (rest == 0) return size;
  return size + (align - rest);
}

// t [rows, cols] with zero rows and columns added up to [rows_to, cols_to];
// t itself where nothing is added.
at::Tensor pad_to(const at::Tensor& t, const c10::SymInt& rows_to, const c10::SymInt& cols_to) {
  const c10::SymInt add_rows = rows_to - t.sym_size(0), add_cols = cols_to - t.sym_size(1);
  if (add_rows == 0 && add_cols == 0) return t;
  return at::constant_pad_nd_symint(t, {0, add_cols, 0, add_rows}, 0);
}

// The backward is not itself differentiable (activation_backward has no
// derivative, and act'' is not written anywhere). Under create_graph=True
// its gradients pass, as with torch.autograd.function.once_differentiable,
// through a node that raises if anything backpropagates through them,
// instead of reaching a graph that would silently leave out act''(Z).
variable_list once_differentiable(variable_list grads) {
  const auto count = static_cast<int64_t>(grads.size());
  return torch::autograd::DelayedError(
             "gemm_act: its backward is not differentiable; double backward (the gradient of a "
             "gradient taken with create_graph=True) is not supported",
             count)
      .apply(std::move(grads));
}

std::optional<at::Tensor> if_defined(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// One forward argument per schema argument, in schema order; backward
// returns a gradient (or an undefined tensor) for each.
struct GemmActFunction : public torch::autograd::Function<GemmActFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                               const std::optional<at::Tensor>& bias,
                               const std::optional<at::Tensor>& c, c10::string_view activation,
                               double alpha, double beta, double negative_slope, bool store_preact) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, z] = call_gemm_act(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
    // The call above has validated every argument, the activation's name included.
    const bool from_output = grad_from_output(parse_activation(activation));
    const at::Tensor saved = from_output ? y : (store_preact ? z : at::Tensor());
    // c is kept only for the rare recomputation of Z in backward (a reference, no copy).
    ctx->save_for_backward({a, b, saved, bias.value_or(at::Tensor()),
                            saved.defined() ? at::Tensor() : c.value_or(at::Tensor())});
    ctx->saved_data["activation"] = std::string(activation);
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["negative_slope"] = negative_slope;
    ctx->saved_data["store_preact"] = store_preact;
    // Which of the tensor arguments are present: the context numbers its
    // input gradients over those only.
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    ctx->saved_data["has_c"] = c.has_value() && c->defined();
    if (!store_preact) ctx->mark_non_differentiable({z});  // an empty placeholder
    // An output that received no gradient (Z, unless the user asked for it
    // and used it) arrives undefined instead of as zeros, which would cost a
    // fill, a dZ pass and an add as large as Y.
    ctx->set_materialize_grads(false);
    return {y, z};
  }

  // `grads` by reference: the autograd node holds the only other reference
  // to the incoming gradients, so moving them out here lets them be freed
  // as soon as dZ exists, before the two GEMMs (eager's activation node
  // frees gY at that point too; holding it raised the peak memory of a
  // training step by gY's size).
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const variable_list saved_vars = ctx->get_saved_variables();
    const at::Tensor &a = saved_vars[0], &b = saved_vars[1], &bias = saved_vars[3], &c = saved_vars[4];
    at::Tensor saved = saved_vars[2];
    const std::string activation = ctx->saved_data["activation"].toStringRef();
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const double beta = ctx->saved_data["beta"].toDouble();
    const double negative_slope = ctx->saved_data["negative_slope"].toDouble();
    const bool store_preact = ctx->saved_data["store_preact"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const bool has_c = ctx->saved_data["has_c"].toBool();
    const size_t bias_edge = 2, c_edge = has_bias ? 3 : 2;
    const bool need_a = ctx->needs_input_grad(0), need_b = ctx->needs_input_grad(1);
    const bool need_bias = has_bias && ctx->needs_input_grad(bias_edge);
    const bool need_c = has_c && ctx->needs_input_grad(c_edge);

    at::Tensor grad_y = std::move(grads[0]);
    at::Tensor grad_z = std::move(grads[1]);
    grads.clear();
    const std::optional<at::Tensor> bias_for_grad = need_bias ? if_defined(bias) : std::nullopt;
    at::Tensor grad_pre, grad_bias;
    if (grad_y.defined()) {
      if (!saved.defined()) {
        // The op was called directly with store_preact=False for an activation
        // whose derivative needs Z (gemm_act() never does this): recompute Z.
        saved = std::get<0>(call_gemm_act(a, b, if_defined(bias), if_defined(c), kIdentity, alpha,
                                          beta, 0.0, false));
      }
      std::tie(grad_pre, grad_bias) =
          call_activation_backward(grad_y, saved, bias_for_grad, activation, negative_slope);
    }
    if (grad_z.defined() && store_preact) {
      // Z was returned to the user and used: its gradient adds to dZ (and dbias).
      auto [grad_pre_z, grad_bias_z] =
          call_activation_backward(grad_z, grad_z, bias_for_grad, kIdentity, 0.0);
      if (!grad_pre.defined()) {
        grad_pre = grad_pre_z;
        grad_bias = grad_bias_z;
      } else {
        grad_pre = grad_pre + grad_pre_z;
        if (need_bias) grad_bias = grad_bias + grad_bias_z;
      }
    }

    grad_y.reset();
    grad_z.reset();

    variable_list out(9);  // one per forward argument; undefined: no gradient
    if (!grad_pre.defined()) return out;  // neither output received a gradient
    c10::SymInt rows = 1;  // M: a's leading dimensions flattened (no -1: K or N may be 0)
    for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.sym_size(d);
    const c10::SymInt k = b.sym_size(0), n = b.sym_size(1);
    const bool pad = pad_for_cublas(grad_pre, rows, n, k);
    const c10::SymInt k_run = pad ? round_up_to_16_bytes(grad_pre, k) : k;
    const c10::SymInt n_run = pad ? round_up_to_16_bytes(grad_pre, n) : n;
    const at::Tensor grad_pre_2d = pad_to(grad_pre.reshape_symint({rows, n}), rows, n_run);
    if (need_a) {
      const at::Tensor grad_a = grad_pre_2d.mm(pad_to(b, k_run, n_run).t());  // [M, k_run]
      out[0] = grad_a.narrow_symint(1, 0, k).reshape_symint(a.sym_sizes());
      if (alpha != 1.0) out[0] = out[0] * alpha;
    }
    if (need_b) {
      // dB in b's own layout: for b = weight.t() (K contiguous), dB^T = dZ^T A
      // row-major, whose transpose the autograd of .t() turns back into a
      // gradient laid out like the weight, which AccumulateGrad then keeps
      // as it is instead of copying it into the weight's strides.
      const at::Tensor a_2d = pad_to(a.reshape_symint({rows, k}), rows, k_run);
      if (b.sym_stride(0) == 1 && b.sym_stride(1) != 1) {
        const at::Tensor grad_bt = grad_pre_2d.t().mm(a_2d);  // [n_run, k_run]
        out[1] = grad_bt.narrow_symint(0, 0, n).narrow_symint(1, 0, k).t();
      } else {
        const at::Tensor grad_b = a_2d.t().mm(grad_pre_2d);  // [k_run, n_run]
        out[1] = grad_b.narrow_symint(0, 0, k).narrow_symint(1, 0, n);
      }
      if (alpha != 1.0) out[1] = out[1] * alpha;
    }
    if (need_bias) out[2] = grad_bias;
    if (need_c) out[3] = grad_pre * beta;
    // Grad mode is on here only under create_graph=True.
    return at::GradMode::is_enabled() ? once_differentiable(std::move(out)) : out;
  }
};

std::tuple<at::Tensor, at::Tensor> gemm_act_autograd(const at::Tensor& a, const at::Tensor& b,
                                                     const std::optional<at::Tensor>& bias,
                                                     const std::optional<at::Tensor>& c,
                                                     c10::string_view activation, double alpha,
                                                     double beta, double negative_slope,
                                                     bool store_preact) {
  const variable_list out =
      GemmActFunction::apply(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
  return {out[0], out[1]};
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, Autograd, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_autograd);
}

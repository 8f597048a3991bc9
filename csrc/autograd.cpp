// The backward of gemm_act (docs/DESIGN.md, "Backward"), registered for the
// Autograd dispatch key: in C++, so that a call with inputs that require
// grad costs about what an ATen op costs (Python's register_autograd costs
// several times that; docs/MEASUREMENTS.md, "Kernel shapes and helpers").
// The gradients themselves are layer_grads.h's.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "activations.h"
#include "gemm_act.h"
#include "checks.h"
#include "layer_grads.h"
#include "needs_autograd.h"
#include "once_differentiable.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The identity activation's name: the pre-activation itself, and the
// pass-through of Z's own gradient.
constexpr const char* kIdentity = activation_name(Activation::None);

std::tuple<at::Tensor, at::Tensor> call_gemm_act(const at::Tensor& a, const at::Tensor& b,
                                                 const std::optional<at::Tensor>& bias,
                                                 const std::optional<at::Tensor>& c,
                                                 c10::string_view activation, double alpha, double beta,
                                                 double negative_slope, bool store_preact) {
  return op::gemm_act().call(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
}

// A layer's non-tensor arguments, as its backward reads them: one
// saved_data entry, since each entry costs every forward a string-keyed
// insertion and every backward a lookup. The chained input's (a_*) are
// the identity's where there is none.
struct LayerRecord {
  Activation activation = Activation::None, a_activation = Activation::None;
  double alpha = 1.0, beta = 0.0, negative_slope = 0.01, a_negative_slope = 0.01;
  bool store_preact = false, has_c = false, z_feeds_chain = false;

  static constexpr const char* kKey = "layer";

  // The record of gemm_act's own arguments (the call that made them has
  // validated the activation's name).
  static LayerRecord of(c10::string_view activation, double alpha, double beta, double negative_slope,
                        bool store_preact) {
    LayerRecord r;
    r.activation = parse_activation(activation);
    r.alpha = alpha;
    r.beta = beta;
    r.negative_slope = negative_slope;
    r.store_preact = store_preact;
    return r;
  }

  // Small integers and flags are exact as doubles.
  void save(AutogradContext* ctx) const {
    ctx->saved_data[kKey] = std::vector<double>{
        double(static_cast<int>(activation)), double(static_cast<int>(a_activation)), alpha, beta,
        negative_slope, a_negative_slope, double(store_preact), double(has_c), double(z_feeds_chain)};
  }

  static LayerRecord load(AutogradContext* ctx) {
    const c10::List<double> v = ctx->saved_data[kKey].toDoubleList();
    LayerRecord r;
    r.activation = static_cast<Activation>(static_cast<int>(v[0]));
    r.a_activation = static_cast<Activation>(static_cast<int>(v[1]));
    r.alpha = v[2];
    r.beta = v[3];
    r.negative_slope = v[4];
    r.a_negative_slope = v[5];
    r.store_preact = v[6] != 0.0;
    r.has_c = v[7] != 0.0;
    r.z_feeds_chain = v[8] != 0.0;
    return r;
  }
};

// What both autograd functions keep of the gemm_act they ran; `record`
// holds its non-tensor arguments (has_c is set here).
void save_layer(AutogradContext* ctx, LayerRecord record, const at::Tensor& a, const at::Tensor& b,
                const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
                const at::Tensor& y, const at::Tensor& z, const at::Tensor& a_saved = at::Tensor(),
                const at::Tensor& a_bias = at::Tensor()) {
  const c10::string_view activation = activation_name(record.activation);
  const at::Tensor saved = saved_output(activation, y, z, record.store_preact);
  const bool recompute = !saved.defined() && record.activation != Activation::None;
  // c is kept only for the rare recomputation of Z in backward (a reference, no copy).
  ctx->save_for_backward({a, b, saved, bias.value_or(at::Tensor()),
                          recompute ? c.value_or(at::Tensor()) : at::Tensor(), a_saved, a_bias});
  record.has_c = c.has_value() && c->defined();
  record.save(ctx);
  if (!record.store_preact) ctx->mark_non_differentiable({z});  // an empty placeholder
  // An output that received no gradient (Z, unless the user asked for it
  // and used it) arrives undefined instead of as zeros, which would cost a
  // fill, a dZ pass and an add as large as Y.
  ctx->set_materialize_grads(false);
}

// Where a function's operands are: `pos` among the forward's arguments (the
// gradients it returns, one per argument; bias and c follow b), `edge`
// among its tensor arguments present (what needs_input_grad counts).
// a_bias (a chained input's layer-before bias) only where chained has one.
struct OperandPlaces {
  size_t a_pos, b_pos, num_args;
  size_t a_edge, b_edge;
  size_t a_bias_pos = 0, a_bias_edge = 0;
};

// The backward both functions share, given `places`; `grads` by reference, so that
// moving the incoming gradients out lets them be freed as soon as dZ exists,
// before the GEMMs (eager's activation node frees gY there too; holding it
// raised a training step's peak memory by gY's size).
variable_list layer_backward(AutogradContext* ctx, const LayerRecord& record, const variable_list& saved_vars,
                             variable_list& grads, const OperandPlaces& places, ChainedInput* chained) {
  const at::Tensor &a = saved_vars[0], &b = saved_vars[1], &bias = saved_vars[3], &c = saved_vars[4];
  at::Tensor saved = saved_vars[2];
  const c10::string_view activation = activation_name(record.activation);
  const double alpha = record.alpha, beta = record.beta, negative_slope = record.negative_slope;
  const bool z_feeds_chain = record.z_feeds_chain;
  const bool has_bias = bias.defined();
  const bool has_c = record.has_c;
  const size_t bias_edge = places.b_edge + 1;
  const size_t c_edge = has_bias ? places.b_edge + 2 : places.b_edge + 1;
  const bool need_a = ctx->needs_input_grad(places.a_edge);
  const bool need_b = ctx->needs_input_grad(places.b_edge);
  const bool need_bias = has_bias && ctx->needs_input_grad(bias_edge);
  const bool need_c = has_c && ctx->needs_input_grad(c_edge);
  if (chained != nullptr) {
    chained->need_a_bias = chained->a_bias.has_value() && ctx->needs_input_grad(places.a_bias_edge);
  }

  at::Tensor grad_y = std::move(grads[0]);
  at::Tensor grad_z = std::move(grads[1]);
  grads.clear();
  if (!record.store_preact) grad_z = at::Tensor();  // the placeholder's
  if (grad_y.defined() && !saved.defined() && record.activation != Activation::None) {
    // The op was called directly with store_preact=False for an activation
    // whose derivative needs Z (gemm_act() never does this): recompute Z.
    saved = std::get<0>(call_gemm_act(a, b, if_defined(bias), if_defined(c), kIdentity, alpha,
                                      beta, 0.0, false));
  }
  auto [grad_pre, grad_bias] =
      preact_grad(grad_y, grad_z, saved, need_bias ? if_defined(bias) : std::nullopt, activation,
                  negative_slope, z_feeds_chain);
  grad_y.reset();
  grad_z.reset();
  saved.reset();

  variable_list out(places.num_args);  // one per forward argument; undefined: no gradient
  if (!grad_pre.defined()) return out;  // neither output received a gradient
  OperandGrads operands = operand_grads(grad_pre, a, b, alpha, need_a, need_b, chained);
  if (need_a) out[places.a_pos] = std::move(operands.a);
  out[places.b_pos] = operands.grad_b();
  if (chained != nullptr && chained->need_a_bias) out[places.a_bias_pos] = std::move(operands.a_bias);
  if (need_bias) out[places.b_pos + 1] = grad_bias;
  // At beta == 0 the forward does not read C (as torch.addmm): its gradient
  // is zero, not 0 * dZ, which is NaN where dZ is.
  if (need_c) out[places.b_pos + 2] = beta == 0.0 ? at::zeros_like(grad_pre, at::MemoryFormat::Contiguous)
                                                  : grad_pre * beta;
  // Grad mode is on here only under create_graph=True.
  return at::GradMode::is_enabled() ? once_differentiable(std::move(out)) : out;
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
    save_layer(ctx, LayerRecord::of(activation, alpha, beta, negative_slope, store_preact), a, b, bias, c, y, z);
    return {y, z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    // Arguments a, b, bias, c, then non-tensors.
    return layer_backward(ctx, LayerRecord::load(ctx), ctx->get_saved_variables(), grads, {0, 1, 9, 0, 1},
                          nullptr);
  }
};

// gemm_act_chained: gemm_act of a layer on a chain (schema.cpp). With
// a_preact, a = a_act(a_preact) and its gradient goes to a_preact through
// the fused gemm_dact (a itself gets none: the caller guarantees a is
// a_act(a_preact), a cache of it), with a_bias's gradient from the same
// epilogue. Arguments: a, a_preact, a_bias, a_activation, a_negative_slope,
// then gemm_act's from b on, then z_feeds_chain.
struct GemmActChainedFunction : public torch::autograd::Function<GemmActChainedFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& a,
                               const std::optional<at::Tensor>& a_preact,
                               const std::optional<at::Tensor>& a_bias, c10::string_view a_activation,
                               double a_negative_slope, const at::Tensor& b,
                               const std::optional<at::Tensor>& bias,
                               const std::optional<at::Tensor>& c, c10::string_view activation,
                               double alpha, double beta, double negative_slope, bool store_preact,
                               bool z_feeds_chain) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, z] = op::gemm_act_chained().call(a, a_preact, a_bias, a_activation, a_negative_slope, b,
                                              bias, c, activation, alpha, beta, negative_slope,
                                              store_preact, z_feeds_chain);
    LayerRecord record = LayerRecord::of(activation, alpha, beta, negative_slope, store_preact);
    record.a_activation = parse_activation(a_activation);
    record.a_negative_slope = a_negative_slope;
    record.z_feeds_chain = z_feeds_chain;
    at::Tensor a_saved;
    if (a_preact.has_value()) a_saved = grad_from_output(record.a_activation) ? a : *a_preact;
    save_layer(ctx, record, a, b, bias, c, y, z, a_saved, a_bias.value_or(at::Tensor()));
    return {y, z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const LayerRecord record = LayerRecord::load(ctx);
    // Arguments a, a_preact, a_bias, two non-tensors, b, bias, c, then
    // non-tensors (14 in all); edges count only the tensors present.
    // a_saved (saved_vars[5]) is defined where a_preact was given, a_bias
    // (saved_vars[6]) where a_bias was.
    const variable_list saved_vars = ctx->get_saved_variables();
    if (!saved_vars[5].defined()) {
      return layer_backward(ctx, record, saved_vars, grads, {0, 5, 14, 0, 1}, nullptr);
    }
    ChainedInput chained;
    chained.a_saved = saved_vars[5];
    if (saved_vars[6].defined()) chained.a_bias = saved_vars[6];
    chained.activation = activation_name(record.a_activation);
    chained.negative_slope = record.a_negative_slope;
    // a_preact takes the gradient a would have had; a none.
    OperandPlaces places{1, 5, 14, 1, chained.a_bias.has_value() ? size_t{3} : size_t{2}};
    places.a_bias_pos = 2;
    places.a_bias_edge = 2;
    return layer_backward(ctx, record, saved_vars, grads, places, &chained);
  }
};

std::tuple<at::Tensor, at::Tensor> gemm_act_autograd(const at::Tensor& a, const at::Tensor& b,
                                                     const std::optional<at::Tensor>& bias,
                                                     const std::optional<at::Tensor>& c,
                                                     c10::string_view activation, double alpha,
                                                     double beta, double negative_slope,
                                                     bool store_preact) {
  if (!needs_autograd({&a, &b, present(bias), present(c)})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_gemm_act(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
  }
  const variable_list out =
      GemmActFunction::apply(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
  return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> gemm_act_chained_autograd(
    const at::Tensor& a, const std::optional<at::Tensor>& a_preact,
    const std::optional<at::Tensor>& a_bias, c10::string_view a_activation, double a_negative_slope,
    const at::Tensor& b, const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
    c10::string_view activation, double alpha, double beta, double negative_slope, bool store_preact,
    bool z_feeds_chain) {
  if (!needs_autograd({&a, present(a_preact), present(a_bias), &b, present(bias), present(c)})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op::gemm_act_chained().call(a, a_preact, a_bias, a_activation, a_negative_slope, b, bias, c,
                                       activation, alpha, beta, negative_slope, store_preact, z_feeds_chain);
  }
  const variable_list out = GemmActChainedFunction::apply(
      a, a_preact, a_bias, a_activation, a_negative_slope, b, bias, c, activation, alpha, beta,
      negative_slope, store_preact, z_feeds_chain);
  return {out[0], out[1]};
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, Autograd, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_autograd);
  m.impl("gemm_act_chained", &gemm_act::gemm_act_chained_autograd);
}

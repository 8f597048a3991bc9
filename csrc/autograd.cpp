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

// Whether t is a plain tensor, not a tensor subclass (a DTensor, or what
// torch.compile traces, which fuses reductions itself).
bool plain(const at::Tensor& t) { return !t.key_set().has(c10::DispatchKey::Python); }

// Whether this backward may overwrite t: it holds the only reference to a
// plain dense tensor with storage of its own (no other node's input, no
// retained or hooked gradient, no view or alias, nothing a transform or
// compiler wraps), as PyTorch's own gradient accumulation checks before it
// adds in place.
bool sole_owner(const at::Tensor& t) {
  return t.use_count() == 1 && plain(t) && !t.key_set().has(c10::DispatchKey::Functionalize) && t.has_storage() &&
         t.storage().use_count() == 1 && !t.is_view() && !t._is_zerotensor() && t.is_contiguous() &&
         !t.requires_grad();
}

// (dZ, dbias): dZ over grad_y itself where this backward owns it, which
// saves a tensor of gY's size at the step's peak (a small fp32 MLP's
// training step peaked above eager's without it).
std::tuple<at::Tensor, at::Tensor> call_activation_backward(const at::Tensor& grad_y,
                                                            const at::Tensor& saved,
                                                            const std::optional<at::Tensor>& bias,
                                                            c10::string_view activation,
                                                            double negative_slope) {
  if (sole_owner(grad_y)) {
    at::Tensor grad_bias = op::activation_backward_().call(grad_y, saved, bias, activation, negative_slope);
    return {grad_y, std::move(grad_bias)};
  }
  return op::activation_backward().call(grad_y, saved, bias, activation, negative_slope);
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

std::optional<at::Tensor> if_defined(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// t [rows, cols] with zero rows and columns added up to [rows_to, cols_to];
// t itself where nothing is added. On plain tensors one pass (zero_pad:
// ATen's pad fills the whole buffer, then copies into it at about half
// the bandwidth: 0.36 against 0.12 ms for the unaligned benchmark shape's
// three copies on an H100); traced, ATen's, which a compiler fuses with
// what produces t.
at::Tensor pad_to(const at::Tensor& t, const c10::SymInt& rows_to, const c10::SymInt& cols_to) {
  const c10::SymInt add_rows = rows_to - t.sym_size(0), add_cols = cols_to - t.sym_size(1);
  if (add_rows == 0 && add_cols == 0) return t;
  if (plain(t) && !rows_to.is_symbolic() && !cols_to.is_symbolic()) {
    return op::zero_pad().call(t, rows_to.as_int_unchecked(), cols_to.as_int_unchecked());
  }
  return at::constant_pad_nd_symint(t, {0, add_cols, 0, add_rows}, 0);
}

// b [K, N] padded to [k_to, n_to], copied in the layout whose rows are
// contiguous: for b = weight.t(), the weight's (a straight copy, where
// padding b itself would transpose it).
at::Tensor pad_b_to(const at::Tensor& b, const c10::SymInt& k_to, const c10::SymInt& n_to) {
  if (b.sym_stride(0) == 1 && b.sym_stride(1) != 1) return pad_to(b.t(), n_to, k_to).t();
  return pad_to(b, k_to, n_to);
}

// The bias's gradient from (part of) dZ alone: bias_grad, the backward
// pass's reduction without writing dZ (6-15 % faster than PyTorch's sum over
// rows on an H100, deterministic), or PyTorch's sum for a tensor subclass.
at::Tensor sum_bias_grad(const at::Tensor& grad_pre, const at::Tensor& bias) {
  return plain(grad_pre) ? op::bias_grad().call(grad_pre, bias)
                         : at::sum_to(grad_pre, bias.sym_sizes(), /*always_return_non_view=*/true);
}

// The pre-activation's gradient dZ and the bias's from the outputs'
// gradients: gY through act' (the backward pass, which reduces dbias in the
// same launch), plus Z's own gradient where Z was returned and used (or, for
// a layer on a chain, is how the next layer's gradient arrives). The
// identity's dZ is gY itself: no pass and no copy. Either gradient may be
// undefined; so is dZ when both are. With z_feeds_chain, Z's gradient adds
// nothing to the bias's (the next layer returned that part itself).
std::pair<at::Tensor, at::Tensor> preact_grad(const at::Tensor& grad_y, const at::Tensor& grad_z,
                                              const at::Tensor& saved,
                                              const std::optional<at::Tensor>& bias,
                                              c10::string_view activation, double negative_slope,
                                              bool z_feeds_chain) {
  at::Tensor grad_pre, grad_bias;
  if (grad_y.defined()) {
    if (parse_activation(activation) == Activation::None) {
      grad_pre = grad_y;
    } else {
      std::tie(grad_pre, grad_bias) =
          call_activation_backward(grad_y, saved, bias, activation, negative_slope);
    }
  }
  const bool z_in_bias = grad_z.defined() && !z_feeds_chain;
  if (bias.has_value() && grad_pre.defined() && !grad_bias.defined() && !z_in_bias) {
    grad_bias = sum_bias_grad(grad_pre, *bias);  // gY's part, before Z's is added
  }
  if (grad_z.defined()) {
    grad_pre = grad_pre.defined() ? grad_pre + grad_z : grad_z;
    if (z_in_bias) grad_bias = bias.has_value() ? sum_bias_grad(grad_pre, *bias) : at::Tensor();
  }
  return {grad_pre, grad_bias};
}

// What a layer's backward saves beyond its operands: Y or Z as the
// activation's table row says (nothing for the identity, whose dZ is gY);
// undefined where Z was needed but not stored (then recomputed).
at::Tensor saved_output(c10::string_view activation, const at::Tensor& y, const at::Tensor& z,
                        bool store_preact) {
  const Activation act = parse_activation(activation);
  if (act == Activation::None) return at::Tensor();
  return grad_from_output(act) ? y : (store_preact ? z : at::Tensor());
}

// The operand gradients of Y = act(alpha * a @ b + ...) from dZ: dB always
// as alpha * a^T dZ, in b's layout; dA as alpha * dZ b^T, or, for a layer
// whose input is chained (a = a_act(a_preact), `a_saved` the Y or Z of
// a_act's table row), d(a_preact) = act'(a_saved) * alpha * dZ b^T in one
// fused GEMM (gemm_dact), which also sums it over rows into a_bias's
// gradient where that bias is per column.
struct OperandGrads {
  at::Tensor a, b, a_bias;
};
struct ChainedInput {
  at::Tensor a_saved;
  std::string activation;
  double negative_slope = 0.01;
  std::optional<at::Tensor> a_bias;  // the layer before's, when its gradient is returned here
  bool need_a_bias = false;
};

// Whether bias is one value per column of an output with n columns.
bool per_column(const at::Tensor& bias, const c10::SymInt& n) {
  return bias.dim() >= 1 && bias.sym_size(-1) == n && bias.sym_numel() == n;
}

OperandGrads operand_grads(const at::Tensor& grad_pre, const at::Tensor& a, const at::Tensor& b,
                           double alpha, bool need_a, bool need_b, const ChainedInput* chained) {
  OperandGrads out;
  c10::SymInt rows = 1;  // M: a's leading dimensions flattened (no -1: K or N may be 0)
  for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.sym_size(d);
  const c10::SymInt k = b.sym_size(0), n = b.sym_size(1);
  const bool pad = pad_for_cublas(grad_pre, rows, n, k);
  const c10::SymInt k_run = pad ? round_up_to_16_bytes(grad_pre, k) : k;
  const c10::SymInt n_run = pad ? round_up_to_16_bytes(grad_pre, n) : n;
  // A 2-D a (a layer's usual input) needs no reshape of a, dZ or dA, and an
  // unpadded GEMM no narrowing: each is a dispatched call the host pays for.
  const bool flat = a.dim() == 2;
  const auto as_2d = [flat](const at::Tensor& t, const c10::SymInt& r, const c10::SymInt& c) {
    return flat ? t : t.reshape_symint({r, c});
  };
  const at::Tensor grad_pre_2d = pad_to(as_2d(grad_pre, rows, n), rows, n_run);
  // pad only says the padded path may pay; it pads only rows that need it.
  const bool padded = pad && (k_run != k || n_run != n);
  const bool need_a_bias = chained != nullptr && chained->need_a_bias;
  if (chained != nullptr && (need_a || need_a_bias) && !padded) {
    const at::Tensor saved_2d = as_2d(chained->a_saved, rows, k);
    const bool column = need_a_bias && per_column(*chained->a_bias, k);
    auto [grad_a, grad_a_bias] =
        op::gemm_dact().call(grad_pre_2d, b.t(), saved_2d, column ? chained->a_bias : std::nullopt,
                             chained->activation, alpha, chained->negative_slope);
    out.a = flat ? grad_a : grad_a.reshape_symint(a.sym_sizes());
    if (column) out.a_bias = std::move(grad_a_bias);
  } else if (need_a || need_a_bias) {
    const at::Tensor grad_a = grad_pre_2d.mm(pad_b_to(b, k_run, n_run).t());  // [M, k_run]
    out.a = padded ? grad_a.narrow_symint(1, 0, k) : grad_a;
    if (!flat) out.a = out.a.reshape_symint(a.sym_sizes());
    if (alpha != 1.0) out.a = out.a * alpha;
    if (chained != nullptr) {
      std::tie(out.a, out.a_bias) =
          call_activation_backward(out.a, chained->a_saved, need_a_bias ? chained->a_bias : std::nullopt,
                                   chained->activation, chained->negative_slope);
    }
  }
  if (need_a_bias && !out.a_bias.defined()) out.a_bias = sum_bias_grad(out.a, *chained->a_bias);
  if (need_b) {
    // dB in b's own layout: for b = weight.t() (K contiguous), dB^T = dZ^T A
    // row-major, whose transpose the autograd of .t() turns back into a
    // gradient laid out like the weight, which AccumulateGrad then keeps
    // as it is instead of copying it into the weight's strides.
    const at::Tensor a_2d = pad_to(as_2d(a, rows, k), rows, k_run);
    if (b.sym_stride(0) == 1 && b.sym_stride(1) != 1) {
      const at::Tensor grad_bt = grad_pre_2d.t().mm(a_2d);  // [n_run, k_run]
      out.b = (padded ? grad_bt.narrow_symint(0, 0, n).narrow_symint(1, 0, k) : grad_bt).t();
    } else {
      const at::Tensor grad_b = a_2d.t().mm(grad_pre_2d);  // [k_run, n_run]
      out.b = padded ? grad_b.narrow_symint(0, 0, k).narrow_symint(1, 0, n) : grad_b;
    }
    if (alpha != 1.0) out.b = out.b * alpha;
  }
  return out;
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
  out[places.b_pos] = std::move(operands.b);
  if (chained != nullptr && chained->need_a_bias) out[places.a_bias_pos] = std::move(operands.a_bias);
  if (need_bias) out[places.b_pos + 1] = grad_bias;
  if (need_c) out[places.b_pos + 2] = grad_pre * beta;
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

// The backward of gemm_act and gemm_act_chained (docs/DESIGN.md,
// "Backward"): one node, written as PyTorch's generated nodes are (a
// torch::autograd::Node, its edges and saved variables set by hand),
// because a training step of small layers is bound by the host's time and
// a node costs a fraction of a C++ autograd function. The gradients are
// layer_grads.h's.
#include "autograd.h"

#include <ATen/ATen.h>
#include <ATen/FuncTorchTLS.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "activations.h"
#include "checks.h"
#include "layer_grads.h"
#include "needs_autograd.h"
#include "once_differentiable.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// The node's edges, one per tensor argument of gemm_act_chained (gemm_act's
// a_preact and a_bias absent): what apply returns a gradient for.
enum EdgeIndex : size_t { kA, kAPreact, kABias, kB, kBias, kC, kNumEdges };

// The identity activation's name: the pre-activation itself, and the
// pass-through of Z's own gradient.
constexpr const char* kIdentity = activation_name(Activation::None);

std::tuple<at::Tensor, at::Tensor> call_op(const LayerCall& k, const at::Tensor& b) {
  if (!k.chained) {
    return op::gemm_act().call(k.a, b, k.bias, k.c, k.activation, k.alpha, k.beta, k.negative_slope,
                               k.store_preact);
  }
  return op::gemm_act_chained().call(k.a, k.a_preact, k.a_bias, k.a_activation, k.a_negative_slope, b, k.bias,
                                     k.c, k.activation, k.alpha, k.beta, k.negative_slope, k.store_preact,
                                     k.z_feeds_chain);
}

// Gradients for (a, a_preact, a_bias, b, bias, c). With a_preact, a =
// a_act(a_preact) and its gradient goes to a_preact through the fused
// gemm_dact (a itself gets none: the caller guarantees a is a cache of
// a_act(a_preact)), with a_bias's from the same epilogue.
struct GemmActBackward final : public Node {
  // a only where b's gradient or a recomputation of Z needs it, as
  // PyTorch's addmm keeps its operands (its sizes otherwise); b, or the
  // weight whose transpose b is (b_is_weight); saved: Y or Z
  // (saved_output); c only for the rare recomputation of Z; a_saved: a or
  // a_preact, as a_act's row says, on a chain.
  SavedVariable a, b, saved, bias, c, a_saved, a_bias;
  std::vector<c10::SymInt> a_sizes;
  Activation activation = Activation::None, a_activation = Activation::None;
  double alpha = 1.0, beta = 0.0, negative_slope = 0.01, a_negative_slope = 0.01;
  bool store_preact = false, z_feeds_chain = false, chained_input = false, b_is_weight = false;

  std::string name() const override { return "GemmActBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (SavedVariable* v : {&a, &b, &saved, &bias, &c, &a_saved, &a_bias}) v->reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    variable_list out(kNumEdges);  // undefined: no gradient
    // Moved out, so that they are freed as soon as dZ exists, before the
    // GEMMs, and dZ may take gY's memory (preact_grad).
    at::Tensor grad_y = std::move(grads[0]);
    at::Tensor grad_z = store_preact ? std::move(grads[1]) : at::Tensor();  // else a placeholder's
    grads.clear();
    const EdgeIndex a_edge = chained_input ? kAPreact : kA;
    const bool need_a = task_should_compute_output(a_edge);
    const bool need_b = task_should_compute_output(kB);
    const bool need_bias = task_should_compute_output(kBias);
    const bool need_c = task_should_compute_output(kC);
    const at::Tensor b_t = b_is_weight ? b.unpack().t() : b.unpack();
    at::Tensor a_t = a.unpack();
    // Where a was not kept, a stand-in with its sizes and no memory.
    if (!a_t.defined()) a_t = at::empty_symint(a_sizes, b_t.options().device(at::kMeta));
    const std::optional<at::Tensor> bias_t = if_defined(bias.unpack());
    at::Tensor saved_t = saved.unpack(getptr());
    if (grad_y.defined() && !saved_t.defined() && activation != Activation::None) {
      // The op was called directly with store_preact=False for an activation
      // whose derivative needs Z (gemm_act() never does this): recompute Z.
      saved_t = std::get<0>(op::gemm_act().call(a_t, b_t, bias_t, if_defined(c.unpack()), kIdentity, alpha,
                                                beta, 0.0, false));
    }
    auto [grad_pre, grad_bias] = preact_grad(grad_y, grad_z, saved_t, need_bias ? bias_t : std::nullopt,
                                             activation_name(activation), negative_slope, z_feeds_chain);
    grad_y.reset();
    grad_z.reset();
    saved_t.reset();
    if (!grad_pre.defined()) return out;  // neither output received a gradient

    ChainedInput chained;
    if (chained_input) {
      chained.a_saved = a_saved.unpack();
      chained.a_bias = if_defined(a_bias.unpack());
      chained.activation = activation_name(a_activation);
      chained.negative_slope = a_negative_slope;
      chained.need_a_bias = chained.a_bias.has_value() && task_should_compute_output(kABias);
    }
    OperandGrads g = operand_grads(grad_pre, a_t, b_t, alpha, need_a, need_b, chained_input ? &chained : nullptr);
    if (need_a) out[a_edge] = std::move(g.a);
    if (need_b) out[kB] = b_is_weight ? g.grad_weight() : g.grad_b();
    if (chained.need_a_bias) out[kABias] = std::move(g.a_bias);
    if (need_bias) out[kBias] = std::move(grad_bias);
    // At beta == 0 the forward does not read C (as torch.addmm): its gradient
    // is zero, not 0 * dZ, which is NaN where dZ is.
    if (need_c) {
      out[kC] = beta == 0.0 ? at::zeros_like(grad_pre, at::MemoryFormat::Contiguous) : grad_pre * beta;
    }
    // Grad mode is on here only under create_graph=True.
    return at::GradMode::is_enabled() ? once_differentiable(std::move(out)) : out;
  }
};

// A new node, held as the autograd engine holds nodes (an intrusive pointer
// in newer PyTorch releases, a shared pointer with the engine's deleter in
// older ones).
template <class T>
auto new_node() {
  using Held = decltype(torch::autograd::Edge::function);
  if constexpr (std::is_same_v<Held, std::shared_ptr<Node>>) {
    return Held(new T(), [](T* node) { deleteNode(node); });  // deleteNode found by ADL
  } else {
    return Held(c10::make_intrusive<T>());
  }
}

// No forward-mode derivative and no functorch support: an error, never a
// result that silently lacks a tangent or a transform's semantics.
void check_supported(const LayerCall& k) {
  for (const at::Tensor* t : {&k.a, present(k.a_preact), present(k.a_bias), &k.b, present(k.bias), present(k.c)}) {
    TORCH_CHECK_NOT_IMPLEMENTED(t == nullptr || !t->defined() || !t->_fw_grad(/*level=*/0).defined(),
                                "gemm_act: forward-mode AD (jvp is not implemented): an input carries a "
                                "tangent; compute the product outside forward_ad.dual_level()");
  }
  const auto& functorch = at::functorch::functorchTLSAccessor();
  if (!functorch) return;
  try {
    functorch->checkSupportsCppAutogradFunction();  // throws inside a transform, as for any C++ backward
  } catch (const c10::Error&) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "gemm_act: functorch transforms (torch.func.grad, vjp, jacrev, vmap) "
                                       "are not supported by its backward; call it outside the transform");
  }
}

// The forward below autograd, then its node; `b_edge` is what b's edge
// and saved operand are: k.b itself, or the weight whose transpose k.b is.
std::tuple<at::Tensor, at::Tensor> forward_with_node(const LayerCall& k, const at::Tensor& b_edge, bool b_is_weight) {
  check_supported(k);
  at::Tensor y, z;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    std::tie(y, z) = call_op(k, k.b);
  }
  TORCH_INTERNAL_ASSERT(!k.store_preact || !z.is_same(y), "gemm_act: Y and Z must be two tensors");
  // The call above has validated every argument, the activation's name included.
  auto held = new_node<GemmActBackward>();
  auto* node = static_cast<GemmActBackward*>(held.get());
  node->set_next_edges(torch::autograd::collect_next_edges(k.a, k.a_preact, k.a_bias, b_edge, k.bias, k.c));
  node->activation = parse_activation(k.activation);
  node->alpha = k.alpha;
  node->beta = k.beta;
  node->negative_slope = k.negative_slope;
  node->store_preact = k.store_preact;
  node->z_feeds_chain = k.z_feeds_chain;
  node->b_is_weight = b_is_weight;
  const at::Tensor saved = saved_output(k.activation, y, z, k.store_preact);
  const bool recompute = !saved.defined() && node->activation != Activation::None;
  if (recompute || b_edge.requires_grad()) {
    node->a = SavedVariable(k.a, false);
  } else {
    node->a_sizes = k.a.sym_sizes().vec();
  }
  node->b = SavedVariable(b_edge, false);
  if (k.bias.has_value() && (recompute || k.bias->requires_grad())) node->bias = SavedVariable(*k.bias, false);
  if (recompute && k.c.has_value()) node->c = SavedVariable(*k.c, false);
  if (k.a_preact.has_value()) {
    node->chained_input = true;
    node->a_activation = parse_activation(k.a_activation);
    node->a_negative_slope = k.a_negative_slope;
    node->a_saved = SavedVariable(grad_from_output(node->a_activation) ? k.a : *k.a_preact, false);
    if (k.a_bias.has_value()) node->a_bias = SavedVariable(*k.a_bias, false);
  }
  // Outputs 0 (Y) and 1 (Z, differentiable only where stored: else an
  // empty placeholder that no gradient reaches).
  torch::autograd::set_history(y, held);
  if (k.store_preact) {
    torch::autograd::set_history(z, held);
  } else {
    node->add_input_metadata(Node::undefined_input());
  }
  if (saved.defined()) {
    node->saved = SavedVariable(saved, /*is_output=*/saved.is_same(y) || (k.store_preact && saved.is_same(z)));
  }
  return {std::move(y), std::move(z)};
}

bool needs_node(const LayerCall& k, const at::Tensor& b) {
  return needs_autograd({&k.a, present(k.a_preact), present(k.a_bias), &b, present(k.bias), present(k.c)});
}

std::tuple<at::Tensor, at::Tensor> autograd_kernel(const LayerCall& k) {
  if (!needs_node(k, k.b)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_op(k, k.b);
  }
  return forward_with_node(k, k.b, false);
}

std::tuple<at::Tensor, at::Tensor> gemm_act_autograd(const at::Tensor& a, const at::Tensor& b,
                                                     const std::optional<at::Tensor>& bias,
                                                     const std::optional<at::Tensor>& c,
                                                     c10::string_view activation, double alpha,
                                                     double beta, double negative_slope,
                                                     bool store_preact) {
  LayerCall k;
  k.a = a;
  k.b = b;
  k.bias = bias;
  k.c = c;
  k.activation = activation;
  k.alpha = alpha;
  k.beta = beta;
  k.negative_slope = negative_slope;
  k.store_preact = store_preact;
  return autograd_kernel(k);
}

std::tuple<at::Tensor, at::Tensor> gemm_act_chained_autograd(
    const at::Tensor& a, const std::optional<at::Tensor>& a_preact,
    const std::optional<at::Tensor>& a_bias, c10::string_view a_activation, double a_negative_slope,
    const at::Tensor& b, const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
    c10::string_view activation, double alpha, double beta, double negative_slope, bool store_preact,
    bool z_feeds_chain) {
  const LayerCall k{a,    a_preact, a_bias,         a_activation, a_negative_slope, b, bias, c, activation,
                    alpha, beta,    negative_slope, store_preact, z_feeds_chain,    /*chained=*/true};
  return autograd_kernel(k);
}

// Whether the node can be made here for a weight's transpose: tensors that
// are plain (no subclass, functorch wrapper or meta tensor), outside
// dispatch modes, functorch transforms and autocast (each of which the
// dispatcher path honours).
bool direct_node_applies(const LayerCall& k, const at::Tensor& weight) {
  for (const at::Tensor* t : {&k.a, &weight, present(k.bias), present(k.c), present(k.a_preact), present(k.a_bias)}) {
    if (t != nullptr && (t->layout() != at::kStrided || at::isTensorSubclassLike(*t))) return false;
  }
  return (c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set).empty() &&
         !at::autocast::is_autocast_enabled(k.a.device().type());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> call_layer(LayerCall call, bool b_is_weight) {
  if (!b_is_weight) return call_op(call, call.b);  // through the dispatcher
  const at::Tensor weight = std::move(call.b);
  call.b = weight.t();  // the view F.linear takes: in C++ a fraction of Python's .t()
  if (!needs_node(call, weight) || !direct_node_applies(call, weight)) return call_op(call, call.b);
  return forward_with_node(call, weight, /*b_is_weight=*/true);
}

}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, Autograd, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_autograd);
  m.impl("gemm_act_chained", &gemm_act::gemm_act_chained_autograd);
}

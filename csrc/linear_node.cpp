// linear_act (linear_node.h): a module layer's forward and its backward node,
// written as PyTorch's generated nodes are (a torch::autograd::Node, its
// edges and saved variables set by hand), because a training step of small
// layers is bound by the host's time: each node and each dispatched call
// costs microseconds that the GPU then waits for. The gradients are the
// operator's own (layer_grads.h).
#include "linear_node.h"

#include <ATen/ATen.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "activations.h"
#include "checks.h"
#include "layer_grads.h"
#include "once_differentiable.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// Gradients for (x, weight, bias), bias's edge empty without one.
struct LinearActBackward final : public Node {
  // x only where the weight's gradient needs it, as PyTorch's addmm keeps
  // its operands (x's sizes otherwise); saved: Y or Z (saved_output).
  SavedVariable x, weight, bias, saved;
  std::vector<int64_t> x_sizes;
  Activation activation = Activation::None;
  double negative_slope = 0.01;

  std::string name() const override { return "LinearActBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x.reset_data();
    weight.reset_data();
    bias.reset_data();
    saved.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    variable_list out(3);
    // Moved out, so that dZ may take gY's memory (preact_grad).
    at::Tensor grad_y = std::move(grads[0]);
    grads.clear();
    if (!grad_y.defined()) return out;
    const bool need_x = task_should_compute_output(0);
    const bool need_weight = task_should_compute_output(1);
    const bool need_bias = task_should_compute_output(2);
    std::optional<at::Tensor> b;
    if (need_bias) b = bias.unpack();
    auto [grad_pre, grad_bias] = preact_grad(grad_y, at::Tensor(), saved.unpack(getptr()), b,
                                             activation_name(activation), negative_slope, false);
    grad_y.reset();
    if (need_x || need_weight) {
      const at::Tensor w = weight.unpack();
      at::Tensor a = x.unpack();
      // Where x was not kept, a stand-in with its sizes and no memory.
      if (!a.defined()) a = at::empty(x_sizes, w.options().device(at::kMeta));
      const OperandGrads g = operand_grads(grad_pre, a, w.t(), 1.0, need_x, need_weight, nullptr);
      out[0] = g.a;
      if (need_weight) out[1] = g.grad_weight();
    }
    if (need_bias) out[2] = std::move(grad_bias);  // (without a bias, an empty placeholder)
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

bool requires_grad(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return at::GradMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad() || (bias.has_value() && bias->requires_grad()));
}

// Whether the node can stand in for the operator's autograd: tensors that
// are plain (no subclass, functorch wrapper or meta tensor), none carrying
// a forward-mode tangent, outside dispatch modes, functorch transforms and
// autocast (each of which the dispatcher path honours).
bool node_applies(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  const auto plain = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !at::isTensorSubclassLike(t) && !t._fw_grad(/*level=*/0).defined();
  };
  return plain(x) && plain(weight) && (!bias.has_value() || plain(*bias)) &&
         (c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set).empty() &&
         !at::autocast::is_autocast_enabled(x.device().type());
}

}  // namespace

at::Tensor linear_act(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      c10::string_view activation, double negative_slope) {
  const Activation act = parse_activation(activation);
  const bool grad = requires_grad(x, weight, bias);
  // Z only where the backward needs it (as functional._stores_preact).
  const bool store_preact = grad && !grad_from_output(act);
  if (!grad || !node_applies(x, weight, bias)) {
    return std::get<0>(op::gemm_act().call(x, weight.t(), bias, std::nullopt, activation, 1.0, 0.0,
                                           negative_slope, store_preact));
  }
  at::Tensor y, z;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // the transpose is not recorded either
    std::tie(y, z) = op::gemm_act().call(x, weight.t(), bias, std::nullopt, activation, 1.0, 0.0,
                                         negative_slope, store_preact);
  }
  auto held = new_node<LinearActBackward>();
  auto* node = static_cast<LinearActBackward*>(held.get());
  node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
  node->activation = act;
  node->negative_slope = negative_slope;
  if (weight.requires_grad()) {
    node->x = SavedVariable(x, false);
  } else {
    node->x_sizes = x.sizes().vec();
  }
  node->weight = SavedVariable(weight, false);
  if (bias.has_value() && bias->requires_grad()) node->bias = SavedVariable(*bias, false);
  torch::autograd::set_history(y, held);
  const at::Tensor saved = saved_output(activation, y, z, store_preact);
  if (saved.defined()) node->saved = SavedVariable(saved, /*is_output=*/saved.is_same(y));
  return y;
}

}  // namespace gemm_act

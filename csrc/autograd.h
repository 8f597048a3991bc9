// gemm_act's autograd (autograd.cpp): one backward node, GemmActBackward,
// for gemm_act and gemm_act_chained, whether the call came through the
// dispatcher's Autograd key or through Python's direct entry.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace gemm_act {

// One call of gemm_act_chained's arguments (schema.cpp); gemm_act's is the
// same with no a_preact and no a_bias (`chained` false).
struct LayerCall {
  at::Tensor a;
  std::optional<at::Tensor> a_preact, a_bias;
  c10::string_view a_activation = "none";
  double a_negative_slope = 0.0;
  at::Tensor b;
  std::optional<at::Tensor> bias, c;
  c10::string_view activation = "none";
  double alpha = 1.0, beta = 0.0, negative_slope = 0.01;
  bool store_preact = false, z_feeds_chain = false;
  bool chained = false;
};

// The operator for Python's direct entry (python_module.cpp). With
// b_is_weight, call.b is a module's weight [N, K] and the operand its
// transpose: in training, on plain tensors outside modes, transforms and
// autocast, the node takes the weight itself as its edge (no transpose
// node); everything else goes through the dispatcher with weight.t().
std::tuple<at::Tensor, at::Tensor> call_layer(LayerCall call, bool b_is_weight);

}  // namespace gemm_act

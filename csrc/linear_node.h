// act(x @ weight.T + bias) for a module's layer, its backward a node of its
// own (linear_node.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace gemm_act {

// Y of gemm_act(x, weight.t(), bias, activation=activation): weight is an
// nn.Linear's [N, K]. In training, on plain tensors outside any mode, the
// backward is one node that takes the weight itself, where the operator's
// autograd function and the transpose's own node were two (and PyTorch's
// F.linear + activation three); elsewhere the operator through the
// dispatcher, whose autograd, modes and subclasses all apply.
at::Tensor linear_act(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      c10::string_view activation, double negative_slope);

}  // namespace gemm_act

// Gradients from a backward that is not itself differentiable.
#pragma once

#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/basic_ops.h>

#include <utility>

namespace gemm_act {

// Under create_graph=True the gradients pass, as with
// torch.autograd.function.once_differentiable, through a node that raises if
// anything backpropagates through them, instead of reaching a graph that
// would silently leave out the second derivative.
inline torch::autograd::variable_list once_differentiable(torch::autograd::variable_list grads) {
  const auto count = static_cast<int64_t>(grads.size());
  return torch::autograd::DelayedError(
             "gemm_act: its backward is not differentiable; double backward (the gradient of a "
             "gradient taken with create_graph=True) is not supported",
             count)
      .apply(std::move(grads));
}

}  // namespace gemm_act

// Whether an operator call must record its backward, for the Autograd
// kernels (autograd.cpp's node, gated_autograd.cpp's function).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <initializer_list>
#include <optional>

namespace gemm_act {

// Whether a call needs its backward: grad mode on and a tensor argument
// that requires grad, or a forward-mode tangent on one (which the kernels
// reject: no jvp). Without either the operator runs below
// autograd directly, as ATen's own autograd kernels do, instead of building
// a node and wrapping outputs that no backward would use.
inline bool needs_autograd(std::initializer_list<const at::Tensor*> tensors) {
  const bool grad_mode = at::GradMode::is_enabled();
  for (const at::Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if ((grad_mode && t->requires_grad()) || t->_fw_grad(/*level=*/0).defined()) return true;
  }
  return false;
}

inline const at::Tensor* present(const std::optional<at::Tensor>& t) { return t.has_value() ? &*t : nullptr; }

}  // namespace gemm_act

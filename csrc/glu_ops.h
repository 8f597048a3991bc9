// glu and glu_backward (the gated activation's passes, glu.h) as every
// backend registers them: the arguments checked once, the outputs
// allocated, then the backend's pass.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <vector>

#include "checks.h"
#include "glu.h"

namespace gemm_act {

using GluPass = void (*)(const GluParams&, at::ScalarType);

inline int64_t glu_width(const at::Tensor& h, const char* op) {
  TORCH_CHECK_VALUE(h.dim() >= 1 && h.size(-1) % 2 == 0, op,
                    ": h must hold the gate and up projections side by side in its last "
                    "dimension (an even size), got shape ", h.sizes());
  TORCH_CHECK_TYPE(at::isFloatingType(h.scalar_type()), op,
                   ": h must be a floating-point tensor, got ", h.scalar_type());
  return h.size(-1) / 2;
}

inline GluParams glu_params(const at::Tensor& h, int64_t n, c10::string_view activation,
                            double negative_slope) {
  GluParams p;
  p.activation = parse_activation(activation);
  check_negative_slope(p.activation, negative_slope);
  p.negative_slope = negative_slope;
  p.n = n;
  p.m = n == 0 ? 0 : h.numel() / (2 * n);
  return p;
}

// y = act(h[..., :N]) * h[..., N:].
template <GluPass Run>
at::Tensor glu_impl(const at::Tensor& h, c10::string_view activation, double negative_slope) {
  const int64_t n = glu_width(h, "glu");
  const c10::OptionalDeviceGuard device_guard(h.device());
  GluParams p = glu_params(h, n, activation, negative_slope);
  std::vector<int64_t> sizes = h.sizes().vec();
  sizes.back() = n;
  at::Tensor y = at::empty(sizes, h.options());
  if (y.numel() == 0) return y;
  const at::Tensor hc = h.contiguous();
  poison_if_requested(y);
  p.h = hc.const_data_ptr();
  p.out = y.mutable_data_ptr();
  Run(p, h.scalar_type());
  return y;
}

// dH [..., 2N] (laid out as h) from gY [..., N].
template <GluPass Run>
at::Tensor glu_backward_impl(const at::Tensor& grad_y, const at::Tensor& h,
                             c10::string_view activation, double negative_slope) {
  const int64_t n = glu_width(h, "glu_backward");
  std::vector<int64_t> sizes = h.sizes().vec();
  sizes.back() = n;
  TORCH_CHECK_VALUE(grad_y.sizes() == at::IntArrayRef(sizes), "glu_backward: grad_y must have h's "
                    "shape with its last dimension halved, ", at::IntArrayRef(sizes), ", got ",
                    grad_y.sizes());
  TORCH_CHECK_TYPE(grad_y.scalar_type() == h.scalar_type() && grad_y.device() == h.device(),
                   "glu_backward: grad_y and h must share dtype and device, got ",
                   grad_y.scalar_type(), " on ", grad_y.device(), " and ", h.scalar_type(), " on ",
                   h.device());
  const c10::OptionalDeviceGuard device_guard(h.device());
  GluParams p = glu_params(h, n, activation, negative_slope);
  at::Tensor grad_h = at::empty(h.sizes(), h.options());
  if (grad_h.numel() == 0) return grad_h;
  const at::Tensor hc = h.contiguous(), gc = grad_y.contiguous();
  poison_if_requested(grad_h);
  p.h = hc.const_data_ptr();
  p.grad_y = gc.const_data_ptr();
  p.out = grad_h.mutable_data_ptr();
  Run(p, h.scalar_type());
  return grad_h;
}

}  // namespace gemm_act

// dropout_add and dropout_scale (dropout.h's pass) as every backend
// registers them, and the checks gemm_dropout_add shares: the arguments
// checked once, the output allocated, then the backend's pass.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include "checks.h"
#include "dropout.h"

namespace gemm_act {

using DropoutPass = void (*)(const DropoutParams&, at::ScalarType);

// p in [0, 1] and seed one int64 on `device`.
inline void check_dropout_args(const char* op, double p, const at::Tensor& seed, const at::Device& device) {
  TORCH_CHECK_VALUE(p >= 0.0 && p <= 1.0, op, ": p is the probability of dropping an element, in [0, 1]; got ", p);
  TORCH_CHECK_VALUE(seed.scalar_type() == at::kLong && seed.numel() == 1, op,
                    ": seed must be one int64 element (a tensor of shape () or (1,)), got ",
                    seed.scalar_type(), " of shape ", seed.sizes());
  TORCH_CHECK_VALUE(seed.device() == device, op, ": seed must be on the data's device, ", device,
                    ", got ", seed.device());
}

inline DropoutParams dropout_params(const at::Tensor& out, const at::Tensor& z, double p,
                                    const at::Tensor& seed) {
  DropoutParams params;
  params.out = out.mutable_data_ptr();
  params.z = z.const_data_ptr();
  params.seed = seed.const_data_ptr<int64_t>();
  params.numel = out.numel();
  params.keep = dropout_keep(p);
  return params;
}

// residual + dropout(z): z's element i kept (times 2^32 / T) or dropped as
// dropout.h draws it under seed.
template <DropoutPass Run>
at::Tensor dropout_add_impl(const at::Tensor& z, const at::Tensor& residual, double p, const at::Tensor& seed) {
  TORCH_CHECK_TYPE(at::isFloatingType(z.scalar_type()), "dropout_add: z must be a floating-point tensor, got ",
                   z.scalar_type());
  TORCH_CHECK_VALUE(residual.sizes() == z.sizes(), "dropout_add: residual must have z's shape ", z.sizes(),
                    ", got ", residual.sizes());
  TORCH_CHECK_TYPE(residual.scalar_type() == z.scalar_type() && residual.device() == z.device(),
                   "dropout_add: residual must share z's dtype and device, ", z.scalar_type(), " on ",
                   z.device(), ", got ", residual.scalar_type(), " on ", residual.device());
  check_dropout_args("dropout_add", p, seed, z.device());
  const c10::OptionalDeviceGuard device_guard(z.device());
  at::Tensor out = at::empty(z.sizes(), z.options());
  if (out.numel() == 0) return out;
  const at::Tensor zc = z.contiguous(), rc = residual.contiguous(), sc = seed.contiguous();
  poison_if_requested(out);
  DropoutParams params = dropout_params(out, zc, p, sc);
  params.residual = rc.const_data_ptr();
  Run(params, z.scalar_type());
  return out;
}

// grad * mask * 2^32 / T: dropout's gradient, the mask drawn again.
template <DropoutPass Run>
at::Tensor dropout_scale_impl(const at::Tensor& grad, double p, const at::Tensor& seed) {
  TORCH_CHECK_TYPE(at::isFloatingType(grad.scalar_type()),
                   "dropout_scale: grad must be a floating-point tensor, got ", grad.scalar_type());
  check_dropout_args("dropout_scale", p, seed, grad.device());
  const c10::OptionalDeviceGuard device_guard(grad.device());
  at::Tensor out = at::empty(grad.sizes(), grad.options());
  if (out.numel() == 0) return out;
  const at::Tensor gc = grad.contiguous(), sc = seed.contiguous();
  poison_if_requested(out);
  Run(dropout_params(out, gc, p, sc), grad.scalar_type());
  return out;
}

}  // namespace gemm_act

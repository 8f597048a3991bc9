// gemm_dact where no kernel fuses it: the GEMM into dA's memory, then the
// activation's backward pass over it in place (each element is read, then
// written, by the same thread). What CPU, and any CUDA case the sm90
// kernels do not take, run. It reduces no column sums: the bias gradient,
// if any, is bias_grad's sum of dA (gemm_dact_impl).
#pragma once

#include <ATen/ATen.h>

#include "backend_args.h"
#include "gemm_act.h"

namespace gemm_act {

template <void (*Pass)(const ActivationBackwardArgs&)>
at::Tensor gemm_dact_unfused(const GemmActArgs& args, bool /*column_sums*/) {
  const GemmActParams& p = args.params;
  at::mm_out(const_cast<at::Tensor&>(args.y), args.a, args.b);
  if (p.alpha != 1.0) args.y.mul_(p.alpha);
  if (p.activation == Activation::None) return at::Tensor();
  ActivationBackwardArgs pass;
  pass.grad_y = args.y;
  pass.saved = args.c.contiguous();
  pass.grad_z = args.y;
  pass.params.grad_z = args.y.mutable_data_ptr();
  pass.params.grad_y = args.y.const_data_ptr();
  pass.params.saved = pass.saved.const_data_ptr();
  pass.params.m = p.m;
  pass.params.n = p.n;
  pass.params.negative_slope = p.negative_slope;
  pass.params.activation = p.activation;
  pass.params.bias_kind = BiasKind::None;
  Pass(pass);
  return at::Tensor();
}

}  // namespace gemm_act

// gemm_dact where no kernel fuses it: the GEMM into dA's memory, then the
// activation's backward pass over it in place (each element is read, then
// written, by the same thread). What CPU, and any CUDA case the sm90
// kernels do not take, run. It reduces no column sums: the bias gradient,
// if any, is bias_grad's sum of dA (gemm_dact_impl).
#pragma once

#include <ATen/ATen.h>

#include "activations.h"
#include "backend_args.h"
#include "checks.h"
#include "gemm_act.h"

namespace gemm_act {

template <void (*Pass)(const ActivationBackwardArgs&)>
at::Tensor gemm_dact_unfused(const GemmActArgs& args, bool /*column_sums*/) {
  const GemmActParams& p = args.params;
  at::mm_out(const_cast<at::Tensor&>(args.y), args.a, args.b);
  if (p.alpha != 1.0) args.y.mul_(p.alpha);
  if (p.activation == Activation::None) return at::Tensor();
  const ActivationBackwardArgs pass = prepare_activation_backward_in_place(
      args.y, args.c, std::nullopt, activation_name(p.activation), p.negative_slope);
  Pass(pass);
  return at::Tensor();
}

}  // namespace gemm_act

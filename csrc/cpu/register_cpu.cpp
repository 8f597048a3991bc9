#include <ATen/ATen.h>
#include <ATen/ops/constant_pad_nd.h>
#include <torch/library.h>

#include <string>

#include "checks.h"
#include "cpu/cpu_backend.h"
#include "dact_unfused.h"
#include "dropout_ops.h"
#include "ce_chunk_ops.h"
#include "glu_ops.h"

namespace gemm_act {
namespace {

// PyTorch's own sum, as nn.Linear's bias gradient on the CPU, over the
// [M, N] gradient by how the bias broadcasts (a bias per row (M, 1) of an
// N-D output does not broadcast as PyTorch's shapes do).
void bias_grad_cpu(const ActivationBackwardArgs& args) {
  const ActivationBackwardParams& p = args.params;
  const at::Tensor grad = args.grad_y.reshape({p.m, p.n});
  at::Tensor sum;
  switch (p.bias_kind) {
    case BiasKind::Scalar: sum = grad.sum(); break;
    case BiasKind::PerColumn: sum = grad.sum(0); break;
    case BiasKind::PerRow: sum = grad.sum(1); break;
    case BiasKind::None: return;
  }
  args.grad_bias.copy_(sum.reshape({-1}));
}

// ATen's pad, as the backward's copies were made before this operator.
at::Tensor zero_pad_cpu(const at::Tensor& src, int64_t rows, int64_t cols) {
  return at::constant_pad_nd(src, {0, cols - src.size(1), 0, rows - src.size(0)}, 0);
}

std::string plan_cpu(const GemmActArgs& args) {
  return std::string("cpu: ATen's GEMM, then one fused epilogue pass [") +
         c10::toString(args.y.scalar_type()) + "]";
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CPU, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_impl<gemm_act::gemm_act_cpu>);
  m.impl("activation_backward", &gemm_act::activation_backward_impl<gemm_act::activation_backward_cpu>);
  m.impl("activation_backward_",
         &gemm_act::activation_backward_in_place_impl<gemm_act::activation_backward_cpu>);
  m.impl("bias_grad", &gemm_act::bias_grad_impl<gemm_act::bias_grad_cpu>);
  m.impl("zero_pad", &gemm_act::zero_pad_impl<gemm_act::zero_pad_cpu>);
  m.impl("gemm_dact",
         &gemm_act::gemm_dact_impl<gemm_act::gemm_dact_unfused<gemm_act::activation_backward_cpu>>);
  m.impl("explain", &gemm_act::explain_impl<gemm_act::plan_cpu>);
  m.impl("glu", &gemm_act::glu_impl<gemm_act::glu_forward_cpu>);
  m.impl("glu_backward", &gemm_act::glu_backward_impl<gemm_act::glu_backward_cpu>);
  m.impl("ce_chunk_forward", &gemm_act::ce_chunk_forward_impl<gemm_act::ce_chunk_forward_cpu>);
  m.impl("ce_chunk_backward", &gemm_act::ce_chunk_backward_impl<gemm_act::ce_chunk_backward_cpu>);
  m.impl("dropout_add", &gemm_act::dropout_add_impl<gemm_act::dropout_cpu>);
  m.impl("dropout_scale", &gemm_act::dropout_scale_impl<gemm_act::dropout_cpu>);
}

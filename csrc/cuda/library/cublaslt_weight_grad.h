// A layer's weight gradient and its bias's in one cuBLASLt matmul, whose
// BGRADA / BGRADB epilogue sums dZ over rows while the GEMM reads it: the
// bias gradient without a pass of its own over dZ (weight_bias_grad).
#pragma once

#include <ATen/core/Tensor.h>

namespace gemm_act {
namespace library {

// grad [M, N] and a [M, K], fp16 or bf16, row-major and 16-byte aligned,
// bias one value per column of grad. Writes grad_b (a^T grad [K, N], or
// with `transposed` grad^T a [N, K]) and grad_bias (bias's shape) and
// returns true; false, having done nothing, where cuBLASLt has no
// algorithm for the case or the case is not one of those.
bool try_cublaslt_weight_bias_grad(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& bias,
                                   bool transposed, at::Tensor& grad_b, at::Tensor& grad_bias);

}  // namespace library
}  // namespace gemm_act

// gemm_dropout_add's checks and its composite (dropout_add.cpp): the GEMM,
// then dropout_add's pass. The CUDA registration tries a fused kernel first
// and falls back here.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace gemm_act {

// a [..., K], b [K, N], residual [..., N] of a's dtype and device, p in
// [0, 1], seed one int64 on that device.
void check_gemm_dropout_add(const at::Tensor& a, const at::Tensor& b, const at::Tensor& residual,
                            double p, const at::Tensor& seed);

// residual + dropout(a @ b + bias), for arguments check_gemm_dropout_add
// passed: gemm_act with C = residual where p = 0, else gemm_act's Z and
// dropout_add.
at::Tensor gemm_dropout_add_composite_checked(const at::Tensor& a, const at::Tensor& b,
                                              const std::optional<at::Tensor>& bias,
                                              const at::Tensor& residual, double p, const at::Tensor& seed);

}  // namespace gemm_act

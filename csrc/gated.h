// gemm_glu's composite forward (gated.cpp): the argument checks and the
// two projections plus the gated pass, which every backend runs where it has
// no fused kernel of its own.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

#include "gemm_act.h"

namespace gemm_act {

void check_gemm_glu(const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
                    const std::optional<at::Tensor>& bias_gate,
                    const std::optional<at::Tensor>& bias_up);

// Whether gemm_glu's biases are as the fused kernels read them: each
// absent, or contiguous and 16-byte aligned.
bool fused_glu_biases_fit(const std::optional<at::Tensor>& bias_gate,
                          const std::optional<at::Tensor>& bias_up);

// What a family's fused gemm_glu kernel is given for a [M, K], b_gate, b_up
// [K, N] (K-major, one row stride) and the biases (fused_glu_biases_fit):
// the op's parameters with b and c the two weights, bias and bias_up their
// biases (null where absent) and n the GEMM's width 2N; Y and H (y, z) are
// the family's to allocate once it takes the case. The family checks what
// its loads and stores need.
inline GemmActParams fused_glu_params(const at::Tensor& a, const at::Tensor& b_gate,
                                      const at::Tensor& b_up,
                                      const std::optional<at::Tensor>& bias_gate,
                                      const std::optional<at::Tensor>& bias_up,
                                      Activation activation, double negative_slope) {
  GemmActParams p;
  p.m = a.size(0);
  p.k = a.size(1);
  p.n = 2 * b_gate.size(1);
  p.a = a.const_data_ptr();
  p.a_stride_m = a.stride(0);
  p.a_stride_k = a.stride(1);
  p.b = b_gate.const_data_ptr();
  p.c = b_up.const_data_ptr();
  p.b_stride_k = b_gate.stride(0);
  p.b_stride_n = b_gate.stride(1);
  p.bias = bias_gate.has_value() ? bias_gate->const_data_ptr() : nullptr;
  p.bias_up = bias_up.has_value() ? bias_up->const_data_ptr() : nullptr;
  p.activation = activation;
  p.negative_slope = negative_slope;
  return p;
}

// Y [M, N] and, with store_preact, H [M, 2N] for a fused gemm_glu kernel,
// poisoned where the testing switch asks; p.y and p.z set to them.
std::tuple<at::Tensor, at::Tensor> fused_glu_outputs(const at::Tensor& a, bool store_preact,
                                                     GemmActParams& p);

std::tuple<at::Tensor, at::Tensor> gemm_glu_composite(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact);

// The same for operands check_gemm_glu has passed (CUDA's gemm_glu, which
// checks them before its fused kernels and falls back here).
std::tuple<at::Tensor, at::Tensor> gemm_glu_composite_checked(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact);

}  // namespace gemm_act

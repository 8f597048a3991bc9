// gemm_glu's composite forward (gated.cpp): the argument checks and the
// two projections plus the gated pass, which every backend runs where it has
// no fused kernel of its own.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace gemm_act {

void check_gemm_glu(const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
                    const std::optional<at::Tensor>& bias_gate,
                    const std::optional<at::Tensor>& bias_up);

std::tuple<at::Tensor, at::Tensor> gemm_glu_composite(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact);

}  // namespace gemm_act

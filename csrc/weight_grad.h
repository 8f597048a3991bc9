// weight_bias_grad: a layer's weight gradient and its bias's from dZ.
// Where a backend fuses them (cuBLASLt's BGRAD epilogues reduce dZ while the
// GEMM reads it) dZ is read once; elsewhere the GEMM, then bias_grad.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "checks.h"
#include "op_handles.h"

namespace gemm_act {

using WeightBiasGrads = std::tuple<at::Tensor, at::Tensor>;

// grad^T a ([N, K], a Linear weight's layout) when `transposed`, else
// a^T grad ([K, N]); and grad summed over its rows into bias's dtype.
inline WeightBiasGrads weight_bias_grad_unfused(const at::Tensor& grad, const at::Tensor& a,
                                                const at::Tensor& bias, bool transposed) {
  return {transposed ? grad.t().mm(a) : a.t().mm(grad), op::bias_grad().call(grad, bias)};
}

// A backend without a fused form.
inline std::optional<WeightBiasGrads> no_fused_weight_bias_grad(const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, bool) {
  return std::nullopt;
}

// The weight_bias_grad operator of a backend whose fused kernel is `Fused`
// (which returns nothing, having done nothing, where it does not take the case).
template <std::optional<WeightBiasGrads> (*Fused)(const at::Tensor&, const at::Tensor&,
                                                  const at::Tensor&, bool)>
WeightBiasGrads weight_bias_grad_impl(const at::Tensor& grad, const at::Tensor& a,
                                      const at::Tensor& bias, bool transposed) {
  check_weight_bias_grad(grad, a, bias);
  if (std::optional<WeightBiasGrads> fused = Fused(grad, a, bias, transposed)) return *fused;
  return weight_bias_grad_unfused(grad, a, bias, transposed);
}

}  // namespace gemm_act

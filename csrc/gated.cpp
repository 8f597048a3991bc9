// gemm_glu's forward for every backend without a fused kernel of its own
// (CUDA's, cuda/register_cuda.cpp, runs this where its kernel declines):
// the two projections written side by side into one buffer H by ATen's GEMM
// (cuBLAS on CUDA; no copy of either weight), then the gated activation's
// pass (glu.h). Its autograd is gated_autograd.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "checks.h"
#include "gated.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

// out = a @ b (+ bias), out being a column block of H.
void project(at::Tensor out, const at::Tensor& a, const at::Tensor& b,
             const std::optional<at::Tensor>& bias) {
  if (bias.has_value()) {
    at::addmm_out(out, *bias, a, b);
  } else {
    at::mm_out(out, a, b);
  }
}

}  // namespace

void check_gemm_glu(const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
                    const std::optional<at::Tensor>& bias_gate,
                    const std::optional<at::Tensor>& bias_up) {
  TORCH_CHECK_VALUE(a.dim() >= 1, "gemm_glu: a must have at least 1 dimension [..., K], got a scalar");
  TORCH_CHECK_VALUE(b_gate.dim() == 2 && b_up.dim() == 2 && b_gate.sizes() == b_up.sizes(),
                    "gemm_glu: b_gate and b_up must both be 2-D [K, N] of one shape, got ",
                    b_gate.sizes(), " and ", b_up.sizes());
  TORCH_CHECK_VALUE(a.size(-1) == b_gate.size(0), "gemm_glu: a ", a.sizes(), " and b_gate ",
                    b_gate.sizes(), " cannot be multiplied (a's last dimension must be K = ",
                    b_gate.size(0), ")");
  for (const auto& [name, bias] : {std::pair{"bias_gate", &bias_gate}, std::pair{"bias_up", &bias_up}}) {
    if (!bias->has_value()) continue;
    TORCH_CHECK_VALUE((*bias)->dim() == 1 && (*bias)->size(0) == b_gate.size(1), "gemm_glu: ", name,
                      " must be 1-D with N = ", b_gate.size(1), " elements, got shape ",
                      (*bias)->sizes());
  }
  for (const at::Tensor* t : {&b_gate, &b_up, bias_gate ? &*bias_gate : nullptr,
                              bias_up ? &*bias_up : nullptr}) {
    if (t == nullptr) continue;
    TORCH_CHECK_TYPE(t->scalar_type() == a.scalar_type() && t->device() == a.device(),
                     "gemm_glu: every operand must have a's dtype and device (", a.scalar_type(),
                     " on ", a.device(), "), got ", t->scalar_type(), " on ", t->device());
  }
  TORCH_CHECK_TYPE(at::isFloatingType(a.scalar_type()),
                   "gemm_glu: operands must be floating point, got ", a.scalar_type());
}

bool fused_glu_biases_fit(const std::optional<at::Tensor>& bias_gate,
                          const std::optional<at::Tensor>& bias_up) {
  for (const std::optional<at::Tensor>* bias : {&bias_gate, &bias_up}) {
    if (bias->has_value() &&
        !((*bias)->is_contiguous() && reinterpret_cast<uintptr_t>((*bias)->const_data_ptr()) % 16 == 0)) {
      return false;
    }
  }
  return true;
}

std::tuple<at::Tensor, at::Tensor> fused_glu_outputs(const at::Tensor& a, bool store_preact,
                                                     GemmActParams& p) {
  at::Tensor y = at::empty({p.m, p.n / 2}, a.options());
  at::Tensor h = store_preact ? at::empty({p.m, p.n}, a.options()) : at::Tensor();
  poison_if_requested(y);
  p.y = y.data_ptr();
  if (h.defined()) {
    poison_if_requested(h);
    p.z = h.data_ptr();
  }
  return {y, h};
}

std::tuple<at::Tensor, at::Tensor> gemm_glu_composite(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact) {
  check_gemm_glu(a, b_gate, b_up, bias_gate, bias_up);
  return gemm_glu_composite_checked(a, b_gate, b_up, bias_gate, bias_up, activation, negative_slope,
                                    store_preact);
}

std::tuple<at::Tensor, at::Tensor> gemm_glu_composite_checked(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact) {
  const c10::SymInt k = b_gate.sym_size(0), n = b_gate.sym_size(1);
  c10::SymInt rows = 1;  // a's leading dimensions flattened (no -1: K may be 0)
  for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.sym_size(d);
  const at::Tensor a_2d = a.reshape_symint({rows, k});
  const at::Tensor h = at::empty_symint({rows, n * 2}, a.options());
  project(h.narrow_symint(1, 0, n), a_2d, b_gate, bias_gate);
  project(h.narrow_symint(1, n, n), a_2d, b_up, bias_up);
  std::vector<c10::SymInt> sizes(a.sym_sizes().begin(), a.sym_sizes().end());
  sizes.back() = n;
  at::Tensor y = op::glu().call(h, activation, negative_slope).view_symint(sizes);
  if (!store_preact) return {y, at::empty({0}, a.options())};
  sizes.back() = n * 2;
  return {y, h.view_symint(sizes)};
}

}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("gemm_glu", &gemm_act::gemm_glu_composite);
}

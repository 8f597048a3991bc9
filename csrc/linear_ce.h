// What the LM loss's two loops (linear_ce_chunks.cpp over the vocabulary,
// linear_ce_rows.cpp over the tokens) share: their operands' checks, the
// logits padded to 16-byte rows, and the one product summed in fp32.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace gemm_act {
namespace ce {

inline void check_operands(const at::Tensor& hidden, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, const char* op) {
  TORCH_CHECK_VALUE(hidden.dim() == 2 && weight.dim() == 2, op,
                    ": hidden [tokens, D] and weight [vocab, D] must be 2-D, got shapes ",
                    hidden.sizes(), " and ", weight.sizes());
  TORCH_CHECK_VALUE(hidden.size(1) == weight.size(1), op, ": hidden's width ", hidden.size(1),
                    " must equal weight's ", weight.size(1));
  TORCH_CHECK_TYPE(at::isFloatingType(hidden.scalar_type()) &&
                       weight.scalar_type() == hidden.scalar_type(),
                   op, ": hidden and weight must share one floating-point dtype, got ",
                   hidden.scalar_type(), " and ", weight.scalar_type());
  TORCH_CHECK_VALUE(weight.device() == hidden.device(), op, ": weight must be on hidden's device ",
                    hidden.device(), ", got ", weight.device());
  if (bias.has_value()) {
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == weight.size(0), op, ": bias must be [",
                      weight.size(0), "], got shape ", bias->sizes());
    TORCH_CHECK_TYPE(bias->scalar_type() == hidden.scalar_type(), op, ": bias must be ",
                     hidden.scalar_type(), ", got ", bias->scalar_type());
    TORCH_CHECK_VALUE(bias->device() == hidden.device(), op, ": bias must be on hidden's device ",
                      hidden.device(), ", got ", bias->device());
  }
}

inline void check_gradient(const std::optional<at::Tensor>& grad, const at::Tensor& like,
                           bool same_dtype, const char* op, const char* name) {
  if (!grad.has_value()) return;
  TORCH_CHECK_VALUE(grad->sizes() == like.sizes(), op, ": ", name, " must have shape ",
                    like.sizes(), ", got ", grad->sizes());
  TORCH_CHECK_TYPE(!same_dtype || grad->scalar_type() == like.scalar_type(), op, ": ", name,
                   " must be ", like.scalar_type(), ", got ", grad->scalar_type());
  TORCH_CHECK_TYPE(at::isFloatingType(grad->scalar_type()), op, ": ", name,
                   " must be floating-point, got ", grad->scalar_type());
  TORCH_CHECK_VALUE(grad->device() == like.device() && grad->is_contiguous(), op, ": ", name,
                    " is written in place and must be contiguous on ", like.device());
}

// `width` columns of `element_size` bytes rounded up to a whole number of
// 16-byte units (as _policy.padded_vocab): cuBLAS runs its unaligned kernels
// where a GEMM's contiguous dimension is not such a number (GPT-2's 50,257).
inline int64_t padded_width(int64_t width, int64_t element_size) {
  const int64_t unit = std::max<int64_t>(1, 16 / element_size);
  return (width + unit - 1) / unit * unit;
}

// t (weight rows [V, D] or bias [V]) with zero rows after, to `to` rows.
inline at::Tensor with_zero_rows(const at::Tensor& t, int64_t to) {
  const int64_t pad = to - t.size(0);
  if (pad == 0) return t;
  std::vector<int64_t> sides(2 * t.dim(), 0);
  sides.back() = pad;  // the pairs run from the last dimension: the first's end
  return at::constant_pad_nd(t, sides, 0);
}

// out = hidden @ w_rows.T (+ bias_rows) in hidden's dtype, as F.linear writes
// it: the bias a 1-D addmm operand, added before the one rounding (on CUDA
// cuBLASLt's bias epilogue; a 2-D broadcast C is copied in and rounded
// twice, and takes longer: docs/MEASUREMENTS.md, "the LM loss's chunk logits rounded twice").
inline void logits_into(at::Tensor& out, const at::Tensor& hidden, const at::Tensor& w_rows,
                        const std::optional<at::Tensor>& bias_rows) {
  if (bias_rows.has_value()) {
    at::addmm_out(out, *bias_rows, hidden, w_rows.t());
  } else {
    at::mm_out(out, hidden, w_rows.t());
  }
}

// out = a @ b, or out += a @ b where `add`, summed in out's dtype: fp32 for
// fp16/bf16 a and b where the GPU's GEMM writes it (one rounding); on the
// CPU, whose GEMM has no such output, a @ b is rounded to a's dtype first.
inline void product_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool add) {
  at::Tensor o = out;
  const int beta = add ? 1 : 0;  // beta 0: out's old values (NaN among them) are not read
  if (out.scalar_type() == a.scalar_type()) {
    at::addmm_out(o, out, a, b, beta, 1);
  } else if (a.is_cuda()) {
    at::addmm_out(o, out, a, b, out.scalar_type(), beta, 1);
  } else if (add) {
    o.add_(at::mm(a, b));
  } else {
    o.copy_(at::mm(a, b));
  }
}

}  // namespace ce
}  // namespace gemm_act

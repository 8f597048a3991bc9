// linear_ce_rows, one for every backend: the loop over blocks of tokens of
// torch_gemm_act.linear_cross_entropy's rows road (rule ce_rows). A block
// takes the whole vocabulary, so each row's log-sum-exp is known before its
// gradient, and the loss and every gradient come out of one pass: three
// GEMMs per block (logits, hidden's rows, weight's share) to the chunk
// loop's four over forward and backward (docs/DESIGN.md).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "linear_ce.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using namespace ce;

constexpr const char* kRows = "linear_ce_rows";

void check_sums(const at::Tensor& t, const at::Tensor& hidden, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == hidden.size(0), kRows, ": ", name, " must be [",
                    hidden.size(0), "], got shape ", t.sizes());
  TORCH_CHECK_VALUE(t.device() == hidden.device() && t.is_contiguous(), kRows, ": ", name,
                    " must be contiguous on ", hidden.device());
}

void linear_ce_rows(const at::Tensor& hidden, const at::Tensor& weight,
                    const std::optional<at::Tensor>& bias, const at::Tensor& target,
                    const at::Tensor& scale, int64_t rows, double label_smoothing, double softcap,
                    const at::Tensor& lse, const at::Tensor& target_logit,
                    const std::optional<at::Tensor>& logit_sum,
                    const std::optional<at::Tensor>& grad_hidden,
                    const std::optional<at::Tensor>& grad_weight,
                    const std::optional<at::Tensor>& grad_bias) {
  check_operands(hidden, weight, bias, kRows);
  TORCH_CHECK_VALUE(rows >= 1, kRows, ": rows must be at least 1, got ", rows);
  TORCH_CHECK_VALUE(target.dim() == 1 && target.size(0) == hidden.size(0), kRows,
                    ": target must be [", hidden.size(0), "], got shape ", target.sizes());
  check_sums(scale, hidden, "scale");
  check_sums(lse, hidden, "lse");
  check_sums(target_logit, hidden, "target_logit");
  if (logit_sum.has_value()) check_sums(*logit_sum, hidden, "logit_sum");
  check_gradient(grad_hidden, hidden, false, kRows, "grad_hidden");
  TORCH_CHECK_VALUE(!grad_bias.has_value() || bias.has_value(), kRows, ": grad_bias needs a bias");
  if (bias.has_value()) check_gradient(grad_bias, *bias, false, kRows, "grad_bias");
  const int64_t tokens = hidden.size(0), vocab = weight.size(0);
  // The block's rows a whole number of 16-byte units wide, as the chunk loop's padded last chunk.
  const int64_t width = padded_width(vocab, hidden.element_size());
  // weight's gradient [vocab or width, D]: with the padded rows, its GEMM's
  // contiguous dimension is a whole number of 16-byte units (cuBLAS's
  // unaligned kernels otherwise); they sum to zero.
  if (grad_weight.has_value()) {
    TORCH_CHECK_VALUE(grad_weight->dim() == 2 && grad_weight->size(1) == weight.size(1) &&
                          (grad_weight->size(0) == vocab || grad_weight->size(0) == width),
                      kRows, ": grad_weight must have shape [", vocab, " or ", width, ", ",
                      weight.size(1), "], got ", grad_weight->sizes());
    TORCH_CHECK_TYPE(at::isFloatingType(grad_weight->scalar_type()), kRows,
                     ": grad_weight must be floating-point, got ", grad_weight->scalar_type());
    TORCH_CHECK_VALUE(grad_weight->device() == hidden.device() && grad_weight->is_contiguous(), kRows,
                      ": grad_weight is written in place and must be contiguous on ", hidden.device());
  }
  if (tokens == 0) {  // no block writes them
    if (grad_weight.has_value()) grad_weight->zero_();
    if (grad_bias.has_value()) grad_bias->zero_();
    return;
  }
  const at::Tensor w = with_zero_rows(weight, width);
  const std::optional<at::Tensor> b =
      bias.has_value() ? std::optional<at::Tensor>(with_zero_rows(*bias, width)) : std::nullopt;
  const int64_t block = std::min(rows, tokens);
  const at::Tensor buffer = at::empty({block, width}, hidden.options());
  const at::ScalarType acc = lse.scalar_type();
  for (int64_t r0 = 0; r0 < tokens; r0 += block) {
    const int64_t r = std::min(block, tokens - r0);
    const at::Tensor h = hidden.narrow(0, r0, r);
    at::Tensor padded = buffer.narrow(0, 0, r);
    logits_into(padded, h, w, b);
    const at::Tensor z = padded.narrow(1, 0, vocab);
    const at::Tensor t = target.narrow(0, r0, r), l = lse.narrow(0, r0, r);
    op::ce_chunk_forward().call(z, t, 0, softcap, l, target_logit.narrow(0, r0, r),
                                logit_sum.has_value()
                                    ? std::optional<at::Tensor>(logit_sum->narrow(0, r0, r))
                                    : std::nullopt);
    op::ce_chunk_backward().call(z, t, l, scale.narrow(0, r0, r), 0, vocab, label_smoothing,
                                 softcap);
    // The padding columns' gradient is zero (their logits are too, unless a row's are not finite).
    if (width > vocab) padded.narrow(1, vocab, width - vocab).zero_();
    // The first block writes weight's and bias's sums, the later ones add: no zeros to fill and read.
    const bool later = r0 > 0;
    if (grad_bias.has_value()) {
      if (later) {
        grad_bias->add_(z.sum(0, false, acc));
      } else {
        at::Tensor into = *grad_bias;
        at::sum_out(into, z, {0}, false, acc);
      }
    }
    if (grad_hidden.has_value()) product_into(grad_hidden->narrow(0, r0, r), padded, w, false);
    if (grad_weight.has_value()) {
      const bool whole = grad_weight->size(0) == width;
      product_into(*grad_weight, whole ? padded.t() : z.t(), h, later);
    }
  }
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("linear_ce_rows", &gemm_act::linear_ce_rows);
}

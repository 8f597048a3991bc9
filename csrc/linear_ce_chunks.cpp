// linear_ce_chunks_forward and _backward, one for every backend: the loop
// over the vocabulary's chunks of torch_gemm_act.linear_cross_entropy, in
// C++ so that a chunk costs its launches and not a Python iteration's (the
// step of a compiled model is issued by the host; see DESIGN.md).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "linear_ce.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

using namespace ce;

constexpr const char* kForward = "linear_ce_chunks_forward";
constexpr const char* kBackward = "linear_ce_chunks_backward";

// The chunks' logits live in one buffer, one chunk held at a time, each row
// a whole number of 16-byte units wide (padded_width: GPT-2's last chunk is
// 50,257 - 24 * 2048 columns), so a chunk that is not runs its GEMMs over
// that padded width: its weight (and bias) rows with zero rows after, its
// logits' padding columns zero and never read by the chunk passes.
struct Chunks {
  at::Tensor buffer;
  int64_t tokens, vocab, chunk, element_size;

  Chunks(const at::Tensor& hidden, int64_t vocab, int64_t chunk)
      : tokens(hidden.size(0)), vocab(vocab), chunk(std::min(chunk, std::max<int64_t>(vocab, 1))),
        element_size(hidden.element_size()) {
    buffer = at::empty({tokens * padded_width(this->chunk, element_size)}, hidden.options());
  }
  int64_t width(int64_t v0) const { return std::min(chunk, vocab - v0); }

  // Rows [v0, v0 + width) of t (weight or bias), zero rows after up to the padded width.
  at::Tensor rows(const at::Tensor& t, int64_t v0) const {
    const int64_t w = width(v0);
    return with_zero_rows(t.narrow(0, v0, w), padded_width(w, element_size));
  }

  // The logits of columns [v0, v0 + padded width) (logits_into). The chunk's
  // own columns are the first width(v0); `w_rows` is rows(weight, v0).
  at::Tensor logits(const at::Tensor& hidden, const at::Tensor& w_rows,
                    const std::optional<at::Tensor>& bias, int64_t v0) {
    const int64_t ld = w_rows.size(0);
    at::Tensor z = buffer.narrow(0, 0, tokens * ld).view({tokens, ld});
    logits_into(z, hidden, w_rows,
                bias.has_value() ? std::optional<at::Tensor>(rows(*bias, v0)) : std::nullopt);
    return z;
  }
};

void linear_ce_chunks_forward(const at::Tensor& hidden, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, const at::Tensor& target,
                              int64_t chunk, double softcap, const at::Tensor& lse,
                              const at::Tensor& target_logit,
                              const std::optional<at::Tensor>& logit_sum) {
  check_operands(hidden, weight, bias, kForward);
  TORCH_CHECK_VALUE(chunk >= 1, kForward, ": chunk must be at least 1 column, got ", chunk);
  Chunks chunks(hidden, weight.size(0), chunk);
  for (int64_t v0 = 0; v0 < chunks.vocab; v0 += chunks.chunk) {
    const at::Tensor z = chunks.logits(hidden, chunks.rows(weight, v0), bias, v0);
    op::ce_chunk_forward().call(z.narrow(1, 0, chunks.width(v0)), target, v0, softcap, lse,
                                target_logit, logit_sum);
  }
}

void linear_ce_chunks_backward(const at::Tensor& hidden, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, const at::Tensor& target,
                               const at::Tensor& lse, const at::Tensor& scale, int64_t chunk,
                               double label_smoothing, double softcap,
                               const std::optional<at::Tensor>& grad_hidden,
                               const std::optional<at::Tensor>& grad_weight,
                               const std::optional<at::Tensor>& grad_bias) {
  check_operands(hidden, weight, bias, kBackward);
  TORCH_CHECK_VALUE(chunk >= 1, kBackward, ": chunk must be at least 1 column, got ", chunk);
  check_gradient(grad_hidden, hidden, false, kBackward, "grad_hidden");
  check_gradient(grad_weight, weight, true, kBackward, "grad_weight");
  TORCH_CHECK_VALUE(!grad_bias.has_value() || bias.has_value(), kBackward,
                    ": grad_bias needs a bias");
  if (bias.has_value()) check_gradient(grad_bias, *bias, true, kBackward, "grad_bias");
  const at::ScalarType acc = lse.scalar_type();
  Chunks chunks(hidden, weight.size(0), chunk);
  for (int64_t v0 = 0; v0 < chunks.vocab; v0 += chunks.chunk) {
    const at::Tensor w_rows = chunks.rows(weight, v0);
    const at::Tensor padded = chunks.logits(hidden, w_rows, bias, v0);
    const int64_t w = chunks.width(v0);
    const at::Tensor z = padded.narrow(1, 0, w);
    op::ce_chunk_backward().call(z, target, lse, scale, v0, chunks.vocab, label_smoothing, softcap);
    // The padding columns' gradient is zero (their logits are too, unless a row's are not finite).
    if (w < padded.size(1)) padded.narrow(1, w, padded.size(1) - w).zero_();
    if (grad_bias.has_value()) grad_bias->narrow(0, v0, w).copy_(z.sum(0, false, acc));
    if (grad_weight.has_value()) {
      at::Tensor rows = grad_weight->narrow(0, v0, w);
      if (w < padded.size(1)) {
        // Over the padded width, then its first w rows: z.t()'s contiguous
        // dimension, w, is not a whole number of 16-byte units (cuBLAS's unaligned kernels).
        rows.copy_(at::mm(padded.t(), hidden).narrow(0, 0, w));
      } else {
        at::mm_out(rows, z.t(), hidden);
      }
    }
    if (grad_hidden.has_value()) product_into(*grad_hidden, padded, w_rows, /*add=*/true);
  }
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("linear_ce_chunks_forward", &gemm_act::linear_ce_chunks_forward);
  m.impl("linear_ce_chunks_backward", &gemm_act::linear_ce_chunks_backward);
}

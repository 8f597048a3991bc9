// linear_ce_chunks_forward and _backward (linear_ce_chunks.h): the loop
// over the vocabulary's chunks of torch_gemm_act.linear_cross_entropy, in
// C++ so that a chunk costs its launches and not a Python iteration's (the
// step of a compiled model is issued by the host; see DESIGN.md). Registered
// here for every backend without kernels of its own.
#include "linear_ce_chunks.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "checks.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

constexpr const char* kForward = "linear_ce_chunks_forward";
constexpr const char* kBackward = "linear_ce_chunks_backward";

void check_operands(const at::Tensor& hidden, const at::Tensor& weight,
                    const std::optional<at::Tensor>& bias, int64_t chunk, const char* op) {
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
  TORCH_CHECK_VALUE(chunk >= 1, op, ": chunk must be at least 1 column, got ", chunk);
}

void check_gradient(const std::optional<at::Tensor>& grad, const at::Tensor& like, bool same_dtype,
                    const char* op, const char* name) {
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

// The chunks' logits live in one buffer, one chunk held at a time, each row
// a whole number of 16-byte units wide; it is made when a chunk first needs
// it (the backend's kernels write no logits in the forward). cuBLAS runs
// its unaligned kernels where a GEMM's contiguous dimension is not such a
// number (GPT-2's last chunk, 50,257 - 24 * 2048 columns), so a chunk that
// is not runs its GEMMs over that padded width: its weight (and bias) rows
// with zero rows after, its logits' padding columns zero and never read by
// the chunk passes.
struct Chunks {
  at::Tensor buffer;
  at::TensorOptions options;
  int64_t tokens, vocab, chunk, per_16_bytes;

  Chunks(const at::Tensor& hidden, int64_t vocab, int64_t chunk)
      : options(hidden.options()), tokens(hidden.size(0)), vocab(vocab),
        chunk(std::min(chunk, std::max<int64_t>(vocab, 1))),
        per_16_bytes(std::max<int64_t>(1, 16 / hidden.element_size())) {}
  int64_t padded(int64_t width) const { return (width + per_16_bytes - 1) / per_16_bytes * per_16_bytes; }
  int64_t width(int64_t v0) const { return std::min(chunk, vocab - v0); }

  // Rows [v0, v0 + width) of t (weight or bias), zero rows after up to the padded width.
  at::Tensor rows(const at::Tensor& t, int64_t v0) const {
    const int64_t w = width(v0), pad = padded(w) - w;
    const at::Tensor part = t.narrow(0, v0, w);
    if (pad == 0) return part;
    std::vector<int64_t> sides(2 * t.dim(), 0);
    sides.back() = pad;  // the pairs run from the last dimension: the first's end
    return at::constant_pad_nd(part, sides, 0);
  }

  // The buffer as a chunk's logits [tokens, padded width].
  at::Tensor view(const at::Tensor& w_rows) {
    if (!buffer.defined()) buffer = at::empty({tokens * padded(chunk)}, options);
    const int64_t ld = w_rows.size(0);
    return buffer.narrow(0, 0, tokens * ld).view({tokens, ld});
  }

  // The logits of columns [v0, v0 + padded width) in hidden's dtype into z,
  // the bias added before their one rounding: a GEMM whose C is the bias
  // broadcast (on CUDA, F.linear's bias epilogue on a narrow chunk measured
  // further from float64 than F.linear on the whole vocabulary). The
  // chunk's own columns are the first width(v0); `w_rows` and `bias_rows`
  // are rows(weight / bias, v0).
  static void logits(const at::Tensor& hidden, const at::Tensor& w_rows,
                     const std::optional<at::Tensor>& bias_rows, at::Tensor& z) {
    if (bias_rows.has_value()) {
      at::addmm_out(z, bias_rows->expand(z.sizes()), hidden, w_rows.t());
    } else {
      at::mm_out(z, hidden, w_rows.t());
    }
  }

  // Whether the backend's kernels take this chunk.
  bool fits(const ChunkKernels* kernels, const at::Tensor& hidden, const at::Tensor& w_rows,
            const std::optional<at::Tensor>& bias_rows) const {
    return kernels != nullptr && kernels->fits(hidden, w_rows, bias_rows, vocab);
  }
};

// Per-row tensors: [tokens] on hidden's device.
void check_per_row(std::initializer_list<const at::Tensor*> tensors, const at::Tensor& hidden, const char* op,
                   const char* names) {
  for (const at::Tensor* t : tensors) {
    TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == hidden.size(0) && t->device() == hidden.device(), op, ": ",
                      names, " must be [", hidden.size(0), "] on ", hidden.device(), ", got shape ", t->sizes(),
                      " on ", t->device());
  }
}

// The chunk's terms as the backend's kernels read them (fp32 per-row sums, an int64 target).
void check_kernel_terms(std::initializer_list<const at::Tensor*> sums, const at::Tensor& target, const char* op) {
  for (const at::Tensor* t : sums) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous(), op,
                ": the per-row sums must be contiguous fp32 here, got ", t->scalar_type());
  }
  TORCH_CHECK(target.scalar_type() == at::kLong && target.is_contiguous(), op,
              ": target must be contiguous int64 here, got ", target.scalar_type());
}

std::optional<at::Tensor> bias_rows(const Chunks& chunks, const std::optional<at::Tensor>& bias, int64_t v0) {
  if (!bias.has_value()) return std::nullopt;
  return chunks.rows(*bias, v0);
}

}  // namespace

void linear_ce_chunks_forward_with(const ChunkKernels* kernels, const at::Tensor& hidden,
                                   const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                   const at::Tensor& target, int64_t chunk, double softcap,
                                   const at::Tensor& lse, const at::Tensor& target_logit,
                                   const std::optional<at::Tensor>& logit_sum) {
  check_operands(hidden, weight, bias, chunk, kForward);
  check_per_row({&lse, &target_logit, &target}, hidden, kForward, "lse, target_logit and target");
  if (logit_sum.has_value()) check_per_row({&*logit_sum}, hidden, kForward, "logit_sum");
  Chunks chunks(hidden, weight.size(0), chunk);
  at::Tensor lse_out = lse, target_logit_out = target_logit;
  for (int64_t v0 = 0; v0 < chunks.vocab; v0 += chunks.chunk) {
    const at::Tensor w_rows = chunks.rows(weight, v0);
    const std::optional<at::Tensor> b_rows = bias_rows(chunks, bias, v0);
    if (chunks.fits(kernels, hidden, w_rows, b_rows)) {
      check_kernel_terms({&lse, &target_logit}, target, kForward);
      if (logit_sum.has_value()) check_kernel_terms({&*logit_sum}, target, kForward);
      CeTerms terms;
      terms.target = target.const_data_ptr<int64_t>();
      terms.v0 = v0;
      terms.width = chunks.width(v0);
      terms.vocab = chunks.vocab;
      terms.softcap = softcap;
      kernels->lse(hidden, w_rows, b_rows, terms, lse_out, target_logit_out, logit_sum);
      continue;
    }
    at::Tensor z = chunks.view(w_rows);
    Chunks::logits(hidden, w_rows, b_rows, z);
    op::ce_chunk_forward().call(z.narrow(1, 0, chunks.width(v0)), target, v0, softcap, lse,
                                target_logit, logit_sum);
  }
}

namespace {

// acc += a @ b, summed in acc's dtype (fp32 for fp16/bf16 a and b where the
// GPU's GEMM writes it; on the CPU a @ b is rounded to a's dtype first).
void add_product(at::Tensor& acc, const at::Tensor& a, const at::Tensor& b) {
  if (acc.scalar_type() == a.scalar_type()) {
    acc.addmm_(a, b);
  } else if (a.is_cuda()) {
    at::addmm_out(acc, acc, a, b, acc.scalar_type());
  } else {
    acc.add_(at::mm(a, b));
  }
}

}  // namespace

void linear_ce_chunks_backward_with(const ChunkKernels* kernels, const at::Tensor& hidden,
                                    const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                    const at::Tensor& target, const at::Tensor& lse,
                                    const at::Tensor& scale, int64_t chunk, double label_smoothing,
                                    double softcap, const std::optional<at::Tensor>& grad_hidden,
                                    const std::optional<at::Tensor>& grad_weight,
                                    const std::optional<at::Tensor>& grad_bias) {
  check_operands(hidden, weight, bias, chunk, kBackward);
  check_gradient(grad_hidden, hidden, false, kBackward, "grad_hidden");
  check_gradient(grad_weight, weight, true, kBackward, "grad_weight");
  TORCH_CHECK_VALUE(!grad_bias.has_value() || bias.has_value(), kBackward,
                    ": grad_bias needs a bias");
  if (bias.has_value()) check_gradient(grad_bias, *bias, true, kBackward, "grad_bias");
  check_per_row({&lse, &scale, &target}, hidden, kBackward, "lse, scale and target");
  const at::ScalarType acc = lse.scalar_type();
  std::optional<at::Tensor> gh = grad_hidden;
  Chunks chunks(hidden, weight.size(0), chunk);
  // The per-row terms as the backend's gradient kernel reads them.
  const at::Tensor target_c = target.contiguous(), lse_c = lse.contiguous(), scale_c = scale.contiguous();
  for (int64_t v0 = 0; v0 < chunks.vocab; v0 += chunks.chunk) {
    const at::Tensor w_rows = chunks.rows(weight, v0);
    const std::optional<at::Tensor> b_rows = bias_rows(chunks, bias, v0);
    at::Tensor padded = chunks.view(w_rows);
    const int64_t w = chunks.width(v0);
    const at::Tensor z = padded.narrow(1, 0, w);
    // The forward asked the same of the same chunk: its logits came from the same kernels.
    if (chunks.fits(kernels, hidden, w_rows, b_rows)) {
      check_kernel_terms({&lse_c, &scale_c}, target_c, kBackward);
      CeTerms terms;
      terms.lse = lse_c.const_data_ptr<float>();
      terms.scale = scale_c.const_data_ptr<float>();
      terms.target = target_c.const_data_ptr<int64_t>();
      terms.v0 = v0;
      terms.width = w;
      terms.vocab = chunks.vocab;
      terms.label_smoothing = label_smoothing;
      terms.softcap = softcap;
      poison_if_requested(padded);
      kernels->grad(hidden, w_rows, b_rows, terms, padded);  // the padding columns 0
    } else {
      Chunks::logits(hidden, w_rows, b_rows, padded);
      op::ce_chunk_backward().call(z, target, lse, scale, v0, chunks.vocab, label_smoothing, softcap);
      // The padding columns' gradient is zero (their logits are too, unless a row's are not finite).
      if (w < padded.size(1)) padded.narrow(1, w, padded.size(1) - w).zero_();
    }
    if (grad_bias.has_value()) grad_bias->narrow(0, v0, w).copy_(z.sum(0, false, acc));
    if (grad_weight.has_value()) {
      at::Tensor rows = grad_weight->narrow(0, v0, w);
      at::mm_out(rows, z.t(), hidden);
    }
    if (gh.has_value()) add_product(*gh, padded, w_rows);
  }
}

}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("linear_ce_chunks_forward", &gemm_act::linear_ce_chunks_forward_impl<nullptr>);
  m.impl("linear_ce_chunks_backward", &gemm_act::linear_ce_chunks_backward_impl<nullptr>);
}

// linear_ce_chunks_forward and _backward (linear_ce_chunks.cpp), the loop over
// the vocabulary's chunks of torch_gemm_act.linear_cross_entropy, with the
// kernels a backend may bring for a chunk's GEMM: the CUDA registration's,
// where the sm90 family takes the chunk, fold its logits into the
// log-sum-exp in the forward's epilogue and form their gradient in the
// backward's (no logits written, no pass over the chunk); elsewhere a
// chunk's logits are F.linear's GEMM and its passes the ce_chunk operators.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "gemm_act.h"

namespace gemm_act {

struct ChunkKernels {
  // Whether the two kernels below take this chunk (hidden [tokens, D], the
  // chunk's weight rows [N, D] and bias rows [N]); asked alike in the
  // forward and the backward, so a chunk's logits round alike.
  bool (*fits)(const at::Tensor& hidden, const at::Tensor& w_rows,
               const std::optional<at::Tensor>& bias_rows, int64_t vocab);
  // lse, target_logit and logit_sum (fp32 [tokens]) updated with the
  // logits hidden @ w_rows.T + bias_rows of columns [terms.v0, terms.v0 +
  // terms.width), as ce_chunk_forward updates them (terms: target, v0,
  // width, softcap).
  void (*lse)(const at::Tensor& hidden, const at::Tensor& w_rows, const std::optional<at::Tensor>& bias_rows,
              const CeTerms& terms, at::Tensor& lse, at::Tensor& target_logit,
              const std::optional<at::Tensor>& logit_sum);
  // z [tokens, N] = the gradient of the loss at those logits (ce_chunk.h's
  // grad; its columns past terms.width 0).
  void (*grad)(const at::Tensor& hidden, const at::Tensor& w_rows,
               const std::optional<at::Tensor>& bias_rows, const CeTerms& terms, at::Tensor& z);
};

// The operators' bodies; `kernels` may be null (none).
void linear_ce_chunks_forward_with(const ChunkKernels* kernels, const at::Tensor& hidden,
                                   const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                   const at::Tensor& target, int64_t chunk, double softcap,
                                   const at::Tensor& lse, const at::Tensor& target_logit,
                                   const std::optional<at::Tensor>& logit_sum);
void linear_ce_chunks_backward_with(const ChunkKernels* kernels, const at::Tensor& hidden,
                                    const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                    const at::Tensor& target, const at::Tensor& lse,
                                    const at::Tensor& scale, int64_t chunk, double label_smoothing,
                                    double softcap, const std::optional<at::Tensor>& grad_hidden,
                                    const std::optional<at::Tensor>& grad_weight,
                                    const std::optional<at::Tensor>& grad_bias);

// The operators as a backend registers them, with its kernels (or none).
template <const ChunkKernels* kKernels>
void linear_ce_chunks_forward_impl(const at::Tensor& hidden, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const at::Tensor& target,
                                   int64_t chunk, double softcap, const at::Tensor& lse,
                                   const at::Tensor& target_logit, const std::optional<at::Tensor>& logit_sum) {
  linear_ce_chunks_forward_with(kKernels, hidden, weight, bias, target, chunk, softcap, lse, target_logit,
                                logit_sum);
}

template <const ChunkKernels* kKernels>
void linear_ce_chunks_backward_impl(const at::Tensor& hidden, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, const at::Tensor& target,
                                    const at::Tensor& lse, const at::Tensor& scale, int64_t chunk,
                                    double label_smoothing, double softcap,
                                    const std::optional<at::Tensor>& grad_hidden,
                                    const std::optional<at::Tensor>& grad_weight,
                                    const std::optional<at::Tensor>& grad_bias) {
  linear_ce_chunks_backward_with(kKernels, hidden, weight, bias, target, lse, scale, chunk, label_smoothing,
                                 softcap, grad_hidden, grad_weight, grad_bias);
}

}  // namespace gemm_act

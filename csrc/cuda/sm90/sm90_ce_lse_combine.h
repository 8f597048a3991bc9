// The last step of gemm_ce_lse (the language-model loss's chunk forward on
// sm90): its epilogue leaves per-tile partials of each row's log-sum-exp
// (sm90_ce_lse_partials.h); one small kernel folds them per row in tile
// order (deterministic) into the running lse, target_logit and logit_sum,
// as the chunk pass (ce_chunk.h) updates them.
#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include <optional>

#include "cuda/sm90/sm90_ce_lse_partials.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {

// For each row r < shape.m: lse[r] = logaddexp(lse[r], the chunk's), the
// target's logit where target[r] - terms.v0 is a column of the chunk, and
// logit_sum[r] += the chunk's sum of logits (where given). lse,
// target_logit and logit_sum fp32 [m] contiguous; terms.target [m].
void combine_ce_lse_partials(const float* partials, const CeLsePartials& shape, const CeTerms& terms,
                             at::Tensor& lse, at::Tensor& target_logit,
                             const std::optional<at::Tensor>& logit_sum, cudaStream_t stream);

}  // namespace sm90
}  // namespace gemm_act

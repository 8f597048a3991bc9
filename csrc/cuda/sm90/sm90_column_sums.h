// The last step of gemm_dact's bias gradient on sm90: the dact epilogue
// leaves each tile's column sums of dA (fp32 partials, one row per tile
// along M); one small kernel adds them up in a fixed order (deterministic) and
// writes the bias gradient in dA's dtype: one launch where ATen's narrow,
// sum and cast took two and their host time, which a host-bound training
// step pays.
#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

namespace gemm_act {
namespace sm90 {

// out[c] = sum over r of partials[r, c] for c < out.numel(); partials
// [rows, >= out.numel()] fp32 with contiguous rows, out contiguous fp16/bf16.
void sum_column_partials(const at::Tensor& partials, at::Tensor& out, cudaStream_t stream);

}  // namespace sm90
}  // namespace gemm_act

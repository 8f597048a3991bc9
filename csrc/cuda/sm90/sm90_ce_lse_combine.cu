#include "cuda/sm90/sm90_ce_lse_combine.h"

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <cstdint>

#include "ce_chunk.h"

namespace gemm_act {
namespace sm90 {
namespace {

constexpr int kThreads = 256;

// One thread per row: its tiles' partials folded in tile order.
__global__ void __launch_bounds__(kThreads) combine_kernel(const float* __restrict__ partials, CeLsePartials shape,
                                                           const int64_t* __restrict__ target, int64_t v0,
                                                           int64_t width, float* __restrict__ lse,
                                                           float* __restrict__ target_logit,
                                                           float* __restrict__ logit_sum) {
  const int64_t row = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (row >= shape.m) return;
  const int64_t q = shape.quantity_stride(), tiles = shape.tiles(), rows = shape.rows();
  float m = ce::minus_inf<float>(), s = 0.0f, sum = 0.0f, t = 0.0f;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const float* p = partials + tile * rows + row;
    ce::merge(m, s, p[0], p[q]);
    sum += p[2 * q];
    t += p[3 * q];
  }
  lse[row] = ce::logaddexp(lse[row], m + ce::log_(s));
  const int64_t column = target[row] - v0;
  if (column >= 0 && column < width) target_logit[row] = t;
  if (logit_sum != nullptr) logit_sum[row] += sum;
}

}  // namespace

void combine_ce_lse_partials(const float* partials, const CeLsePartials& shape, const CeTerms& terms,
                             at::Tensor& lse, at::Tensor& target_logit,
                             const std::optional<at::Tensor>& logit_sum, cudaStream_t stream) {
  for (const at::Tensor* t : {&lse, &target_logit}) {
    TORCH_INTERNAL_ASSERT(t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == shape.m);
  }
  TORCH_INTERNAL_ASSERT(!logit_sum.has_value() || (logit_sum->scalar_type() == at::kFloat &&
                                                   logit_sum->is_contiguous() && logit_sum->numel() == shape.m));
  if (shape.m == 0) return;
  const auto blocks = static_cast<unsigned>((shape.m + kThreads - 1) / kThreads);
  combine_kernel<<<blocks, kThreads, 0, stream>>>(
      partials, shape, terms.target, terms.v0, terms.width, lse.mutable_data_ptr<float>(),
      target_logit.mutable_data_ptr<float>(),
      logit_sum.has_value() ? logit_sum->mutable_data_ptr<float>() : nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace sm90
}  // namespace gemm_act

#include "cuda/sm90/sm90_column_sums.h"

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gemm_act {
namespace sm90 {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// One thread per column: its rows in order, 8 loads in flight at a time.
template <class Out>
__global__ void __launch_bounds__(kThreads) sum_columns_kernel(const float* __restrict__ partials, int rows,
                                                                int64_t ld, int64_t n, Out* __restrict__ out) {
  const int64_t col = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (col >= n) return;
  float sum = 0.0f;
#pragma unroll 8
  for (int r = 0; r < rows; ++r) sum += partials[r * ld + col];
  store(out + col, sum);
}

}  // namespace

void sum_column_partials(const at::Tensor& partials, at::Tensor& out, cudaStream_t stream) {
  TORCH_INTERNAL_ASSERT(partials.dim() == 2 && partials.scalar_type() == at::kFloat &&
                        partials.stride(1) == 1 && out.is_contiguous() &&
                        out.numel() <= partials.size(1));
  const int64_t n = out.numel();
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  const int rows = static_cast<int>(partials.size(0));
  const float* in = partials.const_data_ptr<float>();
  const int64_t ld = partials.stride(0);
  switch (out.scalar_type()) {
    case at::kHalf:
      sum_columns_kernel<<<blocks, kThreads, 0, stream>>>(in, rows, ld, n,
                                                          static_cast<__half*>(out.data_ptr()));
      break;
    case at::kBFloat16:
      sum_columns_kernel<<<blocks, kThreads, 0, stream>>>(in, rows, ld, n,
                                                          static_cast<__nv_bfloat16*>(out.data_ptr()));
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "gemm_dact: column sums into ", out.scalar_type());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace sm90
}  // namespace gemm_act

#include "cuda/sm90/sm90_column_sums.h"

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gemm_act {
namespace sm90 {
namespace {

// A block is kGroups row groups of kColumns threads: thread (g, c) adds the
// rows g, g + kGroups, ... of column c, all its loads in flight at once for
// up to kGroups * kUnroll rows, then group 0 adds the groups' sums in g
// order (deterministic). One thread per column, its rows in order, kept
// few SMs busy at GPT-2's 3072 columns and waited on its loads one batch
// at a time.
constexpr int kColumns = 32, kGroups = 8, kThreads = kColumns * kGroups, kUnroll = 8;

__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <class Out>
__global__ void __launch_bounds__(kThreads) sum_columns_kernel(const float* __restrict__ partials, int rows,
                                                                int64_t ld, int64_t n, Out* __restrict__ out) {
  __shared__ float s_sum[kGroups][kColumns];
  const int c = static_cast<int>(threadIdx.x) % kColumns, g = static_cast<int>(threadIdx.x) / kColumns;
  const int64_t col = int64_t{blockIdx.x} * kColumns + c;
  float sum = 0.0f;
  if (col < n) {
    for (int r0 = g; r0 < rows; r0 += kGroups * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int r = r0 + u * kGroups;
        v[u] = r < rows ? partials[r * ld + col] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum += v[u];
    }
  }
  s_sum[g][c] = sum;
  __syncthreads();
  if (g == 0 && col < n) {
#pragma unroll
    for (int i = 1; i < kGroups; ++i) sum += s_sum[i][c];
    store(out + col, sum);
  }
}

}  // namespace

void sum_column_partials(const at::Tensor& partials, at::Tensor& out, cudaStream_t stream) {
  TORCH_INTERNAL_ASSERT(partials.dim() == 2 && partials.scalar_type() == at::kFloat &&
                        partials.stride(1) == 1 && out.is_contiguous() &&
                        out.numel() <= partials.size(1));
  const int64_t n = out.numel();
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((n + kColumns - 1) / kColumns);
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

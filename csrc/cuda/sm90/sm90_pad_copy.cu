// See sm90_pad_copy.h.
#include "cuda/sm90/sm90_pad_copy.h"

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "cuda/sm90/sm90_tma_rules.h"

namespace gemm_act {
namespace sm90 {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// One thread per 16-byte chunk of a destination row; the grid's y walks the
// rows. T is the element's bit pattern (a zero of every float type is 0).
template <class T, bool kVectorSrc, bool kVectorDst>
__global__ void __launch_bounds__(kThreads)
    pad_copy_kernel(const T* __restrict__ src, int64_t src_ld, int64_t rows, int64_t cols,
                    T* __restrict__ dst, int64_t dst_ld, int64_t dst_rows, int64_t dst_cols) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t c0 = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (c0 >= dst_cols) return;
  for (int64_t r = blockIdx.y; r < dst_rows; r += gridDim.y) {
    alignas(16) T v[kVec];
    const T* s = src + r * src_ld + c0;
    if (kVectorSrc && r < rows && c0 + kVec <= cols) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(s);
    } else {
#pragma unroll
      for (int t = 0; t < kVec; ++t) v[t] = r < rows && c0 + t < cols ? s[t] : T(0);
    }
    T* d = dst + r * dst_ld + c0;
    if (kVectorDst && c0 + kVec <= dst_cols) {
      *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(v);
    } else {
#pragma unroll
      for (int t = 0; t < kVec; ++t) {
        if (c0 + t < dst_cols) d[t] = v[t];
      }
    }
  }
}

template <class T, bool kVectorSrc, bool kVectorDst>
void launch(const at::Tensor& src, const at::Tensor& dst) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t dst_rows = dst.size(0), dst_cols = dst.size(1);
  const int64_t chunks = (dst_cols + kVec - 1) / kVec;
  const dim3 grid(static_cast<unsigned>((chunks + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min(dst_rows, kMaxGridY)));
  pad_copy_kernel<T, kVectorSrc, kVectorDst><<<grid, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const T*>(src.data_ptr()), src.stride(0), src.size(0), src.size(1),
      static_cast<T*>(dst.data_ptr()), dst.stride(0), dst_rows, dst_cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// A row layout whose every row starts 16-byte aligned.
bool rows_aligned16(const at::Tensor& t) {
  return aligned16(t.data_ptr()) && (t.stride(0) * t.element_size()) % 16 == 0;
}

template <class T>
void launch_aligned_as(const at::Tensor& src, const at::Tensor& dst) {
  const bool vs = rows_aligned16(src), vd = rows_aligned16(dst);
  if (vs && vd) return launch<T, true, true>(src, dst);
  if (vs) return launch<T, true, false>(src, dst);
  if (vd) return launch<T, false, true>(src, dst);
  launch<T, false, false>(src, dst);
}

}  // namespace

bool pad_copy(const at::Tensor& src, const at::Tensor& dst) {
  const int64_t bytes = src.element_size();
  if (src.dim() != 2 || dst.dim() != 2 || !src.is_cuda() || !dst.is_cuda() ||
      src.device() != dst.device() || src.scalar_type() != dst.scalar_type() ||
      (bytes != 2 && bytes != 4) || src.stride(1) != 1 || dst.stride(1) != 1 ||
      src.size(0) > dst.size(0) || src.size(1) > dst.size(1) || dst.numel() == 0) {
    return false;
  }
  if (bytes == 2) {
    launch_aligned_as<uint16_t>(src, dst);
  } else {
    launch_aligned_as<uint32_t>(src, dst);
  }
  return true;
}

}  // namespace sm90
}  // namespace gemm_act

// See pad_copy.h.
#include "cuda/common/pad_copy.h"

#include <ATen/ops/empty.h>

#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "checks.h"

namespace gemm_act {
namespace gpu {
namespace {

constexpr int kThreads = 256;

// The destination is copied in 16-byte chunks aligned in memory, whatever
// the alignment of its rows: a row whose start is not 16-byte aligned has
// a short chunk first (its `head` elements, then the aligned ones) and
// perhaps a short one last. Short chunks are stored element by element,
// full ones whole. (Stores of a 16-byte chunk per thread split into
// elements took 0.180 ms for the unaligned benchmark shape's Y, and one
// element per thread 0.084, against ATen's 0.071.) Chunk i of the grid is
// chunk i % chunks_per_row of row i / chunks_per_row; one resident wave of
// blocks strides over them. T is the element's bit pattern (a zero of
// every float type is 0).
template <class T>
__global__ void __launch_bounds__(kThreads)
    pad_copy_kernel(const T* __restrict__ src, int64_t src_ld, int64_t rows, int64_t cols,
                    T* __restrict__ dst, int64_t dst_ld, int64_t dst_cols,
                    at::cuda::detail::IntDivider<unsigned> chunks_per_row, unsigned total) {
  constexpr int kVec = 16 / sizeof(T);
  for (unsigned i = blockIdx.x * kThreads + threadIdx.x; i < total; i += gridDim.x * kThreads) {
    const auto row_chunk = chunks_per_row.divmod(i);
    const int64_t r = row_chunk.div;
    T* d = dst + r * dst_ld;
    // Elements before the row's first 16-byte boundary (the tensor's
    // elements are aligned to their size, so this is whole).
    const int head = static_cast<int>((16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15) / sizeof(T);
    // Chunk 0 is the head, if any; the next ones start on 16-byte boundaries.
    const int64_t c0 = int64_t(row_chunk.mod) * kVec - (head ? kVec - head : 0);
    if (c0 >= dst_cols) continue;
    const T* s = src + r * src_ld;
    const bool full = c0 >= 0 && c0 + kVec <= dst_cols;
    uint4 chunk;
    T* v = reinterpret_cast<T*>(&chunk);
    if (full && r < rows && c0 + kVec <= cols && (reinterpret_cast<uintptr_t>(s + c0) & 15) == 0) {
      chunk = __ldg(reinterpret_cast<const uint4*>(s + c0));
    } else {
      // A warp's element loads still cover whole sectors together, through L1
      // (read-only: nothing writes the source during the copy).
#pragma unroll
      for (int t = 0; t < kVec; ++t) {
        const int64_t c = c0 + t;
        v[t] = r < rows && c >= 0 && c < cols ? __ldg(s + c) : T(0);
      }
    }
    if (full) {
      // An explicit st.global.v4: the plain assignment compiled to four 4-byte stores.
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(d + c0), "r"(chunk.x), "r"(chunk.y),
                   "r"(chunk.z), "r"(chunk.w)
                   : "memory");
    } else {
#pragma unroll
      for (int t = 0; t < kVec; ++t) {
        const int64_t c = c0 + t;
        if (c >= 0 && c < dst_cols) d[c] = v[t];
      }
    }
  }
}

// Launches the copy; false (nothing launched) if its chunks do not fit the
// kernel's 32-bit indices (a destination of 32 GiB).
template <class T>
bool launch(const at::Tensor& src, const at::Tensor& dst) {
  constexpr int kVec = 16 / sizeof(T);
  // Enough chunks for any alignment of a row: a head and a tail besides the
  // full ones.
  const int64_t chunks_per_row = dst.size(1) / kVec + 2;
  const int64_t total = dst.size(0) * chunks_per_row;
  if (total > std::numeric_limits<int32_t>::max()) return false;  // i + stride stays below 2^32
  // Attributes, not at::cuda::getCurrentDeviceProperties(): that header
  // needs the cuSPARSE and cuBLAS headers, which a CUDA toolkit may lack.
  int device = 0, sms = 0, threads_per_sm = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  const int64_t resident = int64_t(sms) * (threads_per_sm / kThreads);
  const int64_t blocks = std::min((total + kThreads - 1) / kThreads, resident);
  pad_copy_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const T*>(src.data_ptr()), src.stride(0), src.size(0), src.size(1),
      static_cast<T*>(dst.data_ptr()), dst.stride(0), dst.size(1),
      at::cuda::detail::IntDivider<unsigned>(static_cast<unsigned>(chunks_per_row)),
      static_cast<unsigned>(total));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
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
  return bytes == 2 ? launch<uint16_t>(src, dst) : launch<uint32_t>(src, dst);
}

at::Tensor padded_copy(const at::Tensor& src, int64_t rows, int64_t cols) {
  at::Tensor dst = at::empty({rows, cols}, src.options().memory_format(at::MemoryFormat::Contiguous));
  poison_if_requested(dst);  // so a test sees any element the copy misses
  if (pad_copy(src, dst)) return dst;
  const int64_t r = src.size(0), c = src.size(1);
  dst.narrow(0, 0, r).narrow(1, 0, c).copy_(src);
  if (cols > c) dst.narrow(0, 0, r).narrow(1, c, cols - c).zero_();
  if (rows > r) dst.narrow(0, r, rows - r).zero_();
  return dst;
}

}  // namespace gpu
}  // namespace gemm_act

// See pad_copy.h.
#include "cuda/common/pad_copy.h"

#include <ATen/ops/empty.h>

#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "activations.h"
#include "checks.h"
#include "stored_activation.h"
#include "cuda/common/numeric.cuh"

namespace gemm_act {
namespace gpu {
namespace {

constexpr int kThreads = 256;

// The copies move the destination in 16-byte chunks aligned in memory,
// whatever the alignment of its rows: a row whose start is not 16-byte
// aligned has a short chunk first (its `head` elements, then the aligned
// ones) and perhaps a short one last. Short chunks are stored element by
// element, full ones whole (16-byte chunks split into elements, or one
// element a thread, were slower than ATen's copy). Chunk i of the grid
// is chunk i % chunks_per_row of row i / chunks_per_row; one resident wave
// of blocks strides over them.
struct ChunkAt {
  int64_t row;
  int64_t c0;  // its first column (negative for a head's missing elements)
  bool full;   // 16 bytes, all within the row
};

template <class E>
__device__ __forceinline__ ChunkAt locate(unsigned i, const E* dst, int64_t dst_ld, int64_t dst_cols,
                                          const at::cuda::detail::IntDivider<unsigned>& chunks_per_row) {
  constexpr int kVec = 16 / sizeof(E);
  const auto row_chunk = chunks_per_row.divmod(i);
  const int64_t r = row_chunk.div;
  // Elements before the row's first 16-byte boundary (the tensor's elements
  // are aligned to their size, so this is whole).
  const int head = static_cast<int>((16 - (reinterpret_cast<uintptr_t>(dst + r * dst_ld) & 15)) & 15) / sizeof(E);
  // Chunk 0 is the head, if any; the next ones start on 16-byte boundaries.
  const int64_t c0 = int64_t(row_chunk.mod) * kVec - (head ? kVec - head : 0);
  return {r, c0, c0 >= 0 && c0 + kVec <= dst_cols};
}

// The chunk's elements of source row `s` (zeros where `in_rows` is false
// or past `cols`).
template <class E>
__device__ __forceinline__ uint4 load_chunk(const E* s, const ChunkAt& at, bool in_rows, int64_t cols) {
  constexpr int kVec = 16 / sizeof(E);
  if (at.full && in_rows && at.c0 + kVec <= cols && (reinterpret_cast<uintptr_t>(s + at.c0) & 15) == 0) {
    return __ldg(reinterpret_cast<const uint4*>(s + at.c0));
  }
  uint4 chunk = make_uint4(0, 0, 0, 0);  // all-zero bits: a zero of every float type
  E* v = reinterpret_cast<E*>(&chunk);
  // A warp's element loads still cover whole sectors together, through L1
  // (read-only: nothing writes the source during the copy).
#pragma unroll
  for (int t = 0; t < kVec; ++t) {
    const int64_t c = at.c0 + t;
    if (in_rows && c >= 0 && c < cols) v[t] = __ldg(s + c);
  }
  return chunk;
}

// Stores the chunk into destination row `d`.
template <class E>
__device__ __forceinline__ void store_chunk(E* d, const ChunkAt& at, const uint4& chunk, int64_t dst_cols) {
  constexpr int kVec = 16 / sizeof(E);
  if (at.full) {
    // An explicit st.global.v4: the plain assignment compiled to four 4-byte stores.
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(d + at.c0), "r"(chunk.x), "r"(chunk.y),
                 "r"(chunk.z), "r"(chunk.w)
                 : "memory");
  } else {
    const E* v = reinterpret_cast<const E*>(&chunk);
#pragma unroll
    for (int t = 0; t < kVec; ++t) {
      const int64_t c = at.c0 + t;
      if (c >= 0 && c < dst_cols) d[c] = v[t];
    }
  }
}

// T is the element's bit pattern.
template <class T>
__global__ void __launch_bounds__(kThreads)
    pad_copy_kernel(const T* __restrict__ src, int64_t src_ld, int64_t rows, int64_t cols,
                    T* __restrict__ dst, int64_t dst_ld, int64_t dst_cols,
                    at::cuda::detail::IntDivider<unsigned> chunks_per_row, unsigned total) {
  for (unsigned i = blockIdx.x * kThreads + threadIdx.x; i < total; i += gridDim.x * kThreads) {
    const ChunkAt at = locate(i, dst, dst_ld, dst_cols, chunks_per_row);
    if (at.c0 >= dst_cols) continue;
    const uint4 chunk = load_chunk(src + at.row * src_ld, at, at.row < rows, cols);
    store_chunk(dst + at.row * dst_ld, at, chunk, dst_cols);
  }
}

// z = src and y = act(src) over z's [rows, cols]; y's rows are aligned as
// z's are (activate_copy checks), so one chunk walk serves both.
template <class Element, Activation kAct>
__global__ void __launch_bounds__(kThreads)
    activate_copy_kernel(const Element* __restrict__ src, int64_t src_ld, Element* __restrict__ z,
                         Element* __restrict__ y, int64_t cols, float slope,
                         at::cuda::detail::IntDivider<unsigned> chunks_per_row, unsigned total) {
  using Num = Numeric<Element>;
  constexpr int kVec = 16 / sizeof(Element);
  for (unsigned i = blockIdx.x * kThreads + threadIdx.x; i < total; i += gridDim.x * kThreads) {
    const ChunkAt at = locate(i, z, cols, cols, chunks_per_row);
    if (at.c0 >= cols) continue;
    uint4 chunk = load_chunk(src + at.row * src_ld, at, true, cols);
    store_chunk(z + at.row * cols, at, chunk, cols);
    Element* v = reinterpret_cast<Element*>(&chunk);
#pragma unroll
    for (int t = 0; t < kVec; ++t) {
      v[t] = Num::from_compute(activate_stored<kAct, Element>(Num::to_compute(v[t]), slope));
    }
    store_chunk(y + at.row * cols, at, chunk, cols);
  }
}

// The grid for `total` chunks: one resident wave at most.
unsigned grid_blocks(int64_t total) {
  // Attributes, not at::cuda::getCurrentDeviceProperties(): that header
  // needs the cuSPARSE and cuBLAS headers, which a CUDA toolkit may lack.
  int device = 0, sms = 0, threads_per_sm = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
  const int64_t resident = int64_t(sms) * (threads_per_sm / kThreads);
  return static_cast<unsigned>(std::min((total + kThreads - 1) / kThreads, resident));
}

// Chunks per destination row of `cols` elements of `bytes` each: enough
// for any alignment of a row, a head and a tail besides the full ones.
int64_t chunks_per_row(int64_t cols, int64_t bytes) { return cols / (16 / bytes) + 2; }

// Launches the copy; false (nothing launched) if its chunks do not fit the
// kernel's 32-bit indices (a destination of 32 GiB).
template <class T>
bool launch(const at::Tensor& src, const at::Tensor& dst) {
  const int64_t per_row = chunks_per_row(dst.size(1), sizeof(T));
  const int64_t total = dst.size(0) * per_row;
  if (total > std::numeric_limits<int32_t>::max()) return false;  // i + stride stays below 2^32
  pad_copy_kernel<T><<<grid_blocks(total), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const T*>(src.data_ptr()), src.stride(0), src.size(0), src.size(1),
      static_cast<T*>(dst.data_ptr()), dst.stride(0), dst.size(1),
      at::cuda::detail::IntDivider<unsigned>(static_cast<unsigned>(per_row)),
      static_cast<unsigned>(total));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

template <class Element>
void launch_activate_copy(const at::Tensor& src, const at::Tensor& z, const at::Tensor& y,
                          Activation act, double negative_slope) {
  const int64_t per_row = chunks_per_row(z.size(1), sizeof(Element));
  const int64_t total = z.size(0) * per_row;
  GEMM_ACT_DISPATCH_ACTIVATION(act, {
    activate_copy_kernel<Element, kAct><<<grid_blocks(total), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        static_cast<const Element*>(src.data_ptr()), src.stride(0), static_cast<Element*>(z.data_ptr()),
        static_cast<Element*>(y.data_ptr()), z.size(1), static_cast<float>(negative_slope),
        at::cuda::detail::IntDivider<unsigned>(static_cast<unsigned>(per_row)), static_cast<unsigned>(total));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
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

bool activate_copy_applies(const at::Tensor& src, const at::Tensor& z, const at::Tensor& y) {
  const auto dtype = z.scalar_type();
  const bool supported = dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat;
  if (!supported || src.dim() != 2 || z.dim() != 2 || !src.is_cuda() || src.scalar_type() != dtype ||
      y.scalar_type() != dtype || src.device() != z.device() || y.device() != z.device() ||
      z.sizes() != y.sizes() || !z.is_contiguous() || !y.is_contiguous() || src.stride(1) != 1 ||
      src.size(0) < z.size(0) || src.size(1) < z.size(1) || z.numel() == 0) {
    return false;
  }
  const auto address = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); };
  return (address(z) - address(y)) % 16 == 0 &&
         z.size(0) * chunks_per_row(z.size(1), z.element_size()) <= std::numeric_limits<int32_t>::max();
}

void activate_copy(const at::Tensor& src, const at::Tensor& z, const at::Tensor& y, Activation act,
                   double negative_slope) {
  TORCH_CHECK(activate_copy_applies(src, z, y), "gemm_act: activate_copy called on a case it does not take");
  switch (z.scalar_type()) {
    case at::kHalf: launch_activate_copy<__half>(src, z, y, act, negative_slope); break;
    case at::kBFloat16: launch_activate_copy<__nv_bfloat16>(src, z, y, act, negative_slope); break;
    default: launch_activate_copy<float>(src, z, y, act, negative_slope); break;
  }
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

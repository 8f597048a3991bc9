// Dropout's pass on CUDA (dropout.h): one thread per group of four elements,
// one Philox draw each; one aligned 4-element access per tensor where every
// pointer allows it. And the keep bits the sm90 epilogue reads.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/cuda_backends.h"
#include "dropout.h"

namespace gemm_act {
namespace {

constexpr int kThreads = 256;

template <class Element, bool kWide>
__global__ void dropout_kernel(DropoutParams p) {
  using Num = gpu::Numeric<Element>;
  using Acc = typename Num::Compute;
  using Group = gpu::AlignedArray<Element, 4>;
  const auto* z = static_cast<const Element*>(p.z);
  const auto* residual = static_cast<const Element*>(p.residual);
  auto* out = static_cast<Element*>(p.out);
  const uint64_t seed = static_cast<uint64_t>(*p.seed);
  const Acc scale = static_cast<Acc>(p.keep.scale);
  const int64_t groups = (p.numel + 3) / 4;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * blockDim.x) {
    uint32_t draws[4];
    dropout_draws(seed, static_cast<uint64_t>(g), draws);
    const int64_t first = 4 * g;
    if constexpr (kWide) {  // numel is a multiple of 4
      const Group zg = *reinterpret_cast<const Group*>(z + first);
      Group rg, og;
      if (residual != nullptr) rg = *reinterpret_cast<const Group*>(residual + first);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        Acc v = dropout_factor(draws[e], p.keep.threshold, scale) * Num::to_compute(zg.v[e]);
        if (residual != nullptr) v += Num::to_compute(rg.v[e]);
        og.v[e] = Num::from_compute(v);
      }
      *reinterpret_cast<Group*>(out + first) = og;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = first + e;
        if (i >= p.numel) break;
        Acc v = dropout_factor(draws[e], p.keep.threshold, scale) * Num::to_compute(z[i]);
        if (residual != nullptr) v += Num::to_compute(residual[i]);
        out[i] = Num::from_compute(v);
      }
    }
  }
}

// One thread per 32-bit word of keep bits (dropout_keep_word); the bits of
// elements past numel are whatever the draws say, and never read.
__global__ void keep_bits_kernel(const int64_t* seed_ptr, uint64_t threshold, int64_t words, uint32_t* out) {
  const uint64_t seed = static_cast<uint64_t>(*seed_ptr);
  for (int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; w < words; w += int64_t{gridDim.x} * blockDim.x) {
    out[w] = dropout_keep_word(seed, static_cast<uint64_t>(w), threshold);
  }
}

template <class Element>
void launch(const DropoutParams& p, cudaStream_t stream, int sm_count) {
  const auto aligned = [](const void* ptr) {
    return reinterpret_cast<uintptr_t>(ptr) % (4 * sizeof(Element)) == 0;
  };
  const bool wide = p.numel % 4 == 0 && aligned(p.z) && aligned(p.out) &&
                    (p.residual == nullptr || aligned(p.residual));
  const int64_t groups = (p.numel + 3) / 4;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, int64_t{sm_count} * 16);
  if (wide) {
    dropout_kernel<Element, true><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    dropout_kernel<Element, false><<<blocks, kThreads, 0, stream>>>(p);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void dropout_keep_bits_cuda(const int64_t* seed, uint64_t threshold, int64_t numel, uint32_t* words,
                            cudaStream_t stream) {
  const int64_t count = (numel + 31) / 32;
  if (count == 0) return;
  keep_bits_kernel<<<(count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(seed, threshold, count, words);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void dropout_cuda(const DropoutParams& p, at::ScalarType dtype) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  int device = 0, sm_count = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  switch (dtype) {
    case at::kFloat: launch<float>(p, stream, sm_count); break;
    case at::kDouble: launch<double>(p, stream, sm_count); break;
    case at::kHalf: launch<__half>(p, stream, sm_count); break;
    case at::kBFloat16: launch<__nv_bfloat16>(p, stream, sm_count); break;
    default: TORCH_CHECK(false, "dropout: no CUDA kernel for dtype ", dtype);
  }
}

}  // namespace gemm_act

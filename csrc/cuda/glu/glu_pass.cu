// The gated activation's passes on CUDA (glu.h): one thread per group of
// columns of a row, 16-byte accesses where N allows them.
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/cuda_backends.h"
#include "glu.h"

namespace gemm_act {
namespace {

constexpr int kThreads = 256;

// Elements per 16-byte access.
template <class T>
constexpr int kWideGroup = 16 / sizeof(T);

// Each thread: kWidth consecutive columns j of one row (kWidth = 1 where N
// is not a multiple of the 16-byte width).
template <class Element, Activation kAct, bool kBackward, int kWidth>
__global__ void glu_kernel(GluParams p) {
  using Num = gpu::Numeric<Element>;
  using Acc = typename Num::Compute;
  using Group = gpu::AlignedArray<Element, kWidth>;
  const Acc slope = static_cast<Acc>(p.negative_slope);
  const int64_t groups_per_row = p.n / kWidth;
  const int64_t total = p.m * groups_per_row;
  const auto* h = static_cast<const Element*>(p.h);
  const auto* grad_y = static_cast<const Element*>(p.grad_y);
  auto* out = static_cast<Element*>(p.out);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / groups_per_row, j = (i % groups_per_row) * kWidth;
    const Element* g_at = h + row * 2 * p.n + j;
    const Group g = *reinterpret_cast<const Group*>(g_at);
    const Group u = *reinterpret_cast<const Group*>(g_at + p.n);
    Group r0, r1, gy;
    if constexpr (kBackward) gy = *reinterpret_cast<const Group*>(grad_y + row * p.n + j);
#pragma unroll
    for (int e = 0; e < kWidth; ++e) {
      const Acc ge = Num::to_compute(g.v[e]), ue = Num::to_compute(u.v[e]);
      if constexpr (kBackward) {
        Acc dg, du;
        glu_backward<kAct, Element>(ge, ue, Num::to_compute(gy.v[e]), slope, dg, du);
        r0.v[e] = Num::from_compute(dg);
        r1.v[e] = Num::from_compute(du);
      } else {
        r0.v[e] = Num::from_compute(glu_forward<kAct, Element>(ge, ue, slope));
      }
    }
    if constexpr (kBackward) {
      *reinterpret_cast<Group*>(out + row * 2 * p.n + j) = r0;
      *reinterpret_cast<Group*>(out + row * 2 * p.n + p.n + j) = r1;
    } else {
      *reinterpret_cast<Group*>(out + row * p.n + j) = r0;
    }
  }
}

template <class Element, bool kBackward>
void launch(const GluParams& p, cudaStream_t stream, int sm_count) {
  constexpr int kWide = kWideGroup<Element>;
  // Every row then starts on a 16-byte boundary, if each tensor does.
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool wide = p.n % kWide == 0 && aligned(p.h) && aligned(p.out) &&
                    (p.grad_y == nullptr || aligned(p.grad_y));
  const int64_t width = wide ? kWide : 1;
  const int64_t total = p.m * (p.n / width);
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{sm_count} * 16);
  GEMM_ACT_DISPATCH_ACTIVATION(p.activation, {
    if (wide) {
      glu_kernel<Element, kAct, kBackward, kWide><<<blocks, kThreads, 0, stream>>>(p);
    } else {
      glu_kernel<Element, kAct, kBackward, 1><<<blocks, kThreads, 0, stream>>>(p);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <bool kBackward>
void glu_cuda(const GluParams& p, at::ScalarType dtype) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  int device = 0, sm_count = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  switch (dtype) {
    case at::kFloat: launch<float, kBackward>(p, stream, sm_count); break;
    case at::kDouble: launch<double, kBackward>(p, stream, sm_count); break;
    case at::kHalf: launch<__half, kBackward>(p, stream, sm_count); break;
    case at::kBFloat16: launch<__nv_bfloat16, kBackward>(p, stream, sm_count); break;
    default: TORCH_CHECK(false, "glu: no CUDA kernel for dtype ", dtype);
  }
}

}  // namespace

void glu_forward_cuda(const GluParams& p, at::ScalarType dtype) { glu_cuda<false>(p, dtype); }
void glu_backward_cuda(const GluParams& p, at::ScalarType dtype) { glu_cuda<true>(p, dtype); }

}  // namespace gemm_act

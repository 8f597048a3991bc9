// The language-model loss's chunk passes on CUDA (ce_chunk.h): a warp per
// row, 16-byte accesses where the chunk's width and row stride allow them,
// several in flight per lane; one read of the chunk forward, one read and
// one write backward.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "ce_chunk.h"
#include "cuda/common/numeric.cuh"
#include "cuda/cuda_backends.h"

namespace gemm_act {
namespace {

constexpr int kWarps = 8;  // rows per block

// Groups each lane loads before it computes on them: several in the forward
// (a row is a few groups per lane: one load at a time leaves it waiting on
// memory), one in the backward, which writes each group back where it read
// it (measured slower with several: docs/MEASUREMENTS.md, session 63).
template <bool kBackward>
constexpr int kInFlight = kBackward ? 1 : 4;

// Each lane: kWidth consecutive columns at a time of its warp's row, up to
// kInFlight<kBackward> such groups loaded at once. Four blocks per SM at
// least: the forward's groups in flight then fit in 64 registers (ptxas -v).
template <class Element, int kWidth, bool kBackward>
__global__ void __launch_bounds__(kWarps * 32, 4) ce_chunk_kernel(CeChunkParams p) {
  constexpr int kGroups = kInFlight<kBackward>;
  using Num = gpu::Numeric<Element>;
  using Acc = typename Num::Compute;
  using Group = gpu::AlignedArray<Element, kWidth>;
  constexpr int kStride = 32 * kWidth;  // columns between a lane's groups
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (row >= p.rows) return;
  Element* z = static_cast<Element*>(p.z) + row * p.ld;
  const Acc softcap = static_cast<Acc>(p.softcap);
  const int64_t tt = p.target[row] - p.v0;
  const int width = static_cast<int>(p.width);
  const int t = tt >= 0 && tt < width ? static_cast<int>(tt) : -1;  // the target's column here, or -1
  auto* lse = static_cast<Acc*>(p.lse);
  Acc m = ce::minus_inf<Acc>(), s = Acc(0), sum = Acc(0);
  Acc row_lse = Acc(0), scale = Acc(0), smoothing = Acc(0), inv_vocab = Acc(0);
  if constexpr (kBackward) {
    row_lse = lse[row];
    scale = static_cast<const Acc*>(p.scale)[row];
    smoothing = static_cast<Acc>(p.label_smoothing);
    inv_vocab = Acc(1) / static_cast<Acc>(p.vocab);
  }
  for (int j0 = lane * kWidth; j0 < width; j0 += kStride * kGroups) {
    Group g[kGroups];
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      if (j0 + u * kStride < width) g[u] = *reinterpret_cast<const Group*>(z + j0 + u * kStride);
    }
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      const int j = j0 + u * kStride;
      if (j >= width) break;
      if constexpr (kBackward) {
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          const Acc l = ce::logit(Num::to_compute(g[u].v[e]), softcap);
          g[u].v[e] = Num::from_compute(ce::grad(l, row_lse, scale, j + e == t, smoothing, inv_vocab, softcap));
        }
        *reinterpret_cast<Group*>(z + j) = g[u];
      } else {
        Acc l[kWidth];
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
          l[e] = ce::logit(Num::to_compute(g[u].v[e]), softcap);
          sum += l[e];
        }
        if (t >= j && t < j + kWidth) {  // the target's group
#pragma unroll
          for (int e = 0; e < kWidth; ++e) {
            if (j + e == t) static_cast<Acc*>(p.target_logit)[row] = l[e];
          }
        }
        ce::add(m, s, l);
      }
    }
  }
  if constexpr (!kBackward) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const Acc m2 = __shfl_xor_sync(0xffffffffu, m, offset);
      const Acc s2 = __shfl_xor_sync(0xffffffffu, s, offset);
      ce::merge(m, s, m2, s2);
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0) {
      lse[row] = ce::logaddexp(lse[row], m + ce::log_(s));
      if (p.logit_sum != nullptr) static_cast<Acc*>(p.logit_sum)[row] += sum;
    }
  }
}

template <class Element, bool kBackward>
void launch(const CeChunkParams& p) {
  constexpr int kWide = 16 / sizeof(Element);
  const bool wide = p.width % kWide == 0 && p.ld % kWide == 0 &&
                    reinterpret_cast<uintptr_t>(p.z) % 16 == 0;
  const int64_t blocks = (p.rows + kWarps - 1) / kWarps;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (wide) {
    ce_chunk_kernel<Element, kWide, kBackward><<<blocks, kWarps * 32, 0, stream>>>(p);
  } else {
    ce_chunk_kernel<Element, 1, kBackward><<<blocks, kWarps * 32, 0, stream>>>(p);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <bool kBackward>
void ce_chunk_cuda(const CeChunkParams& p, at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: launch<float, kBackward>(p); break;
    case at::kDouble: launch<double, kBackward>(p); break;
    case at::kHalf: launch<__half, kBackward>(p); break;
    case at::kBFloat16: launch<__nv_bfloat16, kBackward>(p); break;
    default: TORCH_CHECK(false, "ce_chunk: no CUDA kernel for dtype ", dtype);
  }
}

}  // namespace

void ce_chunk_forward_cuda(const CeChunkParams& p, at::ScalarType dtype) { ce_chunk_cuda<false>(p, dtype); }
void ce_chunk_backward_cuda(const CeChunkParams& p, at::ScalarType dtype) { ce_chunk_cuda<true>(p, dtype); }

}  // namespace gemm_act

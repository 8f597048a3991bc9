// activation_backward_cuda: the CUDA backward elementwise pass's entry point.
// Sets the device and stream, opens an NVTX range, plans the tiling (see
// BackwardPlan in activation_backward.h), allocates the workspace for
// cross-block partial sums (only when blocks share sums; their counters are
// the stream's own, which the kernel leaves at zero) and launches the one
// kernel.
//
// The plan depends only on the shape, dtype, bias kind, pointer alignment and
// the device (SM count, occupancy), so a given call on a given GPU always
// sums in the same order: the results are bitwise identical run to run.
//
// This file has no device code, so its device passes skip it entirely: ATen's
// headers cost nvcc's device front end (cicc) ~8 s per arch otherwise.
#if !defined(__CUDA_ARCH__)

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "activations.h"
#include "backend_args.h"
#include "cuda/cuda_backends.h"
#include "cuda/common/nvtx_range.h"
#include "cuda/backward/activation_backward.h"
#include "gemm_act.h"

namespace gemm_act {
namespace {

// At least `count` int counters at zero for launches on the current stream:
// each stream's own, grown on demand (zeroed on the stream when allocated),
// and left at zero by every kernel that uses them (a counter's last block
// resets it), so that no launch needs a memset. Per stream: launches on one
// stream run in order, while two streams' could overlap. The map is never
// destroyed: freeing CUDA memory during process exit can outlive the context.
int* stream_counters(int64_t count, const at::Tensor& like) {
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<c10::DeviceIndex, cudaStream_t>, at::Tensor>();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& buffer = (*buffers)[{like.device().index(), stream}];
  if (!buffer.defined() || buffer.numel() < count) {
    // The old buffer returns to the caching allocator, which gives it to
    // later work on this stream only.
    buffer = at::zeros({std::max<int64_t>(count, 1024)}, like.options().dtype(at::kInt));
  }
  return buffer.mutable_data_ptr<int>();
}

using gpu::backward::BackwardPlan;
using gpu::backward::ChunkShape;
using gpu::backward::kThreads;

const char* bias_name(BiasKind kind) {
  switch (kind) {
    case BiasKind::None: return "no bias";
    case BiasKind::Scalar: return "scalar bias";
    case BiasKind::PerColumn: return "bias per column";
    case BiasKind::PerRow: return "bias per row";
  }
  return "?";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(v, hi)); }

// Threads per row (log2): enough for the row's chunks up to a warp, more
// (up to the whole block) while the block would otherwise have more rows of
// threads than the problem has rows.
int pick_tc_log2(int64_t chunks, int64_t rows) {
  int want = 0;  // log2 of the chunks, rounded up, at most the block
  while (want < 8 && (int64_t{1} << want) < chunks) ++want;
  int tc_log2 = std::min(want, 5);
  while (tc_log2 < want && (kThreads >> tc_log2) > rows) ++tc_log2;
  return tc_log2;
}

template <class Element>
void run(const ActivationBackwardArgs& args, cudaStream_t stream) {
  using Acc = gpu::backward::BiasSum<Element>;
  const ActivationBackwardParams& p = args.params;
  const int64_t m = p.m, n = p.n;

  BackwardPlan plan;
  plan.grad_z = p.grad_z;
  plan.grad_bias = p.grad_bias;
  plan.grad_y = p.grad_y;
  plan.saved = p.saved;
  plan.negative_slope = p.negative_slope;
  plan.activation = p.activation;
  plan.bias_kind = p.bias_kind;
  TORCH_INTERNAL_ASSERT((p.bias_kind == BiasKind::None) == (p.grad_bias == nullptr));

  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  const bool aligned = aligned16(p.grad_z) && aligned16(p.grad_y) && aligned16(p.saved);
  constexpr int64_t kVecWidth = ChunkShape<Element, true>::kWidth;

  // `target`: the blocks the GPU holds at once. Where blocks share sums the
  // grids below stay within one wave of it, so that the cross-block sums stay
  // few (kMaxColumnPartials bounds them further) and no late wave waits.
  int device = 0, sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  int64_t grid = 0;
  int64_t partial_count = 0;  // Acc entries of workspace
  int64_t counter_count = 0;
  if (p.bias_kind == BiasKind::PerColumn) {
    // Column-parallel: a block owns tc chunks of columns and a range of rows.
    plan.rows = m;
    plan.cols = n;
    plan.vec = aligned && n % kVecWidth == 0;
    const int64_t width = plan.vec ? kVecWidth : 1;
    const int64_t unroll = plan.vec ? ChunkShape<Element, true>::kUnroll : ChunkShape<Element, false>::kUnroll;
    plan.chunks = n / width;  // exact: n % width == 0
    const int64_t target =
        int64_t{sms} * gpu::backward::activation_backward_blocks_per_sm<Element>(p.activation, p.bias_kind, plan.vec);
    // Row tiles: enough for a wave of `target` blocks, each with rows to do.
    const auto row_tiles = [&](int tc_log2) {
      const int64_t tiles_n = ceil_div(plan.chunks, int64_t{1} << tc_log2);
      const int64_t row_batches = ceil_div(m, (kThreads >> tc_log2) * unroll);
      return clamp64(target / tiles_n, 1, std::min(gpu::backward::kMaxColumnPartials, row_batches));
    };
    // Column tiles narrowed while they would have more than kPartialGroup
    // row tiles each: then the partials take one level of the last-block
    // handshake, not two, and the last block has kThreads / (tc * width)
    // threads a column to add them with. Never below 64 bytes of a row (two
    // full 32-byte sectors a row read). 8192 x 768 bf16 (a GPT-2 MLP's
    // second bias) had 176 row tiles on 3 column tiles, two levels.
    plan.tc_log2 = pick_tc_log2(plan.chunks, m);
    int min_tc_log2 = 0;
    while ((width * int64_t{sizeof(Element)} << min_tc_log2) < 64) ++min_tc_log2;
    while (plan.tc_log2 > min_tc_log2 && row_tiles(plan.tc_log2) > gpu::backward::kPartialGroup) --plan.tc_log2;
    plan.tiles_n = ceil_div(plan.chunks, int64_t{1} << plan.tc_log2);
    const int64_t tiles_m = row_tiles(plan.tc_log2);
    plan.tiles_m = tiles_m;
    grid = plan.tiles_m * plan.tiles_n;
    if (plan.tiles_m > 1) {
      const int64_t groups = ceil_div(plan.tiles_m, gpu::backward::kPartialGroup);
      partial_count = (plan.tiles_m + (groups > 1 ? groups : 0)) * n;
      counter_count = plan.tiles_n * (groups + (groups > 1 ? 1 : 0));
    }
  } else {
    // Row-parallel: a block owns kThreads / tc rows and a range of chunks.
    // No bias or a scalar one: the tensor is one flat row.
    const bool flat = p.bias_kind != BiasKind::PerRow;
    plan.rows = flat ? 1 : m;
    plan.cols = flat ? m * n : n;
    plan.vec = aligned && (flat || n % kVecWidth == 0);
    const int64_t width = plan.vec ? kVecWidth : 1;
    const int64_t unroll = plan.vec ? ChunkShape<Element, true>::kUnroll : ChunkShape<Element, false>::kUnroll;
    plan.chunks = ceil_div(plan.cols, width);
    plan.tc_log2 = pick_tc_log2(plan.chunks, plan.rows);
    const int64_t tc = int64_t{1} << plan.tc_log2;
    const int64_t rp = kThreads / tc;
    plan.tiles_m = ceil_div(plan.rows, rp);  // row groups
    const int64_t target =
        int64_t{sms} * gpu::backward::activation_backward_blocks_per_sm<Element>(p.activation, p.bias_kind, plan.vec);
    const int64_t chunk_step = tc * unroll;
    const int64_t chunk_batches = ceil_div(plan.chunks, chunk_step);
    // Split rows across blocks only while the row groups alone leave the GPU
    // short: then there are at most `target` partials, and each of the last
    // block's threads adds at most target / tc of them.
    const int64_t max_splits = chunk_batches;
    plan.tiles_n = clamp64(target / plan.tiles_m, 1, max_splits);
    grid = plan.tiles_m * plan.tiles_n;
    if (plan.tiles_n > 1 && p.bias_kind != BiasKind::None) {
      partial_count = plan.tiles_n * plan.rows;
      counter_count = plan.tiles_m;
    }
  }
  TORCH_CHECK(grid >= 1 && grid <= INT32_MAX, "gemm_act backward: ", m, " x ", n, " needs ", grid,
              " thread blocks, more than a launch allows");

  // Workspace: the partials, and the counters. Outside graph capture the
  // counters are the stream's own zeroed ones (the kernel leaves them at
  // zero); under capture, a workspace's, zeroed here on the stream. The
  // caching allocator keeps the workspace for this stream's work until the
  // kernel ends.
  at::Tensor workspace;
  if (partial_count > 0) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool own_counters = capture != cudaStreamCaptureStatusNone;
    constexpr int64_t kAlign = 256;
    const int64_t counter_bytes =
        own_counters ? ceil_div(counter_count * int64_t{sizeof(int)}, kAlign) * kAlign : 0;
    const int64_t bytes = counter_bytes + partial_count * int64_t{sizeof(Acc)};
    workspace = at::empty({bytes}, args.grad_y.options().dtype(at::kByte));
    auto* base = static_cast<char*>(workspace.mutable_data_ptr());
    plan.partials = base + counter_bytes;
    if (own_counters) {
      plan.counters = reinterpret_cast<int*>(base);
      C10_CUDA_CHECK(cudaMemsetAsync(plan.counters, 0, counter_count * sizeof(int), stream));
    } else {
      plan.counters = stream_counters(counter_count, args.grad_y);
    }
  }

  gpu::backward::launch_activation_backward<Element>(plan, grid, stream);
}

}  // namespace

void activation_backward_cuda(const ActivationBackwardArgs& args) {
  const ActivationBackwardParams& p = args.params;
  const c10::cuda::CUDAGuard device_guard(args.grad_y.device());
  const at::ScalarType dtype = args.grad_y.scalar_type();

  char label[192];
  std::snprintf(label, sizeof(label), "gemm_act.backward M=%" PRId64 "xN=%" PRId64 " %s %s %s", p.m, p.n,
                c10::toString(dtype), activation_name(p.activation), bias_name(p.bias_kind));
  const NvtxRange range(label);

  if (p.m == 0 || p.n == 0) {
    // No dZ to write; an empty sum is zero (a per-row bias of M rows with
    // N == 0, a per-column one of N columns with M == 0, a scalar one).
    if (args.grad_bias.defined() && args.grad_bias.numel() > 0) args.grad_bias.zero_();
    return;
  }

  // c10::cuda::getCurrentCUDAStream is at::cuda::getCurrentCUDAStream, without
  // ATen/cuda/CUDAContext.h (which needs the cuSPARSE/cuBLAS headers).
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  switch (dtype) {
    case at::kFloat: run<float>(args, stream); break;
    case at::kDouble: run<double>(args, stream); break;
    case at::kHalf: run<__half>(args, stream); break;
    case at::kBFloat16: run<__nv_bfloat16>(args, stream); break;
    default: TORCH_CHECK(false, "gemm_act backward: no CUDA kernel for dtype ", dtype);
  }
}

}  // namespace gemm_act

#endif  // !defined(__CUDA_ARCH__)

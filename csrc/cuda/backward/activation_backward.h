// The backward elementwise pass on the GPU: dZ = gY * act'(saved) and the
// bias gradient reduced in the same launch, deterministically.
//
// activation_backward.cpp (the entry point, activation_backward_cuda) plans the
// launch: how the [M, N] problem is cut into thread-block tiles, whether the
// 16-byte vector path applies, and the workspace for cross-block partial sums.
// The per-dtype files (activation_backward_{f32,f64,f16,bf16}.cu) compile the
// kernels of activation_backward_kernel.cuh and launch them from a plan.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace backward {

constexpr int kThreads = 256;  // threads per block, every kernel here
constexpr int kWarps = kThreads / 32;

// PerColumn: the partials of a column tile are added in groups of
// kPartialGroup row tiles, then the groups' sums (see the kernel), so no
// block reads more than kPartialGroup rows of partials; at most
// kMaxColumnPartials row tiles, so two levels do.
constexpr int64_t kPartialGroup = 32;
constexpr int64_t kMaxColumnPartials = kPartialGroup * kPartialGroup;

// How many elements a thread moves per access (a "chunk": 16 bytes on the
// vector path, one element otherwise) and how many chunks it has in flight
// per loop iteration: 2 on the vector path (near a plain elementwise op's
// bandwidth; more needs registers the 64-register budget does not have), 4
// on the scalar path (odd widths and misaligned tensors; 8 was no faster
// and spilled).
template <class Element, bool kVec>
struct ChunkShape {
  static constexpr int kWidth = kVec ? static_cast<int>(16 / sizeof(Element)) : 1;
  static constexpr int kUnroll = kVec ? 2 : 4;
};

// What bias gradients are summed in: double for fp32 as for fp64 (PyTorch
// sums fp32 in float, but in an order whose error grows more slowly than a
// thread's running sum over its rows; in double the sum stays at PyTorch's
// accuracy or better whatever the order), float for fp16/bf16, as PyTorch.
template <class Element>
using BiasSum = std::conditional_t<(sizeof(Element) >= 4), double, float>;

// Everything a kernel needs: pointers and the tiling (all sizes in elements).
//
// The kernels see the problem as `rows` x `cols` row-major. That is M x N,
// except for BiasKind::None and Scalar, where the column structure does not
// matter and the tensor is one flat row (rows = 1, cols = M * N).
//
// A thread handles `width` consecutive columns at a time (a "chunk": 16 bytes
// on the vector path, 1 element otherwise). A block's 256 threads form
// (kThreads / tc) rows of `tc` threads; tc is a power of two.
//
// PerColumn (column-parallel kernel): block b works on column tile
//   b % tiles_n (tc chunks wide) and row tile t = b / tiles_n: rows
//   t * rp + ty + k * tiles_m * rp (rp = kThreads / tc; row tiles interleave,
//   so the grid sweeps down the matrix together); it sums its rows per
//   column. With tiles_m > 1 each block leaves partials [tiles_m][cols],
//   added up in two levels: groups of kPartialGroup row tiles, then the
//   groups (level-2 partials [ceil(tiles_m / kPartialGroup)][cols] after the
//   first). Counters: [tiles_n][groups] for the first level, then [tiles_n]
//   for the second.
// PerRow, Scalar, None (row-parallel kernel): block b works on row group
//   b / tiles_n (kThreads / tc rows) and split s = b % tiles_n: chunks
//   s * tc + tx + k * tiles_n * tc of each row (splits interleave too); it
//   sums each row over its chunks. With tiles_n > 1 each row group's blocks
//   leave partials [tiles_n][rows] and the last of them to finish adds them
//   up. Counters: [tiles_m].
struct BackwardPlan {
  void* grad_z = nullptr;  // null: only the bias gradient (the bias_grad operator)
  void* grad_bias = nullptr;  // null for BiasKind::None
  const void* grad_y = nullptr;
  const void* saved = nullptr;
  void* partials = nullptr;  // compute-type workspace; null when no block shares a sum
  int* counters = nullptr;   // zeroed before the launch; null when partials is
  int64_t rows = 0, cols = 0;
  int64_t chunks = 0;         // chunks per row: ceil(cols / width)
  int64_t tiles_m = 1, tiles_n = 1;
  int tc_log2 = 5;              // log2 of threads per row
  bool vec = false;             // 16-byte loads and stores (width = 16 / sizeof(T))
  double negative_slope = 0.01;
  Activation activation = Activation::None;
  BiasKind bias_kind = BiasKind::None;
};

// The kernel `plan` selects is launched with `grid` blocks on `stream`. The
// plan's pointers must be set; see activation_backward.cpp for the tiling.
template <class Element>
void launch_activation_backward(const BackwardPlan& plan, int64_t grid, cudaStream_t stream);

// How many blocks of the kernel for (activation, bias kind, vec) fit on one
// SM of the current device (at least 1). Cached per device.
template <class Element>
int activation_backward_blocks_per_sm(Activation activation, BiasKind bias_kind, bool vec);

}  // namespace backward
}  // namespace gpu
}  // namespace gemm_act

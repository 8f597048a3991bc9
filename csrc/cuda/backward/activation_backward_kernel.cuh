// The backward elementwise kernels: dZ = gY * act'(saved), with the bias
// gradient summed in the same pass. Included only by the per-dtype .cu files.
//
// Determinism: every sum is taken in an order fixed by the plan (the tiling),
// never by timing. A thread adds its own elements in loop order; a block
// combines its threads through a fixed shuffle tree and shared memory in
// index order; and where several blocks share a sum, each writes its partial
// to its own workspace slot and the last block to arrive (an integer atomic
// on a counter, the only atomic here) adds all the partials in slot order.
// Which block is last changes from run to run; what it computes does not.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "activations.h"
#include "cuda/backward/activation_backward.h"
#include "cuda/common/numeric.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace backward {

constexpr unsigned kFullMask = 0xffffffffu;

// Blocks of kThreads per SM the kernels are compiled for: 4 (64 registers a
// thread) keeps enough loads in flight for HBM; float64, whose erf and exp
// need more registers and whose speed matters less, gets 2 (128 registers).
template <class Element>
constexpr int min_blocks_per_sm() {
  return sizeof(Element) == 8 ? 2 : 4;
}

// kWidth consecutive elements at p: one 16-byte access when kWidth > 1 (p is
// then 16-byte aligned), a plain one otherwise. kReadOnly: through the
// non-coherent path, for what nothing writes during the kernel (saved; not
// grad_y, which dZ overwrites where the pass runs in place).
template <class Element, int kWidth, bool kReadOnly>
__device__ __forceinline__ void load_chunk(const Element* p, Element (&v)[kWidth]) {
  if constexpr (kWidth == 1) {
    v[0] = kReadOnly ? Numeric<Element>::load(p) : *p;
  } else {
    static_assert(kWidth * sizeof(Element) == 16, "a vector chunk is 16 bytes");
    const auto* vp = reinterpret_cast<const uint4*>(p);
    const uint4 bits = kReadOnly ? __ldg(vp) : *vp;
    AlignedArray<Element, kWidth> a;
    std::memcpy(&a, &bits, sizeof(bits));
#pragma unroll
    for (int j = 0; j < kWidth; ++j) v[j] = a.v[j];
  }
}

template <class Element, int kWidth>
__device__ __forceinline__ void store_chunk(Element* p, const Element (&v)[kWidth]) {
  if constexpr (kWidth == 1) {
    p[0] = v[0];
  } else {
    AlignedArray<Element, kWidth> a;
#pragma unroll
    for (int j = 0; j < kWidth; ++j) a.v[j] = v[j];
    uint4 bits;
    std::memcpy(&bits, &a, sizeof(bits));
    // An explicit st.global.v4: a plain assignment was at times split into
    // four 4-byte stores.
    __stwb(reinterpret_cast<uint4*>(p), bits);
  }
}

// Where a thread sits in the plan's launch: its block's threads are rp rows
// of tc (tid = ty * tc + tx, tc = 1 << tc_log2), and the block is tile
// (tile_m, tile_n) of a tiles_m x tiles_n grid, tile_n varying fastest.
struct ThreadPlace {
  int tid, tc, rp, tx, ty;
  int64_t tile_m, tile_n;
  __device__ __forceinline__ explicit ThreadPlace(const BackwardPlan& p) {
    tid = static_cast<int>(threadIdx.x);
    tc = 1 << p.tc_log2;
    rp = kThreads >> p.tc_log2;
    tx = tid & (tc - 1);
    ty = tid >> p.tc_log2;
    // grid = tiles_m * tiles_n <= INT32_MAX, so 32-bit division will do.
    const unsigned tiles_n = static_cast<unsigned>(p.tiles_n);
    tile_n = blockIdx.x % tiles_n;
    tile_m = blockIdx.x / tiles_n;
  }
};

// dZ for one element, in the compute type; the derivative is Act<kAct>'s
// at dZ's precision.
template <class Element, Activation kAct>
__device__ __forceinline__ typename Numeric<Element>::Compute dz_of(
    Element grad_y, Element saved, typename Numeric<Element>::Compute slope) {
  using Num = Numeric<Element>;
  return Num::to_compute(grad_y) * activation_grad<kAct, Element>(Num::to_compute(saved), slope);
}

// dZ for the kU chunks of kW elements at base + i * scale of grad_y and
// saved, i = first, first + stride, ..., into the same places of grad_z; all
// kU chunks' loads are issued before any math. Chunks with i >= end re-read
// chunk `first` (no branch around the loads) and are dropped. Each kept
// element's dZ also goes to add(j, dz), j its index in the chunk, in i order.
template <class Element, Activation kAct, int kW, int kU, class Add>
__device__ __forceinline__ void dz_chunks(const Element* grad_y, const Element* __restrict__ saved,
                                          Element* grad_z, int64_t first,
                                          int64_t stride, int64_t end, int64_t base, int64_t scale,
                                          typename Numeric<Element>::Compute slope, Add add) {
  Element g[kU][kW], s[kU][kW];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t i = first + u * stride;
    const int64_t offset = base + (i < end ? i : first) * scale;
    load_chunk<Element, kW, false>(grad_y + offset, g[u]);
    load_chunk<Element, kW, true>(saved + offset, s[u]);
  }
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int64_t i = first + u * stride;
    if (i < end) {
      Element out[kW];
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        const auto dz = dz_of<Element, kAct>(g[u][j], s[u][j], slope);
        add(j, dz);
        out[j] = Numeric<Element>::from_compute(dz);
      }
      if (grad_z != nullptr) store_chunk<Element, kW>(grad_z + base + i * scale, out);  // null: bias_grad
    }
  }
}

// Sums v over the tc threads of a row (tc = 1 << tc_log2, a power of two up
// to kThreads; threads tid = ty * tc + tx). The sum is valid at tx == 0. Every
// thread of the block must call it (it may __syncthreads).
template <class Acc>
__device__ __forceinline__ Acc sum_over_row(Acc v, int tc_log2, Acc* s_warp) {
  const int tc = 1 << tc_log2;
  const int lanes = tc < 32 ? tc : 32;
  for (int offset = 1; offset < lanes; offset <<= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  if (tc > 32) {  // block-uniform
    const int tid = static_cast<int>(threadIdx.x);
    const int warp = tid >> 5;
    if ((tid & 31) == 0) s_warp[warp] = v;
    __syncthreads();
    const int warps_per_row = tc >> 5;
    const int first = (tid >> tc_log2) * warps_per_row;
    if ((tid & (tc - 1)) == 0) {
      v = s_warp[first];
      for (int w = 1; w < warps_per_row; ++w) v += s_warp[first + w];
    }
    __syncthreads();  // s_warp is free again
  }
  return v;
}

// The last-block handshake. Every thread of a block that wrote its partials
// calls it; it returns true, in all threads, in the one block of `counter`'s
// `expected` blocks that arrives last, after all their partials are visible.
__device__ __forceinline__ bool arrive_last(int* counter, int64_t expected, int* s_flag) {
  __threadfence();  // this thread's partials before the block's arrival
  __syncthreads();
  if (threadIdx.x == 0) {
    const int before = atomicAdd(counter, 1);
    const bool last = before == expected - 1;
    if (last) {
      __threadfence();  // acquire: the others' partials before our reads
      *counter = 0;     // every block has arrived: zero again for the next launch on the stream
    }
    *s_flag = last ? 1 : 0;
  }
  __syncthreads();
  return *s_flag != 0;
}

// src[t * stride] summed for t = first, first + step, ... below count, in that
// order, with kBatch loads in flight (a plain loop waits for each load before
// the next). Reads through L2 (__ldcg): other blocks wrote these.
template <class Acc>
__device__ __forceinline__ Acc sum_partials(const Acc* src, int64_t stride, int64_t first, int64_t step,
                                            int64_t count) {
  constexpr int kBatch = 8;
  Acc sum = Acc(0);
  for (int64_t t = first; t < count; t += kBatch * step) {
    Acc v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t ti = t + i * step;
      v[i] = ti < count ? __ldcg(src + ti * stride) : Acc(0);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (t + i * step < count) sum += v[i];
    }
  }
  return sum;
}

// For the columns [col_base, col_base + width) of a [*][cols] array of
// partials: the sum of rows [row_begin, row_end), in row order, stored to
// out[col] as Out (the compute type or the storage type). With a
// narrow tile, kThreads / width threads share a column: thread g takes rows
// row_begin + g, + 2g, ..., then the threads' sums are added in g order. Every
// thread of the block calls it.
template <class Out, class Acc>
__device__ __forceinline__ void sum_partial_rows(const Acc* partials, int64_t cols, int64_t row_begin,
                                                 int64_t row_end, int64_t col_base, int width,
                                                 Acc* s_sum, Out* out) {
  const int tid = static_cast<int>(threadIdx.x);
  const int groups = width >= kThreads ? 1 : kThreads / width;
  for (int q0 = 0; q0 < width; q0 += kThreads) {  // block-uniform trip count
    const int q = q0 + (tid & (width - 1));
    const int g = groups == 1 ? 0 : tid / width;
    const int64_t col = col_base + q;
    const bool valid = q < width && col < cols;
    Acc sum = Acc(0);
    if (valid) sum = sum_partials(partials + col, cols, row_begin + g, groups, row_end);
    if (groups > 1) {  // block-uniform
      s_sum[g * width + q] = sum;  // groups * width == kThreads entries
      __syncthreads();
      if (g == 0 && valid) {
        sum = s_sum[q];
        for (int i = 1; i < groups; ++i) sum += s_sum[i * width + q];
      }
      __syncthreads();  // s_sum is free again
    }
    if (g == 0 && valid) {
      if constexpr (std::is_same_v<Out, Acc>) {
        out[col] = sum;
      } else {
        out[col] = Numeric<Out>::from_compute(sum);
      }
    }
  }
}

// BiasKind::PerColumn. See BackwardPlan for the tiling.
template <class Element, Activation kAct, bool kVec>
__global__ void __launch_bounds__(kThreads, min_blocks_per_sm<Element>()) dact_bias_cols_kernel(const BackwardPlan p) {
  using Num = Numeric<Element>;
  using Acc = BiasSum<Element>;
  constexpr int kW = ChunkShape<Element, kVec>::kWidth;
  constexpr int kU = ChunkShape<Element, kVec>::kUnroll;
  __shared__ Acc s_sum[kThreads * kW];
  __shared__ int s_last;

  const ThreadPlace at(p);
  const int tid = at.tid, tc = at.tc, rp = at.rp, tx = at.tx, ty = at.ty;
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t tile_n = at.tile_n, tile_m = at.tile_m;
  const int64_t chunk = tile_n * tc + tx;
  const int64_t rows = p.rows, cols = p.cols;
  // Row tiles interleave: this block takes rows tile_m * rp + ty + k * stride,
  // so that the grid sweeps down the matrix together.
  const int64_t row_stride = p.tiles_m * rp;
  const typename Num::Compute slope = static_cast<typename Num::Compute>(p.negative_slope);
  const Element* grad_y = static_cast<const Element*>(p.grad_y);  // may be grad_z (in place)
  const Element* __restrict__ saved = static_cast<const Element*>(p.saved);
  Element* grad_z = static_cast<Element*>(p.grad_z);
  Element* __restrict__ grad_bias = static_cast<Element*>(p.grad_bias);
  Acc* __restrict__ partials = static_cast<Acc*>(p.partials);

  // 1. dZ for this thread's chunk column and rows: kU rows' loads in flight
  //    before any math; column sums in acc, in row order.
  Acc acc[kW];
#pragma unroll
  for (int j = 0; j < kW; ++j) acc[j] = Acc(0);
  if (chunk < p.chunks) {
    const int64_t col = chunk * kW;
    for (int64_t r = tile_m * rp + ty; r < rows; r += kU * row_stride) {
      dz_chunks<Element, kAct, kW, kU>(grad_y, saved, grad_z, r, row_stride, rows, col, cols,
                                       slope, [&](int j, Acc dz) { acc[j] += dz; });
    }
  }

  // 2. Column sums of the block: shuffle down to one value per warp and
  //    column (when a warp holds several rows), then add the sets in order.
  if (tc < 32) {
    for (int offset = tc; offset < 32; offset <<= 1) {
#pragma unroll
      for (int j = 0; j < kW; ++j) acc[j] += __shfl_xor_sync(kFullMask, acc[j], offset);
    }
  }
  const int width = tc * kW;  // columns in this tile
  const int sets = tc < 32 ? kWarps : rp;
  if (tc >= 32 || lane < tc) {
    const int set = tc < 32 ? warp : ty;
#pragma unroll
    for (int j = 0; j < kW; ++j) s_sum[set * width + tx * kW + j] = acc[j];
  }
  __syncthreads();
  const int64_t col_base = tile_n * width;
  const bool shared_sum = p.tiles_m > 1;  // block-uniform
  for (int q = tid; q < width; q += kThreads) {
    const int64_t col = col_base + q;
    if (col < cols) {
      Acc sum = s_sum[q];
      for (int i = 1; i < sets; ++i) sum += s_sum[i * width + q];
      if (shared_sum) {
        partials[tile_m * cols + col] = sum;
      } else {
        grad_bias[col] = Num::from_compute(sum);
      }
    }
  }
  if (!shared_sum) return;

  // 3. The partials of this column tile are added in two levels, so that no
  //    block reads more than kPartialGroup rows of them: the last block to
  //    arrive of each group of kPartialGroup row tiles adds the group's
  //    partials in order; with one group that is the result, else it is a
  //    level-2 partial, and the last group to finish adds those in order.
  const int64_t group_count = (p.tiles_m + kPartialGroup - 1) / kPartialGroup;
  const int64_t group = tile_m / kPartialGroup;
  const int64_t group_begin = group * kPartialGroup;
  const int64_t group_end =
      group_begin + kPartialGroup < p.tiles_m ? group_begin + kPartialGroup : p.tiles_m;
  if (!arrive_last(p.counters + tile_n * group_count + group, group_end - group_begin, &s_last)) return;
  if (group_count == 1) {
    sum_partial_rows<Element>(partials, cols, group_begin, group_end, col_base, width, s_sum, grad_bias);
    return;
  }
  Acc* level2 = partials + p.tiles_m * cols;  // [group_count][cols]
  sum_partial_rows<Acc>(partials, cols, group_begin, group_end, col_base, width, s_sum,
                        level2 + group * cols);
  if (!arrive_last(p.counters + p.tiles_n * group_count + tile_n, group_count, &s_last)) return;
  sum_partial_rows<Element>(level2, cols, 0, group_count, col_base, width, s_sum, grad_bias);
}

// BiasKind::PerRow, Scalar and None (the last two on one flat row: for
// Scalar, the row's sum is the total). See BackwardPlan for the tiling. One
// kernel for the three: with no bias (grad_bias null) the sums are taken and
// dropped, an add per element in a kernel bound by memory.
template <class Element, Activation kAct, bool kVec>
__global__ void __launch_bounds__(kThreads, min_blocks_per_sm<Element>()) dact_bias_rows_kernel(const BackwardPlan p) {
  using Num = Numeric<Element>;
  using Acc = BiasSum<Element>;
  constexpr int kW = ChunkShape<Element, kVec>::kWidth;
  constexpr int kU = ChunkShape<Element, kVec>::kUnroll;
  __shared__ Acc s_warp[kWarps];
  __shared__ int s_last;

  const ThreadPlace at(p);
  const int tc = at.tc, rp = at.rp, tx = at.tx, ty = at.ty;
  const int64_t split = at.tile_n;  // which share of the row's chunks
  const int64_t group = at.tile_m;  // which rp rows
  const int64_t row = group * rp + ty;
  const int64_t cols = p.cols;
  // Splits interleave: this block takes chunks split * tc + tx + k * stride,
  // so that the grid sweeps along the rows together.
  const int64_t chunk_stride = p.tiles_n * tc;
  const typename Num::Compute slope = static_cast<typename Num::Compute>(p.negative_slope);
  const Element* grad_y = static_cast<const Element*>(p.grad_y);  // may be grad_z (in place)
  const Element* __restrict__ saved = static_cast<const Element*>(p.saved);
  Element* grad_z = static_cast<Element*>(p.grad_z);
  Element* __restrict__ grad_bias = static_cast<Element*>(p.grad_bias);
  Acc* __restrict__ partials = static_cast<Acc*>(p.partials);

  // 1. dZ for this thread's chunks of its row (kU in flight), summed in
  //    chunk order. Only the flat vector case has a last chunk shorter than
  //    kW: thread 0 of split 0 does it alone, last.
  Acc acc = Acc(0);
  if (row < p.rows) {
    const int64_t base = row * cols;
    const int64_t full_chunks = cols / kW;
    for (int64_t c = split * tc + tx; c < full_chunks; c += kU * chunk_stride) {
      dz_chunks<Element, kAct, kW, kU>(grad_y, saved, grad_z, c, chunk_stride, full_chunks, base,
                                       kW, slope, [&](int, Acc dz) { acc += dz; });
    }
    if constexpr (kW > 1) {
      if (split == 0 && tx == 0) {  // no-op unless cols % kW != 0
        for (int64_t i = base + full_chunks * kW; i < base + cols; ++i) {
          const auto dz = dz_of<Element, kAct>(grad_y[i], Num::load(saved + i), slope);
          acc += dz;
          if (grad_z != nullptr) grad_z[i] = Num::from_compute(dz);
        }
      }
    }
  }
  if (grad_bias == nullptr) return;  // BiasKind::None

  // 2. The row's sum over this split (tx == 0 holds it).
  acc = sum_over_row(acc, p.tc_log2, s_warp);
  const bool own_row = tx == 0 && row < p.rows;
  if (p.tiles_n == 1) {  // block-uniform: this block has the whole row
    if (own_row) grad_bias[row] = Num::from_compute(acc);
    return;
  }
  if (own_row) partials[split * p.rows + row] = acc;

  // 3. The last block of this row group adds the tiles_n partials of each
  //    row: thread tx takes every tc-th, then the row's threads add up.
  if (!arrive_last(p.counters + group, p.tiles_n, &s_last)) return;
  Acc sum = Acc(0);
  if (row < p.rows) sum = sum_partials(partials + row, p.rows, tx, tc, p.tiles_n);
  sum = sum_over_row(sum, p.tc_log2, s_warp);
  if (own_row) grad_bias[row] = Num::from_compute(sum);
}

}  // namespace backward
}  // namespace gpu
}  // namespace gemm_act

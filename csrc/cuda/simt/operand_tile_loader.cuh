// Global -> register -> shared-memory loader for one operand tile.
//
// An operand is viewed as [MN, K] (A: MN = M; B: MN = N, i.e. B read as its
// transpose), with arbitrary element strides stride_mn and stride_k. The
// block's tile is kTileMN x BK of it, starting at (mn0, k0); in shared memory
// it is stored k-major, smem[k][mn] with leading dimension kSmemLd, in the
// compute type, zero-filled outside the operand.
//
// How the tile is read from global memory is the operand's OperandLoad, chosen
// on the host (choose_operand_load) and uniform over the grid:
//
//   kVectorAlongK   16-byte loads of kVec consecutive k  (stride_k == 1)
//   kVectorAlongMN  16-byte loads of kVec consecutive mn (stride_mn == 1)
//   kScalarAlongK   one element per load, consecutive threads along k
//   kScalarAlongMN  one element per load, consecutive threads along mn
//
// In every layout the tile is cut into "lines" along the layout's contiguous
// direction; a thread loads items of kW elements (kW = kVec or 1) at
//
//     line(i) = tid / kItemsPerLine + i * kLineStep,   pos = (tid % kItemsPerLine) * kW
//     (mn, k) = along K ? (line, pos) : (pos, line)
//
// so consecutive threads read consecutive addresses, and each thread's items
// are kLineStep lines apart. Vector items that cross the edge of the operand
// fall back to bounds-checked element loads; nothing outside it is read.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "cuda/common/numeric.cuh"

namespace gemm_act {
namespace gpu {
namespace simt {

enum class OperandLoad : int {
  kScalarAlongK = 0,
  kScalarAlongMN,
  kVectorAlongK,
  kVectorAlongMN,
};

// Host: the fastest layout that is legal for an operand viewed as [extent_mn, k]
// with the given strides. A 16-byte vector along a dimension needs that
// dimension unit-stride, the pointer 16-byte aligned and the other
// dimension's stride a multiple of the vector width (so every line starts
// aligned); a dimension of size 1 has no stride to respect.
template <class Element>
OperandLoad choose_operand_load(const void* ptr, int64_t stride_mn, int64_t stride_k,
                                int64_t extent_mn, int64_t k) {
  constexpr int64_t kVec = 16 / sizeof(Element);
  const bool aligned = is_aligned(ptr, 16);
  const bool vec_k = aligned && k >= kVec && stride_k == 1 && (extent_mn == 1 || stride_mn % kVec == 0);
  const bool vec_mn = aligned && extent_mn >= kVec && stride_mn == 1 && (k == 1 || stride_k % kVec == 0);
  if (vec_k && vec_mn) return k >= extent_mn ? OperandLoad::kVectorAlongK : OperandLoad::kVectorAlongMN;
  if (vec_k) return OperandLoad::kVectorAlongK;
  if (vec_mn) return OperandLoad::kVectorAlongMN;
  // Scalar: let consecutive threads walk the smaller stride (size-1 dims excluded).
  const int64_t sk = k == 1 ? INT64_MAX : std::llabs(stride_k);
  const int64_t smn = extent_mn == 1 ? INT64_MAX : std::llabs(stride_mn);
  return sk <= smn ? OperandLoad::kScalarAlongK : OperandLoad::kScalarAlongMN;
}

template <class Cfg, int kTileMN>
struct OperandTileLoader {
  using Element = typename Cfg::Element;
  using Compute = typename Cfg::Compute;
  using Num = Numeric<Element>;

  static constexpr int kTileK = Cfg::BK;
  static constexpr int kThreads = Cfg::kThreads;
  static constexpr int kVec = Cfg::kVecElems;
  static constexpr int kElems = kTileMN * kTileK / kThreads;  // per thread, per k-step
  static constexpr int kSmemLd = kTileMN + Cfg::kSmemPad;
  static_assert(kElems % kVec == 0, "each thread must load whole vectors");

  // Thread -> items of one layout (see the top of this file).
  template <bool kAlongK, int kW>
  struct Layout {
    static constexpr int kItems = kElems / kW;
    static constexpr int kItemsPerLine = (kAlongK ? kTileK : kTileMN) / kW;
    static constexpr int kLineStep = kThreads / kItemsPerLine;
    static_assert(kThreads % kItemsPerLine == 0, "a k-step must be whole lines per thread row");
    static_assert(kItems * kLineStep == (kAlongK ? kTileMN : kTileK), "layout must cover the tile once");
    __device__ __forceinline__ static int first_line(int tid) { return tid / kItemsPerLine; }
    __device__ __forceinline__ static int pos(int tid) { return (tid % kItemsPerLine) * kW; }
  };

  // Per-thread state, advanced one k-step per fetch(). Everything about the
  // thread's items follows from the first one: item i is item_step elements
  // further, kLineStep lines further along the layout's line direction.
  const Element* ptr;  // the thread's first item at the next k-step
  int64_t item_step;   // elements from one item to the next (uniform)
  int64_t k_advance;   // elements from one k-step to the next: BK * stride_k (uniform)
  int mn_left;         // along K: rows left from the first item's row; along MN: from its column
  int k_left;          // K minus the first item's k (may go negative on the last k-step)
  int line;            // the first item's line
  int pos;             // the first item's offset along the line
  OperandLoad mode;
  alignas(16) Element stage[kElems];  // the next k-step, in the storage type

  // The operand's block tile starts at row mn0 of extent_mn rows (mn0 < extent_mn);
  // k is K. extent_mn and K are < 2^31 (checks.cpp), so the int counters fit.
  __device__ __forceinline__ OperandTileLoader(const Element* operand, int64_t mn0, int64_t extent_mn,
                                               int64_t k, int64_t stride_mn, int64_t stride_k,
                                               OperandLoad mode_, int tid)
      : k_advance(kTileK * stride_k), mode(mode_) {
    switch (mode) {
      case OperandLoad::kVectorAlongK: init<true, kVec>(operand, mn0, extent_mn, k, stride_mn, stride_k, tid); break;
      case OperandLoad::kVectorAlongMN: init<false, kVec>(operand, mn0, extent_mn, k, stride_mn, stride_k, tid); break;
      case OperandLoad::kScalarAlongK: init<true, 1>(operand, mn0, extent_mn, k, stride_mn, stride_k, tid); break;
      default: init<false, 1>(operand, mn0, extent_mn, k, stride_mn, stride_k, tid); break;
    }
  }

  // Global -> registers: the next k-step (the first call loads k-step 0).
  __device__ __forceinline__ void fetch() {
    switch (mode) {
      case OperandLoad::kVectorAlongK: fetch_layout<true, kVec>(); break;
      case OperandLoad::kVectorAlongMN: fetch_layout<false, kVec>(); break;
      case OperandLoad::kScalarAlongK: fetch_layout<true, 1>(); break;
      default: fetch_layout<false, 1>(); break;
    }
    ptr += k_advance;
    k_left -= kTileK;
  }

  // Registers -> shared memory smem[kTileK][kSmemLd], converted to Compute.
  __device__ __forceinline__ void store(Compute* smem) const {
    switch (mode) {
      case OperandLoad::kVectorAlongK: store_layout<true, kVec>(smem); break;
      case OperandLoad::kVectorAlongMN: store_layout<false, kVec>(smem); break;
      case OperandLoad::kScalarAlongK: store_layout<true, 1>(smem); break;
      default: store_layout<false, 1>(smem); break;
    }
  }

 private:
  template <bool kAlongK, int kW>
  __device__ __forceinline__ void init(const Element* operand, int64_t mn0, int64_t extent_mn, int64_t k,
                                       int64_t stride_mn, int64_t stride_k, int tid) {
    using L = Layout<kAlongK, kW>;
    line = L::first_line(tid);
    pos = L::pos(tid);
    const int mn = kAlongK ? line : pos;  // the first item's row (column of B) in the tile
    const int kk = kAlongK ? pos : line;  // and its k
    ptr = operand + (mn0 + mn) * stride_mn + kk * stride_k;
    item_step = L::kLineStep * (kAlongK ? stride_mn : stride_k);
    mn_left = static_cast<int>(extent_mn - mn0 - mn);
    k_left = static_cast<int>(k - kk);
  }

  // Item i covers kW elements along the unit-stride dimension (kW > 1) or one
  // element. Along K: row (first row + i * kLineStep), k from k_left; along
  // MN: k (first k + i * kLineStep), columns from mn_left.
  template <bool kAlongK, int kW>
  __device__ __forceinline__ void fetch_layout() {
    using L = Layout<kAlongK, kW>;
#pragma unroll
    for (int i = 0; i < L::kItems; ++i) {
      const int line_offset = i * L::kLineStep;
      const bool line_inside = kAlongK ? line_offset < mn_left : line_offset < k_left;
      const int left = kAlongK ? k_left : mn_left;  // elements left along the item
      const Element* src = ptr + i * item_step;
      Element* dst = &stage[i * kW];
      if constexpr (kW == 1) {
        dst[0] = (line_inside && left > 0) ? Num::load(src) : Num::zero();
      } else {
        static_assert(kW * sizeof(Element) == 16, "vector items are 16 bytes");
        if (line_inside && left >= kW) {
          *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
        } else {
#pragma unroll
          for (int j = 0; j < kW; ++j) dst[j] = (line_inside && j < left) ? Num::load(src + j) : Num::zero();
        }
      }
    }
  }

  template <bool kAlongK, int kW>
  __device__ __forceinline__ void store_layout(Compute* smem) const {
    using L = Layout<kAlongK, kW>;
#pragma unroll
    for (int i = 0; i < L::kItems; ++i) {
      const int line_i = line + i * L::kLineStep;
      if constexpr (kAlongK) {
        // smem[pos + j][line]: a transposing store, element by element.
#pragma unroll
        for (int j = 0; j < kW; ++j) smem[(pos + j) * kSmemLd + line_i] = Num::to_compute(stage[i * kW + j]);
      } else if constexpr ((kW * sizeof(Compute)) % 16 == 0) {
        // smem[line][pos .. pos + kW): 16-byte stores.
        constexpr int kChunk = 16 / sizeof(Compute);
#pragma unroll
        for (int c = 0; c < kW / kChunk; ++c) {
          AlignedArray<Compute, kChunk> chunk;
#pragma unroll
          for (int j = 0; j < kChunk; ++j) chunk.v[j] = Num::to_compute(stage[i * kW + c * kChunk + j]);
          store_shared_aligned(smem + line_i * kSmemLd + pos + c * kChunk, chunk);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kW; ++j) smem[line_i * kSmemLd + pos + j] = Num::to_compute(stage[i * kW + j]);
      }
    }
  }
};

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

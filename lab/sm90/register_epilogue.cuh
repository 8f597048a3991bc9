// The register epilogue of the rotating kernel (rotating_kernel.cuh):
// the whole per-element computation, run by a math warpgroup on its own
// accumulators right after its mainloop, outside the part of the epilogue
// that the warpgroups take in turns (they share its shared memory and named
// barrier). What it leaves in each accumulator slot is the element's Z and Y,
// both already rounded to 16 bits, packed as the two halves of the 32-bit
// slot; the turn-taking part (CUTLASS's TMA epilogue with the visitor tree
// UnpackedZ / UnpackedY below) only unpacks and stores them.
//
//     z = alpha * acc + beta * C + bias      fp32 (preact.h)
//     y = activate<kAct, Element>(z)         fp32 (activations.h)
//     slot = bits(Element(y)) << 16 | bits(Element(z))
//
// C and every bias kind are read from global memory here, bounds-checked
// against the problem, each thread only the rows and columns of its own
// fragment.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>

#include "activations.h"
#include "preact.h"

namespace gemm_act {
namespace sm90 {

// Z and Y of one element in one 32-bit accumulator slot, 16 bits each.
template <class Element>
struct PackedZY {
  static_assert(cutlass::sizeof_bits<Element>::value == 16, "Z and Y must be 16-bit to pack");

  // One conversion instruction (cvt.rn.{bf16x2,f16x2}.f32) for both halves.
  CUTLASS_DEVICE static float pack(float z, float y) {
    const cutlass::Array<float, 2> zy{z, y};
    const cutlass::Array<Element, 2> halves =
        cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest>{}(zy);
    return reinterpret_cast<const float&>(halves);
  }
  CUTLASS_DEVICE static float z(float slot) { return half_to_float(bits(slot) & 0xffffu); }
  CUTLASS_DEVICE static float y(float slot) { return half_to_float(bits(slot) >> 16); }

 private:
  CUTLASS_DEVICE static uint32_t bits(float slot) { return reinterpret_cast<const uint32_t&>(slot); }
  CUTLASS_DEVICE static float half_to_float(uint32_t h) {
    return static_cast<float>(Element::bitcast(static_cast<uint16_t>(h)));
  }
};

template <class Element, Activation kAct>
struct RegisterEpilogue {
  // Everything it reads besides the accumulators; uniform per launch.
  struct Params {
    PreactTerms<float> preact;
    const Element* c = nullptr;  // beta * C when preact.has_c
    int64_t c_stride_m = 0, c_stride_n = 0;
    const Element* bias = nullptr;
    int64_t bias_stride_n = 0;  // row broadcast: 1 for bias[n], 0 for bias[0]
    float negative_slope = 0.01f;
    int m = 0, n = 0;  // the problem's M and N: nothing at or beyond is read
  };

  // acc: one warpgroup's accumulator fragment; coord: the (row, column)
  // within the tile of each of its elements (the tiled MMA's partition of an
  // identity tensor); (m0, n0): the tile's first row and column.
  template <class Accumulators, class Coords>
  CUTLASS_DEVICE static void apply(Accumulators& acc, Coords const& coord, int m0, int n0,
                                   Params const& p) {
    using namespace cute;
    // The fragment as (rows, columns) of the tile: a thread's elements share
    // a few rows and columns, so each bias value is read once per tile.
    Tensor z = make_tensor(acc.data(), rows_by_columns(acc.layout()));
    Tensor zc = make_tensor(coord.data(), rows_by_columns(coord.layout()));
    constexpr int kRows = decltype(size<0>(z))::value;
    constexpr int kCols = decltype(size<1>(z))::value;
    int rows[kRows], cols[kCols];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) rows[r] = m0 + get<0>(zc(r, 0));
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kCols; ++j) cols[j] = n0 + get<1>(zc(0, j));

    float column_term[kCols], row_term[kRows];
    if (p.preact.has_column_bias) {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kCols; ++j) {
        column_term[j] = cols[j] < p.n ? static_cast<float>(p.bias[cols[j] * p.bias_stride_n]) : 0.0f;
      }
    }
    if (p.preact.has_row_bias) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        row_term[r] = rows[r] < p.m ? static_cast<float>(p.bias[rows[r]]) : 0.0f;
      }
    }
    // Element i of z (column-major over (rows, columns)) is (i % kRows, i / kRows).
    add_preact_terms<kRows * kCols>(
        z, p.preact,
        [&](int i) {
          const int r = rows[i % kRows], c = cols[i / kRows];
          return r < p.m && c < p.n ? static_cast<float>(p.c[r * p.c_stride_m + c * p.c_stride_n])
                                    : 0.0f;
        },
        [&](int i) { return column_term[i / kRows]; }, [&](int i) { return row_term[i % kRows]; });
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRows * kCols; ++i) {
      const float zi = z(i);
      z(i) = PackedZY<Element>::pack(zi, activate<kAct, Element>(zi, p.negative_slope));
    }
  }

 private:
  // A wgmma accumulator layout ((2 columns, 2 rows, N/8 column groups),
  // MMA_M, MMA_N) as (rows, columns): ((2, MMA_M), (2, N/8, MMA_N)).
  template <class Layout>
  CUTLASS_DEVICE static auto rows_by_columns(Layout const& l) {
    using namespace cute;
    static_assert(rank_v<Layout> == 3 && rank_v<decltype(get<0>(l))> == 3,
                  "expects a wgmma accumulator fragment");
    return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                       make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
  }
};

// Visitor-tree compute functors (fusion::Sm90Compute instantiates Fn<float>
// for its arguments and calls Fn<Array<float, N>>) that read a packed slot.
template <class Element>
struct UnpackedZ {
  template <class T>
  struct Fn {
    template <int N>
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& slots) const {
      cutlass::Array<float, N> z;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) z[i] = PackedZY<Element>::z(slots[i]);
      return z;
    }
  };
};

// Y from the slot; its first input (the Z store's pass-through) orders the
// tree only.
template <class Element>
struct UnpackedY {
  template <class T>
  struct Fn {
    template <int N>
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const&,
                                                       cutlass::Array<float, N> const& slots) const {
      cutlass::Array<float, N> y;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) y[i] = PackedZY<Element>::y(slots[i]);
      return y;
    }
  };
};

}  // namespace sm90
}  // namespace gemm_act

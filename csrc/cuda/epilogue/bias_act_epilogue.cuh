// The in-register epilogue every forward kernel shares.
//
// Given accumulator values (alpha * A @ B not yet applied) and the output
// coordinates they belong to, it computes, in the compute type:
//
//     z = alpha * acc + beta * C[row, col] + bias      (preact.h)
//     y = activate_stored<kAct, Element>(z, slope)  (stored_activation.h)
//
// and stores y (and z when requested) into the contiguous [M, N] outputs,
// rounded to the storage type, skipping coordinates outside [M, N]. The
// activation and the bias kind are template parameters (no per-element branch
// on them); whether C exists and whether Z is stored are uniform run-time
// branches.
//
// Use:   EpilogueBiasAct<Element, kAct, kBias> epi(params);
//        epi.apply(row, col, acc);                       one element
//        epi.apply_row_segment<kW>(row, col0, acc_ptr);  kW adjacent columns
#pragma once

#include <cstdint>

#include "activations.h"
#include "cuda/common/numeric.cuh"
#include "gemm_act.h"
#include "preact.h"
#include "stored_activation.h"

namespace gemm_act {
namespace gpu {

// Everything the epilogue reads, in the storage type `Element`; alpha, beta
// and the slope already in the compute type. Kernels take this by value as
// part of their parameter struct.
template <class Element>
struct EpilogueParams {
  using Compute = typename Numeric<Element>::Compute;
  Element* y = nullptr;
  Element* z = nullptr;           // null: Z is not stored
  const Element* c = nullptr;     // null: no beta * C term
  const Element* bias = nullptr;  // contiguous; how it broadcasts is kBias
  int64_t m = 0, n = 0;           // Y and Z are [m, n], leading dimension n
  int64_t c_stride_m = 0, c_stride_n = 0;
  Compute alpha = Compute(1), beta = Compute(0), slope = Compute(0);
  // Largest number of elements (a power of two, at most 16 bytes' worth)
  // that may be stored with one aligned vector store at any column that is a
  // multiple of it: y and z are aligned to it and n is a multiple of it.
  int store_vector = 1;
};

// Host: fills EpilogueParams from the op's parameters.
template <class Element>
EpilogueParams<Element> make_epilogue_params(const GemmActParams& p) {
  using Compute = typename Numeric<Element>::Compute;
  EpilogueParams<Element> e;
  e.y = static_cast<Element*>(p.y);
  e.z = static_cast<Element*>(p.z);
  e.c = static_cast<const Element*>(p.c);
  e.bias = p.bias_kind == BiasKind::None ? nullptr : static_cast<const Element*>(p.bias);
  e.m = p.m;
  e.n = p.n;
  e.c_stride_m = p.c_stride_m;
  e.c_stride_n = p.c_stride_n;
  e.alpha = static_cast<Compute>(p.alpha);
  e.beta = static_cast<Compute>(p.beta);
  e.slope = static_cast<Compute>(p.negative_slope);
  int vec = static_cast<int>(16 / sizeof(Element));
  while (vec > 1 && !(p.n % vec == 0 && is_aligned(p.y, vec * sizeof(Element)) &&
                      (p.z == nullptr || is_aligned(p.z, vec * sizeof(Element))))) {
    vec /= 2;
  }
  e.store_vector = vec;
  return e;
}

template <class Element, Activation kAct, BiasKind kBias>
struct EpilogueBiasAct {
  using Num = Numeric<Element>;
  using Compute = typename Num::Compute;
  using Params = EpilogueParams<Element>;

  Params p;
  Compute bias_scalar;  // BiasKind::Scalar: bias[0], read once

  __device__ __forceinline__ explicit EpilogueBiasAct(const Params& params) : p(params) {
    bias_scalar = Compute(0);
    if constexpr (kBias == BiasKind::Scalar) bias_scalar = Num::to_compute(Num::load(p.bias));
  }

  // bias[row] (PerRow); zero otherwise. `row` must be < m.
  __device__ __forceinline__ Compute row_bias(int64_t row) const {
    if constexpr (kBias == BiasKind::PerRow) return Num::to_compute(Num::load(p.bias + row));
    return Compute(0);
  }

  // One element; nothing happens outside [m, n].
  __device__ __forceinline__ void apply(int64_t row, int64_t col, Compute acc) const {
    apply_row_segment<1>(row, col, &acc);
  }

  // kW adjacent columns col0 .. col0 + kW - 1 of one row (kW a power of two,
  // col0 a multiple of kW; acc[j] belongs to column col0 + j). Y and Z get
  // one vector store each when the whole segment is inside and aligned,
  // bounds-checked element stores otherwise; nothing outside [m, n] is read
  // or written.
  template <int kW>
  __device__ __forceinline__ void apply_row_segment(int64_t row, int64_t col0,
                                                    const Compute* acc) const {
    static_assert(kW >= 1 && (kW & (kW - 1)) == 0, "segment width must be a power of two");
    if (row >= p.m || col0 >= p.n) return;
    const int64_t cols_left = p.n - col0;
    const int inside = cols_left < kW ? static_cast<int>(cols_left) : kW;  // columns < n: 1 .. kW
    const Compute rbias = row_bias(row);
    const Element* c_row = p.c == nullptr ? nullptr : p.c + row * p.c_stride_m + col0 * p.c_stride_n;

    Compute z[kW];
#pragma unroll
    for (int j = 0; j < kW; ++j) z[j] = acc[j];
    constexpr bool kColumnBias = kBias == BiasKind::PerColumn || kBias == BiasKind::Scalar;
    const PreactTerms<Compute> terms{p.alpha, p.beta, c_row != nullptr, kColumnBias,
                                     kBias == BiasKind::PerRow};
    add_preact_terms<kW>(
        z, terms,
        [&](int j) { return j < inside ? Num::to_compute(Num::load(c_row + j * p.c_stride_n)) : Compute(0); },
        [&](int j) {
          if constexpr (kBias == BiasKind::PerColumn) {
            return j < inside ? Num::to_compute(Num::load(p.bias + col0 + j)) : Compute(0);
          }
          return bias_scalar;
        },
        [&](int) { return rbias; });
    AlignedArray<Element, kW> y_out, z_out;
#pragma unroll
    for (int j = 0; j < kW; ++j) {
      y_out.v[j] = Num::from_compute(activate_stored<kAct, Element>(z[j], p.slope));
      z_out.v[j] = Num::from_compute(z[j]);
    }

    const int64_t offset = row * p.n + col0;
    if (inside == kW && kW <= p.store_vector) {
      store_global_aligned(p.y + offset, y_out);
      if (p.z != nullptr) store_global_aligned(p.z + offset, z_out);
    } else {
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        if (j < inside) {
          p.y[offset + j] = y_out.v[j];
          if (p.z != nullptr) p.z[offset + j] = z_out.v[j];
        }
      }
    }
  }
};

}  // namespace gpu
}  // namespace gemm_act

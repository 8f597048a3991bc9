// The sm90 epilogue of gemm_dropout_add, a visitor tree on the same
// collective epilogue as gemm_act's (sm90_epilogue.cuh):
//
//     Y = C + factor * (acc + bias)     fp32 in registers, one TMA store
//
// C (the residual) comes through the collective's TMA source path
// (TmaSourceFetch: contiguous 16-byte-aligned rows), the bias per column or
// scalar through CUTLASS's row broadcast, the factor from the mask leaf
// (sm90_dropout_mask.cuh), which reads the keep bits params.z points at
// (no Z is stored: the op has none).
#pragma once

#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_dropout_mask.cuh"
#include "cuda/sm90/sm90_epilogue.cuh"
#include "cuda/sm90/sm90_tma_source.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

struct DropoutAddArguments {
  bool bias = false;  // the row broadcast's values are the bias (else zeros)
};

// y = c + factor * (acc + bias) on a fragment.
template <class T>
struct DropoutAddFn {
  using Arguments = DropoutAddArguments;

  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                     cutlass::Array<float, N> const& c,
                                                     cutlass::Array<float, N> const& bias,
                                                     cutlass::Array<float, N> const& factor,
                                                     Arguments const& args) const {
    cutlass::Array<float, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      const float z = args.bias ? acc[i] + bias[i] : acc[i];
      y[i] = c[i] + factor[i] * z;
    }
    return y;
  }
};

template <class Config, class Element>
struct DropoutAddEpilogue {
  static_assert(Config::kSourceTma && !Config::kStoresZ,
                "gemm_dropout_add's configurations load C through TMA and store no Z");
  using Parts = EpilogueParts<Config, Element>;
  using TileShape = typename Config::TileShape;
  using RowBcast = fusion::Sm90RowBroadcast<0, TileShape, Element, float,
                                            Stride<_0, bool, int64_t>>;  // bias[n] or bias[0]
  using Callbacks = fusion::Sm90EVT<fusion::Sm90Compute<DropoutAddFn, Element, float, kRound>,
                                    fusion::Sm90AccFetch, TmaSourceFetch<Element>, RowBcast, DropoutMaskFetch>;
  using Collective = typename Parts::template Collective<Callbacks>;

  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    const bool has_bias = p.bias != nullptr && p.bias_kind != BiasKind::None;
    const auto* bias = static_cast<const Element*>(p.bias);
    return {{},                                                                      // acc
            {p.c != nullptr},                                                        // C
            {has_bias ? bias : nullptr, Element(0),
             {_0{}, p.bias_kind == BiasKind::PerColumn, int64_t(0)}},                // bias[n] / bias[0]
            {static_cast<const uint32_t*>(p.z), static_cast<float>(p.dropout_scale)},  // the keep bits
            DropoutAddArguments{has_bias}};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// The sm90 epilogue of gemm_dact, the fused input gradient through an
// activation: on the same collective epilogue as the forward's
// (EpilogueParts), the tree
//
//     dA = act'(saved) * alpha * acc        fp32, in registers (DactEpilogue)
//
// with `saved` (Y or Z of the layer before) read through GmemSourceFetch in
// C's place, and dA stored as the kernel's D. No bias, no Z.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue.cuh"
#include "cuda/sm90/sm90_epilogue_functors.cuh"
#include "cuda/sm90/sm90_source_fetch.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <class Config, class Element, Activation kAct>
struct GemmDactEpilogue {
  static_assert(!Config::kStoresZ, "gemm_dact stores no Z: its configurations say stores_z=False");
  using Parts = EpilogueParts<Config, Element>;
  using Saved = GmemSourceFetch<Element>;
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<DactEpilogue<kAct>::template Fn, Element, float, kRound>,
      fusion::Sm90AccFetch, Saved>;
  using Collective = typename Parts::template Collective<Callbacks>;

  // params.c is `saved` (gemm_dact's checks make it so), alpha and the slope
  // are the call's; everything else of the params is unused.
  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    return {{},
            {static_cast<const Element*>(p.c), p.c_stride_m, p.c_stride_n},
            DactArguments{static_cast<float>(p.alpha), static_cast<float>(p.negative_slope)}};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

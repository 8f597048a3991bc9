// The sm90 epilogue of gemm_dact, the fused input gradient through an
// activation: the tree
//
//     dA = act'(saved) * alpha * acc        fp32, in registers (DactEpilogue)
//     partials[tile_m, n] = sum of dA over the tile's rows    (ColumnSums)
//
// on the TMA warp-specialised collective epilogue, with `saved` (Y or Z of
// the layer before, [M, N] row-major) as the collective's source C: the
// producer warp loads it by TMA ahead of the consumers, as the forward's
// epilogue stores Z (GmemSourceFetch's per-thread loads, which the forward
// keeps for its rare, any-strided C, made this GEMM slower than the GEMM
// and the backward pass it replaces). dA is the kernel's D. No bias, no Z.
//
// The column sums are the layer before's bias gradient, taken from the fp32
// dA in registers instead of reading dA back from memory: each tile writes
// its rows' sums (CUTLASS's row reduction without its final step, so no
// workspace, counters or atomics) into partials [ceil(M / tile M),
// N rounded up to tile N] fp32, params.z, which the entry then sums in row
// order (deterministic). With params.z null nothing is reduced. Elements
// past M or N are not masked: TMA reads zeros there for A, B and saved, so
// their dA is 0, the sum's identity.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue_functors.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <class Config, class Element, Activation kAct>
struct GemmDactEpilogue {
  static_assert(!Config::kStoresZ, "gemm_dact stores no Z: its configurations say stores_z=False");
  using Layout = cutlass::layout::RowMajor;  // saved and dA [M, N], rows 16-byte aligned
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;
  // fp32 out of the tree: the column sums add unrounded dA; the collective
  // rounds it to Element for the store.
  using Dact = fusion::Sm90EVT<
      fusion::Sm90Compute<DactEpilogue<kAct, Element>::template Fn, float, float, kRound>,
      fusion::Sm90AccFetch, fusion::Sm90SrcFetch<Element>>;
  using ColumnSums = fusion::Sm90RowReduction<
      cutlass::plus, cutlass::plus, cutlass::plus, /*Stages=*/0, typename Config::TileShape,
      float, float, kRound, Stride<_0, _1, _0>, /*Alignment=*/4, /*EnableNullptr=*/true,
      /*FinalReduction=*/false, /*VisitCheckOOB=*/false>;
  using Callbacks = fusion::Sm90EVT<ColumnSums, Dact>;
  using Collective = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, typename Config::EpilogueTile, float, float,
      Element, Layout, kAlignment,  // C: saved, loaded by TMA
      Element, Layout, kAlignment,  // D: dA
      typename Config::EpilogueSchedule, Callbacks>::CollectiveOp;

  // alpha and the slope are the call's, the partials params.z; saved
  // (params.c) goes to the collective as C (launch_dact_kernel), the rest of
  // the params is unused.
  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    return {{{}, {}, DactArguments{static_cast<float>(p.alpha), static_cast<float>(p.negative_slope)}},
            {p.z, 0.0f, {}}};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

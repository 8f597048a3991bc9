// The sm90 epilogue: this project's computation as a CUTLASS epilogue
// visitor tree (EVT) on the TMA warp-specialised collective epilogue:
//
//     z = alpha * acc + beta * C + bias      fp32, in registers (PreactFn)
//     Z = z                                  TMA store, skipped when Z is null
//                                            (ZStore; absent where !kStoresZ)
//     Y = act(z)                             TMA store (the kernel's D)
//
// The activation is a template parameter (one kernel each, no per-element
// branch); the bias kind, C and Z are run-time and uniform per launch:
//  - bias per column or scalar: CUTLASS's row broadcast with a run-time
//    stride (bias[n] or bias[0]) staged through shared memory;
//  - bias per row: CUTLASS's column broadcast (bias[m], straight to registers);
//  - C: GmemSourceFetch, straight from global memory, any strides, only when
//    C exists. The collective's own TMA source path is off (ElementC = void):
//    it would reserve shared memory for C in every launch and cost the
//    mainloop a pipeline stage, for an operand the nn.Linear case never has.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue_functors.cuh"
#include "cuda/sm90/sm90_source_fetch.cuh"
#include "cuda/sm90/sm90_z_store.cuh"
#include "gemm_act.h"
#include "preact.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

// The builder's collective epilogue with kStages store stages (its dispatch
// policy's StagesD) where kStages > 0; the builder picks StagesD from the
// subtile count alone.
template <class Op, int kStages>
struct WithStoreStages {
  using type = Op;
};
template <int kStagesC, int kStagesD, int kFragment, bool kReuseSmemC, bool kDelayTmaStore,
          int kStages, class... Rest>
struct WithStoreStages<
    cutlass::epilogue::collective::CollectiveEpilogue<
        cutlass::epilogue::Sm90TmaWarpSpecialized<kStagesC, kStagesD, kFragment, kReuseSmemC,
                                                  kDelayTmaStore>,
        Rest...>,
    kStages> {
  using type = cutlass::epilogue::collective::CollectiveEpilogue<
      cutlass::epilogue::Sm90TmaWarpSpecialized<kStagesC, (kStages > 0 ? kStages : kStagesD),
                                                kFragment, kReuseSmemC, kDelayTmaStore>,
      Rest...>;
};

// What any visitor tree on this collective epilogue shares: the subtile, Y's
// and Z's layouts and Z's store node, and the collective built around a tree.
template <class Config, class Element>
struct EpilogueParts {
  using ElementCompute = float;
  using LayoutD = cutlass::layout::RowMajor;  // Y, Z [M, N] contiguous
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // 16 bytes
  using TileShape = typename Config::TileShape;
  using EpilogueSchedule = typename Config::EpilogueSchedule;

  // The subtile, stage counts and Z's shared-memory layout, resolved the way
  // the epilogue builder resolves them.
  using EpiDesc = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      TileShape, typename Config::EpilogueTile, void, Element, EpilogueSchedule>;
  using AuxDesc =
      cutlass::epilogue::collective::detail::AuxStoreDescriptor<EpiDesc, LayoutD, Element>;
  using EpilogueTile = typename EpiDesc::EpilogueTile;

  // Z's buffers take turns with Y's (one TMA store group per subtile).
  static constexpr int kStoreStages =
      Config::kStoreStages > 0 ? Config::kStoreStages : AuxDesc::Stages;
  template <class Input>
  using StoreZ = fusion::Sm90EVT<
      ZStore<kStoreStages, EpilogueTile, Element, kRound, typename AuxDesc::Stride,
             typename AuxDesc::SmemLayoutAtom, typename AuxDesc::CopyOpR2S, kAlignment>,
      Input>;

  template <class Callbacks>
  using Collective = typename WithStoreStages<
      typename cutlass::epilogue::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape,
          typename Config::ClusterShape, typename Config::EpilogueTile, float, ElementCompute,
          void, LayoutD, kAlignment,     // no TMA source: C comes through GmemSourceFetch
          Element, LayoutD, kAlignment,  // D = Y
          EpilogueSchedule, Callbacks>::CollectiveOp,
      Config::kStoreStages>::type;
};

template <class Config, class Element, Activation kAct>
struct GemmActEpilogue {
  using Parts = EpilogueParts<Config, Element>;
  using ElementCompute = float;
  using TileShape = typename Config::TileShape;

  // The tree, leaves first.
  using SourceC = GmemSourceFetch<Element>;
  using RowBcast = fusion::Sm90RowBroadcast<0, TileShape, Element, ElementCompute,
                                            Stride<_0, bool, int64_t>>;  // bias[n] or bias[0]
  using ColBcast = fusion::Sm90ColBroadcast<0, TileShape, Element, ElementCompute,
                                            Stride<_1, _0, int64_t>, /*Alignment=*/1>;  // bias[m]
  using Preact = fusion::Sm90EVT<fusion::Sm90Compute<PreactFn, ElementCompute, ElementCompute, kRound>,
                                 fusion::Sm90AccFetch, SourceC, RowBcast, ColBcast>;
  using ActNode = fusion::Sm90Compute<ActEpilogue<kAct, Element>::template Fn, Element,
                                      ElementCompute, kRound>;
  static constexpr bool kStoresZ = Config::kStoresZ;
  using Callbacks = cute::conditional_t<
      kStoresZ, fusion::Sm90EVT<ActNode, typename Parts::template StoreZ<Preact>>,
      fusion::Sm90EVT<ActNode, Preact>>;
  using Collective = typename Parts::template Collective<Callbacks>;

  // The tree's arguments, nested like the tree: {child arguments..., node arguments}.
  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    const BiasKind bias_kind = p.bias == nullptr ? BiasKind::None : p.bias_kind;
    const bool column_bias = bias_kind == BiasKind::PerColumn || bias_kind == BiasKind::Scalar;
    const bool row_bias = bias_kind == BiasKind::PerRow;
    const auto* bias = static_cast<const Element*>(p.bias);
    const PreactTerms<float> terms{static_cast<float>(p.alpha), static_cast<float>(p.beta),
                                   p.c != nullptr, column_bias, row_bias};
    const typename Preact::Arguments preact{
        {},                                                                        // acc
        {static_cast<const Element*>(p.c), p.c_stride_m, p.c_stride_n},            // C
        {column_bias ? bias : nullptr, Element(0),
         {_0{}, bias_kind == BiasKind::PerColumn, int64_t(0)}},                     // bias[n] / bias[0]
        {row_bias ? bias : nullptr, Element(0), {}},                               // bias[m]
        terms};
    const ActArguments act{static_cast<float>(p.negative_slope)};
    if constexpr (kStoresZ) {
      const typename Parts::AuxDesc::Stride stride_z{p.n, _1{}, int64_t(0)};
      return {{preact, {static_cast<Element*>(p.z), stride_z}}, act};
    } else {
      return {preact, act};
    }
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

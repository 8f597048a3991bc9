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
//    C exists, with the collective's own TMA source path off (ElementC =
//    void): that path reserves shared memory for C in every launch and costs
//    the mainloop a pipeline stage, for an operand the nn.Linear case never
//    has. The `tmac` configurations take that path (TmaSourceFetch): C's
//    loads overlap the mainloop, for contiguous 16-byte-aligned rows only.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue_functors.cuh"
#include "cuda/sm90/sm90_source_fetch.cuh"
#include "cuda/sm90/sm90_tma_source.cuh"
#include "cuda/sm90/sm90_z_store.cuh"
#include "gemm_act.h"
#include "preact.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

// The builder's collective epilogue with kStages store stages (its dispatch
// policy's StagesD) where kStages > 0, and kSourceStages stages of C where
// kSourceStages > 0; the builder picks both from the subtile count alone
// (four of C: a 128x256 tile's mainloop would keep two stages).
template <class Op, int kStages, int kSourceStages>
struct WithStoreStages {
  using type = Op;
};
template <int kStagesC, int kStagesD, int kFragment, bool kReuseSmemC, bool kDelayTmaStore,
          int kStages, int kSourceStages, class... Rest>
struct WithStoreStages<
    cutlass::epilogue::collective::CollectiveEpilogue<
        cutlass::epilogue::Sm90TmaWarpSpecialized<kStagesC, kStagesD, kFragment, kReuseSmemC,
                                                  kDelayTmaStore>,
        Rest...>,
    kStages, kSourceStages> {
  using type = cutlass::epilogue::collective::CollectiveEpilogue<
      cutlass::epilogue::Sm90TmaWarpSpecialized<(kSourceStages > 0 ? kSourceStages : kStagesC),
                                                (kStages > 0 ? kStages : kStagesD), kFragment,
                                                kReuseSmemC, kDelayTmaStore>,
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

  // C through the collective's TMA source path (tmac), or none (GmemSourceFetch reads it).
  using ElementC = cute::conditional_t<Config::kSourceTma, Element, void>;
  // C double-buffered: one subtile read while the next loads; Y's buffers reuse them.
  static constexpr int kSourceStages = Config::kSourceTma ? 2 : 0;

  template <class Callbacks>
  using Collective = typename WithStoreStages<
      typename cutlass::epilogue::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape,
          typename Config::ClusterShape, typename Config::EpilogueTile, float, ElementCompute,
          ElementC, LayoutD, kAlignment,  // C [M, N] rows, where it comes through TMA
          Element, LayoutD, kAlignment,   // D = Y
          EpilogueSchedule, Callbacks>::CollectiveOp,
      Config::kStoreStages, kSourceStages>::type;
};

template <class Config, class Element, Activation kAct>
struct GemmActEpilogue {
  using Parts = EpilogueParts<Config, Element>;
  using ElementCompute = float;
  using TileShape = typename Config::TileShape;

  // The tree, leaves first.
  using SourceC = cute::conditional_t<Config::kSourceTma, TmaSourceFetch<Element>,
                                      GmemSourceFetch<Element>>;
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
    typename SourceC::Arguments source{};
    if constexpr (Config::kSourceTma) {
      source.enabled = p.c != nullptr;  // its pointer and strides: gemm_arguments
    } else {
      source = {static_cast<const Element*>(p.c), p.c_stride_m, p.c_stride_n};
    }
    const typename Preact::Arguments preact{
        {},                                                                        // acc
        source,                                                                    // C
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

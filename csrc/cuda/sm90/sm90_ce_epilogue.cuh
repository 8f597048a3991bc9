// The sm90 epilogue of gemm_ce_grad, the language-model loss's chunk
// gradient (ce_chunk.h) fused into the GEMM that recomputes the chunk's
// logits: the tree
//
//     z = acc + bias[n]                       the forward's preact, rounded
//                                             to Element as its logits were
//     dZ = ce::grad(z, lse[m], scale[m], target[m] == v0 + n)
//                                             0 past the chunk's width
//
// so that the backward's pass over the chunk (ce_chunk_backward) goes. Its
// preact is GemmActEpilogue's, and its mainloop the forward's, so a logit
// recomputed here rounds as the forward's (gemm_act, no activation, the same
// tile) did: the log-sum-exp the forward saved is that of these logits.
// dZ is the kernel's D. No C, no Z.
#pragma once

#include "ce_chunk.h"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

// ChunkColumn: an EVT leaf giving each element its column n of the problem
// (as float: exact below 2^24), from the collective's coordinates, which
// count from the thread's first element: that element's column is N less
// the residue the collective passes along.
struct ChunkColumnArguments {};

struct ChunkColumn : RegisterLeaf<ChunkColumnArguments> {
  using Base = RegisterLeaf<ChunkColumnArguments>;
  using Base::Base;

  template <class CTensor>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor tCcD_, int n0_) : tCcD(tCcD_), n0(n0_) {}

    CTensor tCcD;  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates from the thread's first element
    int n0;        // that element's column

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int epi_m, int epi_n) {
      Tensor cD = tCcD(_, _, _, epi_m, epi_n);
      cutlass::Array<float, FragmentSize> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        out[i] = static_cast<float>(n0 + get<1>(cD(epi_v * FragmentSize + i)));
      }
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    const int n = static_cast<int>(get<1>(args.problem_shape_mnkl));
    const int n0 = n - static_cast<int>(get<1>(args.residue_tCcD));
    return ConsumerStoreCallbacks<decltype(args.tCcD)>(args.tCcD, n0);
  }
};

// The loss's per-logit math in both chunk epilogues (this file's and
// sm90_ce_lse_epilogue.cuh), as ce_chunk.h's but shaped for an epilogue:
// no branch per element (a branch there makes each element its own block,
// and the 128 a thread holds then run as one dependent chain), the
// softcap's branch taken once per fragment, exponentials as the hardware's
// base-2 one. Both kernels see a logit through `logits`, so the forward's
// log-sum-exp and the backward's gradient agree on it.
namespace ce_epilogue {

constexpr float kLog2e = 1.4426950408889634f;

// 2^x (ex2.approx: about 2 ulp; exp's terms and gradients are rounded to fp16/bf16 or summed in fp32).
CUTLASS_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Each preact rounded to Element (as the logits F.linear writes), then softcap's.
template <class Element, int N>
CUTLASS_DEVICE cutlass::Array<float, N> logits(cutlass::Array<float, N> const& z, float softcap, float inv_softcap) {
  cutlass::Array<float, N> l;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < N; ++i) l[i] = static_cast<float>(Element(z[i]));
  if (softcap > 0.0f) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) l[i] = softcap * tanhf(l[i] * inv_softcap);
  }
  return l;
}

}  // namespace ce_epilogue

struct CeGradArguments {
  float v0 = 0.0f;      // the chunk's first vocabulary column
  float width = 0.0f;   // the chunk's columns; those past it are padding
  float smoothing_term = 0.0f;  // label_smoothing / vocab, off every logit
  float target_term = 1.0f;     // 1 - label_smoothing, off the target's
  float softcap = 0.0f;
  float inv_softcap = 0.0f;
};

// dZ of one fragment, ce::grad's: scale * (exp(l - lse) - smoothing / vocab
// - (1 - smoothing) at the target), times softcap's derivative; 0 past the width.
template <class Element>
struct CeGradEpilogue {
  template <class T>
  struct Fn {
    using Arguments = CeGradArguments;

    template <int N>
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(
        cutlass::Array<float, N> const& z, cutlass::Array<float, N> const& lse,
        cutlass::Array<float, N> const& scale, cutlass::Array<float, N> const& target,
        cutlass::Array<float, N> const& column, Arguments const& args) const {
      using namespace ce_epilogue;
      const cutlass::Array<float, N> l = logits<Element>(z, args.softcap, args.inv_softcap);
      cutlass::Array<float, N> g;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) {
        float gi = exp2_approx(fmaf(l[i], kLog2e, -lse[i] * kLog2e)) - args.smoothing_term;
        gi = args.v0 + column[i] == target[i] ? gi - args.target_term : gi;
        g[i] = gi * scale[i];
      }
      if (args.softcap > 0.0f) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) {
          const float t = l[i] * args.inv_softcap;
          g[i] *= 1.0f - t * t;
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) g[i] = column[i] < args.width ? g[i] : 0.0f;
      return g;
    }
  };
};

template <class Config, class Element>
struct GemmCeGradEpilogue {
  static_assert(!Config::kStoresZ, "gemm_ce_grad stores no Z: its configurations say stores_z=False");
  using Forward = GemmActEpilogue<Config, Element, Activation::None>;
  using Parts = typename Forward::Parts;
  // Per-row terms, straight to registers: fp32 lse and scale, the int64
  // target as float (exact: checked below 2^24 by the entry).
  template <class Input>
  using PerRow = fusion::Sm90ColBroadcast<0, typename Config::TileShape, Input, float,
                                          Stride<_1, _0, int64_t>, /*Alignment=*/1>;
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<CeGradEpilogue<Element>::template Fn, float, float, kRound>,
      typename Forward::Preact, PerRow<float>, PerRow<float>, PerRow<int64_t>, ChunkColumn>;
  using Collective = typename Parts::template Collective<Callbacks>;

  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    const CeTerms& ce = p.ce;
    const typename Forward::Preact::Arguments preact = Forward::preact_arguments(p);
    const float smoothing = static_cast<float>(ce.label_smoothing);
    const float softcap = static_cast<float>(ce.softcap);
    const CeGradArguments grad{static_cast<float>(ce.v0),
                               static_cast<float>(ce.width),
                               smoothing * (1.0f / static_cast<float>(ce.vocab)),  // as the chunk pass divides
                               1.0f - smoothing,
                               softcap,
                               softcap > 0.0f ? 1.0f / softcap : 0.0f};
    return {preact,
            {ce.lse, 0.0f, {}},
            {ce.scale, 0.0f, {}},
            {ce.target, int64_t(0), {}},
            {},
            grad};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// The sm90 epilogue of gemm_ce_lse, the language-model loss's forward over a
// chunk of logits (ce_chunk.h's log-sum-exp) fused into the GEMM that
// computes them: the tree
//
//     z = acc + bias[n]             GemmActEpilogue's preact, rounded to
//                                   Element as the gradient's kernel rounds it
//     l = logit(z)                  softcap's, where there is one
//     per row of the CTA tile:      max m, sum s of exp(l - m), sum of l,
//                                   and l at the target's column
//
// over the chunk's columns (N past them is padding, left out). Nothing is
// written per logit: the collective has no D. Each CTA tile folds its rows
// in registers (one exponential per logit, one rescale per row and
// subtile), the lanes that share a row merge theirs by shuffles, and one
// lane per row writes the tile's four partials to `partials`:
//
//     partials[q][n_tile][row]      q: 0 m, 1 s, 2 sum of l, 3 the target's l
//                                   (0 where the target is not in the tile);
//                                   rows counted up to M rounded up to the
//                                   CTA tile (CeLsePartials says so once)
//
// which ce_lse_combine (sm90_ce_lse_combine.cu) folds per row, in tile
// order, into the running log-sum-exp: deterministic, no atomics.
#pragma once

#include <cmath>

#include "ce_chunk.h"
#include "cuda/sm90/sm90_ce_epilogue.cuh"
#include "cuda/sm90/sm90_ce_lse_partials.h"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

struct CeLseArguments {
  float* partials = nullptr;  // [4][n_tiles][rows], CeLsePartials
  int v0 = 0;                 // the chunk's first vocabulary column
  int width = 0;              // the chunk's columns; those past it are padding
  float softcap = 0.0f;
  float inv_softcap = 0.0f;
};

// The tree's root: the row fold above. Its children give, per element, the
// preact z and the row's target; the columns come from the collective's
// coordinates (static offsets from the thread's first element, whose column
// is N less the residue: CUTLASS counts them so).
template <class Element, class TileShape>
struct CeLseReduce : RegisterLeaf<CeLseArguments> {
  using Base = RegisterLeaf<CeLseArguments>;
  using Base::Base;
  // The collective's register fragments (there is no D to take their type from).
  using ElementAux = float;

  template <class RowTensor, class PartialsTensor, class CoordTensor, class LaneLayout, class LaneCoord>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(RowTensor rows, PartialsTensor out_, int64_t quantity_stride_,
                                          CoordTensor tCcD_, int n0, LaneLayout lanes_, LaneCoord lane_,
                                          bool in_bounds_, CeLseArguments const& args_)
        : max(rows), sum(rows), logit_sum(rows), target(rows), out(out_), quantity_stride(quantity_stride_),
          tCcD(tCcD_), column0(args_.v0 + n0), width(args_.width - n0), lanes(lanes_), lane(lane_),
          in_bounds(in_bounds_), args(args_) {
      fill(max, ce::minus_inf<float>());
      fill(sum, 0.0f);
      fill(logit_sum, 0.0f);
      fill(target, 0.0f);
    }

    // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) registers, stride 0 along N: one per row.
    RowTensor max, sum, logit_sum, target;
    PartialsTensor out;       // quantity 0 of this tile's rows, laid out as the registers
    int64_t quantity_stride;  // from one quantity to the next
    CoordTensor tCcD;         // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates from the thread's first element
    int column0;              // that element's vocabulary column
    int width;                // the chunk's columns from that element on
    LaneLayout lanes;         // (lanes along M, lanes along N) -> lane
    LaneCoord lane;           // this lane's (m, n) in it
    bool in_bounds;           // the CTA tile is in the problem (a cluster's spare one is not)
    CeLseArguments const& args;

    // The logit of each element (-inf past the chunk's width), their sum and
    // the target's picked up here; the max and exponentials in reduce().
    // No branch per element (see ce_epilogue).
    template <class ElementAccumulator, int N>
    CUTLASS_DEVICE cutlass::Array<float, N> visit(cutlass::Array<ElementAccumulator, N> const&, int epi_v,
                                                  int epi_m, int epi_n, cutlass::Array<float, N> const& z,
                                                  cutlass::Array<int, N> const& row_target) {
      Tensor logit_sum_mn = logit_sum(_, _, _, epi_m, epi_n);
      Tensor target_mn = target(_, _, _, epi_m, epi_n);
      Tensor cD = tCcD(_, _, _, epi_m, epi_n);
      cutlass::Array<float, N> l = ce_epilogue::logits<Element>(z, args.softcap, args.inv_softcap);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) {
        const int e = epi_v * N + i;
        const int c = get<1>(cD(e));  // static: the column less the thread's first
        // A column past the width is padding or outside the problem; the
        // target's column is never one of the chunk's padding columns, and
        // the combine takes a target's logit only from the chunk that holds it.
        float& t = target_mn(e);
        t = c == row_target[i] - column0 ? l[i] : t;
        l[i] = c < width ? l[i] : ce::minus_inf<float>();
        logit_sum_mn(e) += c < width ? l[i] : 0.0f;
      }
      return l;
    }

    // Each subtile's logits folded into its rows' (m, s), as ce::add folds
    // them (a NaN logit makes s NaN, -inf ones add nothing); after the last,
    // the lanes of a row merged and the partials written.
    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n, bool is_last_iteration,
                               VTensor visit_results) {
      using Fragment = typename cute::remove_cvref_t<VTensor>::value_type;
      constexpr int kFragment = static_cast<int>(Fragment::kElements);
      using ce_epilogue::exp2_approx;
      using ce_epilogue::kLog2e;
      Tensor max_mn = max(_, _, _, epi_m, epi_n);
      Tensor sum_mn = sum(_, _, _, epi_m, epi_n);
      // The subtile's max per row (fmaxf passes NaN over).
      Tensor mx = make_tensor_like(max_mn);
      copy(max_mn, mx);
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < size(visit_results); ++v) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < kFragment; ++i) mx(v * kFragment + i) = fmaxf(mx(v * kFragment + i), visit_results(v)[i]);
      }
      // Per row, once: the sum rescaled to the new max, and -max * log2(e)
      // for the terms (0 where the max is -inf: the terms are then 0, or NaN).
      Tensor offset = make_tensor_like(max_mn);
      Tensor mx_rows = filter_zeros(mx);
      Tensor max_rows = filter_zeros(max_mn);
      Tensor sum_rows = filter_zeros(sum_mn);
      Tensor offset_rows = filter_zeros(offset);
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < size(mx_rows); ++r) {
        const float m = max_rows(r), m_new = mx_rows(r);
        const bool empty = m_new == ce::minus_inf<float>();
        sum_rows(r) *= empty || m == m_new ? 1.0f : exp2_approx((m - m_new) * kLog2e);
        max_rows(r) = m_new;
        offset_rows(r) = empty ? 0.0f : -m_new * kLog2e;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int v = 0; v < size(visit_results); ++v) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < kFragment; ++i) {
          const int e = v * kFragment + i;
          sum_mn(e) += exp2_approx(fmaf(visit_results(v)[i], kLog2e, offset(e)));
        }
      }
      if (!is_last_iteration || !in_bounds) return;

      // The lanes that share a row merged, in a fixed order (deterministic).
      Tensor m_all = filter_zeros(max);
      Tensor s_all = filter_zeros(sum);
      Tensor sum_all = filter_zeros(logit_sum);
      Tensor t_all = filter_zeros(target);
      CUTLASS_PRAGMA_UNROLL
      for (int half = size<1>(lanes) / 2; half > 0; half /= 2) {
        const int delta = lanes(0, half);
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < size(m_all); ++r) {
          const float m2 = __shfl_down_sync(0xffffffffu, m_all(r), delta);
          const float s2 = __shfl_down_sync(0xffffffffu, s_all(r), delta);
          ce::merge(m_all(r), s_all(r), m2, s2);
          sum_all(r) += __shfl_down_sync(0xffffffffu, sum_all(r), delta);
          t_all(r) += __shfl_down_sync(0xffffffffu, t_all(r), delta);
        }
      }
      if (get<1>(lane) != 0) return;
      Tensor out_rows = filter_zeros(out);
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < size(m_all); ++r) {
        float* p = &out_rows(r);
        p[0] = m_all(r);
        p[quantity_stride] = s_all(r);
        p[2 * quantity_stride] = sum_all(r);
        p[3 * quantity_stride] = t_all(r);
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    // The warp's lanes as the tiled copy lays them over the tile: a row's
    // lanes are the shuffles' partners. One warp spans a row of the tile.
    auto mn_shape = shape(typename decltype(args.tiled_copy)::Tiler_MN{});
    Layout to_thread = [&] {
      if constexpr (ReferenceSrc) {
        return right_inverse(args.tiled_copy.get_layoutS_TV()).with_shape(mn_shape);
      } else {
        return right_inverse(args.tiled_copy.get_layoutD_TV()).with_shape(mn_shape);
      }
    }();  // (m, n) in the tiler -> thread-value index
    using Warps = Int<decltype(args.tiled_copy)::TiledNumThr::value / cutlass::NumThreadsPerWarp>;
    Layout to_lane = composition(Layout<Shape<Int<cutlass::NumThreadsPerWarp>, Warps, _1>, Stride<_1, _0, _0>>{}, to_thread);
    Layout to_warp = composition(Layout<Shape<Int<cutlass::NumThreadsPerWarp>, Warps, _1>, Stride<_0, _1, _0>>{}, to_thread);
    static_assert(decltype(size(filter(get<1>(to_warp))))::value == 1,
                  "gemm_ce_lse merges a row's lanes by shuffles: one warp along N");
    Layout lanes = make_layout(filter(get<0>(to_lane)), filter(get<1>(to_lane)));
    auto lane = idx2crd(right_inverse(lanes)(cutlass::canonical_lane_idx()), shape(lanes));

    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    const CeLsePartials parts{static_cast<int64_t>(M), static_cast<int64_t>(N),
                              static_cast<int64_t>(size<0>(TileShape{})), static_cast<int64_t>(size<1>(TileShape{}))};
    // Quantity 0 of tile n as an (M, N) tensor with stride 0 along N,
    // partitioned as D would be: the registers take its layout.
    Tensor q0 = make_tensor(make_gmem_ptr(params_ptr->partials + static_cast<int64_t>(n) * parts.rows()),
                            make_layout(make_shape(parts.rows(), N), Stride<_1, _0>{}));
    Tensor out = fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        local_tile(q0, take<0, 2>(args.tile_shape_mnk), make_coord(m, n)), args.epi_tile, args.tiled_copy,
        args.thread_idx);  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    Tensor rows = make_tensor_like<float>(out);
    const bool in_bounds = elem_less(args.cD(_0{}, _0{}), args.residue_cD);
    const int n0 = static_cast<int>(N) - static_cast<int>(get<1>(args.residue_tCcD));
    return ConsumerStoreCallbacks<decltype(rows), decltype(out), decltype(args.tCcD), decltype(lanes), decltype(lane)>(
        rows, out, parts.quantity_stride(), args.tCcD, n0, lanes, lane, in_bounds, *params_ptr);
  }
};

template <class Config, class Element>
struct GemmCeLseEpilogue {
  static_assert(!Config::kStoresZ, "gemm_ce_lse stores no Z: its configurations say stores_z=False");
  using Forward = GemmActEpilogue<Config, Element, Activation::None>;
  using Parts = typename Forward::Parts;
  using TileShape = typename Config::TileShape;
  // The row's target as int (the entry checks the vocabulary is below 2^24).
  using Target = fusion::Sm90ColBroadcast<0, TileShape, int64_t, int, Stride<_1, _0, int64_t>, /*Alignment=*/1>;
  using Callbacks = fusion::Sm90EVT<CeLseReduce<Element, TileShape>, typename Forward::Preact, Target>;
  using Collective = typename Parts::template Collective<Callbacks, void>;

  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    const CeTerms& ce = p.ce;
    return {Forward::preact_arguments(p),
            {ce.target, int64_t(0), {}},
            {static_cast<float*>(p.y), static_cast<int>(ce.v0), static_cast<int>(ce.width),
             static_cast<float>(ce.softcap), ce.softcap > 0.0 ? static_cast<float>(1.0 / ce.softcap) : 0.0f}};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// C for the sm90 epilogue, read straight from global memory.
#pragma once

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"

namespace gemm_act {
namespace sm90 {
namespace detail {

// GmemSourceFetch: an EVT leaf that returns C (as float) for the fragment
// being visited, or zeros when there is no C. Each thread reads exactly the
// elements its accumulator fragment covers, straight from global memory with
// the residue predicate (no shared memory, no TMA, any strides and alignment),
// one epilogue subtile at a time at the start of that subtile.
template <class Element>
struct GmemSourceFetchArguments {
  Element const* ptr = nullptr;  // null: no C
  int64_t stride_m = 0;
  int64_t stride_n = 0;
};

template <class Element>
struct GmemSourceFetch : RegisterLeaf<GmemSourceFetchArguments<Element>> {
  using Base = RegisterLeaf<GmemSourceFetchArguments<Element>>;
  using Base::Base;
  using Base::params_ptr;

  template <class GTensor, class CTensor, class Residue, class RTensor>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(GTensor tCgC_, CTensor tCcC_, Residue residue_,
                                          RTensor tCrC_, bool enabled_)
        : tCgC(tCgC_), tCcC(tCcC_), residue(residue_), tCrC(tCrC_), enabled(enabled_) {}

    GTensor tCgC;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) C in global memory
    CTensor tCcC;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates, relative
    Residue residue;   // (m, n) bound of those coordinates
    RTensor tCrC;      // (CPY,CPY_M,CPY_N) this subtile's C in registers
    bool enabled;

    CUTLASS_DEVICE void begin_loop(int epi_m, int epi_n) {
      if (!enabled) return;
      Tensor gC = tCgC(_, _, _, epi_m, epi_n);
      Tensor cC = tCcC(_, _, _, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(tCrC); ++i) {
        tCrC(i) = elem_less(cC(i), residue) ? Element(gC(i)) : Element(0);
      }
    }

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int) {
      return fragment_as_float<FragmentSize>(tCrC, epi_v, enabled);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    Tensor mC = make_tensor(make_gmem_ptr(params_ptr->ptr), make_shape(M, N, L),
                            make_stride(params_ptr->stride_m, params_ptr->stride_n, int64_t(0)));
    Tensor tCgC = fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        mC, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy,
        args.thread_idx);                                                // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    Tensor tCrC = make_tensor<Element>(take<0, 3>(shape(tCgC)));        // (CPY,CPY_M,CPY_N)
    return ConsumerStoreCallbacks<decltype(tCgC), decltype(args.tCcD), decltype(args.residue_tCcD),
                                  decltype(tCrC)>(tCgC, args.tCcD, args.residue_tCcD, tCrC,
                                                  params_ptr->ptr != nullptr);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

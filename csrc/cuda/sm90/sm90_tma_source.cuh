// C for the sm90 epilogue, loaded through TMA by the collective epilogue's
// producer warp (its source pipeline) into shared memory while the consumer
// warps run the tile's mainloop; this leaf hands each fragment to the tree.
// Run-time switch: with no C the collective loads nothing and the leaf
// returns zeros.
#pragma once

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"

namespace gemm_act {
namespace sm90 {
namespace detail {

struct TmaSourceArguments {
  bool enabled = false;  // C exists (its pointer and strides are the collective's arguments)
};

template <class Element>
struct TmaSourceFetch : RegisterLeaf<TmaSourceArguments> {
  using Base = RegisterLeaf<TmaSourceArguments>;
  using Base::Base;
  using Base::params_ptr;

  // The collective asks its tree whether to load C at all.
  CUTLASS_DEVICE bool is_producer_load_needed() const { return params_ptr->enabled; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return params_ptr->enabled; }

  template <class RTensor>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(RTensor const& tCrC_, bool enabled_)
        : tCrC(tCrC_), enabled(enabled_) {}

    RTensor const& tCrC;  // (CPY,CPY_M,CPY_N) this subtile's C, filled from shared memory by the collective
    bool enabled;

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int) {
      return fragment_as_float<FragmentSize>(tCrC, epi_v, enabled);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    return ConsumerStoreCallbacks<cute::remove_cvref_t<decltype(args.tCrC)>>(args.tCrC,
                                                                               params_ptr->enabled);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// Dropout's mask for the sm90 epilogue: an EVT leaf that hands the tree, for
// each fragment, the factor of each element (2^32 / T where kept, 0 where
// dropped), drawn as dropout.h draws it at the element's row-major index, so
// the fused kernel's mask is dropout_add's and dropout_scale's, bit for bit.
#pragma once

#include <cstdint>

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"
#include "dropout.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

struct DropoutMaskArguments {
  const int64_t* seed = nullptr;  // one element in device memory
  uint64_t threshold = 0;
  float scale = 1.0f;
};

struct DropoutMaskFetch : RegisterLeaf<DropoutMaskArguments> {
  using Base = RegisterLeaf<DropoutMaskArguments>;
  using Base::Base;
  using Base::params_ptr;

  template <class CTensor>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor tCcD_, int64_t origin_m_, int64_t origin_n_, int64_t n_,
                                          uint64_t seed_, uint64_t threshold_, float scale_)
        : tCcD(tCcD_), origin_m(origin_m_), origin_n(origin_n_), n(n_), seed(seed_),
          threshold(threshold_), scale(scale_) {}

    CTensor tCcD;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates relative to the thread's first element
    int64_t origin_m;  // that element's row and column in the output
    int64_t origin_n;
    int64_t n;         // the output's row length
    uint64_t seed;
    uint64_t threshold;
    float scale;

    // One Philox call per group of four row-major elements; a fragment's
    // neighbours in a row share their group's call.
    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int epi_m, int epi_n) {
      Tensor cC = tCcD(_, _, _, epi_m, epi_n);
      cutlass::Array<float, FragmentSize> out;
      uint64_t cached = ~uint64_t{0};
      uint32_t draws[4] = {0, 0, 0, 0};
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        const auto coord = cC(epi_v * FragmentSize + i);
        const uint64_t index = static_cast<uint64_t>(origin_m + get<0>(coord)) * static_cast<uint64_t>(n) +
                               static_cast<uint64_t>(origin_n + get<1>(coord));
        const uint64_t group = index >> 2;
        if (group != cached) {
          dropout_draws(seed, group, draws);
          cached = group;
        }
        out[i] = dropout_factor(draw_lane(draws, static_cast<uint32_t>(index & 3)), threshold, scale);
      }
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    const int64_t origin_m = static_cast<int64_t>(M) - static_cast<int64_t>(get<0>(args.residue_tCcD));
    const int64_t origin_n = static_cast<int64_t>(N) - static_cast<int64_t>(get<1>(args.residue_tCcD));
    return ConsumerStoreCallbacks<decltype(args.tCcD)>(
        args.tCcD, origin_m, origin_n, static_cast<int64_t>(N), static_cast<uint64_t>(*params_ptr->seed),
        params_ptr->threshold, params_ptr->scale);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

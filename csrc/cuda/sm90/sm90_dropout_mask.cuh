// Dropout's mask for the sm90 epilogue: an EVT leaf that hands the tree, for
// each fragment, the factor of each element (2^32 / T where kept, 0 where
// dropped), read from keep bits drawn before the launch (dropout.h's
// dropout_keep_word, one bit per element at its row-major index), so the
// fused kernel's mask is dropout_add's and dropout_scale's, bit for bit.
// Drawing in the epilogue instead (Philox per element pair, by the one
// warpgroup an epilogue runs on) measured slower than eager's branch (rule
// dropout_bits).
#pragma once

#include <cstdint>

#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"

namespace gemm_act {
namespace sm90 {
namespace detail {

struct DropoutMaskArguments {
  const uint32_t* bits = nullptr;  // bit i of word w: element 32 w + i kept
  float scale = 1.0f;
};

struct DropoutMaskFetch : RegisterLeaf<DropoutMaskArguments> {
  using Base = RegisterLeaf<DropoutMaskArguments>;
  using Base::Base;
  using Base::params_ptr;

  template <class CTensor>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor tCcD_, int64_t origin_m_, int64_t origin_n_, int64_t m_,
                                          int64_t n_, const uint32_t* bits_, float scale_)
        : tCcD(tCcD_), origin_m(origin_m_), origin_n(origin_n_), m(m_), n(n_), bits(bits_), scale(scale_) {}

    CTensor tCcD;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates relative to the thread's first element
    int64_t origin_m;  // that element's row and column in the output
    int64_t origin_n;
    int64_t m, n;      // the output's shape
    const uint32_t* bits;
    float scale;

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int epi_m, int epi_n) {
      Tensor cC = tCcD(_, _, _, epi_m, epi_n);
      uint32_t word[FragmentSize];
      int shift[FragmentSize];
      // The loads first, all in flight together (neighbours in a row share a word, cached).
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        const auto coord = cC(epi_v * FragmentSize + i);
        const int64_t row = origin_m + get<0>(coord), col = origin_n + get<1>(coord);
        // An element past the output (a ragged tile's) reads word 0; it is never stored.
        const int64_t index = (row < m && col < n) ? row * n + col : 0;
        word[i] = __ldg(bits + (index >> 5));
        shift[i] = static_cast<int>(index & 31);
      }
      cutlass::Array<float, FragmentSize> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) out[i] = ((word[i] >> shift[i]) & 1u) ? scale : 0.0f;
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    const int64_t origin_m = static_cast<int64_t>(M) - static_cast<int64_t>(get<0>(args.residue_tCcD));
    const int64_t origin_n = static_cast<int64_t>(N) - static_cast<int64_t>(get<1>(args.residue_tCcD));
    return ConsumerStoreCallbacks<decltype(args.tCcD)>(args.tCcD, origin_m, origin_n, static_cast<int64_t>(M),
                                                       static_cast<int64_t>(N), params_ptr->bits, params_ptr->scale);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// Z's store in the sm90 epilogue.
#pragma once

#include "cuda/sm90/sm90_cutlass.cuh"

namespace gemm_act {
namespace sm90 {
namespace detail {

// ZStore: CUTLASS's auxiliary store (Z through shared memory and TMA), with
// Z's conversion to 16 bits moved from visit() to postreduce(), behind the
// null check that postreduce() and the TMA store already make. Sm90AuxStore
// converts each fragment in visit(), stored or not: in inference (no Z) that
// is half an instruction per element of an epilogue that sets the pace on
// short-K shapes. Z stays in float registers for the subtile instead.
template <int kStages, class EpilogueTile, class Element, cutlass::FloatRoundStyle kRoundStyle,
          class StrideZ, class SmemLayoutAtom, class CopyOpR2S, int kAlignment>
struct ZStore
    : fusion::Sm90AuxStore<kStages, EpilogueTile, Element, kRoundStyle, StrideZ, SmemLayoutAtom,
                           CopyOpR2S, kAlignment, /*EnableNullptr=*/true> {
  using Base = fusion::Sm90AuxStore<kStages, EpilogueTile, Element, kRoundStyle, StrideZ,
                                    SmemLayoutAtom, CopyOpR2S, kAlignment, true>;
  using Base::Base;

  template <class BaseCallbacks, class FloatTensor>
  struct ConsumerStoreCallbacks : BaseCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(BaseCallbacks&& base, FloatTensor z)
        : BaseCallbacks(cute::move(base)), tC_rZ(z) {}

    FloatTensor tC_rZ;  // (CPY,CPY_M,CPY_N) this subtile's Z, float

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
        cutlass::Array<float, FragmentSize> const& z) {
      recast<cutlass::Array<float, FragmentSize>>(coalesce(tC_rZ))(epi_v) = z;
      return z;
    }

    CUTLASS_DEVICE void postreduce(int epi_m, int epi_n, int store_iteration,
                                   bool issue_smem_store) {
      if (this->params_ptr->is_nullptr) return;
      constexpr int kSize = decltype(size(tC_rZ))::value;
      recast<cutlass::Array<Element, kSize>>(coalesce(this->tC_rAux))(0) =
          cutlass::NumericArrayConverter<Element, float, kSize, kRoundStyle>{}(
              recast<cutlass::Array<float, kSize>>(coalesce(tC_rZ))(0));
      BaseCallbacks::postreduce(epi_m, epi_n, store_iteration, issue_smem_store);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    auto base = Base::template get_consumer_store_callbacks<ReferenceSrc>(args);
    Tensor tC_rZ = make_tensor<float>(shape(base.tC_rAux));
    return ConsumerStoreCallbacks<decltype(base), decltype(tC_rZ)>(cute::move(base), tC_rZ);
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

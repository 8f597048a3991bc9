// What an EVT leaf of this project's shares when it works from registers and
// global memory alone (GmemSourceFetch, GluStore; TmaSourceFetch, whose C the
// collective loads): run-time arguments that are its parameters, no shared
// memory, workspace or producer loads of its own.
#pragma once

#include "cuda/sm90/sm90_cutlass.cuh"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <class ArgumentsT>
struct RegisterLeaf {
  struct SharedStorage {};
  using Arguments = ArgumentsT;
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE RegisterLeaf() {}
  CUTLASS_HOST_DEVICE RegisterLeaf(Params const& params, SharedStorage const&) : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(fusion::ProducerLoadArgs<Args...> const&) {
    return fusion::EmptyProducerLoadCallbacks{};
  }
};

// The epi_v-th fragment of FragmentSize elements of the register tensor t as
// float, or zeros where the leaf is off: what a C leaf hands the tree.
template <int FragmentSize, class RTensor>
CUTLASS_DEVICE cutlass::Array<float, FragmentSize> fragment_as_float(RTensor const& t, int epi_v,
                                                                     bool enabled) {
  cutlass::Array<float, FragmentSize> out;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < FragmentSize; ++i) {
    out[i] = enabled ? static_cast<float>(t(epi_v * FragmentSize + i)) : 0.0f;
  }
  return out;
}

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

// The 128x256 cooperative kernel's sweep candidates with fewer epilogue
// store buffers (ConfigCooperativeNoZ, ConfigCooperativeStore1) for bf16
// and fp32 (TF32) with column-major B, every activation: compiled in sweep
// builds only (GEMM_ACT_SM90_SWEEP=1), empty otherwise.
#ifdef GEMM_ACT_SM90_SWEEP
#include "cuda/sm90/sm90_gemm_act_kernel.cuh"

namespace gemm_act {
namespace sm90 {

template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_cooperative_candidate(const LaunchArgs& la) {
  using Element = typename detail::ElementOf<kDtype>::type;
  switch (la.config) {
    case KernelConfig::kCooperative128x256NoZ:
      return detail::run_kernel<detail::ConfigCooperativeNoZ<Element>, kDtype, kB, kAct>(la);
    case KernelConfig::kCooperative128x256Store1:
      return detail::run_kernel<detail::ConfigCooperativeStore1<Element>, kDtype, kB, kAct>(la);
    default:
      return {LaunchStatus::kUnknownConfig, cudaSuccess, "not a cooperative candidate"};
  }
}

#define GEMM_ACT_SM90_INSTANTIATE_COOP_CANDIDATE(DT, BL, ACT) \
  template LaunchResult launch_cooperative_candidate<DT, BL, ACT>(const LaunchArgs&);

GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_INSTANTIATE_COOP_CANDIDATE, Dtype::BF16, BLayout::KMajor)
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_INSTANTIATE_COOP_CANDIDATE, Dtype::F32, BLayout::KMajor)

}  // namespace sm90
}  // namespace gemm_act
#endif

// launch_rotating: the rotating kernel's tile configurations (KernelConfig
// kRotating*), for sweep builds. Included only by the file that instantiates
// them, so the other instantiation files do not compile these kernels.
#pragma once

#include "cuda/sm90/sm90_gemm_act_kernel.cuh"

#ifdef GEMM_ACT_SM90_SWEEP
namespace gemm_act {
namespace sm90 {

template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_rotating(const LaunchArgs& la) {
  using namespace cute;
  using Element = typename detail::ElementOf<kDtype>::type;
  using detail::ConfigRotating;
  switch (la.config) {
    case KernelConfig::kRotating2x128x128:
      return detail::run_kernel<
          ConfigRotating<Element, KernelConfig::kRotating2x128x128, 2, Shape<_64, _64>>, kDtype,
          kB, kAct>(la);
    case KernelConfig::kRotating3x128x96:
      return detail::run_kernel<ConfigRotating<Element, KernelConfig::kRotating3x128x96, 3>,
                                kDtype, kB, kAct>(la);
    case KernelConfig::kRotating3x64x192:
      return detail::run_kernel<ConfigRotating<Element, KernelConfig::kRotating3x64x192, 3>,
                                kDtype, kB, kAct>(la);
    default:
      return {LaunchStatus::kUnknownConfig, cudaSuccess, "not a rotating configuration"};
  }
}

#define GEMM_ACT_SM90_INSTANTIATE_ROTATING(DT, BL, ACT) \
  template LaunchResult launch_rotating<DT, BL, ACT>(const LaunchArgs&);

}  // namespace sm90
}  // namespace gemm_act
#endif

// The 128x256 cooperative kernel without Z's store buffers
// (ConfigCooperativeNoZ) for bf16 with column-major B, every activation:
// compiled in sweep builds only (GEMM_ACT_SM90_SWEEP=1), empty otherwise.
// Release builds compile it for fp32 only (sm90_inst_f32_kmajor.cu).
#ifdef GEMM_ACT_SM90_SWEEP
#include "cuda/sm90/sm90_gemm_act_kernel.cuh"

namespace gemm_act {
namespace sm90 {

template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_cooperative_no_z(const LaunchArgs& la) {
  using Element = typename detail::ElementOf<kDtype>::type;
  return detail::run_kernel<detail::ConfigCooperativeNoZ<Element>, kDtype, kB, kAct>(la);
}

#define GEMM_ACT_SM90_INSTANTIATE_NO_Z(DT, BL, ACT) \
  template LaunchResult launch_cooperative_no_z<DT, BL, ACT>(const LaunchArgs&);

GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_INSTANTIATE_NO_Z, Dtype::BF16, BLayout::KMajor)

}  // namespace sm90
}  // namespace gemm_act
#endif

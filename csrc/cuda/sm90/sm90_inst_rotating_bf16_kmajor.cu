// The rotating kernel's configurations for bf16 with column-major B, every
// activation: compiled in sweep builds only (GEMM_ACT_SM90_SWEEP=1), empty
// otherwise.
#ifdef GEMM_ACT_SM90_SWEEP
#include "cuda/sm90/sm90_rotating_launch.cuh"

namespace gemm_act {
namespace sm90 {
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_INSTANTIATE_ROTATING, Dtype::BF16, BLayout::KMajor)
}  // namespace sm90
}  // namespace gemm_act
#endif

// Backward elementwise kernels for bfloat16 storage (see activation_backward_launch.cuh).
#include "cuda/backward/activation_backward_launch.cuh"

namespace gemm_act {
namespace gpu {
namespace backward {
template void launch_activation_backward<__nv_bfloat16>(const BackwardPlan&, int64_t, cudaStream_t);
template int activation_backward_blocks_per_sm<__nv_bfloat16>(Activation, BiasKind, bool);
}  // namespace backward
}  // namespace gpu
}  // namespace gemm_act

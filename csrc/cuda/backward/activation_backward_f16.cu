// Backward elementwise kernels for float16 storage (see activation_backward_launch.cuh).
#include "cuda/backward/activation_backward_launch.cuh"

namespace gemm_act {
namespace gpu {
namespace backward {
template void launch_activation_backward<__half>(const BackwardPlan&, int64_t, cudaStream_t);
template int activation_backward_blocks_per_sm<__half>(Activation, BiasKind, bool);
}  // namespace backward
}  // namespace gpu
}  // namespace gemm_act

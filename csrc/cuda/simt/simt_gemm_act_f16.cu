// SIMT forward kernels for __half storage: every activation x 4 bias kinds.
#include "cuda/simt/simt_gemm_act_launch.cuh"

namespace gemm_act {
namespace gpu {
namespace simt {
template void launch_simt_gemm_act<__half>(const GemmActParams&, cudaStream_t);
}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

// mma_128x256x32_s4 for bf16 with an N-major B: one kernel per activation (the bias kind
// is dispatched at launch). Compile for sm_80; see sm80_kernel.cuh.
#include "cuda/sm80/sm80_launch_template.cuh"

namespace gemm_act {
namespace sm80 {

#define GEMM_ACT_SM80_INSTANTIATE(e, name, from_y, slope)                              \
  template cudaError_t launch_kernel<KernelConfig::mma_128x256x32_s4, Dtype::BF16, BLayout::NMajor, \
                                     Activation::e>(const GemmActParams&, cudaStream_t);
GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_SM80_INSTANTIATE)
#undef GEMM_ACT_SM80_INSTANTIATE

}  // namespace sm80
}  // namespace gemm_act

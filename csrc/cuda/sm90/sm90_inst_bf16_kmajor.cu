// sm90 kernels for bf16 storage and
// column-major B (b = weight.t(), K contiguous: the nn.Linear "TN" case).
// Each activation instantiates the four tile configurations (cooperative,
// ping-pong 128x128, 64x128 and 128x64): 32 kernels.
//
// Kernels of one file share most of their template instantiations, so one
// file per (dtype, B layout) builds much faster than one file per kernel;
// the files build in parallel. Compile for sm_90a only (see
// sm90_gemm_act_kernel.cuh).
#include "cuda/sm90/sm90_gemm_act_kernel.cuh"

namespace gemm_act {
namespace sm90 {
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_INSTANTIATE, Dtype::BF16, BLayout::KMajor)
}  // namespace sm90
}  // namespace gemm_act

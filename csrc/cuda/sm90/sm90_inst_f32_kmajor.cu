// sm90 kernels for fp32 storage (TF32 tensor cores) and
// column-major B (b = weight.t(), K contiguous: the nn.Linear "TN" case).
// Each activation instantiates the 128x256 cooperative configuration, with
// and without Z's store buffers, and the 128x128 ping-pong one: 24 kernels.
//
// Kernels of one file share most of their template instantiations, so one
// file per (dtype, B layout) builds much faster than one file per kernel;
// the files build in parallel. Compile for sm_90a only (see
// sm90_gemm_act_kernel.cuh).
#include "cuda/sm90/sm90_gemm_act_kernel.cuh"

namespace gemm_act {
namespace sm90 {
GEMM_ACT_SM90_FOR_EACH_ACT(GEMM_ACT_SM90_INSTANTIATE, Dtype::F32, BLayout::KMajor)
}  // namespace sm90
}  // namespace gemm_act

// The library backend's epilogue pass for float storage: every activation x 4 bias kinds.
#include "cuda/library/epilogue_pass.cuh"

namespace gemm_act {
namespace gpu {
namespace library {
template void launch_epilogue_pass<float>(const GemmActParams&, const void*, bool, cudaStream_t);
}  // namespace library
}  // namespace gpu
}  // namespace gemm_act

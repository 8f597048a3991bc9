// The library backend's second half: one pass over a GEMM result `acc`
// (alpha * A @ B not yet applied, [M, N] contiguous, as cuBLAS wrote it)
// that applies the shared epilogue (cuda/epilogue/bias_act_epilogue.cuh):
// Y = act(alpha * acc + beta * C + bias), and Z when stored. `acc` is in
// the storage type, and may be Y's or Z's own memory (each element is read
// before it is written), or, with float_acc, fp32 for fp16/bf16 storage (a
// GEMM result not yet rounded to it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <c10/core/ScalarType.h>
#include <cuda_runtime_api.h>

#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace library {

// Element: float, double, __half or __nv_bfloat16. Needs m > 0 and n > 0.
template <class Element>
void launch_epilogue_pass(const GemmActParams& params, const void* acc, bool float_acc, cudaStream_t stream);

extern template void launch_epilogue_pass<float>(const GemmActParams&, const void*, bool, cudaStream_t);
extern template void launch_epilogue_pass<double>(const GemmActParams&, const void*, bool, cudaStream_t);
extern template void launch_epilogue_pass<__half>(const GemmActParams&, const void*, bool, cudaStream_t);
extern template void launch_epilogue_pass<__nv_bfloat16>(const GemmActParams&, const void*, bool,
                                                         cudaStream_t);

}  // namespace library
}  // namespace gpu

namespace library {

// launch_epilogue_pass for the storage type `dtype` (fp16, bf16, fp32, fp64).
void launch_epilogue_pass(c10::ScalarType dtype, const GemmActParams& params, const void* acc, bool float_acc,
                          cudaStream_t stream);

}  // namespace library
}  // namespace gemm_act

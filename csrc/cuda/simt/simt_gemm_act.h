// Host entry of the SIMT forward kernel, one explicit instantiation per
// storage type (simt_gemm_act_<dtype>.cu), so dispatch.cu compiles no kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace simt {

// Launches Y = act(alpha * A @ B + beta * C + bias) (and Z) on `stream`.
// Element: float, double, __half or __nv_bfloat16. Needs m > 0 and n > 0.
template <class Element>
void launch_simt_gemm_act(const GemmActParams& params, cudaStream_t stream);

extern template void launch_simt_gemm_act<float>(const GemmActParams&, cudaStream_t);
extern template void launch_simt_gemm_act<double>(const GemmActParams&, cudaStream_t);
extern template void launch_simt_gemm_act<__half>(const GemmActParams&, cudaStream_t);
extern template void launch_simt_gemm_act<__nv_bfloat16>(const GemmActParams&, cudaStream_t);

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

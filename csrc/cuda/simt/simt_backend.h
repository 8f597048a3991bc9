// The SIMT backend's entry for the CUDA dispatch rule (register_cuda.cpp):
// takes every case, any arch, dtype, strides and alignment.
#pragma once

#include <cuda_runtime_api.h>

#include "backend_args.h"

namespace gemm_act {
namespace gpu {
namespace simt {

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream);

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

// The SIMT backend's entry for the CUDA dispatch rule (register_cuda.cpp):
// takes every case, any arch, dtype, strides and alignment.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "backend_args.h"

namespace gemm_act {
namespace gpu {
namespace simt {

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream);

// What try_gemm_act runs for `args`.
std::optional<std::string> plan(const GemmActArgs& args);

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

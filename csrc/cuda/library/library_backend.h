// The library backend: vendor GEMMs with the project's epilogue. Runs every
// case on any GPU PyTorch's CUDA build runs on:
//  - cuBLASLt with its fused epilogue where that matches the call
//    (cublaslt_epilogue.h), the kernel eager F.linear uses;
//  - otherwise torch.mm's GEMM (cuBLAS, any strides) into Y's or Z's memory,
//    then one vectorised pass (epilogue_pass.h) adds alpha, beta * C and the
//    bias, applies the activation and writes Y (and Z).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "backend_args.h"

namespace gemm_act {
namespace library {

// Always runs the case (true); throws only on a CUDA or cuBLAS error.
bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream);

// What try_gemm_act would run for `args`.
std::optional<std::string> plan(const GemmActArgs& args);

}  // namespace library
}  // namespace gemm_act

// cuBLASLt with its own fused epilogue, for the calls it matches exactly:
// fp16/bf16/fp32, activation none, relu or gelu_tanh (cuBLASLt's GELU is
// the tanh form), no bias or a bias per column, C (if any) row-major, and Z
// stored only for gelu_tanh (GELU_AUX: cuBLASLt writes the GELU input).
// This is the kernel eager F.linear runs for a Linear with a bias.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "backend_args.h"

namespace gemm_act {
namespace library {

// What cuBLASLt would run for `args` ("cuBLASLt GELU_AUX_BIAS", ...), or
// nothing when the case is not one it matches.
std::optional<std::string> cublaslt_plan(const GemmActArgs& args);

// Runs the case if cuBLASLt matches it and finds an algorithm for it; false,
// having done nothing, otherwise.
bool try_cublaslt(const GemmActArgs& args, cudaStream_t stream);

}  // namespace library
}  // namespace gemm_act

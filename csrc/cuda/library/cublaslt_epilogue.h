// cuBLASLt with its own fused epilogue, for the calls whose pre-activation
// it computes as the op does: fp16/bf16/fp32, no bias or a bias per
// column, C (if any) row-major. Its GELU (the tanh form; Z as GELU_AUX's
// aux matrix) where that is the call's activation; otherwise
// the bias epilogue, which eager F.linear runs for a Linear with a bias,
// followed by the activation pass (epilogue_pass.h).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "backend_args.h"

namespace gemm_act {
namespace library {

// What cuBLASLt would run for `args` ("cuBLASLt GELU_AUX_BIAS", ...), or
// nothing when the case is not one it matches.
std::optional<std::string> cublaslt_plan(const GemmActArgs& args);

// Whether cuBLASLt's own activation epilogue (GELU) computes the
// whole call, with no activation pass after it.
bool cublaslt_fuses_activation(const GemmActArgs& args);

// Runs the case if cuBLASLt matches it and finds an algorithm for it; false,
// having done nothing, otherwise.
bool try_cublaslt(const GemmActArgs& args, cudaStream_t stream);

// acc = a @ b (a [M, K], b [K, N], K > 0, each with a unit stride), acc a
// contiguous fp32 tensor: the GEMM's result before any rounding to
// a 16-bit storage type. False, having done nothing, where cuBLASLt declines.
bool cublaslt_accumulate(const at::Tensor& a, const at::Tensor& b, at::Tensor& acc, cudaStream_t stream);

}  // namespace library
}  // namespace gemm_act

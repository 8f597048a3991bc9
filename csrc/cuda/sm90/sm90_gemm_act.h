// Hopper (sm_90a) tensor-core forward: TMA + wgmma, warp-specialised,
// persistent, with the bias/activation/Z epilogue fused (CUTLASS 3 / CuTe).
//
// The entry the CUDA dispatch rule (cuda/register_cuda.cpp) calls. It takes
// the case or declines it.
//
// It returns false, having done nothing, when the device is not sm_90, the
// operands are not what TMA can read, or the library backend runs the same
// kernel eager PyTorch would (see classify in sm90_gemm_act.cpp for the exact
// list); it throws (TORCH_CHECK) only on a real CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backend_args.h"
#include "cuda/cuda_backends.h"

namespace gemm_act {
namespace sm90 {

// Runs Y = act(alpha * A @ B + beta * C + bias) (and Z) on `stream` (the
// current stream of args' device) when the sm90 kernel can; false otherwise.
bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream);

// Runs gemm_dact (args as prepare_gemm_dact makes them: C is `saved`) on
// the fused kernel when it can; false, having done nothing, otherwise. With
// `column_sums`, dA's columns summed over its rows ([N], dA's dtype) go
// there too: reduced per tile in the kernel's epilogue, then added up.
bool try_gemm_dact(const GemmActArgs& args, cudaStream_t stream, at::Tensor* column_sums = nullptr);

// gemm_glu's fused forward: (Y, H) with Y [M, N] = act(a @ b_gate +
// bias_gate) * (a @ b_up + bias_up), a [M, K], b_gate and b_up [K, N]
// (weights' transposes, K-major, one row stride), each bias [N] or none
// (fused_glu_biases_fit, gated.h), and H [M, 2N] both projections side by
// side where store_preact (else undefined), on the fused kernel when it can
// (compute capability 9.0, fp16/bf16, N a multiple of 8, what TMA can
// read) and the rule runs it there (rules glu_rows and glu_preact_k; any
// case when forced); nothing, having allocated
// nothing, otherwise.
// Runs gemm_dropout_add (args as prepare_gemm_act makes them with C the
// residual and beta 1, params.dropout_* set) on the fused kernel where the
// testing switch names one (rule dropout_forced) and it can (compute
// capability 9.0, fp16/bf16, operands TMA can read, C contiguous
// 16-byte-aligned rows, a bias per column, scalar or none); false, having
// done nothing, otherwise.
bool try_gemm_dropout_add(const GemmActArgs& args, cudaStream_t stream);

std::optional<std::tuple<at::Tensor, at::Tensor>> try_gemm_glu(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    bool store_preact, Activation activation, double negative_slope, cudaStream_t stream);

// The configuration try_gemm_act would run for `args`; nothing when it
// would decline the case.
std::optional<std::string> plan(const GemmActArgs& args);

// Why try_gemm_act would decline `args` (the rule that fired, by name);
// nothing when it would run it.
std::optional<std::string> why_not(const GemmActArgs& args);

// The configurations this build compiled, with their dtypes and B layouts.
std::vector<KernelInfo> compiled_kernels();

}  // namespace sm90
}  // namespace gemm_act

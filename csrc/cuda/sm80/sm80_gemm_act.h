// Ampere-class tensor-core forward: cp.async pipeline + ldmatrix +
// mma.sync (CuTe), with the bias/activation/Z epilogue fused. Runs on
// sm_80 and every later GPU.
//
// The entry the CUDA dispatch rule (cuda/register_cuda.cpp) calls. It takes
// the case or declines it: it returns false, having done nothing, when the
// device is older than sm_80, the dtype is not fp16/bf16, A is not
// K-contiguous or B neither K- nor N-contiguous, a pointer of A or B is not
// 16-byte aligned, a leading dimension is not a multiple of 8 elements,
// K == 0, no compiled configuration fits, or the build holds no code of the
// kernel for the device. On compute capability 9.0 and later (which have
// their own families and cuBLAS) it takes cases only when the testing
// switch forces it. It throws (TORCH_CHECK) only on a real CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backend_args.h"
#include "cuda/cuda_backends.h"

namespace gemm_act {
namespace sm80 {

// Runs Y = act(alpha * A @ B + beta * C + bias) (and Z) on `stream` (the
// current stream of args' device) when the sm80 kernel can; false otherwise.
bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream);

// gemm_glu's fused forward where the testing switch forces the family (as
// for gemm_act): as sm90::try_gemm_glu (sm90_gemm_act.h), on any GPU from
// sm_80 on.
std::optional<std::tuple<at::Tensor, at::Tensor>> try_gemm_glu(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    bool store_preact, Activation activation, double negative_slope, cudaStream_t stream);

// The configuration try_gemm_act would run for `args`; nothing when it
// would decline the case.
std::optional<std::string> plan(const GemmActArgs& args);

// The configurations this build compiled, with their dtypes and B layouts.
std::vector<KernelInfo> compiled_kernels();

}  // namespace sm80
}  // namespace gemm_act

// The seam between the sm80 entry (sm80_gemm_act.cpp, which sees PyTorch)
// and the kernel units (kernels/*.cu, which see CUTLASS and nothing of
// PyTorch).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/sm80/sm80_types.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm80 {

// Runs one kernel (configuration x dtype x B layout x activation; the bias
// kind, C and Z are run-time) on `stream`, on the current device. The entry
// has checked the operand rules (sm80_gemm_act.cpp) and that the
// configuration's shared memory fits the device. Returns the CUDA error of
// the shared-memory opt-in (then nothing was launched: for instance
// cudaErrorNoKernelImageForDevice) or of the launch. Defined in
// sm80_launch_template.cuh; instantiated for the rows of
// GEMM_ACT_SM80_FOR_EACH_KERNEL, one kernel unit each.
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
cudaError_t launch_kernel(const GemmActParams& p, cudaStream_t stream);

// gemm_glu's fused kernel (a configuration row with op "gemm_glu"): Y =
// act(A @ B_gate) * (A @ B_up), the weights as p.b and p.c, p.n both
// weights' columns, H to p.z where not null. Instantiated for
// GEMM_ACT_SM80_FOR_EACH_GLU_KERNEL.
template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
cudaError_t launch_glu_kernel(const GemmActParams& p, cudaStream_t stream);

}  // namespace sm80
}  // namespace gemm_act

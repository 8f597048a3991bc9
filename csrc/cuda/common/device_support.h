// Whether this build can run on a GPU, checked once per device before the
// first CUDA call there, so that a GPU the build has no code for gets an
// error naming it instead of CUDA's "no kernel image is available".
#pragma once

namespace gemm_act {

// Throws (a RuntimeError naming the GPU, its compute capability and the
// archs this build holds) when the build cannot run on `device`.
void check_device_supported(int device);

}  // namespace gemm_act

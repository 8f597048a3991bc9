// A kernel that does nothing, compiled for every arch of the build like all
// the others: whether the runtime finds an image of it for a device is
// whether the build runs there (device_support.cpp).
#include <cuda_runtime_api.h>

namespace gemm_act {
namespace {
__global__ void probe_kernel() {}
}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, probe_kernel);
}

}  // namespace gemm_act

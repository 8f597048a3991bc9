// gemm_act_cuda: the CUDA forward's entry point. Sets the device and stream,
// opens an NVTX range, picks the kernel and launches it.
//
// select_forward_kernel() is the one place that chooses a kernel (by arch,
// dtype, alignment and shape); today every problem goes to the SIMT kernel.
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cinttypes>
#include <cstdio>

#include "activations.h"
#include "backends.h"
#include "cuda/common/nvtx_range.h"
#include "cuda/simt/simt_gemm_act.h"
#ifdef GEMM_ACT_WITH_SM90
#include "cuda/sm90/sm90_gemm_act.h"
#endif
#include "gemm_act.h"

namespace gemm_act {
namespace {

const char* dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    default: return "?";
  }
}

enum class ForwardKernel {
  kSimt,  // csrc/cuda/simt: any arch, dtype, strides and alignment
};

// The single place that picks the forward kernel. Later: the sm90 (wgmma +
// TMA) and sm80 (mma.sync) tensor-core kernels by arch (props->major), dtype
// (fp16/bf16, fp32 with TF32 allowed), alignment and shape, falling back to
// SIMT for anything they cannot take.
ForwardKernel select_forward_kernel(const GemmActArgs& /*args*/) { return ForwardKernel::kSimt; }

template <class Element>
void launch_forward(ForwardKernel kernel, const GemmActParams& params, cudaStream_t stream) {
  switch (kernel) {
    case ForwardKernel::kSimt:
      gpu::simt::launch_simt_gemm_act<Element>(params, stream);
      return;
  }
  TORCH_INTERNAL_ASSERT(false, "gemm_act: unknown forward kernel");
}

}  // namespace

void gemm_act_cuda(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  if (p.m == 0 || p.n == 0) return;

  const c10::cuda::CUDAGuard device_guard(args.y.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::ScalarType dtype = args.y.scalar_type();
  char label[192];
  std::snprintf(label, sizeof(label), "gemm_act M=%" PRId64 " K=%" PRId64 " N=%" PRId64 " %s %s",
                p.m, p.k, p.n, dtype_name(dtype), activation_name(p.activation));
  const NvtxRange range(label);

#ifdef GEMM_ACT_WITH_SM90
  // The Hopper tensor-core kernel takes every case it can (sm_90, fp16/bf16,
  // what TMA can address) and declines the rest, which fall through.
  if (sm90::try_gemm_act(args, stream)) return;
#endif
  const ForwardKernel kernel = select_forward_kernel(args);

  switch (dtype) {
    case at::kFloat: launch_forward<float>(kernel, p, stream); break;
    case at::kDouble: launch_forward<double>(kernel, p, stream); break;
    case at::kHalf: launch_forward<__half>(kernel, p, stream); break;
    case at::kBFloat16: launch_forward<__nv_bfloat16>(kernel, p, stream); break;
    default: TORCH_CHECK(false, "gemm_act: no CUDA kernel for dtype ", dtype);
  }
}

}  // namespace gemm_act

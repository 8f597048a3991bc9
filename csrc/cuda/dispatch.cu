// gemm_act_cuda: the CUDA forward's entry point. Sets the device and stream,
// opens an NVTX range, picks the kernel and launches it. This is the one
// place that chooses a kernel (by arch, dtype, alignment and shape):
//
//  1. sm90 (csrc/cuda/sm90): TMA + wgmma on compute capability 9.0, for
//     fp16/bf16, and fp32 where PyTorch allows TF32. It takes operands TMA
//     can address directly, and large cases it cannot through aligned
//     copies (sm90_staging.h); it declines the rest.
//  2. SIMT (csrc/cuda/simt): any arch, dtype, strides and alignment: exact
//     fp32, fp64, small misaligned cases, and every GPU without sm90.
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
  if (sm90::try_gemm_act(args, stream)) return;
#endif
  switch (dtype) {
    case at::kFloat: gpu::simt::launch_simt_gemm_act<float>(p, stream); break;
    case at::kDouble: gpu::simt::launch_simt_gemm_act<double>(p, stream); break;
    case at::kHalf: gpu::simt::launch_simt_gemm_act<__half>(p, stream); break;
    case at::kBFloat16: gpu::simt::launch_simt_gemm_act<__nv_bfloat16>(p, stream); break;
    default: TORCH_CHECK(false, "gemm_act: no CUDA kernel for dtype ", dtype);
  }
}

}  // namespace gemm_act

#include "cuda/simt/simt_backend.h"

#include <c10/util/Exception.h>

#include "cuda/simt/simt_gemm_act.h"

namespace gemm_act {
namespace gpu {
namespace simt {

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream) {
  const GemmActParams& p = args.params;
  switch (args.y.scalar_type()) {
    case at::kFloat: launch_simt_gemm_act<float>(p, stream); return true;
    case at::kDouble: launch_simt_gemm_act<double>(p, stream); return true;
    case at::kHalf: launch_simt_gemm_act<__half>(p, stream); return true;
    case at::kBFloat16: launch_simt_gemm_act<__nv_bfloat16>(p, stream); return true;
    default: TORCH_CHECK(false, "gemm_act: no CUDA kernel for dtype ", args.y.scalar_type());
  }
}

std::optional<std::string> plan(const GemmActArgs&) {
  return std::string("CUDA-core GEMM with the fused epilogue");
}

}  // namespace simt
}  // namespace gpu
}  // namespace gemm_act

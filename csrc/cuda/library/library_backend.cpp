#include "cuda/library/library_backend.h"

#include <ATen/ops/mm.h>
#include <c10/util/Exception.h>

#include "cuda/library/cublaslt_epilogue.h"
#include "cuda/library/epilogue_pass.h"

namespace gemm_act {
namespace library {
void launch_epilogue_pass(c10::ScalarType dtype, const GemmActParams& p, const void* acc,
                          cudaStream_t stream) {
  switch (dtype) {
    case at::kFloat: gpu::library::launch_epilogue_pass<float>(p, acc, stream); return;
    case at::kDouble: gpu::library::launch_epilogue_pass<double>(p, acc, stream); return;
    case at::kHalf: gpu::library::launch_epilogue_pass<__half>(p, acc, stream); return;
    case at::kBFloat16: gpu::library::launch_epilogue_pass<__nv_bfloat16>(p, acc, stream); return;
    default: TORCH_CHECK(false, "gemm_act: the library backend has no pass for dtype ", dtype);
  }
}

std::optional<std::string> plan(const GemmActArgs& args) {
  if (std::optional<std::string> lt = cublaslt_plan(args)) return lt;
  return std::string("torch.mm (cuBLAS), then one epilogue pass");  // try_gemm_act's fallback
}

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream) {
  if (try_cublaslt(args, stream)) return true;
  // The GEMM lands where the pass reads it and then writes Y (or Z) in place.
  // at::mm_out runs on the current stream, which is `stream`.
  at::Tensor acc = args.z.defined() ? args.z : args.y;
  at::mm_out(acc, args.a, args.b);
  launch_epilogue_pass(args.y.scalar_type(), args.params, acc.data_ptr(), stream);
  return true;
}

}  // namespace library
}  // namespace gemm_act

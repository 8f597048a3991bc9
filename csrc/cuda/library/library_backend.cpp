#include "cuda/library/library_backend.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/util/Exception.h>

#include "cuda/library/cublaslt_epilogue.h"
#include "cuda/library/epilogue_pass.h"

namespace gemm_act {
namespace library {
void launch_epilogue_pass(c10::ScalarType dtype, const GemmActParams& p, const void* acc, bool float_acc,
                          cudaStream_t stream) {
  switch (dtype) {
    case at::kFloat: gpu::library::launch_epilogue_pass<float>(p, acc, false, stream); return;
    case at::kDouble: gpu::library::launch_epilogue_pass<double>(p, acc, false, stream); return;
    case at::kHalf: gpu::library::launch_epilogue_pass<__half>(p, acc, float_acc, stream); return;
    case at::kBFloat16: gpu::library::launch_epilogue_pass<__nv_bfloat16>(p, acc, float_acc, stream); return;
    default: TORCH_CHECK(false, "gemm_act: the library backend has no pass for dtype ", dtype);
  }
}

std::optional<std::string> plan(const GemmActArgs& args) {
  if (std::optional<std::string> lt = cublaslt_plan(args)) return lt;
  return std::string("cuBLAS's GEMM, then one epilogue pass");  // try_gemm_act's fallback
}

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream) {
  if (try_cublaslt(args, stream)) return true;
  // The GEMM, then one pass that adds alpha, beta * C and the bias, applies
  // the activation and writes Y (and Z). For fp16/bf16 the GEMM's result
  // stays in fp32, so that the pre-activation is rounded once, as in every
  // fused kernel: rounded to the storage type first, a term that the bias or
  // C then cancels kept its rounding error (docs/DESIGN.md, "Numerics").
  // fp32 and fp64 land in Y's or Z's memory, read before it is written.
  const GemmActParams& p = args.params;
  const bool half = args.y.scalar_type() == at::kHalf || args.y.scalar_type() == at::kBFloat16;
  at::Tensor acc = half ? at::empty({p.m, p.n}, args.y.options().dtype(at::kFloat))
                        : (args.z.defined() ? args.z : args.y);
  if (p.k == 0) {
    acc.zero_();
  } else if (half) {
    // cuBLASLt reads operands with a unit stride; others are copied first.
    const auto readable = [](const at::Tensor& t) {
      return t.stride(0) == 1 || t.stride(1) == 1 ? t : t.contiguous();
    };
    TORCH_CHECK(cublaslt_accumulate(readable(args.a), readable(args.b), acc, stream),
                "gemm_act: cuBLASLt found no algorithm for a ", p.m, " x ", p.k, " x ", p.n, " ",
                args.y.scalar_type(), " GEMM with an fp32 result");
  } else {
    // at::mm_out runs on the current stream, which is `stream`.
    at::mm_out(acc, args.a, args.b);
  }
  launch_epilogue_pass(args.y.scalar_type(), args.params, acc.data_ptr(), half, stream);
  return true;
}

}  // namespace library
}  // namespace gemm_act

#include "cuda/library/cublaslt_wgrad.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cublasLt.h>

#include "checks.h"
#include "cuda/library/cublaslt_common.h"

namespace gemm_act {
namespace library {

std::optional<std::tuple<at::Tensor, at::Tensor>> cublaslt_weight_bias_grad(const at::Tensor& grad,
                                                                           const at::Tensor& a,
                                                                           const at::Tensor& bias,
                                                                           bool transposed) {
  // fp32 keeps bias_grad's sum in double (as accurate as PyTorch's where
  // terms cancel); fp16/bf16 sums here accumulate in fp32, as PyTorch's do.
  cudaDataType_t type;
  switch (grad.scalar_type()) {
    case at::kHalf: type = CUDA_R_16F; break;
    case at::kBFloat16: type = CUDA_R_16BF; break;
    default: return std::nullopt;
  }
  const int64_t m = grad.size(0), n = grad.size(1), k = a.size(1);
  if (m == 0 || n == 0 || k == 0) return std::nullopt;
  // Row-major grad [M, N] and a [M, K] with contiguous rows are column-major
  // N x M and K x M matrices, leading dimensions their row strides.
  const auto rows_ok = [](const at::Tensor& t) {
    return t.stride(1) == 1 && (t.size(0) == 1 || t.stride(0) >= t.size(1));
  };
  if (!rows_ok(grad) || !rows_ok(a)) return std::nullopt;
  const int64_t ld_grad = grad.size(0) == 1 ? n : grad.stride(0);
  const int64_t ld_a = a.size(0) == 1 ? k : a.stride(0);

  // transposed: W [N, K] row-major, the column-major K x N  D = a (N) . grad (T);
  //   the bias runs along D's columns, summed from B over k: BGRADB.
  // else:       G [K, N] row-major, the column-major N x K  D = grad (N) . a (T);
  //   the bias runs along D's rows, summed from A over k: BGRADA.
  const at::Tensor& lt_a = transposed ? a : grad;
  const at::Tensor& lt_b = transposed ? grad : a;
  const int64_t rows_a = transposed ? k : n, ld_lt_a = transposed ? ld_a : ld_grad;
  const int64_t rows_b = transposed ? n : k, ld_lt_b = transposed ? ld_grad : ld_a;
  const int64_t d_rows = transposed ? k : n, d_cols = transposed ? n : k;
  const cublasLtEpilogue_t epilogue = transposed ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
  const cublasOperation_t op_n = CUBLAS_OP_N, op_t = CUBLAS_OP_T;

  at::Tensor weight = at::empty({transposed ? n : k, transposed ? k : n}, grad.options());
  at::Tensor grad_bias = at::empty({n}, grad.options());
  poison_if_requested(weight);
  poison_if_requested(grad_bias);

  const c10::cuda::CUDAGuard device_guard(grad.device());
  LtObjects o;
  const void* bias_ptr = grad_bias.data_ptr();
  bool ok = cublasLtMatmulDescCreate(&o.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            set(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_n) && set(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_t) &&
            set(o.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue) &&
            set(o.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr) &&
            cublasLtMatrixLayoutCreate(&o.a, type, rows_a, m, ld_lt_a) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&o.b, type, rows_b, m, ld_lt_b) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&o.d, type, d_rows, d_cols, d_rows) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceCreate(&o.pref) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return std::nullopt;

  const cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  const size_t workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  void* workspace = at::cuda::getCUDABlasLtWorkspace();
  const uint32_t align_a = alignment_bytes(lt_a.const_data_ptr());
  const uint32_t align_b = alignment_bytes(lt_b.const_data_ptr());
  const uint32_t align_d = alignment_bytes(weight.const_data_ptr());
  AlgoKey key;
  key.fields = {grad.get_device(), type, CUBLAS_COMPUTE_32F, epilogue, rows_a, ld_lt_a, rows_b,
                ld_lt_b, m, d_rows, d_cols, align_a, align_b, align_d,
                alignment_bytes(bias_ptr), int64_t(workspace_bytes)};
  std::optional<cublasLtMatmulAlgo_t> algo = algo_cache().find(key);
  if (!algo) {
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    if (!set_preferences(o.pref, workspace_bytes, align_a, align_b, align_d, align_d) ||
        cublasLtMatmulAlgoGetHeuristic(handle, o.desc, o.a, o.b, o.d, o.d, o.pref, 1, &heuristic,
                                       &found) != CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      return std::nullopt;
    }
    algo = heuristic.algo;
    algo_cache().remember(key, *algo);
  }
  const float alpha = 1.0f, beta = 0.0f;
  void* d = weight.data_ptr();
  const cublasStatus_t status =
      cublasLtMatmul(handle, o.desc, &alpha, lt_a.const_data_ptr(), o.a, lt_b.const_data_ptr(), o.b,
                     &beta, d, o.d, d, o.d, &*algo, workspace, workspace_bytes,
                     at::cuda::getCurrentCUDAStream());
  if (status == CUBLAS_STATUS_INVALID_VALUE || status == CUBLAS_STATUS_NOT_SUPPORTED) return std::nullopt;
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "gemm_act: cublasLtMatmul (weight and bias gradients) failed: ",
              cublasGetStatusString(status));
  return std::make_tuple(std::move(weight), std::move(grad_bias));
}

}  // namespace library
}  // namespace gemm_act

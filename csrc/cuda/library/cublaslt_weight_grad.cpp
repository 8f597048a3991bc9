#include "cuda/library/cublaslt_weight_grad.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <cublasLt.h>

#include <cstdint>

#include "checks.h"
#include "cuda/library/cublaslt_algo_cache.h"

namespace gemm_act {
namespace library {
namespace {

bool row_major_aligned(const at::Tensor& t) {
  constexpr int64_t kElementsPer16Bytes = 8;  // fp16 / bf16
  return t.stride(1) == 1 && t.stride(0) == t.size(1) && t.size(1) % kElementsPer16Bytes == 0 &&
         reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 == 0;
}

AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

}  // namespace

bool try_cublaslt_weight_bias_grad(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& bias,
                                   bool transposed, at::Tensor& grad_b, at::Tensor& grad_bias) {
  const auto dtype = grad.scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16) return false;
  const int64_t m = grad.size(0), n = grad.size(1), k = a.size(1);
  if (m == 0 || n == 0 || k == 0 || bias.numel() != n || bias.dim() < 1 || bias.size(-1) != n) return false;
  if (!row_major_aligned(grad) || !row_major_aligned(a)) return false;
  const cudaDataType_t type = dtype == at::kHalf ? CUDA_R_16F : CUDA_R_16BF;

  // cuBLASLt is column-major: grad's memory is the N x M matrix G, a's the
  // K x M matrix A. Transposed, the result [N, K] row-major is the K x N
  // matrix A G^T, whose columns are the bias's (BGRADB sums G^T over the
  // GEMM's k = M); otherwise [K, N] row-major is the N x K matrix G A^T,
  // whose rows are the bias's (BGRADA sums G).
  const at::Tensor& first = transposed ? a : grad;
  const at::Tensor& second = transposed ? grad : a;
  const uint64_t rows = first.size(1), cols = second.size(1);  // of the column-major result
  const cublasLtEpilogue_t epilogue = transposed ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
  const cublasOperation_t op_n = CUBLAS_OP_N, op_t = CUBLAS_OP_T;

  LtObjects o;
  at::Tensor out = at::empty({static_cast<int64_t>(cols), static_cast<int64_t>(rows)}, grad.options());
  at::Tensor out_bias = at::empty({n}, grad.options());
  poison_if_requested(out);
  poison_if_requested(out_bias);
  void* bias_ptr = out_bias.mutable_data_ptr();
  bool ok = cublasLtMatmulDescCreate(&o.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            set_attribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_n) && set_attribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_t) &&
            set_attribute(o.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue) &&
            set_attribute(o.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr) &&
            cublasLtMatrixLayoutCreate(&o.a, type, rows, m, rows) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&o.b, type, cols, m, cols) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&o.d, type, rows, cols, rows) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceCreate(&o.pref) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return false;

  const cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  // PyTorch's own cuBLASLt workspace for this handle and stream.
  const size_t workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  void* workspace = at::cuda::getCUDABlasLtWorkspace();
  const uint32_t align_a = alignment_bytes(first.const_data_ptr());
  const uint32_t align_b = alignment_bytes(second.const_data_ptr());
  const uint32_t align_d = alignment_bytes(out.const_data_ptr());
  AlgoKey key;
  key.fields = {grad.get_device(), type, epilogue, m, n, k, align_a, align_b, align_d,
                alignment_bytes(bias_ptr), int64_t(workspace_bytes)};
  std::optional<cublasLtMatmulAlgo_t> algo = algo_cache().find(key);
  if (!algo) {
    const auto pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
      return cublasLtMatmulPreferenceSetAttribute(o.pref, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
    };
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    if (!pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes)) ||
        !pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a) ||
        !pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b) ||
        !pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d) ||
        !pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d) ||
        cublasLtMatmulAlgoGetHeuristic(handle, o.desc, o.a, o.b, o.d, o.d, o.pref, 1, &heuristic, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      return false;
    }
    algo = heuristic.algo;
    algo_cache().remember(key, *algo);
  }
  const float alpha = 1.0f, beta = 0.0f;
  void* d = out.mutable_data_ptr();
  const cublasStatus_t status =
      cublasLtMatmul(handle, o.desc, &alpha, first.const_data_ptr(), o.a, second.const_data_ptr(), o.b, &beta, d,
                     o.d, d, o.d, &*algo, workspace, workspace_bytes, at::cuda::getCurrentCUDAStream());
  if (status == CUBLAS_STATUS_INVALID_VALUE || status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "weight_bias_grad: cublasLtMatmul failed: ",
              cublasGetStatusString(status));
  grad_b = std::move(out);
  grad_bias = out_bias.view(bias.sizes());
  return true;
}

}  // namespace library
}  // namespace gemm_act

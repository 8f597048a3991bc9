#include "cuda/library/cublaslt_epilogue.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>
#include <cublasLt.h>

#include <cstdint>

#include "activations.h"
#include "cuda/library/cublaslt_algo_cache.h"
#include "cuda/library/epilogue_pass.h"

namespace gemm_act {
namespace library {
namespace {

// cuBLASLt is column-major: row-major Y[M, N] is the column-major N x M
// matrix D = op(B') op(A'), where B' and A' are B's and A's memory read
// column-major. An operand qualifies when one of its strides is 1.
struct ColumnMajorOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;  // of the stored matrix, before op
  int64_t ld = 0;
};

// [outer, inner] with strides (s_outer, s_inner), read as the column-major
// inner x outer matrix (op N) or, with s_outer == 1, as outer x inner (op T).
std::optional<ColumnMajorOperand> as_column_major(int64_t outer, int64_t inner, int64_t s_outer,
                                                  int64_t s_inner) {
  if ((s_inner == 1 || inner == 1) && (outer == 1 || s_outer >= inner)) {
    return ColumnMajorOperand{CUBLAS_OP_N, uint64_t(inner), uint64_t(outer),
                              outer == 1 ? std::max<int64_t>(inner, 1) : s_outer};
  }
  if ((s_outer == 1 || outer == 1) && (inner == 1 || s_inner >= outer)) {
    return ColumnMajorOperand{CUBLAS_OP_T, uint64_t(outer), uint64_t(inner),
                              inner == 1 ? std::max<int64_t>(outer, 1) : s_inner};
  }
  return std::nullopt;
}

struct LtCase {
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const char* name = "";
  // cuBLASLt writes the pre-activation into Z's memory (Y's without Z),
  // then the epilogue pass writes Y = act(it).
  bool then_activation = false;
  bool gelu_aux = false;  // Z is GELU_AUX's aux matrix
  cudaDataType_t data_type = CUDA_R_16BF;  // of A and B
  cudaDataType_t out_type = CUDA_R_16BF;   // of C and D
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  static constexpr cudaDataType_t scale_type = CUDA_R_32F;
  ColumnMajorOperand a, b;  // the column-major views: D = op(b) op(a)
};

// The operand and compute types of a GEMM on `dtype` operands whose result
// is stored as they are; false for fp64 (cuBLASLt has no fp64 epilogues: the
// library runs at::mm and the pass) and for dtypes cuBLASLt does not take.
bool lt_types(at::ScalarType dtype, LtCase& lt) {
  switch (dtype) {
    case at::kHalf: lt.data_type = CUDA_R_16F; break;
    case at::kBFloat16: lt.data_type = CUDA_R_16BF; break;
    case at::kFloat:
      lt.data_type = CUDA_R_32F;
      // As torch.mm: TF32 only where PyTorch's matmul precision allows it.
      lt.compute = at::globalContext().allowTF32CuBLAS() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    default: return false;
  }
  lt.out_type = lt.data_type;
  return true;
}

std::optional<LtCase> match(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  LtCase lt;
  if (!lt_types(args.y.scalar_type(), lt)) return std::nullopt;
  if (p.k <= 0) return std::nullopt;
  const bool bias = p.bias_kind == BiasKind::PerColumn;
  if (p.bias_kind != BiasKind::None && !bias) return std::nullopt;
  const bool z = p.z != nullptr;
  // cuBLASLt's own activation where it is exactly ours and writes what is
  // asked: GELU (the tanh form), with Z as its aux matrix (whose leading
  // dimension, N, must be a multiple of 8). Not its RELU, which turns NaN
  // into 0 where torch.relu keeps it. Any other case: the pre-activation
  // through the bias epilogue into Z (when stored) or Y, then the activation
  // pass, as eager F.linear and its activation do.
  if (p.activation == Activation::GELUTanh && (!z || p.n % 8 == 0)) {
    lt.gelu_aux = z;
    lt.epilogue = z ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                    : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    lt.name = z ? (bias ? "GELU_AUX_BIAS" : "GELU_AUX") : (bias ? "GELU_BIAS" : "GELU");
  } else {
    lt.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    lt.name = bias ? "BIAS" : "DEFAULT";
    lt.then_activation = p.activation != Activation::None || z;
  }
  // C as cuBLASLt reads it: D's order (row-major), any leading dimension.
  if (p.c != nullptr && !(p.c_stride_n == 1 && (p.m == 1 || p.c_stride_m >= p.n))) return std::nullopt;
  const auto a = as_column_major(p.m, p.k, p.a_stride_m, p.a_stride_k);
  const auto b = as_column_major(p.k, p.n, p.b_stride_k, p.b_stride_n);
  if (!a || !b) return std::nullopt;
  lt.a = *a;
  lt.b = *b;
  return lt;
}

// RAII for the descriptor objects, destroyed whatever path returns.
struct LtObjects {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The largest power of two up to 256 that divides the address, which
// cuBLASLt's heuristic must know (it otherwise assumes 256 and may choose an
// algorithm the pointer cannot serve).
uint32_t alignment_bytes(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// The split-K reduction schemes the heuristic may choose: partial sums added
// in the compute type (fp32) or none, never in fp16 / bf16, whatever
// PyTorch's allow_fp16_/allow_bf16_reduced_precision_reduction permit. A
// partial sum rounded to the output type is off by an ulp of the partial,
// not of the result: the pre-activation of a short, wide problem then
// missed by many of Y's ulps after tanh or sigmoid and flipped relu masks
// (docs/DESIGN.md, "Numerics").
uint32_t reduction_scheme_mask(cudaDataType_t type) {
  if (type != CUDA_R_16F && type != CUDA_R_16BF) return 0;
  return CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_NONE;
}

AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

template <class T>
bool set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

// One cublasLtMatmul: D = alpha * op(B') op(A') + beta * C, with lt's
// epilogue, in the column-major view (D = Y^T, B' = b, A' = a).
struct LtCall {
  LtCase lt;
  int device = 0;
  int64_t m = 0, n = 0, ldc = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
  const void* bias = nullptr;  // the bias epilogues' per-column bias
  void* aux = nullptr;         // GELU_AUX's matrix (leading dimension n)
  double alpha = 1.0, beta = 0.0;
};

// Runs `call` on `stream`; false, having done nothing, where cuBLASLt
// declines it.
bool run(const LtCall& call, cudaStream_t stream) {
  const LtCase& lt = call.lt;
  LtObjects o;
  if (cublasLtMatmulDescCreate(&o.desc, lt.compute, lt.scale_type) != CUBLAS_STATUS_SUCCESS) return false;
  // D = op(b) op(a): b's view comes first.
  bool ok = set(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, lt.b.op) && set(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, lt.a.op) &&
            set(o.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt.epilogue);
  if (ok && call.bias != nullptr) ok = set(o.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  // The aux matrix only for GELU_AUX (set with another epilogue, cuBLASLt
  // wrote into it: NaN rows in Z).
  if (ok && call.aux != nullptr) {
    ok = set(o.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, call.aux) &&
         set(o.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, call.n);
  }
  ok = ok &&
       cublasLtMatrixLayoutCreate(&o.b, lt.data_type, lt.b.rows, lt.b.cols, lt.b.ld) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&o.a, lt.data_type, lt.a.rows, lt.a.cols, lt.a.ld) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&o.c, lt.out_type, call.n, call.m, call.ldc) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&o.d, lt.out_type, call.n, call.m, call.n) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceCreate(&o.pref) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return false;

  const cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  // PyTorch's own cuBLASLt workspace for this handle and stream, as F.linear uses.
  const size_t workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  void* workspace = at::cuda::getCUDABlasLtWorkspace();
  // cuBLASLt's A is our b and its B our a (D = op(b) op(a)).
  const uint32_t align_a = alignment_bytes(call.b), align_b = alignment_bytes(call.a);
  const uint32_t align_c = alignment_bytes(call.c), align_d = alignment_bytes(call.d);
  const uint32_t reductions = reduction_scheme_mask(lt.out_type);

  AlgoKey key;
  key.fields = {call.device, lt.data_type, lt.out_type, lt.compute, lt.epilogue,
                lt.b.op, int64_t(lt.b.rows), int64_t(lt.b.cols), lt.b.ld,
                lt.a.op, int64_t(lt.a.rows), int64_t(lt.a.cols), lt.a.ld,
                call.m, call.n, call.ldc, align_a, align_b, align_c, align_d,
                call.bias != nullptr ? alignment_bytes(call.bias) : 0,
                call.aux != nullptr ? alignment_bytes(call.aux) : 0, int64_t(workspace_bytes), reductions};
  std::optional<cublasLtMatmulAlgo_t> algo = algo_cache().find(key);
  if (!algo) {
    const auto pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
      return cublasLtMatmulPreferenceSetAttribute(o.pref, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
    };
    if (!(pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes) &&
          pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a) &&
          pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b) &&
          pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c) &&
          pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d) &&
          (reductions == 0 || pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions)))) {
      return false;
    }
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(handle, o.desc, o.b, o.a, o.c, o.d, o.pref, 1, &heuristic, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      return false;
    }
    algo = heuristic.algo;
    algo_cache().remember(key, *algo);
  }
  // The scalars in the scale type, float.
  const float alpha = static_cast<float>(call.alpha), beta = static_cast<float>(call.beta);
  const cublasStatus_t status = cublasLtMatmul(handle, o.desc, &alpha, call.b, o.b, call.a, o.a, &beta, call.c, o.c,
                                               call.d, o.d, &*algo, workspace, workspace_bytes, stream);
  // An argument cuBLASLt rejects leaves nothing written: the caller falls back.
  if (status == CUBLAS_STATUS_INVALID_VALUE || status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "gemm_act: cublasLtMatmul failed: ", cublasGetStatusString(status));
  return true;
}

}  // namespace

std::optional<std::string> cublaslt_plan(const GemmActArgs& args) {
  const std::optional<LtCase> lt = match(args);
  if (!lt) return std::nullopt;
  return std::string("cuBLASLt matmul with epilogue ") + lt->name +
         (lt->then_activation ? ", then the activation pass" : "");
}

bool cublaslt_fuses_activation(const GemmActArgs& args) {
  const std::optional<LtCase> lt = match(args);
  return lt.has_value() && !lt->then_activation && lt->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
         lt->epilogue != CUBLASLT_EPILOGUE_BIAS;
}

bool try_cublaslt(const GemmActArgs& args, cudaStream_t stream) {
  const std::optional<LtCase> lt = match(args);
  if (!lt) return false;
  const GemmActParams& p = args.params;
  LtCall call;
  call.lt = *lt;
  call.device = args.y.get_device();
  call.m = p.m;
  call.n = p.n;
  call.a = p.a;
  call.b = p.b;
  call.d = lt->then_activation && p.z != nullptr ? p.z : p.y;
  call.c = p.c != nullptr ? p.c : call.d;
  call.ldc = p.c != nullptr ? (p.m == 1 ? p.n : p.c_stride_m) : p.n;
  call.bias = p.bias_kind == BiasKind::PerColumn ? p.bias : nullptr;
  call.aux = lt->gelu_aux ? p.z : nullptr;
  call.alpha = p.alpha;
  call.beta = p.c != nullptr ? p.beta : 0.0;
  if (!run(call, stream)) return false;
  if (lt->then_activation) {
    // D holds the whole pre-activation, Z's final value when Z is stored:
    // the pass only applies the activation and writes Y.
    GemmActParams act_only = p;
    act_only.alpha = 1.0;
    act_only.c = nullptr;
    act_only.bias_kind = BiasKind::None;
    act_only.z = nullptr;
    // With nothing per row or column left to add, D and Y (both dense
    // [m, n]) are one row of m * n elements to the pass: 16-byte accesses
    // whatever n is.
    act_only.n = p.m * p.n;
    act_only.m = 1;
    launch_epilogue_pass(args.y.scalar_type(), act_only, call.d, /*float_acc=*/false, stream);
  }
  return true;
}

bool cublaslt_accumulate(const at::Tensor& a, const at::Tensor& b, at::Tensor& acc, cudaStream_t stream) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  LtCall call;
  LtCase& lt = call.lt;
  if (!lt_types(a.scalar_type(), lt) || k <= 0 || !acc.is_contiguous() || acc.scalar_type() != at::kFloat) {
    return false;
  }
  lt.out_type = CUDA_R_32F;
  const auto a_view = as_column_major(m, k, a.stride(0), a.stride(1));
  const auto b_view = as_column_major(k, n, b.stride(0), b.stride(1));
  if (!a_view || !b_view) return false;
  lt.a = *a_view;
  lt.b = *b_view;
  lt.name = "DEFAULT";
  call.device = acc.get_device();
  call.m = m;
  call.n = n;
  call.a = a.const_data_ptr();
  call.b = b.const_data_ptr();
  call.d = acc.mutable_data_ptr();
  call.c = call.d;
  call.ldc = n;
  return run(call, stream);
}

}  // namespace library
}  // namespace gemm_act

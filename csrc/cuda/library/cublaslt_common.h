// What every cuBLASLt call of the library backend shares: the descriptor
// objects' lifetime, the operand alignment the heuristic must be told, and
// one cache of the algorithms it chose (cublaslt_algo_cache.h).
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "cuda/library/cublaslt_algo_cache.h"

namespace gemm_act {
namespace library {

// RAII for the descriptor objects, destroyed whatever path returns.
struct LtObjects {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtObjects() = default;
  LtObjects(const LtObjects&) = delete;
  LtObjects& operator=(const LtObjects&) = delete;
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
inline uint32_t alignment_bytes(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// One cache for every call description (the epilogue is part of the key).
inline AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

template <class T>
bool set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

// Sets the preference's workspace limit and the four operands' alignments.
inline bool set_preferences(cublasLtMatmulPreference_t pref, size_t workspace_bytes, uint32_t align_a,
                            uint32_t align_b, uint32_t align_c, uint32_t align_d) {
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
    return cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
  };
  return set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes) &&
         set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a) &&
         set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b) &&
         set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c) &&
         set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
}

}  // namespace library
}  // namespace gemm_act

// What TMA can address: the rules the sm90 entry checks before a direct
// launch and that staging (sm90_staging.h) establishes otherwise.
//
// TMA moves whole 16-byte granules: every base pointer and every non-unit
// stride must be a multiple of 16 bytes (`align` elements), and so must the
// extent of each contiguous dimension (CUTLASS's can_implement asks the same
// of K, and of N for Y, Z and a row-major B). C (any strides, any alignment)
// and the bias (contiguous, any alignment) are read element-wise by the
// epilogue, but for the tmac configurations' C (c_fits_tma).
#pragma once

#include <cstdint>
#include <optional>

#include "cuda/sm90/sm90_launch.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A [M, K]: K contiguous, rows aligned and not overlapping.
inline bool a_fits_tma(const GemmActParams& p, int64_t align) {
  return p.k % align == 0 && p.a_stride_k == 1 && p.a_stride_m % align == 0 &&
         p.a_stride_m >= p.k && aligned16(p.a);
}

// B [K, N]: one dimension contiguous (N only where `n_major_ok`), the other
// an aligned stride no smaller than the contiguous extent. Its layout, or
// nothing when TMA cannot take it.
inline std::optional<BLayout> b_fits_tma(const GemmActParams& p, int64_t align, bool n_major_ok) {
  if (p.k % align != 0 || p.n % align != 0 || !aligned16(p.b)) return std::nullopt;
  if (p.b_stride_k == 1 && p.b_stride_n % align == 0 && p.b_stride_n >= p.k) {
    return BLayout::KMajor;
  }
  if (n_major_ok && p.b_stride_n == 1 && p.b_stride_k % align == 0 && p.b_stride_k >= p.n) {
    return BLayout::NMajor;
  }
  return std::nullopt;
}

// Y and Z: contiguous [M, N], so N is their leading dimension.
inline bool outputs_fit_tma(const GemmActParams& p, int64_t align) {
  return p.n % align == 0 && aligned16(p.y) && (p.z == nullptr || aligned16(p.z));
}

// C [M, N] where a tmac configuration loads it through TMA: N contiguous,
// rows an aligned stride no smaller than N.
inline bool c_fits_tma(const GemmActParams& p, int64_t align) {
  return p.n % align == 0 && p.c_stride_n == 1 && p.c_stride_m % align == 0 && p.c_stride_m >= p.n &&
         aligned16(p.c);
}

}  // namespace sm90
}  // namespace gemm_act

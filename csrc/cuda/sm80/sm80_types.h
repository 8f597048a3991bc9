// The vocabulary of the sm80 family (cp.async + ldmatrix + mma.sync, for
// sm_80 and later), without PyTorch or CUTLASS: what the entry, the
// heuristic and the kernel units share.
#pragma once

// The configurations and the compiled kernels (GEMM_ACT_SM80_FOR_EACH_CONFIG,
// GEMM_ACT_SM80_FOR_EACH_KERNEL), generated from sm80_kernels.py.
#include "cuda/sm80/sm80_kernel_table.h"

namespace gemm_act {
namespace sm80 {

// Storage type of A, B, C, bias, Y and Z (all equal); fp32 accumulation.
enum class Dtype : int { F16 = 0, BF16 = 1 };

// How B [K, N] is laid out: KMajor has b_stride_k == 1 (nn.Linear's
// weight.t()), NMajor has b_stride_n == 1 (a row-major B).
enum class BLayout : int { KMajor = 0, NMajor = 1 };

enum class KernelConfig : int {
#define GEMM_ACT_SM80_ENUMERATOR(name, m, n, k, s) name,
  GEMM_ACT_SM80_FOR_EACH_CONFIG(GEMM_ACT_SM80_ENUMERATOR)
#undef GEMM_ACT_SM80_ENUMERATOR
};

struct ConfigInfo {
  const char* name;
  int tile_m, tile_n, tile_k, stages;
  int threads;     // one warp per 64 x 64 output tile
  int smem_bytes;  // dynamic shared memory: the stages of A and B (the epilogue reuses it)
};

constexpr ConfigInfo make_config_info(const char* name, int m, int n, int k, int stages) {
  constexpr int kElementBytes = 2;  // fp16 and bf16
  return {name, m, n, k, stages, 32 * (m / 64) * (n / 64), stages * (m + n) * k * kElementBytes};
}

inline constexpr ConfigInfo kConfigs[] = {
#define GEMM_ACT_SM80_INFO(name, m, n, k, s) make_config_info(#name, m, n, k, s),
    GEMM_ACT_SM80_FOR_EACH_CONFIG(GEMM_ACT_SM80_INFO)
#undef GEMM_ACT_SM80_INFO
};

constexpr int kNumKernelConfigs = static_cast<int>(sizeof(kConfigs) / sizeof(kConfigs[0]));

constexpr const ConfigInfo& config_info(KernelConfig c) { return kConfigs[static_cast<int>(c)]; }
constexpr const char* config_name(KernelConfig c) { return config_info(c).name; }

#define GEMM_ACT_SM80_IS(C, D, L) \
  if (c == KernelConfig::C && d == Dtype::D && l == BLayout::L) return true;

// Whether configuration c is compiled as gemm_act's kernel for dtype d and
// B layout l.
constexpr bool is_compiled(KernelConfig c, Dtype d, BLayout l) {
  GEMM_ACT_SM80_FOR_EACH_KERNEL(GEMM_ACT_SM80_IS)
  return false;
}

// Whether configuration c is compiled as gemm_glu's kernel for dtype d and
// B layout l.
constexpr bool is_compiled_glu(KernelConfig c, Dtype d, BLayout l) {
  GEMM_ACT_SM80_FOR_EACH_GLU_KERNEL(GEMM_ACT_SM80_IS)
  return false;
}

#undef GEMM_ACT_SM80_IS

}  // namespace sm80
}  // namespace gemm_act

// The vocabulary of the sm80 family (cp.async + ldmatrix + mma.sync, for
// sm_80 and later), without PyTorch or CUTLASS: what the entry, the
// heuristic and the kernel units share.
#pragma once

namespace gemm_act {
namespace sm80 {

// Storage type of A, B, C, bias, Y and Z (all equal); fp32 accumulation.
enum class Dtype : int { F16 = 0, BF16 = 1 };

// How B [K, N] is laid out: KMajor has b_stride_k == 1 (nn.Linear's
// weight.t()), NMajor has b_stride_n == 1 (a row-major B).
enum class BLayout : int { KMajor = 0, NMajor = 1 };

// The configurations, one row each: name, CTA tile M x N x K (K: the depth
// of one pipeline stage), stages. Every configuration gives each warp a
// 64 x 64 output tile, so the tile fixes the warp count.
#define GEMM_ACT_SM80_FOR_EACH_CONFIG(X)                                                \
  /* Fits sm_86/89's 99 KiB of shared memory per block; the default there. */          \
  X(mma_128x256x32_s4, 128, 256, 32, 4)                                                 \
  /* Problems too small to fill the GPU with 128 x 256 tiles. */                        \
  X(mma_128x128x32_s4, 128, 128, 32, 4)                                                 \
  /* Half the barriers per MMA of the K = 32 tile; needs sm_80/90's larger opt-in. */  \
  X(mma_128x256x64_s3, 128, 256, 64, 3)

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

static_assert(config_info(KernelConfig::mma_128x256x32_s4).smem_bytes == 96 * 1024);
static_assert(config_info(KernelConfig::mma_128x128x32_s4).smem_bytes == 64 * 1024);
static_assert(config_info(KernelConfig::mma_128x256x64_s3).smem_bytes == 144 * 1024);

// X(configuration, Dtype, BLayout) for every compiled kernel: one unit each,
// kernels/sm80_<configuration>_<dtype>_<layout>.cu.
#define GEMM_ACT_SM80_FOR_EACH_KERNEL(X) \
  X(mma_128x256x32_s4, BF16, KMajor)     \
  X(mma_128x256x32_s4, BF16, NMajor)     \
  X(mma_128x256x32_s4, F16, KMajor)      \
  X(mma_128x128x32_s4, BF16, KMajor)     \
  X(mma_128x256x64_s3, BF16, KMajor)

// Whether configuration c is compiled for dtype d and B layout l.
constexpr bool is_compiled(KernelConfig c, Dtype d, BLayout l) {
#define GEMM_ACT_SM80_IS(C, D, L) \
  if (c == KernelConfig::C && d == Dtype::D && l == BLayout::L) return true;
  GEMM_ACT_SM80_FOR_EACH_KERNEL(GEMM_ACT_SM80_IS)
#undef GEMM_ACT_SM80_IS
  return false;
}

}  // namespace sm80
}  // namespace gemm_act

// Which sm90 kernel configuration and tile order a problem gets. No
// autotuning at call time: a few rules, each from measurements on an H100
// SXM (132 SMs) of bf16 Y = act(A @ W^T + b), with and without Z, against
// each other and torch.mm in the same run (bench/sm90_sweep.py).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "cuda/sm90/sm90_launch.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {

struct TileGeometry {
  int tile_m, tile_n, cluster_m, cluster_n;
};

inline TileGeometry tile_geometry(KernelConfig config) {
  switch (config) {
    case KernelConfig::kPingpong128x128:
      return {128, 128, 1, 2};
    case KernelConfig::kPingpong64x128:
      return {64, 128, 1, 2};
#ifdef GEMM_ACT_SM90_SWEEP
    case KernelConfig::kPingpong128x128Epi32:
    case KernelConfig::kPingpong128x128EpiWide:
      return {128, 128, 1, 2};
    case KernelConfig::kCooperative256x128:
      return {256, 128, 2, 1};
    case KernelConfig::kPingpong64x128Cluster1:
      return {64, 128, 1, 1};
#endif
    case KernelConfig::kCooperative128x256:
    default:
      return {128, 256, 1, 2};
  }
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// TORCH_GEMM_ACT_SM90_CONFIG=<KernelConfig number> forces a configuration
// (for measuring them against each other: bench/sm90_sweep.py); -1 if unset.
// Read on every call (a lookup in the environment, well under a launch's
// cost) so the sweep can take the configurations in turns in one process.
inline int config_from_env() {
  const char* env = std::getenv("TORCH_GEMM_ACT_SM90_CONFIG");
  return env != nullptr && *env != '\0' ? std::atoi(env) : -1;
}

// Fills la.config, la.raster and la.max_swizzle for the problem in `p`, whose
// elements take `element_bytes` each. `pingpong_compiled`: whether the
// ping-pong configuration exists for this case (fp16/bf16 with column-major B
// only, see sm90_gemm_act_kernel.cuh).
inline void choose_launch(const GemmActParams& p, int64_t element_bytes, bool pingpong_compiled,
                          LaunchArgs& la) {
  // 1. Tile configuration. Ping-pong hides one tile's epilogue behind the
  //    other warpgroup's mainloop, so it wins wherever that mainloop lasts
  //    at least as long as the epilogue; cooperative runs the epilogue on
  //    all 256 consumer threads and has the better mainloop for long K.
  //    Shapes are MxNxK; bf16, 64-wide epilogue subtiles, time / torch.mm
  //    in one run (bench/results/*_sweep.log; runs differ by up to ~5%):
  //  - Small M (inference): the weight read is the whole cost and the
  //    128x128 tiles give twice the CTAs streaming it (M = 128, N = 16384,
  //    K = 4096: ping-pong 1.084, cooperative 1.212). For M <= 64, 64x128
  //    tiles (M = 16, N = 16384, K = 4096, gelu: 1.054 and 1.075 in two
  //    sweeps against 1.179 and 1.157 for 128x128; at M = 128 they lose,
  //    1.123 vs 1.093; without the cluster 1.059, no better).
  //  - Long K: cooperative (8192x4096x16384 none: 1.074 vs 1.238).
  //  - Wide N at moderate K (epilogue hidden as below): ping-pong
  //    (4096x11008x4096 silu: 0.522 vs 0.551 ms with 32-wide subtiles; with
  //    64-wide ones the sweep's gelu + Z runs of one configuration spread
  //    over 1.10-1.20, too wide to rank the two there).
  //  - Short K: ping-pong when its epilogue fits behind a K <= 1024
  //    mainloop: a cheap activation (16384x4096x1024 none: 0.898 vs 1.058;
  //    32768x3072x768 none: 1.036 vs 1.137) or K = 1024 (16384x4096x1024
  //    gelu + Z: 1.292 vs 1.335). At K = 768 an expensive activation's
  //    epilogue outlasts it and cooperative wins (32768x3072x768 gelu + Z:
  //    1.496 vs 1.599).
  //  - Otherwise cooperative (4096^3 gelu + Z: 1.136 vs 1.189).
  const bool cheap_activation = p.activation == Activation::None ||
                                p.activation == Activation::ReLU ||
                                p.activation == Activation::LeakyReLU;
  const bool epilogue_hidden = cheap_activation || p.k >= 1024;
  const bool small_m = p.m <= 256;
  const bool wide_n = p.n >= 8192 && p.k <= 8192;
  const bool short_k = p.k <= 1024;
  la.config = pingpong_compiled && (small_m || (epilogue_hidden && (wide_n || short_k)))
                  ? KernelConfig::kPingpong128x128
                  : KernelConfig::kCooperative128x256;
  if (pingpong_compiled && p.m <= 64) la.config = KernelConfig::kPingpong64x128;
  const int forced = config_from_env();
  if (forced >= 0) la.config = static_cast<KernelConfig>(forced);
  const TileGeometry g = tile_geometry(la.config);

  // 2. Raster order: walk along the dimension of the smaller operand, so the
  //    tiles of the larger one that a wave of CTAs shares stay few. CUTLASS's
  //    own heuristic compares tile counts instead, and with equal counts
  //    (8192x16384 in 128x256 tiles: 64 x 64) it walks along N and re-reads
  //    all of the 128 MiB weight every wave (1.97 against 1.67 along M).
  const bool along_m = p.n > p.m;
  la.raster = along_m ? Raster::AlongM : Raster::AlongN;

  // 3. Grouped rasterisation (swizzle): when the operand that every wave
  //    streams whole (A along M, B along N) is larger than the 50 MiB L2,
  //    walking in bands of 2 clusters keeps a wave's share of it in L2
  //    (8192x16384x4096:
  //    1.61 vs 1.67 cooperative, 1.54 vs 1.84 ping-pong). Wider bands
  //    measured no better. CUTLASS rounds both tile-grid sides up to a
  //    multiple of band x cluster and runs the extra tiles, so a band that
  //    would add tiles is not used (32768x3072 with bands of 4: +33% tiles,
  //    0.51 against 0.39).
  const int64_t tiles_m = ceil_div(p.m, g.tile_m);
  const int64_t tiles_n = ceil_div(p.n, g.tile_n);
  const int64_t streamed_bytes = (along_m ? p.m : p.n) * p.k * element_bytes;
  constexpr int64_t kL2Bytes = int64_t(48) << 20;
  la.max_swizzle = 1;
  if (streamed_bytes > kL2Bytes) {
    constexpr int kBand = 2;
    const bool no_extra_tiles =
        ceil_div(tiles_m, g.cluster_m) == ceil_div(tiles_m, kBand * g.cluster_m) * kBand &&
        ceil_div(tiles_n, g.cluster_n) == ceil_div(tiles_n, kBand * g.cluster_n) * kBand;
    if (no_extra_tiles) la.max_swizzle = kBand;
  }
}

}  // namespace sm90
}  // namespace gemm_act

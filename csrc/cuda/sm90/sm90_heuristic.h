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

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The waves of tiles configuration `g` runs on `sm_count` SMs: CUTLASS rounds
// each side of the tile grid up to a multiple of the cluster, and the
// persistent CTAs take the tiles in turns, so the launch lasts as many tile
// times as the busiest SM has tiles.
inline int64_t tile_waves(const GemmActParams& p, const TileGeometry& g, int sm_count) {
  const int64_t tiles = ceil_div(ceil_div(p.m, g.tile_m), g.cluster_m) * g.cluster_m *
                        ceil_div(ceil_div(p.n, g.tile_n), g.cluster_n) * g.cluster_n;
  return ceil_div(tiles, sm_count);
}

// TORCH_GEMM_ACT_SM90_CONFIG=<KernelConfig number> forces a configuration
// (for measuring them against each other: bench/sm90_sweep.py); -1 if unset.
// Read on every call (a lookup in the environment, well under a launch's
// cost) so the sweep can take the configurations in turns in one process.
inline int config_from_env() {
  const char* env = std::getenv("TORCH_GEMM_ACT_SM90_CONFIG");
  return env != nullptr && *env != '\0' ? std::atoi(env) : -1;
}

// Which configurations a case has (sm90_gemm_act_kernel.cuh).
enum class CompiledConfigs {
  kCooperativeOnly,  // row-major B: 128x256 cooperative
  kTf32,             // fp32 (TF32): that, that without Z, and 128x128 ping-pong
  kAll,              // fp16/bf16 with column-major B
};

// Fills la.config, la.raster and la.max_swizzle for the problem in `p`, whose
// elements take `element_bytes` each, from la.sm_count, among the
// configurations `compiled`.
inline void choose_launch(const GemmActParams& p, int64_t element_bytes, CompiledConfigs compiled,
                          LaunchArgs& la) {
  // 1. Tile configuration. Ping-pong hides one tile's epilogue behind the
  //    other warpgroup's mainloop, so it wins wherever that mainloop lasts
  //    about as long as the epilogue; cooperative runs the epilogue on all
  //    256 consumer threads and has the better mainloop for long K. Shapes
  //    are MxNxK, bf16, time / torch.mm. The numbers are from
  //    bench/results/20261123T092600Z_618f6cb_sweep.log, where torch.mm and
  //    the configurations take turns in one process (one configuration
  //    still reads up to ~3% apart from itself); "earlier" cites the older
  //    sweeps (one process per configuration, ~10% apart from itself):
  //  - Small M (inference): the weight read is the whole cost and the
  //    128x128 tiles give twice the CTAs streaming it (M = 128, N = 16384,
  //    K = 4096, gelu: ping-pong 1.074, cooperative 1.201). For M <= 64,
  //    64x128 tiles (M = 16: 1.071 against 1.138 for 128x128; earlier
  //    1.054 and 1.075 against 1.179 and 1.157; at M = 128 a tie, 1.079),
  //    and of those the ones with K = 128 per stage and no cluster (M =
  //    16: 1.026 against 1.075 in 9 rounds,
  //    bench/results/20261123T150445Z_36ecf14_sweep_m16.log; at M = 128
  //    1.074 against 1.044 for 128x64).
  //    For 64 < M <= 128, 128x64 tiles, two or more per CTA, so the last
  //    epilogue no longer ends the launch alone (M = 128: 1.041-1.043
  //    against 1.063-1.064 for 128x128 in three sweeps of 9 rounds,
  //    bench/results/20261123T111200Z_dfe8b56_sweep.log; 64x64 tiles for
  //    M = 16: 1.094-1.096 against 1.075-1.080 for 64x128).
  //  - Long K: cooperative (8192x4096x16384 none: 1.067 vs 1.434).
  //  - Wide N: ping-pong (8192x16384x4096 gelu: 1.073 vs 1.121; with Z
  //    1.019 vs 1.139; 4096x11008x4096 silu + Z: 0.973 vs 1.129).
  //  - Short K: ping-pong (16384x4096x1024 none 0.969 vs 1.117, gelu
  //    1.153 vs 1.345, gelu + Z 1.224 vs 1.351; 32768x3072x768 none 1.045
  //    vs 1.214, gelu 1.362 vs 1.415, gelu + Z 1.435 vs 1.478). Before the
  //    16-bit GELU lost 4 instructions per element, cooperative won the
  //    K = 768 gelu + Z case (earlier: 1.496 vs 1.599).
  //  - Otherwise cooperative; at 4096^3 the two tie (gelu 1.094 vs 1.099,
  //    gelu + Z 1.055 vs 1.046, fp16 relu 1.019 vs 1.018). Its 256x128
  //    tiles where they need fewer waves than 128x256: their mainloop is
  //    2-3% slower (4096^3 gelu 1.089 vs 1.062, 8192x4096x16384 none 1.040
  //    vs 1.021), a wave fewer gains more (8191x4097x4095, staged as
  //    N = 4104, 8 waves instead of 9: 0.285 vs 0.316, with Z 0.339 vs
  //    0.372; bench/results/20261123T185300Z_01447cb_sweep_coop256x128.log).
  //  - TF32 (fp32 elements, 128x128 ping-pong only): the same rules for wide
  //    N and short K (16384x4096x1024 gelu + Z 1.088 vs 1.276,
  //    8192x16384x4096 gelu + Z 1.054 vs 1.063), cooperative at 4096^3
  //    (gelu 1.018 vs 1.118, + Z 1.011 vs 1.045);
  //    bench/results/20261124T000000Z_d344fe4_sweep_tf32.log. Small M with
  //    wide N falls under the wide-N rule (M = 16: 1.092 vs 1.170, M = 128:
  //    1.023 vs 1.160; bench/results/20261124T001500Z_bc80ef7_sweep_tf32_small_m.log);
  //    small M with narrower N, unmeasured, stays cooperative. Where no Z
  //    is stored, cooperative TF32 drops Z's store buffers for a fourth
  //    pipeline stage (4096^3 gelu 1.009 vs 1.047-1.058;
  //    bench/results/20261125T012000Z_b8258f5_sweep_store_buffers.log).
  const bool small_m = p.m <= 256;
  const bool wide_n = p.n >= 8192 && p.k <= 8192;
  const bool short_k = p.k <= 1024;
  const bool all = compiled == CompiledConfigs::kAll;
  const bool pingpong = all ? small_m || wide_n || short_k
                            : compiled == CompiledConfigs::kTf32 && (wide_n || short_k);
  if (!pingpong) {
    la.config = compiled == CompiledConfigs::kTf32 && p.z == nullptr
                    ? KernelConfig::kCooperative128x256NoZ
                    : KernelConfig::kCooperative128x256;
    if (all && la.sm_count > 0 &&
        tile_waves(p, tile_geometry(KernelConfig::kCooperative256x128), la.sm_count) <
            tile_waves(p, tile_geometry(KernelConfig::kCooperative128x256), la.sm_count)) {
      la.config = KernelConfig::kCooperative256x128;
    }
  } else if (!all) {
    la.config = KernelConfig::kPingpong128x128;
  } else {
    la.config = p.m <= 64    ? KernelConfig::kPingpong64x128K128
                : p.m <= 128 ? KernelConfig::kPingpong128x64
                             : KernelConfig::kPingpong128x128;
  }
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

// Which sm90 kernel configuration and tile order a problem gets. No
// autotuning at call time: a few rules, each measured against the
// alternatives and torch.mm in one run of the kernel sweep (docs/DESIGN.md,
// "sm90 heuristic"; the numbers in docs/MEASUREMENTS.md).
#pragma once

#include <algorithm>
#include <cstdint>

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

inline int64_t element_bytes(Dtype dtype) { return dtype == Dtype::F32 ? 4 : 2; }

// What a Hopper L2 (50 MiB) holds of the operands a wave of tiles reads.
constexpr int64_t kL2Bytes = int64_t(48) << 20;

// A launch long enough to run its whole length at the board's power cap, on
// operands neither of which the L2 holds: there ping-pong's 128x128 tiles,
// which read a third more operand bytes per multiply-add than cooperative's
// 128x256, lost to them at every band; at 2^39 multiply-adds ping-pong still
// won.
constexpr double kMaxPingpongMultiplyAdds = 549755813888.0;  // 2^39
inline bool long_and_beyond_l2(const GemmActParams& p, Dtype dtype) {
  return static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) >
             kMaxPingpongMultiplyAdds &&
         std::min(p.m, p.n) * p.k * element_bytes(dtype) > kL2Bytes;
}

// The configuration for the problem in `p` among those compiled for
// (dtype, layout), given `sm_count` SMs.
inline KernelConfig choose_config(const GemmActParams& p, Dtype dtype, BLayout layout,
                                  int sm_count) {
  using C = KernelConfig;
  // Ping-pong hides one tile's epilogue behind the other warpgroup's
  // mainloop, so it wins wherever that mainloop lasts about as long as the
  // epilogue (wide N, short K) and where twice the CTAs stream the weight
  // (small M); cooperative has the better mainloop for long K.
  const bool small_m = p.m <= 256;
  const bool wide_n = p.n >= 8192 && p.k <= 8192 && !long_and_beyond_l2(p, dtype);
  const bool short_k = p.k <= 1024;
  // Small-M tiles exist for fp16/bf16 with a K-major B; TF32 has the
  // 128x128 ping-pong kernel only, where small M with wide N falls under the
  // wide-N rule; row-major B has the cooperative kernel only.
  const bool small_tiles = is_compiled(C::pingpong_64x128_k2_c1x1, dtype, layout);
  const bool pingpong = small_tiles ? small_m || wide_n || short_k
                                    : is_compiled(C::pingpong_128x128_c1x2, dtype, layout) &&
                                          (wide_n || short_k);
  if (pingpong) {
    if (!small_tiles) return C::pingpong_128x128_c1x2;
    // Small M: the weight read is the whole cost. 64x128 tiles for M <= 64
    // (half the wasted MMA rows), 128x64 for M <= 128 (two or more tiles
    // per CTA, so the last epilogue does not end the launch alone).
    return p.m <= 64 ? C::pingpong_64x128_k2_c1x1
           : p.m <= 128 ? C::pingpong_128x64_c1x2
                        : C::pingpong_128x128_c1x2;
  }
  if (dtype == Dtype::F32) {
    // TF32 stages hold K = 32 only: the kernels with a fourth stage.
    return p.z == nullptr ? C::cooperative_128x256_c1x2_noz : C::cooperative_128x256_c1x2_s1;
  }
  // 256x128 tiles where they need fewer waves: their mainloop is 2-3% slower,
  // a wave fewer gains more (N a little above a multiple of 256).
  if (is_compiled(C::cooperative_256x128_c2x1, dtype, layout) && sm_count > 0 &&
      tile_waves(p, tile_geometry(C::cooperative_256x128_c2x1), sm_count) <
          tile_waves(p, tile_geometry(C::cooperative_128x256_c1x2), sm_count)) {
    return C::cooperative_256x128_c2x1;
  }
  return C::cooperative_128x256_c1x2;
}

// Fills la.raster and la.max_swizzle for the problem in `p` and the
// configuration la.config.
inline void choose_tile_order(const GemmActParams& p, Dtype dtype, LaunchArgs& la) {
  const TileGeometry g = tile_geometry(la.config);

  // Raster order: walk along the dimension of the smaller operand, so the
  // tiles of the larger one that a wave of CTAs shares stay few. CUTLASS's
  // own heuristic compares tile counts instead, and with equal counts
  // walks along N and re-reads the whole weight every wave.
  const bool along_m = p.n > p.m;
  la.raster = along_m ? Raster::AlongM : Raster::AlongN;

  // Grouped rasterisation (swizzle): when the operand that every wave
  // streams whole (A along M, B along N) is larger than the 50 MiB L2, the
  // waves walk in bands of clusters across the other side, and each band
  // reads the streamed operand once more from memory: so many bytes per
  // multiply-add as 1 / the band's span in elements. Bands span at least
  // 512 rows or columns (2 clusters of 1x2 128x128 tiles along M, 4 along
  // N: the fastest swept). CUTLASS rounds both tile-grid sides up to a
  // multiple of band x cluster and runs the extra tiles, so a band that
  // would add tiles is narrowed.
  const int64_t tiles_m = ceil_div(p.m, g.tile_m);
  const int64_t tiles_n = ceil_div(p.n, g.tile_n);
  const int64_t streamed_bytes = (along_m ? p.m : p.n) * p.k * element_bytes(dtype);
  la.max_swizzle = 1;
  if (streamed_bytes > kL2Bytes) {
    constexpr int64_t kMinBandSpan = 512;
    const int64_t cluster_span = along_m ? int64_t(g.tile_n) * g.cluster_n : int64_t(g.tile_m) * g.cluster_m;
    int band = 2;
    while (band < 8 && band * cluster_span < kMinBandSpan) band *= 2;
    const auto adds_tiles = [&](int b) {
      return ceil_div(tiles_m, g.cluster_m) != ceil_div(tiles_m, b * g.cluster_m) * b ||
             ceil_div(tiles_n, g.cluster_n) != ceil_div(tiles_n, b * g.cluster_n) * b;
    };
    while (band > 1 && adds_tiles(band)) band /= 2;
    la.max_swizzle = band;
  }
}

// Fills la.config, la.raster and la.max_swizzle for gemm_act's problem in
// `p` from la.sm_count.
inline void choose_launch(const GemmActParams& p, Dtype dtype, BLayout layout, LaunchArgs& la) {
  la.config = choose_config(p, dtype, layout, la.sm_count);
  choose_tile_order(p, dtype, la);
}

}  // namespace sm90
}  // namespace gemm_act

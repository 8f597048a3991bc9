// Which sm80 configuration a problem gets, and the tile order it runs in.
// No PyTorch, no CUTLASS: the entry chooses the configuration, the launch
// the band height. Not yet measured: the efficiencies below are estimates
// (bench on an sm_80/86/89 part before trusting them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "cuda/sm80/sm80_types.h"

namespace gemm_act {
namespace sm80 {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct DeviceLimits {
  int sm_count = 0;
  int smem_optin = 0;   // cudaDevAttrMaxSharedMemoryPerBlockOptin
};

// Whether configuration c's shared memory fits one block on the device.
inline bool fits(KernelConfig c, const DeviceLimits& dev) {
  return config_info(c).smem_bytes <= dev.smem_optin;
}

// Grouped tile order: the kernel walks bands of `rows` tile rows, column by
// column within a band, so the CTAs resident at once share rows of A and
// columns of B in L2. The band height minimising what one wave of CTAs
// reads per k step (its distinct tile rows of A plus tile columns of B).
inline int band_rows(int64_t tiles_m, int64_t tiles_n, int tile_m, int tile_n, int sm_count) {
  const int64_t wave = std::min<int64_t>(std::max(sm_count, 1), tiles_m * tiles_n);
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int rows = 1; rows <= 16; rows *= 2) {
    const int64_t r = std::min<int64_t>(rows, tiles_m);
    const int64_t cols = std::min(ceil_div(wave, r), tiles_n);
    const int64_t rows_touched = std::min(tiles_m, ceil_div(wave, cols));
    const int64_t cost = rows_touched * tile_m + cols * tile_n;
    if (cost < best_cost) best = rows, best_cost = cost;
  }
  return best;
}

// The configuration for an M x N output among those compiled for (d, l)
// that fit the device; nothing when none does. Cost: the tiles the busiest
// SM runs times the tile's work over its relative efficiency (CTAs sharing
// an SM share its tensor cores, so they take about as long as in turn).
inline std::optional<KernelConfig> choose_config(int64_t m, int64_t n, Dtype d, BLayout l,
                                                 const DeviceLimits& dev) {
  struct Candidate {
    KernelConfig config;
    double efficiency;  // estimated throughput relative to the best tile
  };
  // In order of preference on a tie. The K = 64 stage halves the barriers
  // per MMA; a 128 x 128 tile reads twice the operand bytes per MMA.
  constexpr Candidate kCandidates[] = {
      {KernelConfig::mma_128x256x64_s3, 1.0},
      {KernelConfig::mma_128x256x32_s4, 0.97},
      {KernelConfig::mma_128x128x32_s4, 0.85},
  };
  std::optional<KernelConfig> best;
  double best_cost = 0;
  for (const Candidate& c : kCandidates) {
    if (!is_compiled(c.config, d, l) || !fits(c.config, dev)) continue;
    const ConfigInfo& info = config_info(c.config);
    const int64_t tiles = ceil_div(m, info.tile_m) * ceil_div(n, info.tile_n);
    const int64_t per_sm = ceil_div(tiles, std::max(dev.sm_count, 1));
    const double cost = double(per_sm) * info.tile_m * info.tile_n / c.efficiency;
    if (!best || cost < best_cost) best = c.config, best_cost = cost;
  }
  return best;
}

}  // namespace sm80
}  // namespace gemm_act

// Where gemm_ce_lse's epilogue (sm90_ce_lse_epilogue.cuh) leaves its
// partials and ce_lse_combine (sm90_ce_lse_combine.h) reads them: four fp32
// quantities per (tile along N, row), rows counted up to M rounded up to
// the CTA tile, so that every tile's rows are in the buffer.
#pragma once

#include <cstdint>

#include "act_math.h"

namespace gemm_act {
namespace sm90 {

struct CeLsePartials {
  int64_t m = 0, n = 0, tile_m = 1, tile_n = 1;

  GEMM_ACT_HD int64_t rows() const { return (m + tile_m - 1) / tile_m * tile_m; }
  GEMM_ACT_HD int64_t tiles() const { return (n + tile_n - 1) / tile_n; }
  // Quantity q of tile t, row r: q * quantity_stride() + t * rows() + r;
  // q: 0 the max, 1 the sum of exp(l - max), 2 the sum of l, 3 the target's l.
  GEMM_ACT_HD int64_t quantity_stride() const { return tiles() * rows(); }
  GEMM_ACT_HD int64_t floats() const { return 4 * quantity_stride(); }
};

}  // namespace sm90
}  // namespace gemm_act

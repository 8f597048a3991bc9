// Dropout's pass on the CPU (dropout.h): one loop over groups of four
// elements, one Philox draw each.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include "cpu/cpu_backend.h"
#include "dropout.h"

namespace gemm_act {
namespace {

constexpr int64_t kGroupsPerTask = 4096;

template <class scalar_t>
void dropout_groups(const DropoutParams& p) {
  using opmath_t = at::opmath_type<scalar_t>;
  const auto* z = static_cast<const scalar_t*>(p.z);
  const auto* residual = static_cast<const scalar_t*>(p.residual);
  auto* out = static_cast<scalar_t*>(p.out);
  const uint64_t seed = static_cast<uint64_t>(*p.seed);
  const uint64_t threshold = p.keep.threshold;
  const opmath_t scale = static_cast<opmath_t>(p.keep.scale);
  const int64_t groups = (p.numel + 3) / 4;
  at::parallel_for(0, groups, kGroupsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      uint32_t draws[4];
      dropout_draws(seed, static_cast<uint64_t>(g), draws);
      for (int64_t i = 4 * g; i < std::min(4 * g + 4, p.numel); ++i) {
        const opmath_t f = dropout_factor(draw_lane(draws, static_cast<uint32_t>(i & 3)), threshold, scale);
        opmath_t v = f * static_cast<opmath_t>(z[i]);
        if (residual != nullptr) v += static_cast<opmath_t>(residual[i]);
        out[i] = static_cast<scalar_t>(v);
      }
    }
  });
}

}  // namespace

void dropout_cpu(const DropoutParams& p, at::ScalarType dtype) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "gemm_act dropout (cpu)",
                                  [&] { dropout_groups<scalar_t>(p); });
}

}  // namespace gemm_act

// The gated activation's passes on the CPU (glu.h): one loop over rows.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include "cpu/cpu_backend.h"
#include "glu.h"

namespace gemm_act {
namespace {

constexpr int64_t kRowsPerTask = 16;

template <class scalar_t, Activation kAct, bool kBackward>
void glu_rows(const GluParams& p) {
  using opmath_t = at::opmath_type<scalar_t>;
  const opmath_t slope = static_cast<opmath_t>(p.negative_slope);
  const int64_t n = p.n;
  const auto* h = static_cast<const scalar_t*>(p.h);
  const auto* grad_y = static_cast<const scalar_t*>(p.grad_y);
  auto* out = static_cast<scalar_t*>(p.out);
  at::parallel_for(0, p.m, kRowsPerTask, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      const scalar_t* g = h + row * 2 * n;
      const scalar_t* u = g + n;
      for (int64_t j = 0; j < n; ++j) {
        const opmath_t gj = static_cast<opmath_t>(g[j]), uj = static_cast<opmath_t>(u[j]);
        if constexpr (kBackward) {
          opmath_t dg, du;
          glu_backward<kAct, scalar_t>(gj, uj, static_cast<opmath_t>(grad_y[row * n + j]), slope,
                                       dg, du);
          out[row * 2 * n + j] = static_cast<scalar_t>(dg);
          out[row * 2 * n + n + j] = static_cast<scalar_t>(du);
        } else {
          out[row * n + j] = static_cast<scalar_t>(glu_forward<kAct, scalar_t>(gj, uj, slope));
        }
      }
    }
  });
}

template <bool kBackward>
void glu_cpu(const GluParams& p, at::ScalarType dtype) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "gemm_act glu (cpu)", [&] {
    GEMM_ACT_DISPATCH_ACTIVATION(p.activation, glu_rows<scalar_t, kAct, kBackward>(p));
  });
}

}  // namespace

void glu_forward_cpu(const GluParams& p, at::ScalarType dtype) { glu_cpu<false>(p, dtype); }
void glu_backward_cpu(const GluParams& p, at::ScalarType dtype) { glu_cpu<true>(p, dtype); }

}  // namespace gemm_act

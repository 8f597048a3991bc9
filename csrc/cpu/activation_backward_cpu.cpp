// CPU backward: dZ = gY * act'(saved) and the bias gradient in one pass.
// Sums run over fixed row chunks, in a fixed order, so the result does not
// depend on the number of threads; in float for fp16/bf16 and in double for
// fp32 and fp64 (as the CUDA pass: a cancelling fp32 sum keeps PyTorch's
// accuracy whatever the order).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <type_traits>
#include <vector>

#include "activations.h"
#include "cpu/cpu_backend.h"

namespace gemm_act {
namespace {

constexpr int64_t kRowsPerChunk = 64;

template <class scalar_t, Activation kAct, BiasKind kBias>
void dact_and_bias_grad(const ActivationBackwardArgs& args) {
  using opmath_t = at::opmath_type<scalar_t>;
  using sum_t = std::conditional_t<(sizeof(scalar_t) >= 4), double, float>;
  const ActivationBackwardParams& p = args.params;
  const int64_t m = p.m, n = p.n;
  const opmath_t slope = static_cast<opmath_t>(p.negative_slope);
  const auto* grad_y = static_cast<const scalar_t*>(p.grad_y);
  const auto* saved = static_cast<const scalar_t*>(p.saved);
  auto* grad_z = static_cast<scalar_t*>(p.grad_z);
  auto* grad_bias = static_cast<scalar_t*>(p.grad_bias);

  const int64_t chunks = (m + kRowsPerChunk - 1) / kRowsPerChunk;
  // Per chunk: N column sums (PerColumn) or one total (Scalar).
  const int64_t partial_width = kBias == BiasKind::PerColumn ? n : 1;
  std::vector<sum_t> partial(kBias == BiasKind::PerColumn || kBias == BiasKind::Scalar
                                    ? chunks * partial_width : 0, opmath_t(0));

  at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t row_end = std::min(m, (chunk + 1) * kRowsPerChunk);
      for (int64_t row = chunk * kRowsPerChunk; row < row_end; ++row) {
        sum_t row_sum = 0;
        for (int64_t col = 0; col < n; ++col) {
          const int64_t i = row * n + col;
          const opmath_t dz = static_cast<opmath_t>(grad_y[i]) *
                              activation_grad<kAct, scalar_t>(static_cast<opmath_t>(saved[i]), slope);
          grad_z[i] = static_cast<scalar_t>(dz);
          if constexpr (kBias == BiasKind::PerColumn) partial[chunk * n + col] += dz;
          if constexpr (kBias == BiasKind::PerRow || kBias == BiasKind::Scalar) row_sum += dz;
        }
        if constexpr (kBias == BiasKind::PerRow) grad_bias[row] = static_cast<scalar_t>(row_sum);
        if constexpr (kBias == BiasKind::Scalar) partial[chunk] += row_sum;
      }
    }
  });

  if constexpr (kBias == BiasKind::PerColumn || kBias == BiasKind::Scalar) {
    for (int64_t j = 0; j < partial_width; ++j) {
      sum_t total = 0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * partial_width + j];
      grad_bias[j] = static_cast<scalar_t>(total);
    }
  }
}

}  // namespace

void activation_backward_cpu(const ActivationBackwardArgs& args) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, args.grad_z.scalar_type(),
                                  "activation_backward_cpu", [&] {
    GEMM_ACT_DISPATCH_ACTIVATION(args.params.activation,
        GEMM_ACT_DISPATCH_BIAS(args.params.bias_kind,
            dact_and_bias_grad<scalar_t, kAct, kBias>(args)));
  });
}

}  // namespace gemm_act

// CPU forward: ATen's GEMM into an opmath accumulator, then one fused pass
// that adds beta*C and the bias (preact.h), applies the activation and
// stores Y (and Z).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include "activations.h"
#include "cpu/cpu_backend.h"
#include "preact.h"
#include "stored_activation.h"

namespace gemm_act {
namespace {

template <class scalar_t, Activation kAct, BiasKind kBias>
void fused_epilogue(const GemmActArgs& args, const at::Tensor& acc) {
  using opmath_t = at::opmath_type<scalar_t>;
  const GemmActParams& p = args.params;
  const opmath_t alpha = static_cast<opmath_t>(p.alpha);
  const opmath_t beta = static_cast<opmath_t>(p.beta);
  const opmath_t slope = static_cast<opmath_t>(p.negative_slope);
  const opmath_t* acc_ptr = acc.const_data_ptr<opmath_t>();
  const auto* c = static_cast<const scalar_t*>(p.c);
  const auto* bias = static_cast<const scalar_t*>(p.bias);
  auto* y = static_cast<scalar_t*>(p.y);
  auto* z = static_cast<scalar_t*>(p.z);
  const int64_t n = p.n;

  constexpr bool kColumnBias = kBias == BiasKind::PerColumn || kBias == BiasKind::Scalar;
  const PreactTerms<opmath_t> terms{alpha, beta, c != nullptr, kColumnBias, kBias == BiasKind::PerRow};

  at::parallel_for(0, p.m, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)),
                   [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        opmath_t pre[1] = {acc_ptr[row * n + col]};
        add_preact_terms<1>(
            pre, terms,
            [&](int) { return static_cast<opmath_t>(c[row * p.c_stride_m + col * p.c_stride_n]); },
            [&](int) { return static_cast<opmath_t>(bias[kBias == BiasKind::PerColumn ? col : 0]); },
            [&](int) { return static_cast<opmath_t>(bias[row]); });
        y[row * n + col] = static_cast<scalar_t>(activate_stored<kAct, scalar_t>(pre[0], slope));
        if (z != nullptr) z[row * n + col] = static_cast<scalar_t>(pre[0]);
      }
    }
  });
}

}  // namespace

void gemm_act_cpu(const GemmActArgs& args) {
  const at::ScalarType dtype = args.y.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "gemm_act_cpu", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    // fp16/bf16 multiply in fp32 so Z is rounded once, as on the GPU.
    const auto acc_dtype = c10::CppTypeToScalarType<opmath_t>::value;
    const at::Tensor acc = at::mm(args.a.to(acc_dtype), args.b.to(acc_dtype));
    GEMM_ACT_DISPATCH_ACTIVATION(args.params.activation,
        GEMM_ACT_DISPATCH_BIAS(args.params.bias_kind,
            fused_epilogue<scalar_t, kAct, kBias>(args, acc)));
  });
}

}  // namespace gemm_act

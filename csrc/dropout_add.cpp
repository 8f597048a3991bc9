// gemm_dropout_add's checks and composite forward, registered for every
// backend (CUDA's own registration tries its fused kernel first), and its
// autocast rule. Its autograd: dropout_autograd.cpp.
#include "dropout_add.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <vector>

#include "dropout_ops.h"
#include "op_handles.h"

namespace gemm_act {

void check_gemm_dropout_add(const at::Tensor& a, const at::Tensor& b, const at::Tensor& residual,
                            double p, const at::Tensor& seed) {
  TORCH_CHECK_VALUE(a.dim() >= 1 && b.dim() == 2, "gemm_dropout_add: expected a [..., K] and b [K, N], got a ",
                    a.sizes(), " and b ", b.sizes());
  std::vector<int64_t> sizes = a.sizes().vec();
  sizes.back() = b.size(1);
  TORCH_CHECK_VALUE(residual.sizes() == at::IntArrayRef(sizes), "gemm_dropout_add: residual must have the "
                    "output's shape ", at::IntArrayRef(sizes), ", got ", residual.sizes());
  TORCH_CHECK_TYPE(residual.scalar_type() == a.scalar_type() && residual.device() == a.device(),
                   "gemm_dropout_add: residual must share a's dtype and device, ", a.scalar_type(), " on ",
                   a.device(), ", got ", residual.scalar_type(), " on ", residual.device());
  check_dropout_args("gemm_dropout_add", p, seed, a.device());
}

at::Tensor gemm_dropout_add_composite_checked(const at::Tensor& a, const at::Tensor& b,
                                              const std::optional<at::Tensor>& bias,
                                              const at::Tensor& residual, double p, const at::Tensor& seed) {
  if (p == 0.0) {
    return std::get<0>(op::gemm_act().call(a, b, bias, residual, "none", 1.0, 1.0, 0.01, false));
  }
  const at::Tensor z = std::get<0>(op::gemm_act().call(a, b, bias, std::nullopt, "none", 1.0, 0.0, 0.01, false));
  return op::dropout_add().call(z, residual, p, seed);
}

namespace {

at::Tensor gemm_dropout_add_composite(const at::Tensor& a, const at::Tensor& b,
                                      const std::optional<at::Tensor>& bias, const at::Tensor& residual,
                                      double p, const at::Tensor& seed) {
  check_gemm_dropout_add(a, b, residual, p, seed);
  return gemm_dropout_add_composite_checked(a, b, bias, residual, p, seed);
}

// Autocast: a, b and the bias cast like F.linear's; a residual of another
// dtype (an fp32 residual stream) keeps it, as eager's `r + dropout(linear(x))`
// promotes: the GEMM in the autocast dtype, then dropout_add in the
// promoted one.
template <c10::DeviceType kDevice>
at::Tensor gemm_dropout_add_autocast(const at::Tensor& a, const at::Tensor& b,
                                     const std::optional<at::Tensor>& bias, const at::Tensor& residual,
                                     double p, const at::Tensor& seed) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(at::autocast::get_autocast_dispatch_key_from_device_type(kDevice));
  const auto dtype = at::autocast::get_lower_precision_fp_from_device_type(kDevice);
  const at::Tensor a_cast = at::autocast::cached_cast(dtype, a, kDevice);
  const at::Tensor b_cast = at::autocast::cached_cast(dtype, b, kDevice);
  const std::optional<at::Tensor> bias_cast = at::autocast::cached_cast(dtype, bias, kDevice);
  if (residual.scalar_type() == a_cast.scalar_type()) {
    return op::gemm_dropout_add().call(a_cast, b_cast, bias_cast, residual, p, seed);
  }
  const at::ScalarType out = at::promote_types(a_cast.scalar_type(), residual.scalar_type());
  const at::Tensor z =
      std::get<0>(op::gemm_act().call(a_cast, b_cast, bias_cast, std::nullopt, "none", 1.0, 0.0, 0.01, false));
  return op::dropout_add().call(z.to(out), residual.to(out), p, seed);
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("gemm_dropout_add", &gemm_act::gemm_dropout_add_composite);
}

TORCH_LIBRARY_IMPL(gemm_act, AutocastCUDA, m) {
  m.impl("gemm_dropout_add", &gemm_act::gemm_dropout_add_autocast<c10::DeviceType::CUDA>);
}

TORCH_LIBRARY_IMPL(gemm_act, AutocastCPU, m) {
  m.impl("gemm_dropout_add", &gemm_act::gemm_dropout_add_autocast<c10::DeviceType::CPU>);
}

// Autocast: cast like F.linear (to the autocast dtype; float64 stays), then
// run the op with autocast off so autograd and the kernels see one dtype.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "op_handles.h"

namespace gemm_act {
namespace {

template <c10::DeviceType kDevice>
std::tuple<at::Tensor, at::Tensor> gemm_act_autocast(const at::Tensor& a, const at::Tensor& b,
                                                     const std::optional<at::Tensor>& bias,
                                                     const std::optional<at::Tensor>& c,
                                                     c10::string_view activation, double alpha,
                                                     double beta, double negative_slope,
                                                     bool store_preact) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      at::autocast::get_autocast_dispatch_key_from_device_type(kDevice));
  const auto dtype = at::autocast::get_lower_precision_fp_from_device_type(kDevice);
  return op::gemm_act().call(at::autocast::cached_cast(dtype, a, kDevice),
                             at::autocast::cached_cast(dtype, b, kDevice),
                             at::autocast::cached_cast(dtype, bias, kDevice),
                             at::autocast::cached_cast(dtype, c, kDevice), activation, alpha,
                             beta, negative_slope, store_preact);
}

template <c10::DeviceType kDevice>
std::tuple<at::Tensor, at::Tensor> gemm_act_chained_autocast(
    const at::Tensor& a, const std::optional<at::Tensor>& a_preact,
    const std::optional<at::Tensor>& a_bias, c10::string_view a_activation, double a_negative_slope,
    const at::Tensor& b, const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
    c10::string_view activation, double alpha, double beta, double negative_slope, bool store_preact,
    bool z_feeds_chain) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      at::autocast::get_autocast_dispatch_key_from_device_type(kDevice));
  const auto dtype = at::autocast::get_lower_precision_fp_from_device_type(kDevice);
  return op::gemm_act_chained().call(
      at::autocast::cached_cast(dtype, a, kDevice),
      at::autocast::cached_cast(dtype, a_preact, kDevice),
      at::autocast::cached_cast(dtype, a_bias, kDevice), a_activation, a_negative_slope,
      at::autocast::cached_cast(dtype, b, kDevice), at::autocast::cached_cast(dtype, bias, kDevice),
      at::autocast::cached_cast(dtype, c, kDevice), activation, alpha, beta, negative_slope,
      store_preact, z_feeds_chain);
}

template <c10::DeviceType kDevice>
std::tuple<at::Tensor, at::Tensor> gemm_glu_autocast(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      at::autocast::get_autocast_dispatch_key_from_device_type(kDevice));
  const auto dtype = at::autocast::get_lower_precision_fp_from_device_type(kDevice);
  return op::gemm_glu().call(
      at::autocast::cached_cast(dtype, a, kDevice), at::autocast::cached_cast(dtype, b_gate, kDevice),
      at::autocast::cached_cast(dtype, b_up, kDevice),
      at::autocast::cached_cast(dtype, bias_gate, kDevice),
      at::autocast::cached_cast(dtype, bias_up, kDevice), activation, negative_slope, store_preact);
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, AutocastCUDA, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_autocast<c10::DeviceType::CUDA>);
  m.impl("gemm_act_chained", &gemm_act::gemm_act_chained_autocast<c10::DeviceType::CUDA>);
  m.impl("gemm_glu", &gemm_act::gemm_glu_autocast<c10::DeviceType::CUDA>);
}

TORCH_LIBRARY_IMPL(gemm_act, AutocastCPU, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_autocast<c10::DeviceType::CPU>);
  m.impl("gemm_act_chained", &gemm_act::gemm_act_chained_autocast<c10::DeviceType::CPU>);
  m.impl("gemm_glu", &gemm_act::gemm_glu_autocast<c10::DeviceType::CPU>);
}

// Typed handles of this library's operators, each looked up once, for calling them through the
// dispatcher from C++ (autograd, autocast, the chained forward, the Python
// entry point): each signature written once, to match schema.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <tuple>

namespace gemm_act {
namespace op {

using GemmActSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, c10::string_view, double, double, double, bool);
using GemmActChainedSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
    c10::string_view, double, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, c10::string_view, double, double, double, bool, bool);
using ActivationBackwardSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view, double);
using ActivationBackwardInPlaceSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                                                      const std::optional<at::Tensor>&,
                                                      c10::string_view, double);
using BiasGradSignature = at::Tensor(const at::Tensor&, const at::Tensor&);
using ZeroPadSignature = at::Tensor(const at::Tensor&, int64_t, int64_t);
using GluSignature = at::Tensor(const at::Tensor&, c10::string_view, double);
using GluBackwardSignature = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view,
                                        double);
using GemmGluSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, c10::string_view, double, bool);
using GemmDactSignature = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    c10::string_view, double, double);
using CeChunkForwardSignature = void(const at::Tensor&, const at::Tensor&, int64_t, double,
                                     const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&);
using CeChunkBackwardSignature = void(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      const at::Tensor&, int64_t, int64_t, double, double);

using DropoutAddSignature = at::Tensor(const at::Tensor&, const at::Tensor&, double, const at::Tensor&);
using DropoutScaleSignature = at::Tensor(const at::Tensor&, double, const at::Tensor&);
using GemmDropoutAddSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                                           const std::optional<at::Tensor>&, const at::Tensor&, double,
                                           const at::Tensor&);

template <class Signature>
c10::TypedOperatorHandle<Signature> find(const char* qualified_name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified_name, "").typed<Signature>();
}

inline const c10::TypedOperatorHandle<GemmActSignature>& gemm_act() {
  static const auto h = find<GemmActSignature>("gemm_act::gemm_act");
  return h;
}
inline const c10::TypedOperatorHandle<GemmActChainedSignature>& gemm_act_chained() {
  static const auto h = find<GemmActChainedSignature>("gemm_act::gemm_act_chained");
  return h;
}
inline const c10::TypedOperatorHandle<ActivationBackwardSignature>& activation_backward() {
  static const auto h = find<ActivationBackwardSignature>("gemm_act::activation_backward");
  return h;
}
inline const c10::TypedOperatorHandle<ActivationBackwardInPlaceSignature>& activation_backward_() {
  static const auto h = find<ActivationBackwardInPlaceSignature>("gemm_act::activation_backward_");
  return h;
}
inline const c10::TypedOperatorHandle<BiasGradSignature>& bias_grad() {
  static const auto h = find<BiasGradSignature>("gemm_act::bias_grad");
  return h;
}
inline const c10::TypedOperatorHandle<ZeroPadSignature>& zero_pad() {
  static const auto h = find<ZeroPadSignature>("gemm_act::zero_pad");
  return h;
}
inline const c10::TypedOperatorHandle<GemmDactSignature>& gemm_dact() {
  static const auto h = find<GemmDactSignature>("gemm_act::gemm_dact");
  return h;
}

inline const c10::TypedOperatorHandle<GluSignature>& glu() {
  static const auto h = find<GluSignature>("gemm_act::glu");
  return h;
}
inline const c10::TypedOperatorHandle<GluBackwardSignature>& glu_backward() {
  static const auto h = find<GluBackwardSignature>("gemm_act::glu_backward");
  return h;
}
inline const c10::TypedOperatorHandle<DropoutAddSignature>& dropout_add() {
  static const auto h = find<DropoutAddSignature>("gemm_act::dropout_add");
  return h;
}
inline const c10::TypedOperatorHandle<DropoutScaleSignature>& dropout_scale() {
  static const auto h = find<DropoutScaleSignature>("gemm_act::dropout_scale");
  return h;
}
inline const c10::TypedOperatorHandle<GemmDropoutAddSignature>& gemm_dropout_add() {
  static const auto h = find<GemmDropoutAddSignature>("gemm_act::gemm_dropout_add");
  return h;
}
inline const c10::TypedOperatorHandle<GemmGluSignature>& gemm_glu() {
  static const auto h = find<GemmGluSignature>("gemm_act::gemm_glu");
  return h;
}

inline const c10::TypedOperatorHandle<CeChunkForwardSignature>& ce_chunk_forward() {
  static const auto h = find<CeChunkForwardSignature>("gemm_act::ce_chunk_forward");
  return h;
}
inline const c10::TypedOperatorHandle<CeChunkBackwardSignature>& ce_chunk_backward() {
  static const auto h = find<CeChunkBackwardSignature>("gemm_act::ce_chunk_backward");
  return h;
}

}  // namespace op
}  // namespace gemm_act

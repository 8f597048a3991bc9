// ce_chunk_forward and ce_chunk_backward (ce_chunk.h) as every backend
// registers them: the arguments checked once, then the backend's pass.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <cstdint>
#include <optional>

#include "ce_chunk.h"

namespace gemm_act {

using CeChunkPass = void (*)(const CeChunkParams&, at::ScalarType);

namespace ce_checks {

inline void check_z(const at::Tensor& z, const char* op) {
  TORCH_CHECK_VALUE(z.dim() == 2, op, ": z must be a 2-D chunk of logits [rows, width], got shape ",
                    z.sizes());
  TORCH_CHECK_TYPE(at::isFloatingType(z.scalar_type()), op,
                   ": z must be a floating-point tensor, got ", z.scalar_type());
  TORCH_CHECK_VALUE(z.size(1) <= 1 || z.stride(1) == 1, op,
                    ": z's columns must be contiguous (stride 1), got strides ", z.strides());
}

// A [rows] tensor of `dtype` on z's device; contiguous where it is written.
inline void check_row_tensor(const at::Tensor& t, const at::Tensor& z, at::ScalarType dtype,
                             const char* op, const char* name, bool written) {
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == z.size(0), op, ": ", name, " must be [",
                    z.size(0), "] (one per row of z), got shape ", t.sizes());
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ",
                   t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == z.device(), op, ": ", name, " must be on z's device ",
                    z.device(), ", got ", t.device());
  TORCH_CHECK_VALUE(!written || t.is_contiguous(), op, ": ", name,
                    " is written in place and must be contiguous");
}

inline at::ScalarType acc_type(const at::Tensor& z) {
  return z.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

inline CeChunkParams params(const at::Tensor& z, const at::Tensor& target, int64_t v0,
                            double softcap, const char* op) {
  check_z(z, op);
  check_row_tensor(target, z, at::kLong, op, "target", false);
  TORCH_CHECK_VALUE(v0 >= 0, op, ": v0 must be at least 0, got ", v0);
  TORCH_CHECK_VALUE(z.size(1) <= (int64_t{1} << 30), op,
                    ": z's width must be at most 2^30 columns, got ", z.size(1));
  TORCH_CHECK_VALUE(softcap >= 0.0, op, ": softcap must be 0 (none) or positive, got ", softcap);
  CeChunkParams p;
  p.rows = z.size(0);
  p.width = z.size(1);
  p.ld = z.stride(0);  // a view's, whatever its width
  p.v0 = v0;
  p.softcap = softcap;
  return p;
}

}  // namespace ce_checks

// Folds z's columns into each row's running log-sum-exp, target logit and
// logits' sum, in place.
template <CeChunkPass Run>
void ce_chunk_forward_impl(const at::Tensor& z, const at::Tensor& target, int64_t v0,
                           double softcap, const at::Tensor& lse, const at::Tensor& target_logit,
                           const std::optional<at::Tensor>& logit_sum) {
  constexpr const char* op = "ce_chunk_forward";
  CeChunkParams p = ce_checks::params(z, target, v0, softcap, op);
  const at::ScalarType acc = ce_checks::acc_type(z);
  ce_checks::check_row_tensor(lse, z, acc, op, "lse", true);
  ce_checks::check_row_tensor(target_logit, z, acc, op, "target_logit", true);
  if (logit_sum.has_value()) ce_checks::check_row_tensor(*logit_sum, z, acc, op, "logit_sum", true);
  if (p.rows == 0 || p.width == 0) return;
  const c10::OptionalDeviceGuard device_guard(z.device());
  const at::Tensor tc = target.contiguous();
  p.z = const_cast<void*>(z.const_data_ptr());
  p.target = tc.const_data_ptr<int64_t>();
  p.lse = lse.mutable_data_ptr();
  p.target_logit = target_logit.mutable_data_ptr();
  p.logit_sum = logit_sum.has_value() ? logit_sum->mutable_data_ptr() : nullptr;
  Run(p, z.scalar_type());
}

// Writes over z its columns' gradient (ce_chunk.h's grad).
template <CeChunkPass Run>
void ce_chunk_backward_impl(const at::Tensor& z, const at::Tensor& target, const at::Tensor& lse,
                            const at::Tensor& scale, int64_t v0, int64_t vocab,
                            double label_smoothing, double softcap) {
  constexpr const char* op = "ce_chunk_backward";
  CeChunkParams p = ce_checks::params(z, target, v0, softcap, op);
  const at::ScalarType acc = ce_checks::acc_type(z);
  ce_checks::check_row_tensor(lse, z, acc, op, "lse", false);
  ce_checks::check_row_tensor(scale, z, acc, op, "scale", false);
  TORCH_CHECK_VALUE(vocab >= v0 + z.size(1), op, ": vocab (", vocab,
                    ") must hold the chunk's columns [", v0, ", ", v0 + z.size(1), ")");
  TORCH_CHECK_VALUE(label_smoothing >= 0.0 && label_smoothing <= 1.0, op,
                    ": label_smoothing must be in [0, 1], got ", label_smoothing);
  if (p.rows == 0 || p.width == 0) return;
  const c10::OptionalDeviceGuard device_guard(z.device());
  const at::Tensor tc = target.contiguous(), lc = lse.contiguous(), sc = scale.contiguous();
  p.z = z.mutable_data_ptr();
  p.target = tc.const_data_ptr<int64_t>();
  p.lse = const_cast<void*>(lc.const_data_ptr());
  p.scale = sc.const_data_ptr();
  p.vocab = vocab;
  p.label_smoothing = label_smoothing;
  Run(p, z.scalar_type());
}

}  // namespace gemm_act

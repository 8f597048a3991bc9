// A layer's gradients (layer_grads.h). Everything here calls operators
// through the dispatcher (ours and ATen's), so torch.compile traces the
// backward as it traces ATen's, and sizes are symbolic where they may be.
#include "layer_grads.h"

#include <ATen/ATen.h>

#include <numeric>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "activations.h"
#include "checks.h"
#include "gemm_act.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

// Whether t is a plain tensor, not a tensor subclass (a DTensor, or what
// torch.compile traces, which fuses reductions itself).
bool plain(const at::Tensor& t) { return !t.key_set().has(c10::DispatchKey::Python); }

// Whether this backward may overwrite t: it holds the only reference to a
// plain dense tensor with storage of its own (no other node's input, no
// retained or hooked gradient, no view or alias, nothing a transform or
// compiler wraps), as PyTorch's own gradient accumulation checks before it
// adds in place.
bool sole_owner(const at::Tensor& t) {
  return t.use_count() == 1 && plain(t) && !t.key_set().has(c10::DispatchKey::Functionalize) && t.has_storage() &&
         t.storage().use_count() == 1 && !t.is_view() && !t._is_zerotensor() && t.is_contiguous() &&
         !t.requires_grad();
}

// (dZ, dbias): dZ over grad_y itself where this backward owns it, which
// saves a tensor of gY's size at the step's peak (a small fp32 MLP's
// training step peaked above eager's without it).
std::tuple<at::Tensor, at::Tensor> call_activation_backward(const at::Tensor& grad_y,
                                                            const at::Tensor& saved,
                                                            const std::optional<at::Tensor>& bias,
                                                            c10::string_view activation,
                                                            double negative_slope) {
  if (sole_owner(grad_y)) {
    at::Tensor grad_bias = op::activation_backward_().call(grad_y, saved, bias, activation, negative_slope);
    return {grad_y, std::move(grad_bias)};
  }
  return op::activation_backward().call(grad_y, saved, bias, activation, negative_slope);
}

// cuBLAS runs a GEMM whose rows are not 16-byte aligned (in bf16: K or N
// not a multiple of 8) on a kernel several times slower. There the
// backward's two GEMMs run on copies whose K and N are padded with zeros to
// 16 bytes (the zeros add nothing to any sum) and their results are sliced
// back: on CUDA, for element types up to 4 bytes (float64 is left alone),
// and for problems large enough (gemm_act.h) that the copies pay.
bool pad_for_cublas(const at::Tensor& like, const c10::SymInt& m, const c10::SymInt& n,
                    const c10::SymInt& k) {
  if (!like.is_cuda() || like.element_size() > 4) return false;
  // On symbolic sizes each comparison is a guard. Divided, not multiplied:
  // M*N*K can overflow int64.
  return k > 0 && m * n >= c10::SymInt(kMinMultiplyAddsToAlign) / k;
}

// `size` rounded up to a whole number of 16-byte rows of `like`'s elements.
c10::SymInt round_up_to_16_bytes(const at::Tensor& like, const c10::SymInt& size) {
  const int64_t align = 16 / like.element_size();
  const c10::SymInt rest = size % align;
  if (rest == 0) return size;
  return size + (align - rest);
}

// t [rows, cols] with zero rows and columns added up to [rows_to, cols_to];
// t itself where nothing is added. On plain tensors one pass (zero_pad:
// ATen's pad fills the whole buffer, then copies into it at about half
// the bandwidth); traced, ATen's, which a compiler fuses with what
// produces t.
at::Tensor pad_to(const at::Tensor& t, const c10::SymInt& rows_to, const c10::SymInt& cols_to) {
  const c10::SymInt add_rows = rows_to - t.sym_size(0), add_cols = cols_to - t.sym_size(1);
  if (add_rows == 0 && add_cols == 0) return t;
  if (plain(t) && !rows_to.is_symbolic() && !cols_to.is_symbolic()) {
    return op::zero_pad().call(t, rows_to.as_int_unchecked(), cols_to.as_int_unchecked());
  }
  return at::constant_pad_nd_symint(t, {0, add_cols, 0, add_rows}, 0);
}

// b [K, N] padded to [k_to, n_to], copied in the layout whose rows are
// contiguous: for b = weight.t(), the weight's (a straight copy, where
// padding b itself would transpose it).
at::Tensor pad_b_to(const at::Tensor& b, const c10::SymInt& k_to, const c10::SymInt& n_to) {
  if (b.sym_stride(0) == 1 && b.sym_stride(1) != 1) return pad_to(b.t(), n_to, k_to).t();
  return pad_to(b, k_to, n_to);
}

// The bias's gradient from (part of) dZ alone: bias_grad, the backward
// pass's reduction without writing dZ (faster than PyTorch's sum over rows,
// and deterministic), or PyTorch's sum for a tensor subclass,
// over the dimensions the bias broadcasts along as classify_bias reads its
// shape (a bias per row (M, 1) of an N-D output is not PyTorch's broadcast).
at::Tensor sum_bias_grad(const at::Tensor& grad_pre, const at::Tensor& bias) {
  if (plain(grad_pre)) return op::bias_grad().call(grad_pre, bias);
  const c10::SymInt n = grad_pre.sym_size(-1);
  at::Tensor sum;
  if (bias.sym_numel() == 1) {
    sum = grad_pre.sum();
  } else if (bias.sym_size(-1) == n && bias.sym_numel() == n) {
    std::vector<int64_t> leading(grad_pre.dim() - 1);
    std::iota(leading.begin(), leading.end(), 0);
    sum = leading.empty() ? grad_pre : grad_pre.sum(leading);
  } else {
    sum = grad_pre.sum(-1);
  }
  return sum.reshape_symint(bias.sym_sizes());
}

// Whether bias is one value per column of an output with n columns.
bool per_column(const at::Tensor& bias, const c10::SymInt& n) {
  return bias.dim() >= 1 && bias.sym_size(-1) == n && bias.sym_numel() == n;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> preact_grad(const at::Tensor& grad_y, const at::Tensor& grad_z,
                                              const at::Tensor& saved,
                                              const std::optional<at::Tensor>& bias,
                                              c10::string_view activation, double negative_slope,
                                              bool z_feeds_chain) {
  at::Tensor grad_pre, grad_bias;
  if (grad_y.defined()) {
    if (parse_activation(activation) == Activation::None) {
      grad_pre = grad_y;
    } else {
      std::tie(grad_pre, grad_bias) =
          call_activation_backward(grad_y, saved, bias, activation, negative_slope);
    }
  }
  const bool z_in_bias = grad_z.defined() && !z_feeds_chain;
  if (bias.has_value() && grad_pre.defined() && !grad_bias.defined() && !z_in_bias) {
    grad_bias = sum_bias_grad(grad_pre, *bias);  // gY's part, before Z's is added
  }
  if (grad_z.defined()) {
    grad_pre = grad_pre.defined() ? grad_pre + grad_z : grad_z;
    if (z_in_bias) grad_bias = bias.has_value() ? sum_bias_grad(grad_pre, *bias) : at::Tensor();
  }
  return {grad_pre, grad_bias};
}

at::Tensor saved_output(c10::string_view activation, const at::Tensor& y, const at::Tensor& z,
                        bool store_preact) {
  const Activation act = parse_activation(activation);
  if (act == Activation::None) return at::Tensor();
  return grad_from_output(act) ? y : (store_preact ? z : at::Tensor());
}

OperandGrads operand_grads(const at::Tensor& grad_pre, const at::Tensor& a, const at::Tensor& b,
                           double alpha, bool need_a, bool need_b, const ChainedInput* chained) {
  OperandGrads out;
  c10::SymInt rows = 1;  // M: a's leading dimensions flattened (no -1: K or N may be 0)
  for (int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.sym_size(d);
  const c10::SymInt k = b.sym_size(0), n = b.sym_size(1);
  const bool pad = pad_for_cublas(grad_pre, rows, n, k);
  const c10::SymInt k_run = pad ? round_up_to_16_bytes(grad_pre, k) : k;
  const c10::SymInt n_run = pad ? round_up_to_16_bytes(grad_pre, n) : n;
  // A 2-D a (a layer's usual input) needs no reshape of a, dZ or dA, and an
  // unpadded GEMM no narrowing: each is a dispatched call the host pays for.
  const bool flat = a.dim() == 2;
  const auto as_2d = [flat](const at::Tensor& t, const c10::SymInt& r, const c10::SymInt& c) {
    return flat ? t : t.reshape_symint({r, c});
  };
  const at::Tensor grad_pre_2d = pad_to(as_2d(grad_pre, rows, n), rows, n_run);
  // pad only says the padded path may pay; it pads only rows that need it.
  const bool padded = pad && (k_run != k || n_run != n);
  const bool need_a_bias = chained != nullptr && chained->need_a_bias;
  if (chained != nullptr && (need_a || need_a_bias) && !padded) {
    const at::Tensor saved_2d = as_2d(chained->a_saved, rows, k);
    const bool column = need_a_bias && per_column(*chained->a_bias, k);
    auto [grad_a, grad_a_bias] =
        op::gemm_dact().call(grad_pre_2d, b.t(), saved_2d, column ? chained->a_bias : std::nullopt,
                             chained->activation, alpha, chained->negative_slope);
    out.a = flat ? grad_a : grad_a.reshape_symint(a.sym_sizes());
    if (column) out.a_bias = std::move(grad_a_bias);
  } else if (need_a || need_a_bias) {
    const at::Tensor grad_a = grad_pre_2d.mm(pad_b_to(b, k_run, n_run).t());  // [M, k_run]
    out.a = padded ? grad_a.narrow_symint(1, 0, k) : grad_a;
    if (!flat) out.a = out.a.reshape_symint(a.sym_sizes());
    if (alpha != 1.0) out.a = out.a * alpha;
    if (chained != nullptr) {
      std::tie(out.a, out.a_bias) =
          call_activation_backward(out.a, chained->a_saved, need_a_bias ? chained->a_bias : std::nullopt,
                                   chained->activation, chained->negative_slope);
    }
  }
  if (need_a_bias && !out.a_bias.defined()) out.a_bias = sum_bias_grad(out.a, *chained->a_bias);
  if (need_b) {
    // For b = weight.t(), dB^T (OperandGrads::b_transposed).
    const at::Tensor a_2d = pad_to(as_2d(a, rows, k), rows, k_run);
    if (b.sym_stride(0) == 1 && b.sym_stride(1) != 1) {
      const at::Tensor grad_bt = grad_pre_2d.t().mm(a_2d);  // [n_run, k_run]
      out.b = padded ? grad_bt.narrow_symint(0, 0, n).narrow_symint(1, 0, k) : grad_bt;
      out.b_transposed = true;
    } else {
      const at::Tensor grad_b = a_2d.t().mm(grad_pre_2d);  // [k_run, n_run]
      out.b = padded ? grad_b.narrow_symint(0, 0, k).narrow_symint(1, 0, n) : grad_b;
    }
    if (alpha != 1.0) out.b = out.b * alpha;
  }
  return out;
}

}  // namespace gemm_act

// All validation happens here, once, before any kernel: backends and kernels
// assume valid, consistent parameters (backend_args.h).
#include "checks.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "activations.h"
#include "op_handles.h"
#include "testing.h"

namespace gemm_act {

Activation parse_activation(std::string_view name) {
  for (int i = 0; i < kNumActivations; ++i) {
    const auto act = static_cast<Activation>(i);
    if (name == activation_name(act)) return act;
  }
  std::string known;
  for (int i = 0; i < kNumActivations; ++i) {
    known += known.empty() ? "" : ", ";
    known += activation_name(static_cast<Activation>(i));
  }
  TORCH_CHECK_VALUE(false, "gemm_act: unknown activation '", name, "'; expected one of: ", known);
}

void check_negative_slope(Activation act, double negative_slope) {
  // A backward from Y needs sign(y) == sign(z), i.e. slope >= 0.
  TORCH_CHECK_VALUE(!uses_slope(act) || !grad_from_output(act) || negative_slope >= 0.0,
                    "gemm_act: ", activation_name(act), " needs negative_slope >= 0, got ",
                    negative_slope);
}

// Under the testing switch's poison_outputs, every output is NaN before its
// kernel runs, so an element a kernel skips cannot pass a test.
void poison_if_requested(at::Tensor& t) {
  if (t.defined() && testing::active() && testing::overrides().poison_outputs) {
    t.fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

namespace {

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << sizes;
  return os.str();
}

bool all_ones(at::IntArrayRef sizes) {
  for (auto s : sizes) {
    if (s != 1) return false;
  }
  return true;
}

// How `bias` broadcasts against an output of shape `out` = [..., N]
// (docs/DESIGN.md, "Bias"). Never guesses from numel(): with M == N a guess
// would be silently wrong.
BiasKind classify_bias(at::IntArrayRef bias, at::IntArrayRef out) {
  const int64_t n = out.back();
  const auto lead = out.slice(0, out.size() - 1);
  int64_t m = 1;
  for (auto s : lead) m *= s;
  const bool fits_rank = bias.size() <= std::max<size_t>(out.size(), 2);

  if (fits_rank && all_ones(bias)) return BiasKind::Scalar;
  if (fits_rank && !bias.empty() && bias.back() == n && all_ones(bias.slice(0, bias.size() - 1)))
    return BiasKind::PerColumn;
  if (bias.size() == 2 && bias[0] == m && bias[1] == 1) return BiasKind::PerRow;
  if (bias.size() == out.size() && bias.size() >= 2 && bias.back() == 1 &&
      bias.slice(0, bias.size() - 1) == lead)
    return BiasKind::PerRow;

  std::string hint;
  if (bias.size() == 1 && bias[0] == m && m != n) {
    hint = "; for a bias per row pass shape (" + std::to_string(m) + ", 1)";
  }
  TORCH_CHECK_VALUE(false, "gemm_act: bias of shape ", shape_str(bias),
                    " does not broadcast to the output ", shape_str(out),
                    " in a supported way; expected a scalar ((), (1,) or (1, 1)), one value per column ((",
                    n, ",) or (1, ", n, ")) or one value per row ((", m, ", 1) or ",
                    shape_str(lead), " + (1,))", hint);
}

void check_floating(const at::Tensor& t, const char* name) {
  const auto dt = t.scalar_type();
  TORCH_CHECK_TYPE(dt == at::kHalf || dt == at::kBFloat16 || dt == at::kFloat || dt == at::kDouble,
                   "gemm_act: ", name, " must be float16, bfloat16, float32 or float64, got ", dt);
}

// Every operand shares `ref`'s dtype and device, as in F.linear.
void check_like(const at::Tensor& t, const at::Tensor& ref, const char* name, const char* ref_name) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), "gemm_act: expected ", name,
                   " to have the dtype of ", ref_name, " (", ref.scalar_type(), "), got ",
                   t.scalar_type());
  TORCH_CHECK(t.device() == ref.device(), "gemm_act: expected ", name, " on the device of ",
              ref_name, " (", ref.device(), "), got ", t.device());
}

void check_int32(int64_t size, const char* what) {
  TORCH_CHECK(size <= std::numeric_limits<int32_t>::max(), "gemm_act: ", what, " = ", size,
              " exceeds the supported maximum of 2^31 - 1");
}

int64_t leading_rows(at::IntArrayRef sizes) {
  int64_t m = 1;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) m *= sizes[i];
  return m;
}

}  // namespace

GemmActArgs prepare_gemm_act(const at::Tensor& a, const at::Tensor& b,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& c, std::string_view activation,
                             double alpha, double beta, double negative_slope, bool store_preact) {
  const Activation act = parse_activation(activation);
  check_negative_slope(act, negative_slope);
  check_floating(a, "a");
  check_like(b, a, "b", "a");
  TORCH_CHECK_VALUE(a.dim() >= 1, "gemm_act: a must have at least 1 dimension ([..., K]), got a 0-d tensor");
  TORCH_CHECK_VALUE(b.dim() == 2, "gemm_act: b must be 2-D [K, N], got shape ", shape_str(b.sizes()));
  TORCH_CHECK_VALUE(a.size(-1) == b.size(0), "gemm_act: a ", shape_str(a.sizes()), " and b ",
                    shape_str(b.sizes()), " cannot be multiplied: a.shape[-1] (", a.size(-1),
                    ") must equal b.shape[0] (", b.size(0), ")");

  const int64_t m = leading_rows(a.sizes());
  const int64_t k = b.size(0);
  const int64_t n = b.size(1);
  check_int32(m, "M (rows of a)");
  check_int32(n, "N (columns of b)");
  check_int32(k, "K (columns of a)");

  GemmActArgs args;
  args.out_sizes.assign(a.sizes().begin(), a.sizes().end() - 1);
  args.out_sizes.push_back(n);
  GemmActParams& p = args.params;
  args.a = a.dim() == 2 ? a : a.reshape({m, k});
  args.b = b;
  BiasKind bias_kind = BiasKind::None;
  if (bias.has_value()) {
    check_like(*bias, a, "bias", "a");
    bias_kind = classify_bias(bias->sizes(), args.out_sizes);
    args.bias = bias->dim() == 1 ? bias->contiguous() : bias->contiguous().view(-1);
    p.bias = args.bias.const_data_ptr();
  }
  if (c.has_value()) {
    check_like(*c, a, "c", "a");
    TORCH_CHECK_VALUE(c->sizes() == at::IntArrayRef(args.out_sizes),
                      "gemm_act: c must have the output's shape ", shape_str(args.out_sizes),
                      ", got ", shape_str(c->sizes()));
  } else {
    TORCH_CHECK_VALUE(beta == 0.0, "gemm_act: beta = ", beta, " was given but c is None; pass c or beta = 0");
  }
  // As in torch.addmm, beta == 0 means C is not read (NaN in C does not leak).
  if (c.has_value() && beta != 0.0) {
    args.c = c->dim() == 2 ? *c : c->reshape({m, n});
    p.c = args.c.const_data_ptr();
    p.c_stride_m = args.c.stride(0);
    p.c_stride_n = args.c.stride(1);
  }

  args.y = at::empty({m, n}, a.options());
  if (store_preact) args.z = at::empty({m, n}, a.options());
  poison_if_requested(args.y);
  poison_if_requested(args.z);

  p.y = args.y.mutable_data_ptr();
  p.z = store_preact ? args.z.mutable_data_ptr() : nullptr;
  p.a = args.a.const_data_ptr();
  p.b = args.b.const_data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_stride_m = args.a.stride(0);
  p.a_stride_k = args.a.stride(1);
  p.b_stride_k = args.b.stride(0);
  p.b_stride_n = args.b.stride(1);
  p.alpha = alpha;
  p.beta = beta;
  p.negative_slope = negative_slope;
  p.activation = act;
  p.bias_kind = bias_kind;
  return args;
}

std::tuple<at::Tensor, at::Tensor> gemm_act_outputs(const GemmActArgs& args) {
  const at::Tensor z = args.z.defined() ? shaped(args.z, args.out_sizes) : at::empty({0}, args.y.options());
  return {shaped(args.y, args.out_sizes), z};
}

GemmActArgs prepare_gemm_dact(const at::Tensor& grad, const at::Tensor& b, const at::Tensor& saved,
                              const std::optional<at::Tensor>& bias, std::string_view activation,
                              double alpha, double negative_slope) {
  check_floating(grad, "grad");
  check_like(saved, grad, "saved", "grad");
  TORCH_CHECK_VALUE(b.dim() == 2 && grad.dim() >= 1,
                    "gemm_dact: grad must be [..., K] and b [K, N], got grad ", shape_str(grad.sizes()),
                    " and b ", shape_str(b.sizes()));
  std::vector<int64_t> expected(grad.sizes().begin(), grad.sizes().end() - 1);
  expected.push_back(b.size(1));
  TORCH_CHECK_VALUE(saved.sizes() == at::IntArrayRef(expected), "gemm_dact: saved must have the shape of grad @ b, ",
                    shape_str(expected), ", got ", shape_str(saved.sizes()));
  if (bias.has_value()) {
    check_like(*bias, grad, "bias", "grad");
    classify_bias(bias->sizes(), expected);  // a ValueError unless it broadcasts to dA
  }
  // saved takes C's place (beta = 1 makes the checks keep it); the backends
  // read it as act'(saved), never add it.
  return prepare_gemm_act(grad, b, std::nullopt, saved, activation, alpha, /*beta=*/1.0,
                          negative_slope, /*store_preact=*/false);
}

at::Tensor dact_bias_grad(const at::Tensor& grad_a, const std::optional<at::Tensor>& bias,
                          const at::Tensor& column_sums) {
  if (!bias.has_value()) return grad_a.new_empty({0});
  if (!column_sums.defined()) return op::bias_grad().call(grad_a, *bias);
  return shaped(column_sums, bias->sizes());
}

void check_chained_input(const at::Tensor& a, const std::optional<at::Tensor>& a_preact,
                         const std::optional<at::Tensor>& a_bias, std::string_view a_activation,
                         double a_negative_slope) {
  check_negative_slope(parse_activation(a_activation), a_negative_slope);
  if (!a_preact.has_value()) {
    TORCH_CHECK_VALUE(!a_bias.has_value(), "gemm_act_chained: a_bias is the bias of the layer whose "
                      "pre-activation a_preact is; got a_bias without a_preact");
    return;
  }
  check_like(*a_preact, a, "a_preact", "a");
  TORCH_CHECK_VALUE(a_preact->sizes() == a.sizes(), "gemm_act_chained: a_preact must have a's shape ",
                    shape_str(a.sizes()), ", got ", shape_str(a_preact->sizes()));
  if (a_bias.has_value()) {
    check_like(*a_bias, a, "a_bias", "a");
    classify_bias(a_bias->sizes(), a.sizes());  // a ValueError unless it broadcasts to a_preact
  }
}

namespace {

// Where the pass writes dZ.
enum class GradZ { kNew, kOverGradY, kNone };

ActivationBackwardArgs prepare_backward_pass(const at::Tensor& grad_y, const at::Tensor& saved,
                                             const std::optional<at::Tensor>& bias,
                                             std::string_view activation, double negative_slope,
                                             GradZ grad_z);

}  // namespace

ActivationBackwardArgs prepare_activation_backward(const at::Tensor& grad_y,
                                                   const at::Tensor& saved,
                                                   const std::optional<at::Tensor>& bias,
                                                   std::string_view activation,
                                                   double negative_slope) {
  return prepare_backward_pass(grad_y, saved, bias, activation, negative_slope, GradZ::kNew);
}

ActivationBackwardArgs prepare_activation_backward_in_place(const at::Tensor& grad_y,
                                                            const at::Tensor& saved,
                                                            const std::optional<at::Tensor>& bias,
                                                            std::string_view activation,
                                                            double negative_slope) {
  // As PyTorch's in-place ops: no element of grad_y written twice, and no
  // element of saved read after another's dZ overwrote it (saved may be
  // grad_y itself: each element is read before it is written).
  at::assert_no_internal_overlap(grad_y);
  at::assert_no_partial_overlap(grad_y, saved);
  return prepare_backward_pass(grad_y, saved, bias, activation, negative_slope, GradZ::kOverGradY);
}

void check_zero_pad(const at::Tensor& src, int64_t rows, int64_t cols) {
  TORCH_CHECK_VALUE(src.dim() == 2 && src.size(0) <= rows && src.size(1) <= cols,
                    "zero_pad: expected a 2-D src of at most ", rows, " x ", cols, " elements, got ",
                    shape_str(src.sizes()));
}

ActivationBackwardArgs prepare_bias_grad(const at::Tensor& grad, const at::Tensor& bias) {
  return prepare_backward_pass(grad, grad, bias, activation_name(Activation::None), 0.0, GradZ::kNone);
}

namespace {

ActivationBackwardArgs prepare_backward_pass(const at::Tensor& grad_y, const at::Tensor& saved,
                                             const std::optional<at::Tensor>& bias,
                                             std::string_view activation, double negative_slope,
                                             GradZ grad_z) {
  const Activation act = parse_activation(activation);
  check_negative_slope(act, negative_slope);
  check_floating(grad_y, "grad_y");
  check_like(saved, grad_y, "saved", "grad_y");
  TORCH_CHECK_VALUE(grad_y.dim() >= 1 && saved.sizes() == grad_y.sizes(),
                    "gemm_act: saved ", shape_str(saved.sizes()), " must have grad_y's shape ",
                    shape_str(grad_y.sizes()));
  const int64_t n = grad_y.size(-1);
  const int64_t m = leading_rows(grad_y.sizes());
  check_int32(m, "M (rows of grad_y)");
  check_int32(n, "N (columns of grad_y)");

  ActivationBackwardArgs args;
  ActivationBackwardParams& p = args.params;
  args.grad_y = grad_y.contiguous();
  args.saved = saved.contiguous();
  // Over grad_y: into grad_y itself where it is contiguous, else into its
  // contiguous copy (which the operator copies back).
  if (grad_z == GradZ::kNew) args.grad_z = at::empty_like(args.grad_y, at::MemoryFormat::Contiguous);
  if (grad_z == GradZ::kOverGradY) args.grad_z = args.grad_y;
  if (bias.has_value()) {
    check_like(*bias, grad_y, "bias", "grad_y");
    p.bias_kind = classify_bias(bias->sizes(), grad_y.sizes());
    args.grad_bias = at::empty({bias->numel()}, grad_y.options());
    args.bias_sizes = bias->sizes().vec();
    p.grad_bias = args.grad_bias.mutable_data_ptr();
  }
  if (grad_z == GradZ::kNew) poison_if_requested(args.grad_z);
  poison_if_requested(args.grad_bias);
  p.grad_z = grad_z != GradZ::kNone ? args.grad_z.mutable_data_ptr() : nullptr;
  p.grad_y = args.grad_y.const_data_ptr();
  p.saved = args.saved.const_data_ptr();
  p.m = m;
  p.n = n;
  p.negative_slope = negative_slope;
  p.activation = act;
  return args;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> activation_backward_outputs(const ActivationBackwardArgs& args) {
  const at::Tensor grad_bias = args.grad_bias.defined() ? shaped(args.grad_bias, args.bias_sizes)
                                                        : at::empty({0}, args.grad_z.options());
  return {args.grad_z, grad_bias};
}

}  // namespace gemm_act

// The CUDA implementations of the operators and the one rule that chooses a
// forward backend: the backends below are tried in order and the first that
// takes the case runs it (each declines, doing nothing, what it cannot run
// or, for a tensor-core family, what would not be at least as fast as the
// next one). A new backend is a folder under cuda/ and one line here;
// docs/DESIGN.md, "Dispatch", has the rule with its measurements.
//
//  1. sm90 (cuda/sm90): compute capability 9.0; fp16/bf16, and fp32 where
//     PyTorch allows TF32; operands TMA can address, or large cases through
//     aligned copies. On aligned operands it leaves to the library a plain
//     GEMM with at most a bias per column (eager's own kernel) and K > 4096,
//     where the library was measured faster.
//  2. sm80 (cuda/sm80): the Ampere-class mma.sync family, fp16/bf16 with
//     16-byte aligned operands, on any GPU from sm_80 on; only when forced
//     until an Ampere-class GPU has measured it against eager.
//  3. library (cuda/library): every GPU, dtype, stride and alignment:
//     cuBLASLt's fused epilogue where it matches the call, else cuBLAS's
//     GEMM and one epilogue pass. What every arch but sm_90 gets, and exact
//     fp32 and fp64 everywhere.
//  4. simt (cuda/simt): any arch, dtype, strides and alignment; reached only
//     through the testing switch while the library takes every case.
// A problem torch_gemm_act.tune() timed starts at the backend it chose
// (tuned_choices.h), which then takes every case it can run.
// sm80 and simt are built only when asked for (setup.py: GEMM_ACT_SM80,
// GEMM_ACT_SIMT): the default build holds what the default rule chooses.
//
// The backward's elementwise pass has one backend (cuda/backward).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "activations.h"
#include "checks.h"
#include "cuda/common/device_support.h"
#include "cuda/common/pad_copy.h"
#include "cuda/common/nvtx_range.h"
#include "cuda/cuda_backends.h"
#include "cuda/library/library_backend.h"
#ifdef GEMM_ACT_WITH_SIMT
#include "cuda/simt/simt_backend.h"
#endif
#include "dact_unfused.h"
#include "dropout_add.h"
#include "dropout_ops.h"
#include "gated.h"
#include "ce_chunk_ops.h"
#include "glu_ops.h"
#ifdef GEMM_ACT_WITH_SM90
#include "cuda/sm90/sm90_gemm_act.h"
#endif
#ifdef GEMM_ACT_WITH_SM80
#include "cuda/sm80/sm80_gemm_act.h"
#endif
#include "testing.h"
#include "tuned_choices.h"

namespace gemm_act {
namespace {

constexpr CudaForwardBackend kForwardBackends[] = {
#ifdef GEMM_ACT_WITH_SM90
    {"sm90", &sm90::plan, &sm90::try_gemm_act, &sm90::why_not},
#endif
#ifdef GEMM_ACT_WITH_SM80
    {"sm80", &sm80::plan, &sm80::try_gemm_act},
#endif
    {"library", &library::plan, &library::try_gemm_act},
#ifdef GEMM_ACT_WITH_SIMT
    {"simt", &gpu::simt::plan, &gpu::simt::try_gemm_act},
#endif
};

// The backend called `name`; an error naming what this build holds otherwise.
const CudaForwardBackend* backend_named(const std::string& name, const char* by) {
  for (const CudaForwardBackend& backend : kForwardBackends) {
    if (name == backend.name) return &backend;
  }
  std::string names;
  for (const std::string& known : cuda_forward_backends()) names += (names.empty() ? "" : ", ") + known;
  C10_THROW_ERROR(Error, c10::str("gemm_act: the ", by, " CUDA backend '", name,
                                  "' does not exist in this build; expected one of: ", names));
}

// Where the rule starts: its first backend, the testing switch's forced one,
// or else the one tuned for the call's problem (tuned_choices.h). A forced or
// tuned backend takes every case it can run, on any GPU it can run on; the
// backends after it take the rest, as on a GPU where it comes first (sm80
// forced on sm_90: the family on every fp16/bf16 case it can run, the
// library on the others).
const CudaForwardBackend* first_backend(const std::optional<std::string>& tuned_choice = std::nullopt) {
  if (testing::active()) {
    const std::string forced = testing::overrides().cuda_backend;
    if (!forced.empty()) return backend_named(forced, "forced");
  }
  if (tuned_choice.has_value()) return backend_named(tuned::backend_of(*tuned_choice), "tuned");
  return std::begin(kForwardBackends);
}

void gemm_act_cuda(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  const c10::cuda::CUDAGuard device_guard(args.y.device());
  check_device_supported(args.y.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  char label[192];
  std::snprintf(label, sizeof(label), "gemm_act M=%" PRId64 " K=%" PRId64 " N=%" PRId64 " %s %s",
                p.m, p.k, p.n, c10::toString(args.y.scalar_type()), activation_name(p.activation));
  const NvtxRange range(label);

  const std::optional<std::string> tuned_choice = tuned::choice(args);
  const tuned::ScopedForce force(tuned_choice);
  for (const CudaForwardBackend* backend = first_backend(tuned_choice); backend != std::end(kForwardBackends);
       ++backend) {
    if (backend->try_run(args, stream)) return;
  }
  TORCH_CHECK(false, "gemm_act: no CUDA backend can run this case (", c10::toString(args.y.scalar_type()),
              ", M=", p.m, ", K=", p.k, ", N=", p.n, ", activation '", activation_name(p.activation), "')");
}

// What gemm_act_cuda would run for `args`, without running it.
std::string plan_cuda(const GemmActArgs& args) {
  const c10::cuda::CUDAGuard device_guard(args.y.device());
  check_device_supported(args.y.get_device());
  const GemmActParams& p = args.params;
  if (p.m == 0 || p.n == 0) return "nothing to compute: the output is empty";
  const std::optional<std::string> tuned_choice = tuned::choice(args);
  const tuned::ScopedForce force(tuned_choice);
  const CudaForwardBackend* first = first_backend(tuned_choice);
  const bool by_tuning = tuned_choice.has_value() && first->name == tuned::backend_of(*tuned_choice);
  std::string declined;  // the rules of the backends before it that fired
  for (const CudaForwardBackend* backend = first; backend != std::end(kForwardBackends); ++backend) {
    if (std::optional<std::string> plan = backend->plan(args)) {
      return std::string(backend->name) + (by_tuning && backend == first ? " (tuned)" : "") + ": " + *plan + " [" +
             c10::toString(args.y.scalar_type()) + "]" + (declined.empty() ? "" : " | " + declined);
    }
    if (backend->why_not == nullptr) continue;
    if (std::optional<std::string> why = backend->why_not(args)) {
      declined += (declined.empty() ? "" : "; ") + std::string(backend->name) + " declined: " + *why;
    }
  }
  return "no CUDA backend can run this case";
}

// gemm_dact: the sm90 family's fused kernel where the rule starts at sm90 and
// it takes the case (with the column sums of dA when asked), else the GEMM
// and the backward pass in place.
at::Tensor gemm_dact_cuda(const GemmActArgs& args, bool column_sums) {
  const c10::cuda::CUDAGuard device_guard(args.y.device());
  check_device_supported(args.y.get_device());
  const GemmActParams& p = args.params;
  char label[192];
  std::snprintf(label, sizeof(label), "gemm_dact M=%" PRId64 " K=%" PRId64 " N=%" PRId64 " %s %s",
                p.m, p.k, p.n, c10::toString(args.y.scalar_type()), activation_name(p.activation));
  const NvtxRange range(label);
#ifdef GEMM_ACT_WITH_SM90
  at::Tensor sums;
  if (std::string(first_backend()->name) == "sm90" &&
      sm90::try_gemm_dact(args, c10::cuda::getCurrentCUDAStream(), column_sums ? &sums : nullptr)) {
    return sums;
  }
#endif
  return gemm_dact_unfused<activation_backward_cuda>(args, column_sums);
}

// gemm_glu: a tensor-core family's fused kernel where the rule starts at it
// and it takes the case (H written beside Y when kept): sm90's on
// compute capability 9.0, sm80's where that family is forced (as for
// gemm_act); else the composite (gated.cpp).
std::tuple<at::Tensor, at::Tensor> gemm_glu_cuda(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    c10::string_view activation, double negative_slope, bool store_preact) {
  check_gemm_glu(a, b_gate, b_up, bias_gate, bias_up);
#if defined(GEMM_ACT_WITH_SM90) || defined(GEMM_ACT_WITH_SM80)
  const std::string first = first_backend()->name;
  if (fused_glu_biases_fit(bias_gate, bias_up) && a.numel() > 0 &&
      (first == "sm90" || first == "sm80")) {
    const Activation act = parse_activation(activation);
    check_negative_slope(act, negative_slope);
    const c10::cuda::CUDAGuard device_guard(a.device());
    check_device_supported(a.get_device());
    const at::Tensor a_2d = a.reshape({-1, a.size(-1)});
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    std::optional<std::tuple<at::Tensor, at::Tensor>> fused;
#ifdef GEMM_ACT_WITH_SM90
    if (first == "sm90") {
      fused = sm90::try_gemm_glu(a_2d, b_gate, b_up, bias_gate, bias_up, store_preact, act,
                                 negative_slope, stream);
    }
#endif
#ifdef GEMM_ACT_WITH_SM80
    if (!fused.has_value()) {
      fused = sm80::try_gemm_glu(a_2d, b_gate, b_up, bias_gate, bias_up, store_preact, act,
                                 negative_slope, stream);
    }
#endif
    if (fused.has_value()) {
      auto [y, h] = std::move(*fused);
      std::vector<int64_t> sizes = a.sizes().vec();
      sizes.back() = b_gate.size(1);
      at::Tensor y_out = y.view(sizes);
      if (!h.defined()) return {y_out, at::empty({0}, a.options())};
      sizes.back() = 2 * b_gate.size(1);
      return {y_out, h.view(sizes)};
    }
  }
#endif
  return gemm_glu_composite_checked(a, b_gate, b_up, bias_gate, bias_up, activation,
                                    negative_slope, store_preact);
}

// gemm_dropout_add: sm90's fused kernel where the rule starts at sm90, p > 0
// and the testing switch names it (rule dropout_forced); else the composite
// (dropout_add.cpp).
at::Tensor gemm_dropout_add_cuda(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& bias,
                                 const at::Tensor& residual, double p, const at::Tensor& seed) {
  check_gemm_dropout_add(a, b, residual, p, seed);
#ifdef GEMM_ACT_WITH_SM90
  if (p > 0.0 && residual.numel() > 0 && a.size(-1) > 0 && std::string(first_backend()->name) == "sm90") {
    const c10::cuda::CUDAGuard device_guard(a.device());
    check_device_supported(a.get_device());
    GemmActArgs args = prepare_gemm_act(a, b, bias, residual, "none", 1.0, 1.0, 0.01, false);
    const DropoutKeep keep = dropout_keep(p);
    const at::Tensor seed_c = seed.contiguous();
    args.params.dropout_seed = seed_c.const_data_ptr<int64_t>();
    args.params.dropout_threshold = keep.threshold;
    args.params.dropout_scale = keep.scale;
    const NvtxRange range("gemm_dropout_add");
    if (sm90::try_gemm_dropout_add(args, c10::cuda::getCurrentCUDAStream())) {
      return std::get<0>(gemm_act_outputs(args));
    }
  }
#endif
  return gemm_dropout_add_composite_checked(a, b, bias, residual, p, seed);
}

void activation_backward_checked(const ActivationBackwardArgs& args) {
  check_device_supported(args.grad_y.get_device());
  activation_backward_cuda(args);
}

at::Tensor zero_pad_cuda(const at::Tensor& src, int64_t rows, int64_t cols) {
  const c10::cuda::CUDAGuard guard(src.device());
  check_device_supported(src.get_device());
  return gpu::padded_copy(src, rows, cols);
}

// An elementwise pass (the gated activation's, the loss's chunk passes), on a
// GPU this build has an image for.
template <class Params, void (*Pass)(const Params&, at::ScalarType)>
void pass_checked(const Params& params, at::ScalarType dtype) {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  check_device_supported(device);
  Pass(params, dtype);
}

constexpr auto glu_forward_checked = pass_checked<GluParams, glu_forward_cuda>;
constexpr auto glu_backward_checked = pass_checked<GluParams, glu_backward_cuda>;
constexpr auto ce_chunk_forward_checked = pass_checked<CeChunkParams, ce_chunk_forward_cuda>;
constexpr auto ce_chunk_backward_checked = pass_checked<CeChunkParams, ce_chunk_backward_cuda>;
constexpr auto dropout_checked = pass_checked<DropoutParams, dropout_cuda>;

}  // namespace

std::vector<std::string> cuda_forward_backends() {
  std::vector<std::string> names;
  for (const CudaForwardBackend& backend : kForwardBackends) names.emplace_back(backend.name);
  return names;
}

std::vector<KernelInfo> compiled_kernels() {
  std::vector<KernelInfo> out;
#ifdef GEMM_ACT_WITH_SM90
  for (KernelInfo& k : sm90::compiled_kernels()) out.push_back(std::move(k));
#endif
#ifdef GEMM_ACT_WITH_SM80
  for (KernelInfo& k : sm80::compiled_kernels()) out.push_back(std::move(k));
#endif
  return out;
}

}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CUDA, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_impl<gemm_act::gemm_act_cuda>);
  m.impl("activation_backward",
         &gemm_act::activation_backward_impl<gemm_act::activation_backward_checked>);
  m.impl("activation_backward_",
         &gemm_act::activation_backward_in_place_impl<gemm_act::activation_backward_checked>);
  m.impl("bias_grad", &gemm_act::bias_grad_impl<gemm_act::activation_backward_checked>);
  m.impl("zero_pad", &gemm_act::zero_pad_impl<gemm_act::zero_pad_cuda>);
  m.impl("gemm_dact", &gemm_act::gemm_dact_impl<gemm_act::gemm_dact_cuda>);
  m.impl("explain", &gemm_act::explain_impl<gemm_act::plan_cuda>);
  m.impl("gemm_glu", &gemm_act::gemm_glu_cuda);
  m.impl("glu", &gemm_act::glu_impl<gemm_act::glu_forward_checked>);
  m.impl("glu_backward", &gemm_act::glu_backward_impl<gemm_act::glu_backward_checked>);
  m.impl("ce_chunk_forward", &gemm_act::ce_chunk_forward_impl<gemm_act::ce_chunk_forward_checked>);
  m.impl("ce_chunk_backward",
         &gemm_act::ce_chunk_backward_impl<gemm_act::ce_chunk_backward_checked>);
  m.impl("dropout_add", &gemm_act::dropout_add_impl<gemm_act::dropout_checked>);
  m.impl("dropout_scale", &gemm_act::dropout_scale_impl<gemm_act::dropout_checked>);
  m.impl("gemm_dropout_add", &gemm_act::gemm_dropout_add_cuda);
}

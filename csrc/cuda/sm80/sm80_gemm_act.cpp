// The sm80 entry: decides whether the cp.async + mma.sync kernels can take
// a case, picks the configuration (sm80_heuristic.h) and runs it. The
// kernels are in kernels/*.cu; this file sees PyTorch and no CUTLASS.
#include "cuda/sm80/sm80_gemm_act.h"

#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "activations.h"
#include "cuda/sm80/sm80_heuristic.h"
#include "cuda/sm80/sm80_launch.h"
#include "cuda/sm80/sm80_types.h"
#include "gated.h"
#include "testing.h"
#include "tuned_choices.h"

namespace gemm_act {
namespace sm80 {
namespace {

struct DeviceInfo {
  int major = 0;  // compute capability major; 0 where the query failed
  DeviceLimits limits;
};

const DeviceInfo& device_info(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<DeviceInfo, kMaxDevices> info;
  static const DeviceInfo none;
  if (device < 0 || device >= kMaxDevices) return none;
  std::call_once(once[device], [device] {
    DeviceInfo d;
    const bool ok =
        cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&d.limits.sm_count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&d.limits.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) ==
            cudaSuccess;
    if (ok) {
      info[device] = d;
    } else {
      cudaGetLastError();
    }
  });
  return info[device];
}

const char* dtype_name(Dtype dtype) { return dtype == Dtype::F16 ? "f16" : "bf16"; }
const char* layout_name(BLayout layout) { return layout == BLayout::KMajor ? "kmajor" : "nmajor"; }

// The testing switch's forced configuration; empty: the heuristic decides.
std::string forced_kernel() {
  return testing::active() ? testing::overrides().sm80_kernel : std::string();
}

// A forced sm80 backend or kernel (the testing switch), or a tuned choice of
// the backend, takes every case the family can run, on any GPU from sm_80 on.
bool forced_here() { return tuned::forced("sm80") || !forced_kernel().empty(); }

// The configuration named `name` (the testing switch's sm80_kernel).
KernelConfig config_named(const std::string& name) {
  std::string known;
  for (int i = 0; i < kNumKernelConfigs; ++i) {
    const auto config = static_cast<KernelConfig>(i);
    if (name == config_name(config)) return config;
    known += known.empty() ? "" : ", ";
    known += config_name(config);
  }
  C10_THROW_ERROR(ValueError, c10::str("gemm_act: no sm80 kernel configuration '", name,
                                       "' in this build; expected one of: ", known));
}

std::optional<Dtype> sm80_dtype(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
      return Dtype::F16;
    case at::kBFloat16:
      return Dtype::BF16;
    default:
      return std::nullopt;  // fp32 (TF32) and fp64 are not this family's
  }
}

// The kernel reads A and B in 16-byte vectors (8 elements) along their
// contiguous dimension, each starting at a multiple of 8 elements of a row:
// the base must be 16-byte aligned and the other dimension's stride a
// multiple of 8. A dimension of extent 1 may have any stride (only index 0
// is read). Y, Z, C and the bias have no rules: the epilogue checks their
// alignment itself.
constexpr int64_t kVector = 8;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool a_fits(const GemmActParams& p) {
  return aligned16(p.a) && (p.a_stride_k == 1 || p.k == 1) && (p.a_stride_m % kVector == 0 || p.m == 1);
}

std::optional<BLayout> b_layout(const GemmActParams& p) {
  if (!aligned16(p.b)) return std::nullopt;
  if ((p.b_stride_k == 1 || p.k == 1) && (p.b_stride_n % kVector == 0 || p.n == 1)) return BLayout::KMajor;
  if ((p.b_stride_n == 1 || p.n == 1) && (p.b_stride_k % kVector == 0 || p.k == 1)) return BLayout::NMajor;
  return std::nullopt;
}

struct Sm80Case {
  bool run = false;
  Dtype dtype = Dtype::BF16;
  BLayout layout = BLayout::KMajor;
  KernelConfig config{};
  int device = 0;
};

Sm80Case classify(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  Sm80Case out;
  if (!args.a.defined() || !args.a.is_cuda()) return out;
  const std::optional<Dtype> dtype = sm80_dtype(args.a.scalar_type());
  if (!dtype.has_value()) return out;
  out.dtype = *dtype;
  out.device = args.a.get_device();
  const DeviceInfo& info = device_info(out.device);
  // The family has been measured only forced on sm_90, where it runs below
  // cuBLAS; until an sm_80 or sm_86 GPU measures it against eager, the rule
  // leaves those GPUs to the library (eager's own kernels) and the
  // family runs only when forced (TORCH_GEMM_ACT_BACKEND=sm80) or where
  // torch_gemm_act.tune() measured it fastest, on any GPU from sm_80 on.
  if (info.major < 8 || !forced_here()) return out;
  // K == 0 (an empty sum) is the fallback's; M and N are > 0 here.
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return out;
  const std::optional<BLayout> layout = b_layout(p);
  if (!a_fits(p) || !layout.has_value()) return out;
  out.layout = *layout;

  const std::string forced = forced_kernel();
  // A tuned choice's configuration where it can run the case (a problem key
  // does not see everything a kernel needs), else the heuristic's.
  const std::string tuned_name = forced.empty() ? tuned::forced_kernel("sm80") : std::string();
  std::optional<KernelConfig> tuned;
  if (!tuned_name.empty()) {
    const KernelConfig named = config_named(tuned_name);
    if (is_compiled(named, out.dtype, out.layout) && fits(named, info.limits)) tuned = named;
  }
  if (!forced.empty()) {
    out.config = config_named(forced);
    TORCH_CHECK(is_compiled(out.config, out.dtype, out.layout),
                "gemm_act: the forced sm80 kernel '", forced, "' is not compiled for ",
                dtype_name(out.dtype), " with a ", layout_name(out.layout),
                " B (torch_gemm_act.testing.kernels() lists what is compiled); leave sm80_kernel "
                "unset to let the heuristic choose");
    TORCH_CHECK(fits(out.config, info.limits), "gemm_act: the forced sm80 kernel '", forced,
                "' needs ", config_info(out.config).smem_bytes,
                " bytes of shared memory per block; this GPU allows ", info.limits.smem_optin);
  } else if (tuned.has_value()) {
    out.config = *tuned;
  } else {
    const std::optional<KernelConfig> config = choose_config(p.m, p.n, out.dtype, out.layout, info.limits);
    if (!config.has_value()) return out;
    out.config = *config;
  }
  out.run = true;
  return out;
}

// Runs kernel (config, dtype, layout, act); classify made sure it is compiled.
cudaError_t launch(const Sm80Case& c, const GemmActParams& p, cudaStream_t stream) {
#define GEMM_ACT_SM80_CASE(C, D, L)                                                              \
  if (c.config == KernelConfig::C && c.dtype == Dtype::D && c.layout == BLayout::L) {            \
    cudaError_t err = cudaSuccess;                                                               \
    GEMM_ACT_DISPATCH_ACTIVATION(                                                                \
        p.activation, err = launch_kernel<KernelConfig::C, Dtype::D, BLayout::L, kAct>(p, stream)); \
    return err;                                                                                  \
  }
  GEMM_ACT_SM80_FOR_EACH_KERNEL(GEMM_ACT_SM80_CASE)
#undef GEMM_ACT_SM80_CASE
  TORCH_INTERNAL_ASSERT(false, "gemm_act: sm80 kernel ", config_name(c.config), " is not compiled for ",
                        dtype_name(c.dtype), ", ", layout_name(c.layout), " B");
}

}  // namespace

std::optional<std::string> plan(const GemmActArgs& args) {
  const Sm80Case c = classify(args);
  if (!c.run) return std::nullopt;
  return std::string(config_name(c.config)) + ", " + layout_name(c.layout) + " B";
}

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream) {
  const Sm80Case c = classify(args);
  if (!c.run) return false;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(c.device));
  const GemmActParams& p = args.params;
  const cudaError_t err = launch(c, p, stream);
  // The build holds no code of the kernel for this GPU (its shared-memory
  // opt-in failed, so nothing was launched): another backend runs the case.
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) return false;
  TORCH_CHECK(err == cudaSuccess, "gemm_act: the sm80 kernel ", config_name(c.config), " (",
              dtype_name(c.dtype), ", ", layout_name(c.layout), " B, activation '",
              activation_name(p.activation), "') failed: ", cudaGetErrorString(err));
  return true;
}

std::optional<std::tuple<at::Tensor, at::Tensor>> try_gemm_glu(
    const at::Tensor& a, const at::Tensor& b_gate, const at::Tensor& b_up,
    const std::optional<at::Tensor>& bias_gate, const std::optional<at::Tensor>& bias_up,
    bool store_preact, Activation activation, double negative_slope, cudaStream_t stream) {
  if (!a.is_cuda() || a.dim() != 2 || b_gate.dim() != 2 || b_up.dim() != 2 || !forced_here()) {
    return std::nullopt;
  }
  const std::optional<Dtype> dtype = sm80_dtype(a.scalar_type());
  const int device = a.get_device();
  const DeviceInfo& info = device_info(device);
  if (!dtype.has_value() || info.major < 8) return std::nullopt;
  GemmActParams p = fused_glu_params(a, b_gate, b_up, bias_gate, bias_up, activation, negative_slope);
  // The kernel reads each weight's rows in 16-byte vectors from where they
  // are: both K-major with one row stride, both 16-byte aligned, apart by a
  // multiple of 16 bytes; Y and H are written 8 columns at a time.
  const int64_t delta_bytes = std::llabs(static_cast<const char*>(p.c) - static_cast<const char*>(p.b));
  const bool weights_fit = p.b_stride_k == 1 && b_up.stride(0) == 1 &&
                           b_up.stride(1) == p.b_stride_n && p.b_stride_n % kVector == 0 &&
                           aligned16(p.b) && aligned16(p.c) && delta_bytes != 0 && delta_bytes % 16 == 0;
  const KernelConfig config = KernelConfig::mma_128x256x32_s4_glu;
  if (p.m <= 0 || p.k <= 0 || (p.n / 2) % kVector != 0 || !weights_fit || !a_fits(p) ||
      !is_compiled_glu(config, *dtype, BLayout::KMajor) || !fits(config, info.limits)) {
    return std::nullopt;
  }
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  auto outputs = fused_glu_outputs(a, store_preact, p);  // fresh: contiguous and aligned
  cudaError_t err = cudaSuccess;
#define GEMM_ACT_SM80_GLU_CASE(C, D, L)                                                            \
  if (config == KernelConfig::C && *dtype == Dtype::D && BLayout::L == BLayout::KMajor) {          \
    GEMM_ACT_DISPATCH_ACTIVATION(                                                                  \
        activation, err = launch_glu_kernel<KernelConfig::C, Dtype::D, BLayout::L, kAct>(p, stream)); \
  }
  GEMM_ACT_SM80_FOR_EACH_GLU_KERNEL(GEMM_ACT_SM80_GLU_CASE)
#undef GEMM_ACT_SM80_GLU_CASE
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) return std::nullopt;
  TORCH_CHECK(err == cudaSuccess, "gemm_glu: the sm80 kernel ", config_name(config), " (",
              dtype_name(*dtype), ", activation '", activation_name(activation),
              "') failed: ", cudaGetErrorString(err));
  return outputs;
}

std::vector<KernelInfo> compiled_kernels() {
  std::vector<KernelInfo> out;
#define GEMM_ACT_SM80_INFO(C, D, L) \
  out.push_back({"sm80", config_name(KernelConfig::C), dtype_name(Dtype::D), layout_name(BLayout::L), true});
  GEMM_ACT_SM80_FOR_EACH_KERNEL(GEMM_ACT_SM80_INFO)
#undef GEMM_ACT_SM80_INFO
#define GEMM_ACT_SM80_GLU_INFO(C, D, L)                                                          \
  out.push_back({"sm80", config_name(KernelConfig::C), dtype_name(Dtype::D), layout_name(BLayout::L), \
                 false, "gemm_glu"});
  GEMM_ACT_SM80_FOR_EACH_GLU_KERNEL(GEMM_ACT_SM80_GLU_INFO)
#undef GEMM_ACT_SM80_GLU_INFO
  return out;
}

}  // namespace sm80
}  // namespace gemm_act

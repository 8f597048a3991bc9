// The sm90 entry: decides whether the TMA + wgmma kernel can take a case,
// picks its launch options and runs it. The kernels themselves live in
// sm90_inst_<dtype>_<b layout>.cu; this file sees PyTorch and no CUTLASS.
#include "cuda/sm90/sm90_gemm_act.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "activations.h"
#include "cuda/sm90/sm90_heuristic.h"
#include "cuda/sm90/sm90_launch.h"

namespace gemm_act {
namespace sm90 {
namespace {

// TMA reads and writes whole 16-byte granules: every base pointer and every
// non-unit stride must be a multiple of 16 bytes (8 fp16/bf16 elements), and
// so must the extent of each contiguous dimension (CUTLASS's can_implement
// asks the same of K, and of N for Y, Z and a row-major B).
constexpr int64_t kAlignElems = 8;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

struct DeviceInfo {
  bool is_sm90 = false;  // exactly compute capability 9.0: what an sm_90a cubin runs on
  int sm_count = 0;
};

const DeviceInfo& device_info(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<DeviceInfo, kMaxDevices> info;
  static const DeviceInfo none;
  if (device < 0 || device >= kMaxDevices) return none;
  std::call_once(once[device], [device] {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    info[device].is_sm90 = prop.major == 9 && prop.minor == 0;
    info[device].sm_count = prop.multiProcessorCount;
  });
  return info[device];
}

// TORCH_GEMM_ACT_DISABLE_SM90=1 sends every case to the fallback (for A/B
// comparisons and for ruling this kernel out when debugging).
bool disabled_by_env() {
  static const bool disabled = [] {
    const char* env = std::getenv("TORCH_GEMM_ACT_DISABLE_SM90");
    return env != nullptr && std::string(env) == "1";
  }();
  return disabled;
}

// The workspace (if a kernel needs one) comes from PyTorch's caching
// allocator on the current stream and lives until try_gemm_act returns, which
// is after the launch: the allocator reuses it only in stream order.
struct Workspace {
  at::TensorOptions options;
  at::Tensor buffer;
};

void* alloc_workspace(void* ctx, size_t bytes) {
  auto* ws = static_cast<Workspace*>(ctx);
  ws->buffer = at::empty({static_cast<int64_t>(bytes)}, ws->options);
  return ws->buffer.data_ptr();
}

template <Dtype kDtype, BLayout kB>
LaunchResult launch(const LaunchArgs& la, Activation act) {
  LaunchResult result{LaunchStatus::kNotImplementable, cudaSuccess, "activation"};
  GEMM_ACT_DISPATCH_ACTIVATION(act, result = launch_gemm_act<kDtype, kB, kAct>(la));
  return result;
}

}  // namespace

bool try_gemm_act(const GemmActArgs& args, cudaStream_t stream) {
  const GemmActParams& p = args.params;
  if (disabled_by_env() || !args.a.defined() || !args.a.is_cuda()) return false;

  Dtype dtype;
  switch (args.a.scalar_type()) {
    case at::kHalf:
      dtype = Dtype::F16;
      break;
    case at::kBFloat16:
      dtype = Dtype::BF16;
      break;
    default:
      return false;
  }

  const int device = args.a.get_device();
  const DeviceInfo& info = device_info(device);
  if (!info.is_sm90) return false;

  // Sizes: K == 0 (an empty sum) is the fallback's; M and N are > 0 here.
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  if (p.k % kAlignElems != 0 || p.n % kAlignElems != 0) return false;

  // A [M, K]: K contiguous, rows 16-byte aligned and not overlapping.
  if (p.a_stride_k != 1 || p.a_stride_m % kAlignElems != 0 || p.a_stride_m < p.k ||
      !aligned16(p.a)) {
    return false;
  }

  // B [K, N]: one of the two dimensions contiguous, the other a 16-byte
  // multiple no smaller than the contiguous extent.
  BLayout layout;
  if (p.b_stride_k == 1 && p.b_stride_n % kAlignElems == 0 && p.b_stride_n >= p.k) {
    layout = BLayout::KMajor;
  } else if (p.b_stride_n == 1 && p.b_stride_k % kAlignElems == 0 && p.b_stride_k >= p.n) {
    layout = BLayout::NMajor;
  } else {
    return false;
  }
  if (!aligned16(p.b)) return false;

  // Y and Z: contiguous [M, N] (ld = N, a multiple of 8 as checked above).
  if (!aligned16(p.y) || (p.z != nullptr && !aligned16(p.z))) return false;
  // C (any strides, any alignment) and the bias (contiguous, any alignment)
  // are read element-wise by the epilogue: nothing to check.

  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  Workspace workspace{args.a.options().dtype(at::kByte), {}};
  LaunchArgs la;
  la.params = &p;
  la.device = device;
  la.sm_count = info.sm_count;
  la.alloc_workspace = &alloc_workspace;
  la.alloc_ctx = &workspace;
  la.stream = stream;
  choose_launch(p, /*pingpong_compiled=*/layout == BLayout::KMajor, la);

  LaunchResult result;
  if (dtype == Dtype::BF16) {
    result = layout == BLayout::KMajor ? launch<Dtype::BF16, BLayout::KMajor>(la, p.activation)
                                       : launch<Dtype::BF16, BLayout::NMajor>(la, p.activation);
  } else {
    result = layout == BLayout::KMajor ? launch<Dtype::F16, BLayout::KMajor>(la, p.activation)
                                       : launch<Dtype::F16, BLayout::NMajor>(la, p.activation);
  }
  if (result.status == LaunchStatus::kNotImplementable) return false;
  TORCH_CHECK(result.status == LaunchStatus::kOk, "gemm_act: the sm90 kernel failed at ",
              result.what, ": ", cudaGetErrorString(result.error));
  return true;
}

}  // namespace sm90
}  // namespace gemm_act

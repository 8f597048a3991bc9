// The CUDA implementations of the operators and the one rule that chooses a
// forward backend: the backends below are tried in order and the first that
// takes the case runs it (each declines, doing nothing, what it cannot run
// or, for a tensor-core family, what would not be at least as fast as the
// next one). A new backend is a folder under cuda/ and one line here.
//
//  1. sm90 (cuda/sm90): compute capability 9.0; fp16/bf16, and fp32 where
//     PyTorch allows TF32; operands TMA can address, or large cases through
//     aligned copies.
//  2. simt (cuda/simt): any arch, dtype, strides and alignment.
//
// The backward's elementwise pass has one backend (cuda/backward).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cinttypes>
#include <cstdio>
#include <string>

#include "activations.h"
#include "checks.h"
#include "cuda/common/nvtx_range.h"
#include "cuda/cuda_backends.h"
#include "cuda/simt/simt_backend.h"
#ifdef GEMM_ACT_WITH_SM90
#include "cuda/sm90/sm90_gemm_act.h"
#endif
#include "testing.h"

namespace gemm_act {
namespace {

constexpr CudaForwardBackend kForwardBackends[] = {
#ifdef GEMM_ACT_WITH_SM90
    {"sm90", &sm90::try_gemm_act},
#endif
    {"simt", &gpu::simt::try_gemm_act},
};

void gemm_act_cuda(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  const c10::cuda::CUDAGuard device_guard(args.y.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  char label[192];
  std::snprintf(label, sizeof(label), "gemm_act M=%" PRId64 " K=%" PRId64 " N=%" PRId64 " %s %s",
                p.m, p.k, p.n, c10::toString(args.y.scalar_type()), activation_name(p.activation));
  const NvtxRange range(label);

  const std::string forced = testing::active() ? testing::overrides().cuda_backend : std::string();
  for (const CudaForwardBackend& backend : kForwardBackends) {
    if (!forced.empty() && forced != backend.name) continue;
    if (backend.try_run(args, stream)) return;
    TORCH_CHECK(forced.empty(), "gemm_act: the forced CUDA backend '", forced,
                "' cannot run this case (", c10::toString(args.y.scalar_type()), ", M=", p.m,
                ", K=", p.k, ", N=", p.n, ", activation '", activation_name(p.activation), "')");
  }
  std::string names;
  for (const std::string& name : cuda_forward_backends()) names += (names.empty() ? "" : ", ") + name;
  TORCH_CHECK(false, "gemm_act: the forced CUDA backend '", forced,
              "' does not exist in this build; expected one of: ", names);
}

}  // namespace

std::vector<std::string> cuda_forward_backends() {
  std::vector<std::string> names;
  for (const CudaForwardBackend& backend : kForwardBackends) names.emplace_back(backend.name);
  return names;
}

std::vector<KernelInfo> compiled_kernels() {
#ifdef GEMM_ACT_WITH_SM90
  return sm90::compiled_kernels();
#else
  return {};
#endif
}

}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CUDA, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_impl<gemm_act::gemm_act_cuda>);
  m.impl("activation_backward", &gemm_act::activation_backward_impl<gemm_act::activation_backward_cuda>);
}

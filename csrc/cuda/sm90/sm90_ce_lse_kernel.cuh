// An sm90 gemm_ce_lse kernel: the forward's mainloop and launch
// (sm90_kernel.cuh) with the loss's log-sum-exp epilogue
// (sm90_ce_lse_epilogue.cuh), for a configuration row marked
// op="gemm_ce_lse". One kernel: the activation parameter the table's
// instantiation passes is unused (every one but None declines). Only the
// generated kernel files include this.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_ce_lse_epilogue.cuh"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_launch_template.cuh"
#include "cuda/sm90/sm90_mainloop.cuh"

namespace gemm_act {
namespace sm90 {

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_ce_lse_kernel(const LaunchArgs& la) {
  if constexpr (kAct != Activation::None || kDtype == Dtype::F32) {
    return {LaunchStatus::kUnknownConfig, cudaSuccess, "gemm_ce_lse has one kernel: no activation, fp16/bf16"};
  } else {
    using Element = typename ElementOf<kDtype>::type;
    using Config = detail::CutlassConfig<ConfigSpec<kConfig>, Element>;
    using Epilogue = detail::GemmCeLseEpilogue<Config, Element>;
    using Kernel = detail::GemmKernelWith<Config, Element, kB, Epilogue>;
    return detail::launch_gemm<Kernel>(
        detail::gemm_arguments<Kernel, kB, Element>(la, Epilogue::arguments(*la.params)), la);
  }
}

}  // namespace sm90
}  // namespace gemm_act

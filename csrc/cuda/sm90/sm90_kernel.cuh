// An sm90 kernel of this project: CUTLASS 3's warp-specialised persistent
// GEMM (TMA loads into a multi-stage pipeline, wgmma, producer/consumer
// warps, the persistent tile scheduler with grouped rasterisation) with the
// mainloop of sm90_mainloop.cuh and the epilogue of sm90_epilogue.cuh, put
// together for one row of the configuration table (ConfigSpec), dtype, B
// layout and activation. Only the generated kernel files include this.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_epilogue.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_launch_template.cuh"
#include "cuda/sm90/sm90_mainloop.cuh"
#include "cuda/sm90/sm90_tma_rules.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
struct GemmActKernel {
  using Element = typename ElementOf<kDtype>::type;
  using Config = CutlassConfig<ConfigSpec<kConfig>, Element>;
  using Epilogue = GemmActEpilogue<Config, Element, kAct>;
  using Mainloop = GemmActMainloop<Config, Element, kB,
                                   static_cast<int>(sizeof(typename Epilogue::Collective::SharedStorage))>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, typename Mainloop::Collective,
                                                      typename Epilogue::Collective,
                                                      typename Config::TileScheduler>;

  static LaunchResult run(const LaunchArgs& la) {
    if (!Config::kStoresZ && la.params->z != nullptr) {  // only where the configuration was forced
      return {LaunchStatus::kUnknownConfig, cudaSuccess, "the configuration stores no Z"};
    }
    if (Config::kSourceTma && la.params->c != nullptr &&
        !c_fits_tma(*la.params, Epilogue::Parts::kAlignment)) {  // only where forced, as above
      return {LaunchStatus::kUnknownConfig, cudaSuccess,
              "the configuration loads C through TMA: contiguous rows aligned to 16 bytes only"};
    }
    return launch_gemm<Kernel>(
        gemm_arguments<Kernel, kB, Element>(la, Epilogue::arguments(*la.params)), la);
  }
};

}  // namespace detail

template <>
struct KernelAssembly<kCutlassAssembly> {
  template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
  static LaunchResult run(const LaunchArgs& la) {
    return detail::GemmActKernel<kConfig, kDtype, kB, kAct>::run(la);
  }
};

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_kernel(const LaunchArgs& la) {
  return KernelAssembly<ConfigSpec<kConfig>::kAssembly>::template run<kConfig, kDtype, kB, kAct>(la);
}

}  // namespace sm90
}  // namespace gemm_act

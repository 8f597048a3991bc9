// An sm90 gemm_dropout_add kernel: the forward's mainloop and launch with
// the dropout epilogue (sm90_dropout_epilogue.cuh), for a configuration row
// marked op="gemm_dropout_add". Only the generated kernel files include this.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_dropout_epilogue.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_launch_template.cuh"
#include "cuda/sm90/sm90_mainloop.cuh"

namespace gemm_act {
namespace sm90 {

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_dropout_kernel(const LaunchArgs& la) {
  static_assert(kAct == Activation::None, "gemm_dropout_add has no activation");
  using Element = typename ElementOf<kDtype>::type;
  using Config = detail::CutlassConfig<ConfigSpec<kConfig>, Element>;
  using Epilogue = detail::DropoutAddEpilogue<Config, Element>;
  using Mainloop = detail::GemmActMainloop<
      Config, Element, kB, static_cast<int>(sizeof(typename Epilogue::Collective::SharedStorage))>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      typename Mainloop::Collective,
                                                      typename Epilogue::Collective,
                                                      typename Config::TileScheduler>;
  return detail::launch_gemm<Kernel>(
      detail::gemm_arguments<Kernel, kB, Element>(la, Epilogue::arguments(*la.params)), la);
}

}  // namespace sm90
}  // namespace gemm_act

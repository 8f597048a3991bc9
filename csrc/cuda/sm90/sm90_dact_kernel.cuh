// An sm90 gemm_dact kernel: the forward's mainloop and launch (sm90_kernel.cuh)
// with the dact epilogue (sm90_dact_epilogue.cuh), for a configuration row
// marked op="gemm_dact". Only the generated kernel files include this.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_dact_epilogue.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_launch_template.cuh"
#include "cuda/sm90/sm90_mainloop.cuh"

namespace gemm_act {
namespace sm90 {

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_dact_kernel(const LaunchArgs& la) {
  using Element = typename ElementOf<kDtype>::type;
  using Config = detail::CutlassConfig<ConfigSpec<kConfig>, Element>;
  using Epilogue = detail::GemmDactEpilogue<Config, Element, kAct>;
  using Mainloop = detail::GemmActMainloop<
      Config, Element, kB, static_cast<int>(sizeof(typename Epilogue::Collective::SharedStorage))>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      typename Mainloop::Collective,
                                                      typename Epilogue::Collective,
                                                      typename Config::TileScheduler>;
  auto args = detail::gemm_arguments<Kernel, kB, Element>(la, Epilogue::arguments(*la.params));
  args.epilogue.ptr_C = static_cast<const Element*>(la.params->c);  // saved, as the source
  args.epilogue.dC = typename Kernel::StrideC{la.params->c_stride_m, cute::_1{}, int64_t(0)};
  return detail::launch_gemm<Kernel>(args, la);
}

}  // namespace sm90
}  // namespace gemm_act

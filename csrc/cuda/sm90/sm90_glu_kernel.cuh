// An sm90 gemm_glu kernel: the gated MLP's two projections and its gate in
// one GEMM (docs/DESIGN.md, "Gated activations"), CUTLASS's persistent
// warp-specialised kernel with the interleaving mainloop
// (sm90_glu_mainloop.cuh) and the pairing epilogue (sm90_glu_epilogue.cuh),
// for a configuration row marked op="gemm_glu". Only the generated kernel
// files include this.
//
// The op's parameters carry the two weights as b (the gate's) and c (the
// up projection's), both K-major with the row stride b_stride_n, and n as
// the GEMM's width, twice Y's.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_glu_epilogue.cuh"
#include "cuda/sm90/sm90_glu_mainloop.cuh"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_launch_template.cuh"

namespace gemm_act {
namespace sm90 {

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_glu_kernel(const LaunchArgs& la) {
  static_assert(kB == BLayout::KMajor, "gemm_glu reads the weights K-major (nn.Linear's)");
  using Element = typename ElementOf<kDtype>::type;
  using Config = detail::CutlassConfig<ConfigSpec<kConfig>, Element>;
  using Epilogue = detail::GemmGluEpilogue<Config, Element, kAct>;
  using Mainloop = detail::GluMainloop<
      Config, Element, static_cast<int>(sizeof(typename Epilogue::Collective::SharedStorage))>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      typename Mainloop::Collective,
                                                      typename Epilogue::Collective,
                                                      typename Config::TileScheduler>;
  const GemmActParams& p = *la.params;
  const auto* gate = static_cast<const Element*>(p.b);
  const auto* up = static_cast<const Element*>(p.c);
  const int64_t delta = up > gate ? up - gate : gate - up;  // elements from weight 0 to weight 1
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1};
  typename Kernel::MainloopArguments mainloop{};
  mainloop.ptr_A = static_cast<const Element*>(p.a);
  mainloop.dA = typename Kernel::StrideA{p.a_stride_m, cute::_1{}, int64_t(0)};
  mainloop.ptr_B = up < gate ? up : gate;
  mainloop.dB = typename Kernel::StrideB{p.b_stride_n, cute::_1{}, int64_t(0)};
  mainloop.delta = delta;
  args.mainloop = mainloop;
  args.epilogue = {Epilogue::arguments(p), nullptr, {}, nullptr, {}};
  args.hw_info.device_id = la.device;
  args.hw_info.sm_count = la.sm_count;
  args.scheduler.max_swizzle_size = la.max_swizzle;
  args.scheduler.raster_order = detail::to_cutlass(la.raster);
  return detail::launch_gemm<Kernel>(args, la);
}

}  // namespace sm90
}  // namespace gemm_act

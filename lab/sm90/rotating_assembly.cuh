// KernelAssembly<kRotatingAssembly>: the rotating kernel (rotating_kernel.cuh)
// around the product's collectives, for the lab's rows of the sm90 table
// (lab_kernels.py). The per-element work runs in the register epilogue
// (register_epilogue.cuh); the visitor tree only unpacks and stores Z and Y.
#pragma once

#include "cuda/sm90/sm90_kernel.cuh"
#include "sm90/register_epilogue.cuh"
#include "sm90/rotating_kernel.cuh"

namespace gemm_act {
namespace sm90 {

constexpr int kRotatingAssembly = 1;

namespace detail {

template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
struct RotatingGemmActKernel {
  using Element = typename ElementOf<kDtype>::type;
  using Spec = ConfigSpec<kConfig>;
  using Config = CutlassConfig<Spec, Element>;
  using Parts = EpilogueParts<Config, Element>;
  using ElementCompute = float;

  // Z and Y come packed in the accumulator slots.
  using UnpackZ = fusion::Sm90EVT<
      fusion::Sm90Compute<UnpackedZ<Element>::template Fn, ElementCompute, ElementCompute, kRound>,
      fusion::Sm90AccFetch>;
  using Callbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<UnpackedY<Element>::template Fn, Element, ElementCompute, kRound>,
      typename Parts::template StoreZ<UnpackZ>, fusion::Sm90AccFetch>;
  using CollectiveEpilogue = typename Parts::template Collective<Callbacks>;
  using Mainloop = GemmActMainloop<Config, Element, kB,
                                   static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>;
  using RegisterEpi = RegisterEpilogue<Element, kAct>;
  using Kernel = RotatingKernel<typename Mainloop::Collective, CollectiveEpilogue, RegisterEpi,
                                Spec::kMathWarpgroups>;

  static LaunchResult run(const LaunchArgs& la) {
    const GemmActParams& p = *la.params;
    const BiasKind bias_kind = p.bias == nullptr ? BiasKind::None : p.bias_kind;
    const PreactTerms<float> terms{static_cast<float>(p.alpha), static_cast<float>(p.beta),
                                   p.c != nullptr,
                                   bias_kind == BiasKind::PerColumn || bias_kind == BiasKind::Scalar,
                                   bias_kind == BiasKind::PerRow};
    const typename Parts::AuxDesc::Stride stride_z{p.n, _1{}, int64_t(0)};
    const typename Callbacks::Arguments fusion_args{
        {{{}, {}}, {static_cast<Element*>(p.z), stride_z}}, {}, {}};
    auto args = gemm_arguments<Kernel, kB, Element>(la, fusion_args);
    args.register_epilogue = {terms,
                              static_cast<const Element*>(p.c),
                              p.c_stride_m,
                              p.c_stride_n,
                              static_cast<const Element*>(p.bias),
                              bias_kind == BiasKind::PerColumn ? int64_t(1) : int64_t(0),
                              static_cast<float>(p.negative_slope),
                              static_cast<int>(p.m),
                              static_cast<int>(p.n)};
    return launch_gemm<Kernel>(args, la);
  }
};

}  // namespace detail

template <>
struct KernelAssembly<kRotatingAssembly> {
  template <KernelConfig kConfig, Dtype kDtype, BLayout kB, Activation kAct>
  static LaunchResult run(const LaunchArgs& la) {
    return detail::RotatingGemmActKernel<kConfig, kDtype, kB, kAct>::run(la);
  }
};

}  // namespace sm90
}  // namespace gemm_act

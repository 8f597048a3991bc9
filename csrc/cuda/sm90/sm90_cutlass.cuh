// The CUTLASS pieces the sm90 kernels are built from, by name, and the
// checks that they are compiled the one way that works (sm_90a only, no
// device asserts). Included by the kernel headers only, never by code that
// sees PyTorch.
#pragma once

// CUTLASS's device code asserts (e.g. k_tile_count >= 1) compile to calls of
// __assertfail, and a call inside the mainloop serialises the wgmma pipeline
// (ptxas C7510). The entry never passes a case those asserts guard against.
#ifndef NDEBUG
#define NDEBUG
#endif

// CUTLASS's sm100 headers (pulled in by the builders) capture `this`
// implicitly, which C++20 deprecates: not this project's code to change.
#pragma nv_diag_suppress 2908

// The sm90 headers by name, rather than the umbrella headers that bring
// every architecture's collectives along; sm90_launch_template.cuh replaces
// the device-level adapter.
#include <cute/tensor.hpp>
#include <cutlass/cluster_launch.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/builders/sm90_gmma_builder.inl>
#include <cutlass/gemm/collective/collective_builder_decl.hpp>
#include <cutlass/gemm/collective/collective_mma_decl.hpp>
#include <cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal_decl.h>
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp>
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/numeric_types.h>

#include "cuda/sm90/sm90_types.h"

#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#error "the sm90 kernels need CUDA 12.0+ (CUTLASS_ARCH_MMA_SM90_SUPPORTED)"
#endif

// A device pass for compute capability 9.0 that is not the arch-specific
// sm_90a would compile CUTLASS's kernel body to a stub that only prints an
// error: fail the build instead. Compile these files with
// -gencode arch=compute_90a,code=sm_90a (and for no other architecture).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the sm90 kernels must be compiled for sm_90a only: -gencode arch=compute_90a,code=sm_90a"
#endif

namespace gemm_act {
namespace sm90 {

// The CUTLASS element type of each storage type.
template <Dtype kDtype>
struct ElementOf;
template <>
struct ElementOf<Dtype::F16> {
  using type = cutlass::half_t;
};
template <>
struct ElementOf<Dtype::BF16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct ElementOf<Dtype::F32> {
  using type = float;  // the collective builder multiplies float as TF32
};

// The kernel headers' own namespace, where CuTe's names are at hand.
namespace detail {
using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
}  // namespace detail

}  // namespace sm90
}  // namespace gemm_act

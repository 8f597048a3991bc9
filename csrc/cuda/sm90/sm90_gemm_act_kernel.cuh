// The sm_90a kernel: CUTLASS 3 collectives (TMA loads into a multi-stage
// shared-memory pipeline, wgmma, producer/consumer warp specialisation, a
// persistent tile scheduler with grouped rasterisation) and this project's
// epilogue, written as a CUTLASS epilogue visitor tree (EVT):
//
//     z = alpha * acc + beta * C + bias      fp32, in registers
//     Z = z                                  TMA store, skipped when Z is null
//                                            (ZStore)
//     Y = Act<kAct>::forward(z, slope)       TMA store (the kernel's D)
//
// The activation is a template parameter (one kernel each, no per-element
// branch); the bias kind, C and Z are run-time and uniform per launch:
//  - bias per column or scalar: CUTLASS's row broadcast with a run-time
//    vector/scalar stride (bias[n] or bias[0]) staged through shared memory;
//  - bias per row: CUTLASS's column broadcast (bias[m], straight to registers);
//  - C: read by this file's GmemSourceFetch straight from global memory into
//    registers, with any strides, only when C exists. The kernel's own TMA
//    source path is switched off (ElementC = void): it would reserve shared
//    memory for C in every launch and cost the mainloop a pipeline stage, for
//    an operand the nn.Linear case never has.
//
// The rotating configurations run the same computation in a kernel of this
// project's (sm90_rotating_kernel.cuh): the per-element part on the
// accumulators before the epilogue (sm90_register_epilogue.cuh), the
// visitor tree only unpacking and storing Z and Y.
//
// Only the instantiation files (sm90_inst_*.cu) include this header.
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

#include <cstdint>
#include <mutex>

// The sm90 pieces of CUTLASS by name, rather than its umbrella headers
// (gemm/collective/collective_builder.hpp, gemm/kernel/gemm_universal.hpp,
// gemm/device/gemm_universal_adapter.h) that bring every architecture's
// collectives along; the launch below replaces the device-level adapter.
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

#include "activations.h"
#include "cuda/sm90/sm90_launch.h"
#include "cuda/sm90/sm90_preact.cuh"
#include "cuda/sm90/sm90_register_epilogue.cuh"
#include "cuda/sm90/sm90_rotating_kernel.cuh"
#include "gemm_act.h"

#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#error "the sm90 kernels need CUDA 12.0+ (CUTLASS_ARCH_MMA_SM90_SUPPORTED)"
#endif

// A device pass for compute capability 9.0 that is not the arch-specific
// sm_90a would compile CUTLASS's kernel body to a stub that only prints an
// error: fail the build instead. Compile these files with
// -gencode arch=compute_90a,code=sm_90a (and for no other architecture).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "csrc/cuda/sm90 must be compiled for sm_90a only: -gencode arch=compute_90a,code=sm_90a"
#endif

namespace gemm_act {
namespace sm90 {
namespace detail {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// ---------------------------------------------------------------------------
// Compute functors for fusion::Sm90Compute. Sm90Compute instantiates
// Fn<float> to find Fn::Arguments (the run-time parameters, passed to every
// call) and calls Fn<Array<float, N>> on fragments.
// ---------------------------------------------------------------------------

// z = alpha * acc + beta * c + row + col (sm90_preact.cuh) on a fragment.
template <class T>
struct PreactFn {
  using Arguments = PreactArguments;

  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                     cutlass::Array<float, N> const& c,
                                                     cutlass::Array<float, N> const& row,
                                                     cutlass::Array<float, N> const& col,
                                                     Arguments const& args) const {
    cutlass::Array<float, N> z = acc;
    add_preact_terms<N>(
        z, args, [&](int i) { return c[i]; }, [&](int i) { return row[i]; },
        [&](int i) { return col[i]; });
    return z;
  }
};

// y = activate<kAct, Element>(z, slope): activations.h is the single source of
// the formula; this only adapts it to CUTLASS's fragment-wise functor
// interface. Element: what Y is stored as.
struct ActArguments {
  float negative_slope = 0.01f;
};

template <Activation kAct, class Element>
struct ActEpilogue {
  template <class T>
  struct Fn {
    using Arguments = ActArguments;

    template <int N>
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& z,
                                                       Arguments const& args) const {
      cutlass::Array<float, N> y;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) y[i] = activate<kAct, Element>(z[i], args.negative_slope);
      return y;
    }
  };
};

// ---------------------------------------------------------------------------
// GmemSourceFetch: an EVT leaf that returns C (as float) for the fragment
// being visited, or zeros when there is no C. Each thread reads exactly the
// elements its accumulator fragment covers, straight from global memory with
// the residue predicate (no shared memory, no TMA, any strides and alignment),
// one epilogue subtile at a time at the start of that subtile.
// ---------------------------------------------------------------------------
template <class Element>
struct GmemSourceFetch {
  struct SharedStorage {};

  struct Arguments {
    Element const* ptr = nullptr;  // null: no C
    int64_t stride_m = 0;
    int64_t stride_n = 0;
  };

  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE GmemSourceFetch() {}

  CUTLASS_HOST_DEVICE GmemSourceFetch(Params const& params, SharedStorage const&)
      : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(fusion::ProducerLoadArgs<Args...> const&) {
    return fusion::EmptyProducerLoadCallbacks{};
  }

  template <class GTensor, class CTensor, class Residue, class RTensor>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(GTensor tCgC_, CTensor tCcC_, Residue residue_,
                                          RTensor tCrC_, bool enabled_)
        : tCgC(tCgC_), tCcC(tCcC_), residue(residue_), tCrC(tCrC_), enabled(enabled_) {}

    GTensor tCgC;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) C in global memory
    CTensor tCcC;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates, relative
    Residue residue;   // (m, n) bound of those coordinates
    RTensor tCrC;      // (CPY,CPY_M,CPY_N) this subtile's C in registers
    bool enabled;

    CUTLASS_DEVICE void begin_loop(int epi_m, int epi_n) {
      if (!enabled) return;
      Tensor gC = tCgC(_, _, _, epi_m, epi_n);
      Tensor cC = tCcC(_, _, _, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(tCrC); ++i) {
        tCrC(i) = elem_less(cC(i), residue) ? Element(gC(i)) : Element(0);
      }
    }

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int) {
      cutlass::Array<float, FragmentSize> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) {
        out[i] = enabled ? static_cast<float>(tCrC(epi_v * FragmentSize + i)) : 0.0f;
      }
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    auto [M, N, K, L] = args.problem_shape_mnkl;
    Tensor mC = make_tensor(make_gmem_ptr(params_ptr->ptr), make_shape(M, N, L),
                            make_stride(params_ptr->stride_m, params_ptr->stride_n, int64_t(0)));
    Tensor tCgC = fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        mC, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy,
        args.thread_idx);                                                // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    Tensor tCrC = make_tensor<Element>(take<0, 3>(shape(tCgC)));        // (CPY,CPY_M,CPY_N)
    return ConsumerStoreCallbacks<decltype(tCgC), decltype(args.tCcD), decltype(args.residue_tCcD),
                                  decltype(tCrC)>(tCgC, args.tCcD, args.residue_tCcD, tCrC,
                                                  params_ptr->ptr != nullptr);
  }
};

// ---------------------------------------------------------------------------
// ZStore: CUTLASS's auxiliary store (Z through shared memory and TMA), with
// Z's conversion to 16 bits moved from visit() to postreduce(), behind the
// null check that postreduce() and the TMA store already make. Sm90AuxStore
// converts each fragment in visit(), stored or not: in inference (no Z) that
// is half an instruction per element of an epilogue that sets the pace on
// short-K shapes. Z stays in float registers for the subtile instead.
// ---------------------------------------------------------------------------
template <int kStages, class EpilogueTile, class Element, cutlass::FloatRoundStyle kRoundStyle,
          class StrideZ, class SmemLayoutAtom, class CopyOpR2S, int kAlignment>
struct ZStore
    : fusion::Sm90AuxStore<kStages, EpilogueTile, Element, kRoundStyle, StrideZ, SmemLayoutAtom,
                           CopyOpR2S, kAlignment, /*EnableNullptr=*/true> {
  using Base = fusion::Sm90AuxStore<kStages, EpilogueTile, Element, kRoundStyle, StrideZ,
                                    SmemLayoutAtom, CopyOpR2S, kAlignment, true>;
  using Base::Base;

  template <class BaseCallbacks, class FloatTensor>
  struct ConsumerStoreCallbacks : BaseCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(BaseCallbacks&& base, FloatTensor z)
        : BaseCallbacks(cute::move(base)), tC_rZ(z) {}

    FloatTensor tC_rZ;  // (CPY,CPY_M,CPY_N) this subtile's Z, float

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
        cutlass::Array<float, FragmentSize> const& z) {
      recast<cutlass::Array<float, FragmentSize>>(coalesce(tC_rZ))(epi_v) = z;
      return z;
    }

    CUTLASS_DEVICE void postreduce(int epi_m, int epi_n, int store_iteration,
                                   bool issue_smem_store) {
      if (this->params_ptr->is_nullptr) return;
      constexpr int kSize = decltype(size(tC_rZ))::value;
      recast<cutlass::Array<Element, kSize>>(coalesce(this->tC_rAux))(0) =
          cutlass::NumericArrayConverter<Element, float, kSize, kRoundStyle>{}(
              recast<cutlass::Array<float, kSize>>(coalesce(tC_rZ))(0));
      BaseCallbacks::postreduce(epi_m, epi_n, store_iteration, issue_smem_store);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    auto base = Base::template get_consumer_store_callbacks<ReferenceSrc>(args);
    Tensor tC_rZ = make_tensor<float>(shape(base.tC_rAux));
    return ConsumerStoreCallbacks<decltype(base), decltype(tC_rZ)>(cute::move(base), tC_rZ);
  }
};

// ---------------------------------------------------------------------------
// Tile configuration.
// ---------------------------------------------------------------------------

// Elements in one 128-byte shared-memory swizzle row: 64 fp16/bf16, 32 fp32.
template <class Element>
using SwizzleRow = Int<128 * 8 / cutlass::sizeof_bits<Element>::value>;

// The CuTe shapes of configuration kConfig's tile (M x N x K) and cluster,
// from the one table of them (tile_geometry, sm90_launch.h).
template <class Element, KernelConfig kConfig>
struct ConfigShapes {
  static constexpr TileGeometry kGeometry = tile_geometry(kConfig);
  using TileShape = Shape<Int<kGeometry.tile_m>, Int<kGeometry.tile_n>,
                          Int<kGeometry.k_swizzle_rows * SwizzleRow<Element>::value>>;
  using ClusterShape = Shape<Int<kGeometry.cluster_m>, Int<kGeometry.cluster_n>, _1>;
};

// Cooperative: both consumer warpgroups on one tile, each owning half of its
// rows. kCooperative128x256: 64x256 per warpgroup, a cluster of two CTAs
// along N sharing (multicasting) the A tile; as many pipeline stages as fit
// beside the epilogue's shared memory. Cluster 1x2 and 2x1 measured the
// same on the training shapes (8192x16384x4096, gelu + Z: 1.959 vs 1.963
// ms); 1x1 no better (1.982).
// Epilogue subtiles one swizzle row wide. For fp16/bf16 that is 128x64
// rather than 128x32: half the subtile loop iterations and barriers per
// tile, ~4% faster on gelu + Z (bench/results/*_sweep.log), with 3 pipeline
// stages instead of 4. For fp32 it is 128x32: a 128x64 subtile's Y and Z
// buffers (130 KB) leave room for 2 stages only (TF32 4096^3 gelu: 1.63x
// torch.mm, bench/results/20261123T054641Z_820fae8.json); 128x32 leaves 3.
// kRotatingWarpgroups: 0 for CUTLASS's own kernels. kStoreStages: the
// shared-memory buffers of each of Y and Z (0: the builder's, 2 where a tile
// has two or more subtiles); kStoreZ: whether the kernel can store Z at all.
template <class Element, KernelConfig kConfig = KernelConfig::kCooperative128x256,
          class EpiTile = Shape<_128, SwizzleRow<Element>>, int kStoreStages_ = 0,
          bool kStoreZ_ = true>
struct ConfigCooperative : ConfigShapes<Element, kConfig> {
  static constexpr int kRotatingWarpgroups = 0;
  static constexpr bool kStoreZ = kStoreZ_;
  static constexpr int kStoreStages = kStoreStages_;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using EpilogueTile = EpiTile;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
};

// Ping-pong: each consumer warpgroup owns a whole tile and the two
// alternate, so one's epilogue overlaps the other's mainloop (its epilogue
// runs on 128 threads instead of 256, which loses where the activation is
// expensive and K short: see sm90_heuristic.h). 128x128 tiles take
// epilogue subtiles 64 rows by one swizzle row (64x64, 6 pipeline stages);
// a 64x128 subtile spills registers and 128x64 is not a shape CUTLASS's
// ping-pong epilogue takes. The small tiles for small M (sm90_launch.h)
// take 64x32 subtiles (the epilogue is a small part of those launches) and
// get 8 pipeline stages, 4 with K = 128 per stage.
template <class Element, KernelConfig kConfig, class EpiTile = Shape<_64, _32>>
struct ConfigPingpong : ConfigShapes<Element, kConfig> {
  static constexpr int kRotatingWarpgroups = 0;
  static constexpr bool kStoreZ = true;
  static constexpr int kStoreStages = 0;  // the builder's (2 where a tile has 2+ subtiles)
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using EpilogueTile = EpiTile;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
};

template <class Element>
using ConfigPingpong128x128 =
    ConfigPingpong<Element, KernelConfig::kPingpong128x128, Shape<_64, SwizzleRow<Element>>>;

// The rotating kernel (sm90_rotating_kernel.cuh): kWarpgroups math
// warpgroups, one tile each; the epilogue's visitor tree only unpacks and
// stores, so its subtiles need few registers.
template <class Element, KernelConfig kConfig, int kWarpgroups, class EpiTile = Shape<_64, _32>>
struct ConfigRotating : ConfigShapes<Element, kConfig> {
  static constexpr int kRotatingWarpgroups = kWarpgroups;
  static constexpr bool kStoreZ = true;
  static constexpr int kStoreStages = 0;  // the builder's (2 where a tile has 2+ subtiles)
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;  // its mainloop
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using EpilogueTile = EpiTile;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
};

// 256x128: each warpgroup a 128x128 half, cluster 2x1 sharing the B tile;
// 128x32 epilogue subtiles.
template <class Element>
using ConfigCooperative256x128 =
    ConfigCooperative<Element, KernelConfig::kCooperative256x128, Shape<_128, _32>>;

// fp32 (TF32) 128x256: a pipeline stage holds K = 32 only, half of what a
// fp16/bf16 stage holds, so 3 stages hide too little of the loads' latency.
// One store buffer each for Y and Z (each subtile then waits for the
// previous one's TMA store to leave shared memory) leaves room for a fourth:
// TF32 gelu + Z 1.087 against 1.106 x torch.mm at 4096^3, 1.090 against
// 1.107 at 8192x4096x16384; fp16/bf16 gain nothing from it (4096^3 bf16
// gelu + Z 1.122 against 1.133, relu 1.062 against 1.037-1.049;
// bench/results/20261125T012000Z_b8258f5_sweep_store_buffers.log).
template <class Element>
using ConfigCooperative128x256 =
    cute::conditional_t<cute::is_same_v<Element, float>,
                        ConfigCooperative<Element, KernelConfig::kCooperative128x256,
                                          Shape<_128, SwizzleRow<Element>>, 1>,
                        ConfigCooperative<Element>>;

// 128x256 without Z's store buffers, for cases that store no Z: the fourth
// pipeline stage with Y's two buffers kept. For TF32 without Z: 1.009
// against 1.047-1.058 x torch.mm (4096^3 gelu, the sweep above); compiled
// for fp32 only (bf16: 4096^3 gelu 1.083 against 1.061-1.089, relu 1.019
// against 1.037-1.049, inside the sweep's spread).
template <class Element>
using ConfigCooperativeNoZ =
    ConfigCooperative<Element, KernelConfig::kCooperative128x256NoZ,
                      Shape<_128, SwizzleRow<Element>>, 0, /*kStoreZ=*/false>;

// The builder's collective epilogue with kStages store stages (its dispatch
// policy's StagesD) where kStages > 0; the builder picks StagesD from the
// subtile count alone.
template <class Op, int kStages>
struct WithStoreStages {
  using type = Op;
};
template <int kStagesC, int kStagesD, int kFragment, bool kReuseSmemC, bool kDelayTmaStore,
          int kStages, class... Rest>
struct WithStoreStages<
    cutlass::epilogue::collective::CollectiveEpilogue<
        cutlass::epilogue::Sm90TmaWarpSpecialized<kStagesC, kStagesD, kFragment, kReuseSmemC,
                                                  kDelayTmaStore>,
        Rest...>,
    kStages> {
  using type = cutlass::epilogue::collective::CollectiveEpilogue<
      cutlass::epilogue::Sm90TmaWarpSpecialized<kStagesC, (kStages > 0 ? kStages : kStagesD),
                                                kFragment, kReuseSmemC, kDelayTmaStore>,
      Rest...>;
};

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

template <Dtype kDtype, BLayout kB, Activation kAct, class Config>
struct GemmActKernel {
  using Element = typename ElementOf<kDtype>::type;
  using ElementAccumulator = float;
  using ElementCompute = float;

  using LayoutA = cutlass::layout::RowMajor;  // A [M, K], K contiguous
  using LayoutB = cute::conditional_t<kB == BLayout::KMajor, cutlass::layout::ColumnMajor,
                                      cutlass::layout::RowMajor>;
  using LayoutD = cutlass::layout::RowMajor;  // Y, Z [M, N] contiguous
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // 16 bytes

  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  using EpilogueSchedule = typename Config::EpilogueSchedule;

  // The epilogue's subtile, stage counts and the Z store's shared-memory
  // layout, resolved the way the epilogue builder resolves them.
  using EpiDesc = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      TileShape, typename Config::EpilogueTile, void, Element, EpilogueSchedule>;
  using AuxDesc =
      cutlass::epilogue::collective::detail::AuxStoreDescriptor<EpiDesc, LayoutD, Element>;
  using EpilogueTile = typename EpiDesc::EpilogueTile;

  // The EVT, leaves first.
  using SourceC = GmemSourceFetch<Element>;
  using RowBcast = fusion::Sm90RowBroadcast<0, TileShape, Element, ElementCompute,
                                            Stride<_0, bool, int64_t>>;  // bias[n] or bias[0]
  using ColBcast = fusion::Sm90ColBroadcast<0, TileShape, Element, ElementCompute,
                                            Stride<_1, _0, int64_t>, /*Alignment=*/1>;  // bias[m]
  using Preact = fusion::Sm90EVT<fusion::Sm90Compute<PreactFn, ElementCompute, ElementCompute, kRound>,
                                 fusion::Sm90AccFetch, SourceC, RowBcast, ColBcast>;
  // Z's buffers take turns with Y's (one TMA store group per subtile).
  static constexpr int kStoreStages =
      Config::kStoreStages > 0 ? Config::kStoreStages : AuxDesc::Stages;
  template <class Input>
  using StoreZ = fusion::Sm90EVT<
      ZStore<kStoreStages, EpilogueTile, Element, kRound, typename AuxDesc::Stride,
             typename AuxDesc::SmemLayoutAtom, typename AuxDesc::CopyOpR2S, kAlignment>,
      Input>;
  static constexpr bool kStoreZ = Config::kStoreZ;
  using ActNode = fusion::Sm90Compute<ActEpilogue<kAct, Element>::template Fn, Element,
                                      ElementCompute, kRound>;
  using FullCallbacks = cute::conditional_t<kStoreZ, fusion::Sm90EVT<ActNode, StoreZ<Preact>>,
                                            fusion::Sm90EVT<ActNode, Preact>>;

  // The rotating kernel's tree: Z and Y come packed in the accumulator
  // slots (sm90_register_epilogue.cuh).
  static constexpr int kRotatingWarpgroups = Config::kRotatingWarpgroups;
  using UnpackZ = fusion::Sm90EVT<
      fusion::Sm90Compute<UnpackedZ<Element>::template Fn, ElementCompute, ElementCompute, kRound>,
      fusion::Sm90AccFetch>;
  using UnpackCallbacks = fusion::Sm90EVT<
      fusion::Sm90Compute<UnpackedY<Element>::template Fn, Element, ElementCompute, kRound>,
      StoreZ<UnpackZ>, fusion::Sm90AccFetch>;

  using Callbacks = cute::conditional_t<kRotatingWarpgroups == 0, FullCallbacks, UnpackCallbacks>;

  using CollectiveEpilogue = typename WithStoreStages<
      typename cutlass::epilogue::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
          EpilogueTile, ElementAccumulator, ElementCompute,
          void, LayoutD, kAlignment,     // no TMA source: C comes through SourceC
          Element, LayoutD, kAlignment,  // D = Y
          EpilogueSchedule, Callbacks>::CollectiveOp,
      Config::kStoreStages>::type;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, LayoutA, kAlignment,
      Element, LayoutB, kAlignment,
      ElementAccumulator, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;

  using RegisterEpi = RegisterEpilogue<Element, kAct>;
  using Kernel = cute::conditional_t<
      kRotatingWarpgroups == 0,
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                           CollectiveEpilogue, typename Config::TileScheduler>,
      RotatingKernel<CollectiveMainloop, CollectiveEpilogue, RegisterEpi, kRotatingWarpgroups>>;
};

inline cutlass::gemm::kernel::detail::RasterOrderOptions to_cutlass(Raster r) {
  using R = cutlass::gemm::kernel::detail::RasterOrderOptions;
  switch (r) {
    case Raster::AlongM:
      return R::AlongM;
    case Raster::AlongN:
      return R::AlongN;
    default:
      return R::Heuristic;
  }
}

}  // namespace detail

namespace detail {

template <class Config, Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult run_kernel(const LaunchArgs& la) {
  using namespace cute;
  using K = GemmActKernel<kDtype, kB, kAct, Config>;
  using Element = typename K::Element;
  using Kernel = typename K::Kernel;

  const GemmActParams& p = *la.params;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);

  using StrideA = typename Kernel::StrideA;  // (M, K, L)
  using StrideB = typename Kernel::StrideB;  // (N, K, L)
  using StrideC = typename Kernel::StrideC;
  using StrideD = typename Kernel::StrideD;  // (M, N, L)
  StrideA stride_a{p.a_stride_m, _1{}, int64_t(0)};
  StrideB stride_b{};
  if constexpr (kB == BLayout::KMajor) {
    stride_b = StrideB{p.b_stride_n, _1{}, int64_t(0)};
  } else {
    stride_b = StrideB{_1{}, p.b_stride_k, int64_t(0)};
  }
  StrideD stride_d{static_cast<int64_t>(n), _1{}, int64_t(0)};

  const BiasKind bias_kind = p.bias == nullptr ? BiasKind::None : p.bias_kind;
  const bool row_bcast = bias_kind == BiasKind::PerColumn || bias_kind == BiasKind::Scalar;
  const bool col_bcast = bias_kind == BiasKind::PerRow;
  const auto* bias = static_cast<const Element*>(p.bias);

  const PreactArguments preact{static_cast<float>(p.alpha), static_cast<float>(p.beta),
                               p.c != nullptr, row_bcast, col_bcast};
  const auto* c = static_cast<const Element*>(p.c);
  auto* z = static_cast<Element*>(p.z);
  const typename K::AuxDesc::Stride stride_z{static_cast<int64_t>(n), _1{}, int64_t(0)};
  const float slope = static_cast<float>(p.negative_slope);

  // EVT arguments nest like the tree: {child arguments..., node arguments}.
  if (!K::kStoreZ && z != nullptr) {  // only where the configuration was forced
    return {LaunchStatus::kUnknownConfig, cudaSuccess, "the configuration stores no Z"};
  }
  const typename K::Callbacks::Arguments epilogue_args = [&] {
    if constexpr (K::kRotatingWarpgroups == 0) {
      const typename K::Preact::Arguments preact_args{
          {},                                              // acc
          {c, p.c_stride_m, p.c_stride_n},                 // C
          {row_bcast ? bias : nullptr, Element(0),
           {_0{}, bias_kind == BiasKind::PerColumn, int64_t(0)}},  // bias[n] / bias[0]
          {col_bcast ? bias : nullptr, Element(0), {}},   // bias[m]
          preact};
      if constexpr (K::kStoreZ) {
        return typename K::Callbacks::Arguments{{preact_args, {z, stride_z}}, {slope}};
      } else {
        return typename K::Callbacks::Arguments{preact_args, {slope}};
      }
    } else {
      return typename K::Callbacks::Arguments{{{{}, {}}, {z, stride_z}}, {}, {}};
    }
  }();

  cutlass::KernelHardwareInfo hw_info;
  hw_info.device_id = la.device;
  hw_info.sm_count = la.sm_count;

  typename Kernel::TileSchedulerArguments scheduler_args;
  scheduler_args.max_swizzle_size = la.max_swizzle;
  scheduler_args.raster_order = to_cutlass(la.raster);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = typename Kernel::ProblemShape(m, n, k, 1);
  args.mainloop = {static_cast<const Element*>(p.a), stride_a, static_cast<const Element*>(p.b),
                   stride_b};
  args.epilogue = {epilogue_args, nullptr, StrideC{}, static_cast<Element*>(p.y), stride_d};
  args.hw_info = hw_info;
  args.scheduler = scheduler_args;
  if constexpr (K::kRotatingWarpgroups != 0) {
    args.register_epilogue = {preact, c, p.c_stride_m, p.c_stride_n,
                              bias, bias_kind == BiasKind::PerColumn ? int64_t(1) : int64_t(0),
                              slope, m, n};
  }

  if (!Kernel::can_implement(args)) {
    return {LaunchStatus::kNotImplementable, cudaSuccess, "can_implement"};
  }

  void* workspace = nullptr;
  const size_t workspace_bytes = Kernel::get_workspace_size(args);
  if (workspace_bytes > 0) {
    workspace = la.alloc_workspace(la.alloc_ctx, workspace_bytes);
  }
  if (Kernel::initialize_workspace(args, workspace, la.stream) != cutlass::Status::kSuccess) {
    return {LaunchStatus::kError, cudaGetLastError(), "initialize_workspace"};
  }
  // Builds the TMA descriptors (host side, through the driver entry point).
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);

  // More than 48 KiB of dynamic shared memory needs an opt-in, once per
  // device (the attribute lives in the device's context).
  constexpr int kSmemBytes = Kernel::SharedStorageSize;
  const void* kernel_fn = reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>);
  constexpr int kMaxDevices = 64;
  static std::once_flag smem_once[kMaxDevices];
  cudaError_t attr_error = cudaSuccess;
  auto set_smem = [&] {
    attr_error = cudaFuncSetAttribute(kernel_fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kSmemBytes);
  };
  if (la.device >= 0 && la.device < kMaxDevices) {
    std::call_once(smem_once[la.device], set_smem);
  } else {
    set_smem();
  }
  if (attr_error != cudaSuccess) {
    cudaGetLastError();
    return {LaunchStatus::kError, attr_error, "cudaFuncSetAttribute"};
  }

  const dim3 block = Kernel::get_block_shape();
  const dim3 grid = Kernel::get_grid_shape(params);
  const dim3 cluster(size<0>(typename K::ClusterShape{}), size<1>(typename K::ClusterShape{}),
                     size<2>(typename K::ClusterShape{}));
  void* kernel_params[] = {&params};
  if (cutlass::ClusterLauncher::launch(grid, cluster, block, kSmemBytes, la.stream, kernel_fn,
                                       kernel_params) != cutlass::Status::kSuccess) {
    return {LaunchStatus::kError, cudaGetLastError(), "kernel launch"};
  }
  return {LaunchStatus::kOk, cudaSuccess, ""};
}

}  // namespace detail

#ifdef GEMM_ACT_SM90_SWEEP
// The rotating kernel's configurations (sm90_rotating_launch.cuh), compiled
// in a file of their own (sm90_inst_rotating_bf16_kmajor.cu).
template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_rotating(const LaunchArgs& la);

// The 128x256 cooperative kernel without Z's store buffers for bf16,
// likewise (sm90_inst_no_z_bf16_kmajor.cu).
template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_cooperative_no_z(const LaunchArgs& la);
#endif

// fp16/bf16 with column-major B (weight.t(), the nn.Linear case) get all
// five configurations, fp32 (TF32) the cooperative ones (with and without
// Z) and the 128x128 ping-pong one; row-major B only the 128x256
// cooperative one, which keeps the build shorter (each configuration adds
// about a minute of compile time per file) for cases that are rarer and for
// which the others' gains (3-5%) are small.
template <Dtype kDtype, BLayout kB, Activation kAct>
LaunchResult launch_gemm_act(const LaunchArgs& la) {
  using Element = typename detail::ElementOf<kDtype>::type;
  static_assert(kDtype != Dtype::F32 || kB == BLayout::KMajor,
                "wgmma reads TF32 operands K-major only");
  if constexpr (kB == BLayout::KMajor && kDtype != Dtype::F32) {
    using detail::ConfigPingpong;
    switch (la.config) {
      case KernelConfig::kPingpong128x128:
        return detail::run_kernel<detail::ConfigPingpong128x128<Element>, kDtype, kB, kAct>(la);
      case KernelConfig::kPingpong128x64:
        return detail::run_kernel<ConfigPingpong<Element, KernelConfig::kPingpong128x64>, kDtype,
                                  kB, kAct>(la);
      case KernelConfig::kPingpong64x128K128:
        return detail::run_kernel<ConfigPingpong<Element, KernelConfig::kPingpong64x128K128>,
                                  kDtype, kB, kAct>(la);
      case KernelConfig::kCooperative256x128:
        return detail::run_kernel<detail::ConfigCooperative256x128<Element>, kDtype, kB, kAct>(
            la);
      default:
        break;
    }
#ifdef GEMM_ACT_SM90_SWEEP
    if constexpr (kDtype == Dtype::BF16) {
      if (is_rotating(la.config)) return launch_rotating<kDtype, kB, kAct>(la);
      if (la.config == KernelConfig::kCooperative128x256NoZ) {
        return launch_cooperative_no_z<kDtype, kB, kAct>(la);
      }
    }
#endif
  }
  if constexpr (kDtype == Dtype::F32) {
    if (la.config == KernelConfig::kPingpong128x128) {
      return detail::run_kernel<detail::ConfigPingpong128x128<Element>, kDtype, kB, kAct>(la);
    }
    if (la.config == KernelConfig::kCooperative128x256NoZ) {
      return detail::run_kernel<detail::ConfigCooperativeNoZ<Element>, kDtype, kB, kAct>(la);
    }
  }
  if (la.config != KernelConfig::kCooperative128x256) {
    return {LaunchStatus::kUnknownConfig, cudaSuccess, "configuration not compiled for this case"};
  }
  return detail::run_kernel<detail::ConfigCooperative128x256<Element>, kDtype, kB, kAct>(la);
}

#define GEMM_ACT_SM90_INSTANTIATE(DT, BL, ACT) \
  template LaunchResult launch_gemm_act<DT, BL, ACT>(const LaunchArgs&);

}  // namespace sm90
}  // namespace gemm_act

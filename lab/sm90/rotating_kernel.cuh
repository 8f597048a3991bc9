// The rotating kernel: kMathWarpgroups math warpgroups take the tiles of a
// CTA in turns, each a whole tile, around CUTLASS's sm90 collectives (the
// TMA/wgmma mainloop of the ping-pong schedule, the TMA epilogue, the static
// persistent tile scheduler); one producer warp loads for all of them.
//
// Per tile a math warpgroup runs
//     mainloop            in turn     (the tensor cores run one at a time)
//     register epilogue   concurrently with the others' mainloops
//     store               in turn     (shared epilogue smem, one named barrier)
// CUTLASS's own ping-pong kernel (two warpgroups) runs the whole epilogue
// in turn, so where the activation outlasts a mainloop (short K, GELU) the
// tensor cores wait for it. Here the turn-taking part only unpacks Z and Y
// and stores them (register_epilogue.cuh); with three warpgroups an
// epilogue may last up to two mainloops before the tensor cores idle.
//
// Host-side plumbing (arguments, workspace, grid) is CUTLASS's ping-pong
// kernel's: this class derives from it and replaces the device code, the
// block size and the shared-memory layout.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/pipeline/pipeline.hpp>

namespace gemm_act {
namespace sm90 {

template <class CollectiveMainloop, class CollectiveEpilogue, class RegisterEpilogue,
          int kMathWarpgroups>
class RotatingKernel
    : public cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                  CollectiveMainloop, CollectiveEpilogue,
                                                  cutlass::gemm::PersistentScheduler> {
  using Base = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                    CollectiveMainloop, CollectiveEpilogue,
                                                    cutlass::gemm::PersistentScheduler>;

 public:
  using typename Base::ClusterShape;
  using typename Base::TileScheduler;
  using typename Base::TileShape;
  using typename Base::TiledMma;
  static_assert(!Base::IsSchedDynamicPersistent, "the rotation assumes the static scheduler");
  static_assert(size(TiledMma{}) == cutlass::NumThreadsPerWarpGroup,
                "one warpgroup per tile");
  static_assert(kMathWarpgroups >= 2, "a single math warpgroup has nothing to overlap");

  static constexpr int kMathThreads = kMathWarpgroups * cutlass::NumThreadsPerWarpGroup;
  static constexpr uint32_t MaxThreadsPerBlock = cutlass::NumThreadsPerWarpGroup + kMathThreads;
  static constexpr uint32_t MinBlocksPerMultiprocessor = 1;

  // Registers per thread after the warpgroups re-balance them (setmaxnreg):
  // the producer keeps the minimum, the math warpgroups share the rest of
  // the 64K register file in multiples of 8.
  static constexpr uint32_t kProducerRegisters = kMathWarpgroups == 2 ? 40 : 24;
  static constexpr uint32_t kMathRegisters =
      (65536 / cutlass::NumThreadsPerWarpGroup - kProducerRegisters) / kMathWarpgroups / 8 * 8;
  static_assert(kMathRegisters <= 256, "setmaxnreg takes at most 256");

  // The math warpgroups' turns: one sequence for the mainloop, one for the
  // store.
  using TurnBarrier = cutlass::OrderedSequenceBarrier<2, kMathWarpgroups>;

  struct SharedStorage {
    struct PipelineStorage : cute::aligned_struct<16, cute::_1> {
      alignas(16) typename CollectiveMainloop::PipelineStorage mainloop;
      alignas(16) typename CollectiveEpilogue::PipelineStorage epi_load;
      alignas(16) typename TurnBarrier::SharedStorage turns;
    } pipelines;

    struct TensorStorage : cute::aligned_struct<128, cute::_1> {
      typename CollectiveEpilogue::TensorStorage epilogue;
      typename CollectiveMainloop::TensorStorage mainloop;
    } tensors;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);

  struct Arguments : Base::Arguments {
    typename RegisterEpilogue::Params register_epilogue{};
  };
  struct Params : Base::Params {
    typename RegisterEpilogue::Params register_epilogue{};
  };

  static Params to_underlying_arguments(Arguments const& args, void* workspace) {
    return {Base::to_underlying_arguments(args, workspace), args.register_epilogue};
  }

  static dim3 get_block_shape() { return dim3(MaxThreadsPerBlock, 1, 1); }

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace cute;
    using MainloopPipeline = typename CollectiveMainloop::MainloopPipeline;
    using EpiLoadPipeline = typename CollectiveEpilogue::LoadPipeline;
    using EpiStorePipeline = typename CollectiveEpilogue::StorePipeline;

    SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_buf);
    const int thread_idx = int(threadIdx.x);
    const int warpgroup = cutlass::canonical_warp_group_idx();  // 0: producer
    const int warpgroup_thread = thread_idx % cutlass::NumThreadsPerWarpGroup;
    const int warp_in_warpgroup = cutlass::canonical_warp_idx_sync() % cutlass::NumWarpsPerWarpGroup;
    const int lane = cutlass::canonical_lane_idx();
    const bool is_producer = warpgroup == 0;
    const int math_index = warpgroup - 1;  // this warpgroup's place in the rotation

    if (thread_idx == 0) {
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);
      CollectiveEpilogue::prefetch_tma_descriptors(params.epilogue);
    }

    // The mainloop's stages: filled by the producer warp, each emptied by
    // the one math warpgroup whose tile it belongs to.
    typename MainloopPipeline::Params mainloop_params;
    mainloop_params.role = is_producer ? MainloopPipeline::ThreadCategory::Producer
                                       : MainloopPipeline::ThreadCategory::Consumer;
    mainloop_params.is_leader = warpgroup_thread == 0;
    mainloop_params.num_consumers = cutlass::NumThreadsPerWarpGroup;
    mainloop_params.num_producers = CollectiveMainloop::NumProducerThreadEvents;
    mainloop_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    MainloopPipeline mainloop_pipeline(smem.pipelines.mainloop, mainloop_params, ClusterShape{});

    // The epilogue's source pipeline exists for its interface only: the
    // unpacking visitor tree loads nothing (checked below).
    typename EpiLoadPipeline::Params epi_load_params;
    epi_load_params.role = EpiLoadPipeline::ThreadCategory::Consumer;
    epi_load_params.dst_blockid = cute::block_rank_in_cluster();
    epi_load_params.producer_arv_count = cutlass::NumThreadsPerWarp;
    epi_load_params.consumer_arv_count = cutlass::NumThreadsPerWarpGroup;
    if constexpr (CollectiveEpilogue::RequiresTransactionBytes) {
      epi_load_params.transaction_bytes = params.epilogue.tma_transaction_bytes;
    }
    EpiLoadPipeline epi_load_pipeline(smem.pipelines.epi_load, epi_load_params);

    typename EpiStorePipeline::Params epi_store_params;
    epi_store_params.always_wait = true;  // the next warpgroup reuses the smem
    EpiStorePipeline epi_store_pipeline(epi_store_params);

    typename TurnBarrier::Params turn_params;
    turn_params.group_id = is_producer ? 0 : math_index;
    turn_params.group_size = cutlass::NumThreadsPerWarpGroup;
    TurnBarrier turns(smem.pipelines.turns, turn_params);

    // Barrier initialisation visible to the whole cluster before use.
    if constexpr (size(ClusterShape{}) > 1) {
      cute::cluster_arrive_relaxed();
    } else {
      __syncthreads();
    }

    auto problem_shape = append<4>(params.problem_shape, Int<1>{});
    TiledMma tiled_mma;
    const auto tile_shape = TileShape{};
    CollectiveMainloop mainloop;
    CollectiveEpilogue epilogue(params.epilogue, smem.tensors.epilogue);
    auto load_inputs = mainloop.load_init(problem_shape, params.mainloop);
    auto gA_mkl = get<0>(load_inputs);  // (BLK_M, BLK_K, m, k, l)
    auto gB_nkl = get<1>(load_inputs);  // (BLK_N, BLK_K, n, k, l)
    const int k_tiles = size<3>(gA_mkl);
    const auto c_stages_per_tile = CollectiveEpilogue::get_load_pipe_increment(tile_shape);
    const auto d_stages_per_tile = CollectiveEpilogue::get_store_pipe_increment(tile_shape);

    auto tile_coord = [&](auto const& work) {
      return make_coord(idx2crd(work.M_idx, shape<2>(gA_mkl)), idx2crd(work.N_idx, shape<2>(gB_nkl)),
                        _, idx2crd(work.L_idx, shape<4>(gB_nkl)));
    };

    TileScheduler scheduler{params.scheduler};

    if constexpr (size(ClusterShape{}) > 1) {
      cute::cluster_wait();
    }

    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      if (warp_in_warpgroup != 0) return;
      // Every tile of this CTA in order; the math warpgroups' mainloop turns
      // consume the stages in the same order.
      auto state = cutlass::make_producer_start_state<MainloopPipeline>();
      for (auto work = scheduler.initial_work_tile_info(ClusterShape{}); work.is_valid();
           scheduler.advance_to_next_work(), work = scheduler.get_current_work()) {
        auto k_tile_iter = cute::make_coord_iterator(shape<3>(gA_mkl));
        mainloop.load(params.mainloop, mainloop_pipeline, state, load_inputs, tile_coord(work),
                      k_tile_iter, k_tiles, lane, cute::block_rank_in_cluster(),
                      smem.tensors.mainloop);
        state.advance(k_tiles);
      }
      mainloop.load_tail(mainloop_pipeline, state);
      return;
    }

    cutlass::arch::warpgroup_reg_alloc<kMathRegisters>();
    if (epilogue.is_producer_load_needed()) __trap();  // nothing loads the epilogue's source

    // This warpgroup's tiles are every kMathWarpgroups-th of the CTA's,
    // starting at its place in the rotation; its pipeline states skip the
    // stages of the others' tiles.
    typename CollectiveMainloop::PipelineState mainloop_state;
    typename CollectiveEpilogue::LoadPipelineState epi_load_state;
    auto epi_store_state = cutlass::make_producer_start_state<EpiStorePipeline>();
    if (math_index > 0) scheduler.advance_to_next_work(math_index);
    mainloop_state.advance(k_tiles * math_index);
    epi_load_state.advance(c_stages_per_tile * math_index);
    epi_store_state.advance(d_stages_per_tile * math_index);

    auto thread_mma = tiled_mma.get_thread_slice(warpgroup_thread);
    // (row, column) within the tile of each accumulator element.
    const auto acc_coord = thread_mma.partition_C(make_identity_tensor(take<0, 2>(tile_shape)));

    for (auto work = scheduler.initial_work_tile_info(ClusterShape{}); work.is_valid();
         scheduler.advance_to_next_work(kMathWarpgroups), work = scheduler.get_current_work()) {
      const auto coord = tile_coord(work);
      auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(tile_shape));

      turns.wait();
      mainloop.mma(mainloop_pipeline, mainloop_state, accumulators, k_tiles, warpgroup_thread,
                   smem.tensors.mainloop, params.mainloop);
      turns.arrive();  // the next warpgroup's mainloop may start
      mainloop.mma_tail(mainloop_pipeline, mainloop_state, k_tiles);
      mainloop_state.advance(k_tiles * kMathWarpgroups);

      RegisterEpilogue::apply(accumulators, acc_coord, int(work.M_idx) * int(size<0>(tile_shape)),
                              int(work.N_idx) * int(size<1>(tile_shape)),
                              params.register_epilogue);

      turns.wait();
      auto [epi_load_next, epi_store_next] =
          epilogue.store(epi_load_pipeline, epi_load_state, epi_store_pipeline, epi_store_state,
                         problem_shape, tile_shape, coord, accumulators, tiled_mma,
                         warpgroup_thread, smem.tensors.epilogue);
      // Waits until the TMA stores have read the shared memory the next
      // warpgroup's store writes.
      auto [epi_load_after, epi_store_after] =
          epilogue.store_tail(epi_load_pipeline, epi_load_next, epi_store_pipeline, epi_store_next);
      epi_load_state = epi_load_after;
      epi_store_state = epi_store_after;
      epi_load_state.advance(c_stages_per_tile * (kMathWarpgroups - 1));
      epi_store_state.advance(d_stages_per_tile * (kMathWarpgroups - 1));
      turns.arrive();
    }
#else
    // Compiled for sm_90a only (sm90_cutlass.cuh fails other builds).
    __trap();
#endif
  }
};

}  // namespace sm90
}  // namespace gemm_act

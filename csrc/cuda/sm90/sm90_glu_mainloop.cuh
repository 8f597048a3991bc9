// The mainloop of the fused gated kernel (gemm_glu): the forward's TMA +
// wgmma collective reading B as the two weights interleaved by 8 columns,
// straight from where they are, without a packed copy.
//
// The kernel computes a GEMM N' = 2N columns wide whose column n' is
//     n' = 16 g + 8 h + j   (j < 8, h < 2),   the column 8 g + j of weight h,
// h = 0 being the weight at the lower address. One TMA descriptor of rank 4
// covers both: (K, 8, 2, N / 8) with strides (1, ldb, delta, 8 ldb), delta
// the distance from one weight to the other. TMA computes an address from
// coordinates and strides only, so the weights may be anywhere (two
// parameters, or the halves of one); every address it reads lies in one of
// them. Each 16 columns of a tile hold 8 gate and the 8 matching up
// columns, so every thread's accumulators hold each gate value beside its up
// value (sm90_glu_epilogue.cuh).
//
// CUTLASS's collective is built for a plain K-major B; this project's part
// is what touches B's global layout: the arguments (the distance between the
// weights), the parameters (the rank-4 descriptor), the tiled view the
// producer loads from and the producer's loop; the shared-memory layout, the
// pipeline and the math are CUTLASS's.
#pragma once

#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"

namespace gemm_act {
namespace sm90 {
namespace detail {

// Columns of one weight per group (the 8 of the file comment).
constexpr int kGluGroup = 8;

template <class Base>
struct GluCollectiveMma : Base {
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::GmemTiledCopyA;
  using typename Base::GmemTiledCopyB;
  using typename Base::TileShape;
  using typename Base::DispatchPolicy;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using ElementB = typename Base::InternalElementB;

  // B: ((column in group, weight, group), K, L).
  using StrideGlu = cute::Stride<cute::Stride<int64_t, int64_t, int64_t>, cute::_1, int64_t>;
  template <class T>
  static CUTLASS_HOST_DEVICE auto b_shape(T n_packed, T k, T l) {
    using namespace cute;
    return make_shape(make_shape(Int<kGluGroup>{}, _2{}, n_packed / (2 * kGluGroup)), k, l);
  }
  static CUTLASS_HOST_DEVICE auto b_layout(int n_packed, int k, int l, int64_t ldb, int64_t delta) {
    using namespace cute;
    return make_layout(b_shape(n_packed, k, l),
                       StrideGlu{{ldb, delta, kGluGroup * ldb}, _1{}, int64_t(0)});
  }

  // The base's, with ptr_B the weight at the lower address (weight 0), dB
  // its row stride, and the distance to the other weight, in elements.
  struct Arguments : Base::Arguments {
    int64_t delta = 0;
  };

  using TmaB = decltype(make_tma_copy_B_sm90(
      GmemTiledCopyB{}, cute::make_tensor(static_cast<ElementB const*>(nullptr), b_layout(0, 0, 1, 0, 0)),
      SmemLayoutB{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{}));

  // The base's (its B descriptor unused), with the rank-4 one.
  struct Params : Base::Params {
    TmaB tma_load_b_glu;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    using namespace cute;
    auto [M, N, K, L] = append<4>(problem_shape, 1);
    Params params{Base::to_underlying_arguments(problem_shape, args, workspace), {}};
    auto ptr_b = reinterpret_cast<ElementB const*>(args.ptr_B);
    Tensor tensor_b = make_tensor(ptr_b, b_layout(N, K, L, get<0>(args.dB), args.delta));
    params.tma_load_b_glu = make_tma_copy_B_sm90(GmemTiledCopyB{}, tensor_b,
                                                 SmemLayoutB{}(_, _, Int<0>{}), TileShape{},
                                                 ClusterShape{});
    return params;
  }

  // The entry (sm90_gemm_act.cpp) checked the alignments and the strides.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    return N % (2 * kGluGroup) == 0 && Base::can_implement(problem_shape, args);
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b_glu.get_tma_descriptor());
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_mnkl,
                                Params const& params) const {
    using namespace cute;
    auto [M, N, K, L] = problem_shape_mnkl;
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));      // (m,k,l)
    Tensor mB_nkl = params.tma_load_b_glu.get_tma_tensor(b_shape(N, K, L));     // ((8,2,n/16),k,l)
    Tensor gA_mkl = local_tile(mA_mkl, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});
    Tensor gB_nkl = local_tile(mB_nkl, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});
    return make_tuple(gA_mkl, gB_nkl);
  }

  // The producer: per K tile, A's tile (multicast along the cluster's N) and
  // B's through the rank-4 descriptor, into the pipeline's next stage.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline,
                           PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                           int, uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    using namespace cute;
    if (!elect_one_sync()) return;
    static_assert(size<0>(ClusterShape{}) == 1, "B is not multicast: clusters span N only");
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});
    constexpr uint32_t cluster_m = size<0>(ClusterShape{});
    const uint2 block_in_cluster = {block_rank_in_cluster % cluster_m, block_rank_in_cluster / cluster_m};
    auto block_tma_a = params.tma_load_a.get_slice(block_in_cluster.y);
    auto block_tma_b = params.tma_load_b_glu.get_slice(block_in_cluster.x);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor tAgA = block_tma_a.partition_S(get<0>(load_inputs)(_, _, m_coord, _, l_coord));
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(get<1>(load_inputs)(_, _, n_coord, _, l_coord));
    Tensor tBsB = block_tma_b.partition_D(sB);
    uint16_t mcast_mask_a = 0;
    if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<ClusterShape>{};  // (m,n) -> block id
      for (int n = 0; n < size<1>(block_layout); ++n) {
        mcast_mask_a |= uint16_t(1) << block_layout(block_in_cluster.x, n, Int<0>{});
      }
    }
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* barrier = pipeline.producer_get_barrier(smem_pipe_write);
      const int stage = smem_pipe_write.index();
      copy(params.tma_load_a.with(*barrier, mcast_mask_a), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      copy(params.tma_load_b_glu.with(*barrier, 0), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

template <class Config, class Element, int kEpilogueSmemBytes>
struct GluMainloop {
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // 16 bytes
  using Collective = GluCollectiveMma<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, kAlignment,
      Element, cutlass::layout::ColumnMajor, kAlignment,  // B: K-major, read as above
      float, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<kEpilogueSmemBytes>,
      typename Config::KernelSchedule>::CollectiveOp>;
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

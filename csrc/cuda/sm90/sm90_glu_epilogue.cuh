// The epilogue of the fused gated kernel (gemm_glu): Y = act(gate) * up at
// half the GEMM's width, stored straight from registers.
//
// The GEMM's column n' = 16 g + 8 h + j is column 8 g + j of weight h
// (sm90_glu_mainloop.cuh), so Y's column is 8 g + j, and the up value of a
// gate column n' sits at n' + 8 in the same thread's accumulators: a thread
// holds the columns 2 (lane % 4) + {0, 1} + 8 i of its rows (wgmma's
// accumulator layout, which the epilogue's partition keeps), each subtile
// is a whole number of 16-column groups, and so within its subtile each of
// its columns with n' % 16 < 8 has its partner 8 further on. The pairing is
// found at compile time from the partition's coordinate layout, and
// two adjacent products go out as one 4-byte store.
//
// The tree is one leaf (GluStore). Its visit hands the accumulators on; its
// reduce, which sees the subtile's values whole, multiplies each pair and
// stores the products to Y, [M, N] row-major, with the residue predicate.
// No D (ElementD void): nothing goes through shared memory, and no bias or
// C (the entry sends those cases to the composite).
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_glu_mainloop.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <class Element, Activation kAct>
struct GluStore {
  // What the collective sizes its (unused) D buffers by when D is void.
  using ElementAux = Element;

  struct SharedStorage {};

  struct Arguments {
    Element* y = nullptr;
    int64_t ldy = 0;
    bool gate_second = false;  // the gate is weight 1, at the higher address
    float negative_slope = 0.01f;
  };

  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.y != nullptr;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE GluStore() {}
  CUTLASS_HOST_DEVICE GluStore(Params const& params, SharedStorage const&) : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(fusion::ProducerLoadArgs<Args...> const&) {
    return fusion::EmptyProducerLoadCallbacks{};
  }

  template <class CTensor, class Residue>
  struct ConsumerStoreCallbacks : fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor tCcD_, Residue residue_, Params const& params_,
                                          int64_t row0_, int64_t col0_)
        : tCcD(tCcD_), residue(residue_), params(params_), row0(row0_), col0(col0_) {}

    CTensor tCcD;      // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) coordinates relative to the thread's first
    Residue residue;   // (m, n') bound of those coordinates
    Params const& params;
    int64_t row0, col0;  // the thread's first element: its row, and its column of Y

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const& acc, int, int, int) {
      cutlass::Array<float, FragmentSize> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) out[i] = static_cast<float>(acc[i]);
      return out;
    }

    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n, bool, VTensor visit_results) {
      using namespace cute;
      constexpr int kFragment = cute::remove_cvref_t<decltype(visit_results(0))>::kElements;
      Tensor coords = tCcD(_, _, _, epi_m, epi_n);  // (CPY,CPY_M,CPY_N)
      constexpr int kValues = decltype(size(coords))::value;
      const auto value = [&](int i) { return visit_results(i / kFragment)[i % kFragment]; };
      // Pairs of adjacent gate columns, stored as one 4-byte word: Y's column
      // of the first is even (col0 is, and so is n % 8) and N' bounds whole
      // groups, so the pair is in bounds whenever its first element is.
      const auto find = [&](int m, int n) {
        int at = -1;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kValues; ++j) {
          if (get<0>(coords(j)) == m && get<1>(coords(j)) == n) at = j;
        }
        return at;
      };
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues; ++i) {
        const int m = get<0>(coords(i)), n = get<1>(coords(i));
        if (n % (2 * kGluGroup) >= kGluGroup || n % 2 != 0) continue;  // not a pair's first gate column
        if (!elem_less(coords(i), residue)) continue;
        cutlass::Array<Element, 2> pair;
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 2; ++e) {
          const float first = value(find(m, n + e)), second = value(find(m, n + e + kGluGroup));
          const float gate = params.gate_second ? second : first;
          const float up = params.gate_second ? first : second;
          pair[e] = static_cast<Element>(activate<kAct, Element>(gate, params.negative_slope) * up);
        }
        // Y's column of n': 8 per group of 16 (col0 already is Y's).
        const int64_t col = col0 + (n / (2 * kGluGroup)) * kGluGroup + n % kGluGroup;
        *reinterpret_cast<cutlass::Array<Element, 2>*>(params.y + (row0 + m) * params.ldy + col) = pair;
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    auto [M, N, K, L] = args.problem_shape_mnkl;
    // The thread's first element, from the bound: residue = (M, N') - first.
    const int64_t row0 = int64_t(M) - int64_t(get<0>(args.residue_tCcD));
    const int64_t col_packed = int64_t(N) - int64_t(get<1>(args.residue_tCcD));
    const int64_t col0 = (col_packed / (2 * kGluGroup)) * kGluGroup + col_packed % (2 * kGluGroup);
    return ConsumerStoreCallbacks<decltype(args.tCcD), decltype(args.residue_tCcD)>(
        args.tCcD, args.residue_tCcD, *params_ptr, row0, col0);
  }
};

template <class Config, class Element, Activation kAct>
struct GemmGluEpilogue {
  static_assert(!Config::kStoresZ, "gemm_glu stores no Z: its configurations say stores_z=False");
  using Callbacks = GluStore<Element, kAct>;
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;
  using Collective = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, typename Config::EpilogueTile, float, float,
      void, cutlass::layout::RowMajor, kAlignment,  // no C
      void, cutlass::layout::RowMajor, kAlignment,  // no D: GluStore stores Y
      typename Config::EpilogueSchedule, Callbacks>::CollectiveOp;

  // Y is params.y ([M, N / 2 of the GEMM] row-major); the gate is weight 1
  // where params.c (the up weight) lies below params.b (the gate's).
  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    return {static_cast<Element*>(p.y), p.n / 2, p.c < p.b, static_cast<float>(p.negative_slope)};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

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
// found at compile time from the partition's coordinate layout.
//
// The tree is one leaf (GluStore). Its visit hands the accumulators on; its
// reduce, which sees the subtile's values whole, multiplies each pair, and
// the four lanes that share a row swap their results (a 4 x 4 transpose of
// 4-byte words by shuffles) so that each stores 8 consecutive columns of Y
// as one 16-byte word: a quad writes 64 contiguous bytes of a row, where a
// 4-byte store per lane pair left each 32-byte sector half written per
// instruction. Where asked (training), the projections go out the same way,
// as the composite's H. Each projection's bias, where given, is added
// before the gate. No D (ElementD void): nothing goes through shared
// memory.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_config.cuh"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "cuda/sm90/sm90_glu_mainloop.cuh"
#include "cuda/sm90/sm90_register_leaf.cuh"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

template <class Element>
struct GluStoreArguments {
  Element* y = nullptr;
  int64_t ldy = 0;
  bool gate_second = false;  // the gate is weight 1, at the higher address
  float negative_slope = 0.01f;
  // Where not null, the projections too, as the composite's H [M, 2 ldy]:
  // the gate's in its first ldy columns, the up projection's after them.
  Element* h = nullptr;
  // Each projection's bias [ldy] (16-byte aligned), or null for none.
  Element const* bias_gate = nullptr;
  Element const* bias_up = nullptr;
};

template <class Element, Activation kAct>
struct GluStore : RegisterLeaf<GluStoreArguments<Element>> {
  using Base = RegisterLeaf<GluStoreArguments<Element>>;
  using typename Base::Params;
  using Base::Base;
  using Base::params_ptr;
  // What the collective sizes its (unused) D buffers by when D is void.
  using ElementAux = Element;

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

    // A 4 x 4 transpose of 32-bit words within a quad of lanes (the four
    // that share a row): lane q holds word[g], its pair of columns in group
    // g; afterwards out[p] is lane p's word of group q, so lane q holds
    // group q's 8 consecutive columns.
    CUTLASS_DEVICE static void quad_transpose(uint32_t const (&word)[4], uint32_t (&out)[4], int q) {
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < 4; ++k) {
        const int partner = q ^ k;
        uint32_t send = word[0];
        CUTLASS_PRAGMA_UNROLL
        for (int g = 1; g < 4; ++g) send = partner == g ? word[g] : send;
        const uint32_t got = k == 0 ? send : __shfl_xor_sync(0xffffffffu, send, k);
        CUTLASS_PRAGMA_UNROLL
        for (int p = 0; p < 4; ++p) out[p] = partner == p ? got : (k == 0 ? 0u : out[p]);
      }
    }

    // bias[col], bias[col + 1] (col even: one 4-byte load), or zeros.
    CUTLASS_DEVICE static cutlass::Array<float, 2> bias_pair(Element const* bias, int64_t col) {
      cutlass::Array<float, 2> out;
      out.fill(0.f);
      if (bias != nullptr) {
        const cutlass::Array<Element, 2> pair = *reinterpret_cast<cutlass::Array<Element, 2> const*>(bias + col);
        out[0] = static_cast<float>(pair[0]);
        out[1] = static_cast<float>(pair[1]);
      }
      return out;
    }

    // One 16-byte store (st.global.v4: the compiler split a uint4 assignment
    // through an Element pointer into four).
    CUTLASS_DEVICE static void store16(uint32_t const (&word)[4], Element* at, bool ok) {
      cutlass::arch::global_store<uint4, 16>(make_uint4(word[0], word[1], word[2], word[3]), at, ok);
    }

    template <class STensor, class SyncFn, class VTensor>
    CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n, bool, VTensor visit_results) {
      using namespace cute;
      constexpr int kFragment = cute::remove_cvref_t<decltype(visit_results(0))>::kElements;
      Tensor coords = tCcD(_, _, _, epi_m, epi_n);  // (CPY,CPY_M,CPY_N)
      constexpr int kValues = decltype(size(coords))::value;
      // Per row of the thread's: 4 groups of 16 columns (the subtile's 64),
      // a pair of gate columns and their up pair in each.
      constexpr int kGroups = 4, kRows = kValues / (4 * kGroups);
      static_assert(kValues == kRows * 4 * kGroups, "a subtile of 64 columns per row of a thread's");
      const auto value = [&](int i) { return visit_results(i / kFragment)[i % kFragment]; };
      const auto find = [&](int m, int n) {
        int at = -1;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kValues; ++j) {
          if (get<0>(coords(j)) == m && get<1>(coords(j)) == n) at = j;
        }
        return at;
      };
      // Each pair of adjacent gate columns (the first's n even, below 8 in
      // its group of 16) gives a 4-byte word each of Y, and of H's two halves.
      float gate_acc[kRows][kGroups][2], up_acc[kRows][kGroups][2];
      bool in_bounds[kRows][kGroups];
      int row_m[kRows], group_n[kGroups];
      int rows_seen = 0;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues; ++i) {
        const int m = get<0>(coords(i)), n = get<1>(coords(i));
        if (n % (2 * kGluGroup) >= kGluGroup || n % 2 != 0) continue;
        const int g = (n % (kGroups * 2 * kGluGroup)) / (2 * kGluGroup);
        int r = rows_seen;
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < kRows; ++k) r = (k < rows_seen && row_m[k] == m) ? k : r;
        if (r == rows_seen) row_m[rows_seen++] = m;
        group_n[g] = n;  // the subtile's offset included
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 2; ++e) {
          const float first = value(find(m, n + e)), second = value(find(m, n + e + kGluGroup));
          gate_acc[r][g][e] = params.gate_second ? second : first;
          up_acc[r][g][e] = params.gate_second ? first : second;
        }
        in_bounds[r][g] = elem_less(coords(i), residue);
      }
      // The biases of a group's pair (Y's columns col0 + 8 (n / 16) + {0, 1}),
      // loaded once for all the thread's rows; none past N, where no row is
      // in bounds. Skipped whole without biases (a uniform branch): adding
      // zeros cost the bias-free kernel 3 % (Llama's shape).
      if (params.bias_gate != nullptr || params.bias_up != nullptr) {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          const int64_t y_col = col0 + (group_n[g] / (2 * kGluGroup)) * kGluGroup;
          const bool inside = y_col < params.ldy;
          const cutlass::Array<float, 2> gate_bias = bias_pair(inside ? params.bias_gate : nullptr, y_col);
          const cutlass::Array<float, 2> up_bias = bias_pair(inside ? params.bias_up : nullptr, y_col);
          CUTLASS_PRAGMA_UNROLL
          for (int r = 0; r < kRows; ++r) {
            CUTLASS_PRAGMA_UNROLL
            for (int e = 0; e < 2; ++e) {
              gate_acc[r][g][e] += gate_bias[e];
              up_acc[r][g][e] += up_bias[e];
            }
          }
        }
      }
      uint32_t y_words[kRows][kGroups], g_words[kRows][kGroups], u_words[kRows][kGroups];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          cutlass::Array<Element, 2> y, gate, up;
          CUTLASS_PRAGMA_UNROLL
          for (int e = 0; e < 2; ++e) {
            const float g_value = gate_acc[r][g][e];
            const float u_value = up_acc[r][g][e];
            y[e] = static_cast<Element>(activate<kAct, Element>(g_value, params.negative_slope) * u_value);
            gate[e] = static_cast<Element>(g_value);
            up[e] = static_cast<Element>(u_value);
          }
          y_words[r][g] = reinterpret_cast<uint32_t const&>(y);
          g_words[r][g] = reinterpret_cast<uint32_t const&>(gate);
          u_words[r][g] = reinterpret_cast<uint32_t const&>(up);
        }
      }
      // Lane q of its quad stores group q's 8 columns as one 16-byte word:
      // the quad's first column of Y is col0 - 2q, a multiple of 8, and N'
      // bounds whole groups.
      const int q = static_cast<int>(threadIdx.x % 4);
      int n_q = group_n[0];
      CUTLASS_PRAGMA_UNROLL
      for (int g = 1; g < kGroups; ++g) n_q = q == g ? group_n[g] : n_q;
      const int64_t col = col0 - 2 * q + (n_q / (2 * kGluGroup)) * kGluGroup;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        bool ok = in_bounds[r][0];
        CUTLASS_PRAGMA_UNROLL
        for (int g = 1; g < kGroups; ++g) ok = q == g ? in_bounds[r][g] : ok;
        uint32_t out[4];
        quad_transpose(y_words[r], out, q);
        const int64_t row = row0 + row_m[r];
        store16(out, params.y + row * params.ldy + col, ok);
        if (params.h != nullptr) {
          Element* h_row = params.h + row * 2 * params.ldy;
          quad_transpose(g_words[r], out, q);
          store16(out, h_row + col, ok);
          quad_transpose(u_words[r], out, q);
          store16(out, h_row + params.ldy + col, ok);
        }
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
  // where params.c (the up weight) lies below params.b (the gate's); the
  // biases are params.bias (the gate's) and params.bias_up.
  static typename Callbacks::Arguments arguments(const GemmActParams& p) {
    return {static_cast<Element*>(p.y), p.n / 2, p.c < p.b, static_cast<float>(p.negative_slope),
            static_cast<Element*>(p.z), static_cast<Element const*>(p.bias),
            static_cast<Element const*>(p.bias_up)};
  }
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

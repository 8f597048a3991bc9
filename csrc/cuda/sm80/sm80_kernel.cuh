// The sm80 kernel: Y = act(alpha * A @ B + beta * C + bias) (and Z) on the
// tensor cores through mma.sync, for sm_80 and every later GPU.
//
// One CTA per output tile, in grouped order. Mainloop: a cp.async pipeline
// keeps Stages - 1 k-tiles in flight into swizzled shared memory (16-byte
// vectors, zero-filled past M, N and K); ldmatrix loads the next k-block's
// fragments while the current one's MMAs issue. Epilogue: each warp stages
// its fp32 accumulators through (reused) shared memory so that every thread
// holds 8 adjacent columns of one row, which the project's epilogue
// (bias_act_epilogue.cuh) finishes and stores with 16-byte stores.
//
// Only sm80_launch_template.cuh includes this file.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>

#include "activations.h"
#include "cuda/epilogue/bias_act_epilogue.cuh"
#include "cuda/sm80/sm80_config.cuh"
#include "gemm_act.h"

// cp.async, ldmatrix and bf16 mma.sync are sm_80 instructions; an older
// target would compile the kernel into one that computes nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the sm80 kernels need sm_80 or later: compile the units for sm_80"
#endif

namespace gemm_act {
namespace sm80 {

template <class CudaElement>
struct KernelParams {
  const void* a = nullptr;  // [M, K], K contiguous
  const void* b = nullptr;  // [K, N], K (KMajor) or N (NMajor) contiguous
  int m = 0, n = 0, k = 0;
  int64_t lda = 0;  // A's row stride
  int64_t ldb = 0;  // B's stride along its non-contiguous dimension
  int tiles_m = 0, tiles_n = 0;
  int band_rows = 1;  // grouped order (sm80_heuristic.h)
  gpu::EpilogueParams<CudaElement> epi;
  // gemm_glu (kGlu): b is the weight at the lower address, the other
  // b_delta elements on; n is both weights' columns; epi.y is Y [m, n / 2],
  // epi.z H [m, n] or null; glu_bias[h] weight h's bias [n / 2] or null.
  int64_t b_delta = 0;
  bool gate_second = false;  // the gate is the weight at the higher address
  const CudaElement* glu_bias[2] = {nullptr, nullptr};
};

namespace detail {

// This CTA's output tile: bands of band_rows tile rows, walked column by
// column (then row by row within a column) so that consecutive CTAs share
// their B tile and a band's A rows stay in L2.
template <class Params>
__device__ __forceinline__ void tile_coords(const Params& p, int& tile_m, int& tile_n) {
  const int per_band = p.band_rows * p.tiles_n;
  const int pid = static_cast<int>(blockIdx.x);
  const int band = pid / per_band;
  const int first_m = band * p.band_rows;
  const int rows = min(p.tiles_m - first_m, p.band_rows);  // the last band may be short
  const int in_band = pid - band * per_band;
  tile_m = first_m + in_band % rows;
  tile_n = in_band / rows;
}

// Float offset of accumulator (r, c) in a warp's 16 x 64 fp32 staging block.
// The 16 16-byte chunks of a row are permuted (XOR) so that both the float2
// writes of m16n8 fragments (a half-warp: rows r..r+3, two chunks each) and
// the float4 reads of 8-column segments (a quarter-warp: one row, 8
// segments) touch every bank once.
__device__ __forceinline__ int staged_offset(int r, int c) {
  const int chunk = c >> 2;
  const int r8 = r & 7;
  const int row_xor = ((r8 & 3) << 1) | (r8 >> 2);
  return r * 64 + (((chunk ^ (chunk >> 3)) ^ row_xor) << 2) + (c & 3);
}

// The bytes of a 16-byte vector (8 two-byte elements) that lie before an
// edge `elements_left` elements from its start.
constexpr int bytes_inside(int elements_left) {
  return elements_left >= 8 ? 16 : elements_left > 0 ? 2 * elements_left : 0;
}

// gemm_glu's epilogue for one lane's 8 adjacent columns (col, a multiple of
// 8, of the GEMM's 2N) of one row: weight `half`'s values of a group of 8,
// to which the lane adds that weight's bias. The lane pair (even, odd)
// swaps its values, the even lane stores Y's 8 columns act(gate) * up as
// one 16-byte word, and where H is kept each lane stores its own 8 values
// in H's gate or up half. A group lies wholly inside N' or outside it.
template <class Traits, Activation kAct>
__device__ __forceinline__ void glu_segment(const KernelParams<typename Traits::CudaElement>& p,
                                            int64_t row, int64_t col, int half, const float (&acc)[8]) {
  using Element = typename Traits::CudaElement;
  using Num = gpu::Numeric<Element>;
  const int64_t n_out = p.n / 2;          // Y's width
  const int64_t y_col = (col / 16) * 8;  // the group's first column of Y
  const Element* const bias = col < p.n ? p.glu_bias[half] : nullptr;
  float v[8], other[8];
  CUTE_UNROLL
  for (int j = 0; j < 8; ++j) {
    v[j] = acc[j] + (bias != nullptr ? Num::to_compute(Num::load(bias + y_col + j)) : 0.f);
    other[j] = __shfl_xor_sync(0xffffffffu, v[j], 1);
  }
  if (row >= p.m || col >= p.n) return;
  gpu::AlignedArray<Element, 8> out;
  if (half == 0) {
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) {
      const float gate = p.gate_second ? other[j] : v[j];
      const float up = p.gate_second ? v[j] : other[j];
      out.v[j] = Num::from_compute(activate<kAct, Element>(gate, p.epi.slope) * up);
    }
    gpu::store_global_aligned(p.epi.y + row * n_out + y_col, out);
  }
  if (p.epi.z != nullptr) {
    const bool is_gate = (half == 1) == p.gate_second;
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) out.v[j] = Num::from_compute(v[j]);
    gpu::store_global_aligned(p.epi.z + row * 2 * n_out + (is_gate ? 0 : n_out) + y_col, out);
  }
}

}  // namespace detail

namespace detail {

// The kernel's body. With kGlu it computes gemm_glu: B's column n' = 16 g +
// 8 h + j is column 8 g + j of weight h (the two weights read where they
// are, through a hierarchical layout), so each 16 columns hold 8 gate and
// the 8 matching up columns, and the epilogue's lanes 2s and 2s + 1 (a
// row's adjacent 8-column segments) hold a group's gate and up values.
template <class Traits, Activation kAct, BiasKind kBias, bool kGlu>
__device__ __forceinline__ void gemm_body(const KernelParams<typename Traits::CudaElement>& p) {
  using namespace cute;
  using T = typename Traits::Element;
  using TileM = typename Traits::TileM;
  using TileN = typename Traits::TileN;
  using TileK = typename Traits::TileK;
  constexpr int kStages = Traits::kStages;
  constexpr int kTileK = Traits::kTileK;
  constexpr bool kBKMajor = Traits::kBLayout == BLayout::KMajor;

  extern __shared__ __align__(128) unsigned char smem[];
  T* const smem_a = reinterpret_cast<T*>(smem);
  Tensor sA = make_tensor(make_smem_ptr(smem_a), typename Traits::SmemLayoutA{});  // (BM, BK, stage)
  Tensor sB = make_tensor(make_smem_ptr(smem_a + Traits::kSmemElementsA),
                          typename Traits::SmemLayoutB{});  // (BN, BK, stage)

  int tile_m, tile_n;
  detail::tile_coords(p, tile_m, tile_n);
  const int tid = static_cast<int>(threadIdx.x);

  // A as (M, K) and B as (N, K), cut into this CTA's k-tiles.
  Tensor mA = make_tensor(make_gmem_ptr(static_cast<const T*>(p.a)), make_shape(p.m, p.k),
                          make_stride(p.lda, _1{}));
  Tensor mB = [&] {
    const auto* b = static_cast<const T*>(p.b);
    if constexpr (kGlu) {
      static_assert(kBKMajor, "gemm_glu reads the weights K-major");
      return make_tensor(make_gmem_ptr(b), make_shape(make_shape(_8{}, _2{}, p.n / 16), p.k),
                         make_stride(make_stride(p.ldb, p.b_delta, 8 * p.ldb), _1{}));
    } else if constexpr (kBKMajor) {
      return make_tensor(make_gmem_ptr(b), make_shape(p.n, p.k), make_stride(p.ldb, _1{}));
    } else {
      return make_tensor(make_gmem_ptr(b), make_shape(p.n, p.k), make_stride(_1{}, p.ldb));
    }
  }();
  Tensor gA = local_tile(mA, make_shape(TileM{}, TileK{}), make_coord(tile_m, _));  // (BM, BK, k_tiles)
  Tensor gB = local_tile(mB, make_shape(TileN{}, TileK{}), make_coord(tile_n, _));  // (BN, BK, k_tiles)

  // ---- global -> shared (cp.async) --------------------------------------
  typename Traits::G2SCopyA g2s_a;
  typename Traits::G2SCopyB g2s_b;
  auto g2s_thr_a = g2s_a.get_thread_slice(tid);
  auto g2s_thr_b = g2s_b.get_thread_slice(tid);
  Tensor tAgA = g2s_thr_a.partition_S(gA);  // (CPY, CPY_M, CPY_K, k_tiles)
  Tensor tAsA = g2s_thr_a.partition_D(sA);  // (CPY, CPY_M, CPY_K, stage)
  Tensor tBgB = g2s_thr_b.partition_S(gB);  // (CPY, CPY_N, CPY_K, k_tiles)
  Tensor tBsB = g2s_thr_b.partition_D(sB);  // (CPY, CPY_N, CPY_K, stage)
  // Where each of this thread's vectors starts in the tile: (row, k).
  Tensor tAcA = g2s_thr_a.partition_S(make_identity_tensor(make_shape(TileM{}, TileK{})));
  Tensor tBcB = g2s_thr_b.partition_S(make_identity_tensor(make_shape(TileN{}, TileK{})));
  constexpr int kAM = decltype(size<1>(tAsA))::value, kAK = decltype(size<2>(tAsA))::value;
  constexpr int kBN = decltype(size<1>(tBsB))::value, kBK = decltype(size<2>(tBsB))::value;

  // Which vectors lie inside M (N): the rest read nothing and land as
  // zeros, so their MMAs add nothing. An N-major B's vector at the N edge
  // reads only its columns before N.
  const int m_left = p.m - tile_m * Traits::kTileM;
  const int n_left = p.n - tile_n * Traits::kTileN;
  bool a_in[kAM];
  int b_bytes[kBN];  // 16 or 0, or in between at an N-major B's edge
  CUTE_UNROLL
  for (int i = 0; i < kAM; ++i) a_in[i] = get<0>(tAcA(0, i, 0)) < m_left;
  CUTE_UNROLL
  for (int i = 0; i < kBN; ++i) {
    const int left = n_left - get<0>(tBcB(0, i, 0));
    b_bytes[i] = kBKMajor ? (left > 0 ? 16 : 0) : detail::bytes_inside(left);
  }

  // The k-tiles run last one first, then 0, 1, ...: only the last can reach
  // past K, and this way only the prologue's first copy checks K.
  typename Traits::G2SAtom g2s_atom;
  const int k_tiles = static_cast<int>(size<3>(tAgA));
  auto k_tile_at = [&](int step) { return step == 0 ? k_tiles - 1 : step - 1; };
  // Issues the copies of k-tile kt into `stage`. With kCheckK, a
  // K-contiguous vector keeps its elements before K (a partial read, the
  // rest zero-filled) and an N-major B's K row is read only before K.
  auto copy_k_tile = [&](int kt, int stage, auto check_k) {
    constexpr bool kCheckK = decltype(check_k)::value;
    const int k_left = p.k - kt * kTileK;
    CUTE_UNROLL
    for (int j = 0; j < kAK; ++j) {
      const int k_bytes = detail::bytes_inside(k_left - get<1>(tAcA(0, 0, j)));
      CUTE_UNROLL
      for (int i = 0; i < kAM; ++i) {
        const int bytes = a_in[i] ? (kCheckK ? k_bytes : 16) : 0;
        copy(g2s_atom.with(bytes), tAgA(_, i, j, kt), tAsA(_, i, j, stage));
      }
    }
    CUTE_UNROLL
    for (int j = 0; j < kBK; ++j) {
      const int k_col = get<1>(tBcB(0, 0, j));
      CUTE_UNROLL
      for (int i = 0; i < kBN; ++i) {
        int bytes = b_bytes[i];
        if constexpr (kCheckK) {
          if constexpr (kBKMajor) {
            bytes = cute::min(bytes, detail::bytes_inside(k_left - k_col));
          } else {
            bytes = k_col < k_left ? bytes : 0;
          }
        }
        copy(g2s_atom.with(bytes), tBgB(_, i, j, kt), tBsB(_, i, j, stage));
      }
    }
  };

  // ---- shared -> registers (ldmatrix) and the MMAs ----------------------
  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
  Tensor acc = partition_fragment_C(tiled_mma, make_shape(TileM{}, TileN{}));  // (MMA, MMA_M, MMA_N) fp32
  clear(acc);

  auto s2r_a = make_tiled_copy_A(typename Traits::S2RAtomA{}, tiled_mma);
  auto s2r_b = make_tiled_copy_B(typename Traits::S2RAtomB{}, tiled_mma);
  auto s2r_thr_a = s2r_a.get_thread_slice(tid);
  auto s2r_thr_b = s2r_b.get_thread_slice(tid);
  Tensor tXsA = s2r_thr_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, stage)
  Tensor tXrA = s2r_thr_a.retile_D(tCrA);   // (CPY, CPY_M, CPY_K)
  Tensor tXsB = s2r_thr_b.partition_S(sB);  // (CPY, CPY_N, CPY_K, stage)
  Tensor tXrB = s2r_thr_b.retile_D(tCrB);   // (CPY, CPY_N, CPY_K)
  constexpr int kBlocks = decltype(size<2>(tCrA))::value;  // k-blocks of 16 per k-tile
  static_assert(kBlocks >= 2, "the fragment double buffer is the k-tile's k-blocks");

  // ---- mainloop ---------------------------------------------------------
  // Prologue: steps 0 .. Stages-2 in flight. Every step commits one
  // cp.async group, empty past the last k-tile, so cp_async_wait<Stages-2>
  // always means "step t has landed".
  if (k_tiles > 0) copy_k_tile(k_tile_at(0), 0, std::true_type{});
  cp_async_fence();
  CUTE_UNROLL
  for (int s = 1; s < kStages - 1; ++s) {
    if (s < k_tiles) copy_k_tile(k_tile_at(s), s, std::false_type{});
    cp_async_fence();
  }
  int read_stage = 0;             // the stage the MMAs read
  int write_stage = kStages - 1;  // the stage the next step's copy fills
  int next_step = kStages - 1;
  Tensor tXsA_r = tXsA(_, _, _, read_stage);
  Tensor tXsB_r = tXsB(_, _, _, read_stage);

  cp_async_wait<kStages - 2>();
  __syncthreads();
  copy(s2r_a, tXsA_r(_, _, Int<0>{}), tXrA(_, _, Int<0>{}));
  copy(s2r_b, tXsB_r(_, _, Int<0>{}), tXrB(_, _, Int<0>{}));

  CUTE_NO_UNROLL
  for (int step = 0; step < k_tiles; ++step) {
    for_each(make_int_sequence<kBlocks>{}, [&](auto kb) {
      constexpr int kb_now = decltype(kb)::value;
      if constexpr (kb_now == kBlocks - 1) {
        // Move to the next stage once it has landed. The barrier also orders
        // every warp's reads of the stage the next copy overwrites (all done
        // by now: its last fragments were loaded at kb == kBlocks - 2, or
        // before the previous barrier) before that copy.
        tXsA_r = tXsA(_, _, _, read_stage);
        tXsB_r = tXsB(_, _, _, read_stage);
        cp_async_wait<kStages - 2>();
        __syncthreads();
      }
      // The next k-block's fragments (the next k-tile's first at the end).
      constexpr int kb_next = (kb_now + 1) % kBlocks;
      copy(s2r_a, tXsA_r(_, _, Int<kb_next>{}), tXrA(_, _, Int<kb_next>{}));
      copy(s2r_b, tXsB_r(_, _, Int<kb_next>{}), tXrB(_, _, Int<kb_next>{}));
      gemm(tiled_mma, acc, tCrA(_, _, kb), tCrB(_, _, kb), acc);
      // The next k-tile's copies go out behind the first k-block's MMAs,
      // which the tensor cores work through meanwhile.
      if constexpr (kb_now == 0) {
        if (next_step < k_tiles) copy_k_tile(k_tile_at(next_step), write_stage, std::false_type{});
        cp_async_fence();
        ++next_step;
        write_stage = read_stage;
        read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
      }
    });
  }

  // ---- epilogue ---------------------------------------------------------
  // Shared memory is reused: every copy has landed (only empty groups are
  // left) and every warp has finished its ldmatrix reads.
  cp_async_wait<0>();
  __syncthreads();

  const gpu::EpilogueBiasAct<typename Traits::CudaElement, kAct, kBias> epilogue(p.epi);
  const int warp = tid / 32, lane = tid % 32;
  float* const staged = reinterpret_cast<float*>(smem) + warp * (16 * 64);
  static_assert(Traits::kThreads / 32 * 16 * 64 * int(sizeof(float)) <= Traits::kSmemBytes,
                "the staging blocks fit the mainloop's shared memory");
  // Each accumulator's (row, column) in the tile; a warp's 64 x 64 block is
  // contiguous (the TiledMma's permutations), one 16-row slice per MMA_M.
  Tensor tCcC = thr_mma.partition_C(make_identity_tensor(make_shape(TileM{}, TileN{})));
  static_assert(decltype(size<0>(acc))::value == 4 && decltype(size<2>(acc))::value * 8 == 64,
                "a warp's slice is 16 x 64: m16n8 fragments, 8 of them across");
  const int64_t col0 = int64_t{tile_n} * Traits::kTileN + (get<1>(tCcC(0, 0, 0)) & ~63);
  const int64_t tile_row0 = int64_t{tile_m} * Traits::kTileM;

  CUTE_UNROLL
  for (int mm = 0; mm < size<1>(acc); ++mm) {
    // An m16n8 fragment holds (row, col), (row, col + 1), (row + 8, col),
    // (row + 8, col + 1): two float2 stores.
    CUTE_UNROLL
    for (int nn = 0; nn < size<2>(acc); ++nn) {
      CUTE_UNROLL
      for (int v = 0; v < 4; v += 2) {
        const int r = get<0>(tCcC(v, mm, nn)) & 15, c = get<1>(tCcC(v, mm, nn)) & 63;
        *reinterpret_cast<float2*>(staged + detail::staged_offset(r, c)) =
            make_float2(acc(v, mm, nn), acc(v + 1, mm, nn));
      }
    }
    __syncwarp();
    const int64_t row0 = tile_row0 + (get<0>(tCcC(0, mm, 0)) & ~15);
    // A quarter-warp takes one row's 8 segments: 128 contiguous bytes of Y.
#pragma unroll 1
    for (int r = lane / 8; r < 16; r += 4) {
      const int seg = lane % 8;
      const float4 lo = *reinterpret_cast<const float4*>(staged + detail::staged_offset(r, 8 * seg));
      const float4 hi = *reinterpret_cast<const float4*>(staged + detail::staged_offset(r, 8 * seg + 4));
      const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      if constexpr (kGlu) {
        glu_segment<Traits, kAct>(p, row0 + r, col0 + 8 * seg, seg % 2, v);
      } else {
        epilogue.template apply_row_segment<8>(row0 + r, col0 + 8 * seg, v);
      }
    }
    __syncwarp();  // the reads are done before the next slice overwrites the block
  }
}

}  // namespace detail

template <class Traits, Activation kAct, BiasKind kBias>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sm80_gemm_act_kernel(const __grid_constant__ KernelParams<typename Traits::CudaElement> p) {
  detail::gemm_body<Traits, kAct, kBias, false>(p);
}

template <class Traits, Activation kAct>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sm80_gemm_glu_kernel(const __grid_constant__ KernelParams<typename Traits::CudaElement> p) {
  detail::gemm_body<Traits, kAct, BiasKind::None, true>(p);
}

}  // namespace sm80
}  // namespace gemm_act

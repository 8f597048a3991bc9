// Dropout's mask, defined once for every backend (cpu/dropout_cpu.cpp,
// cuda/dropout/dropout_pass.cu, the sm90 epilogue's mask leaf): a
// counter-based draw, so the backward draws the mask again instead of
// storing it.
//
// Element i of a [M, N] row-major output (i = m * N + n) draws the 32-bit
// word i % 4 of Philox4x32-10 at counter (i / 4, 0) under key `seed`, and is
// kept when that word is below T = round((1 - p) * 2^32). A kept element is
// scaled by 2^32 / T, so the output's expectation is its input's exactly (for
// the p that T represents; p is rounded to a multiple of 2^-32). The same
// seed and shape give the same mask on every backend, bit for bit; it is not
// PyTorch's own mask.
#pragma once

#include <cmath>
#include <cstdint>

#include "act_math.h"

namespace gemm_act {

// The per-call constants: keep where the draw is below `threshold`
// (0 ... 2^32), then multiply by `scale`.
struct DropoutKeep {
  uint64_t threshold = uint64_t{1} << 32;
  double scale = 1.0;
};

// T and 2^32 / T for drop probability p in [0, 1] (p = 1 keeps nothing).
inline DropoutKeep dropout_keep(double p) {
  constexpr double kTwo32 = 4294967296.0;
  DropoutKeep k;
  k.threshold = static_cast<uint64_t>(std::llround((1.0 - p) * kTwo32));
  k.scale = k.threshold == 0 ? 0.0 : kTwo32 / static_cast<double>(k.threshold);
  return k;
}

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", 2011) on counter c, key (k0, k1); the result replaces c.
GEMM_ACT_HD void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kBump0 = 0x9E3779B9u, kBump1 = 0xBB67AE85u;
#if defined(__CUDACC__) || defined(__HIPCC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c[0] = hi1 ^ c[1] ^ k0;
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k1;
    c[3] = lo0;
    k0 += kBump0;
    k1 += kBump1;
  }
}

// The four draws of element group `group` (elements 4 * group ... 4 * group + 3).
GEMM_ACT_HD void dropout_draws(uint64_t seed, uint64_t group, uint32_t out[4]) {
  out[0] = static_cast<uint32_t>(group);
  out[1] = static_cast<uint32_t>(group >> 32);
  out[2] = 0;
  out[3] = 0;
  philox4x32_10(out, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Word `lane` (0 ... 3) of a group's draws, without indexing registers.
GEMM_ACT_HD uint32_t draw_lane(const uint32_t draws[4], uint32_t lane) {
  const uint32_t low = (lane & 1u) ? draws[1] : draws[0];
  const uint32_t high = (lane & 1u) ? draws[3] : draws[2];
  return (lane & 2u) ? high : low;
}

// The factor element `index` is multiplied by: scale where kept, else 0.
template <class T>
GEMM_ACT_HD T dropout_factor(uint32_t draw, uint64_t threshold, T scale) {
  return static_cast<uint64_t>(draw) < threshold ? scale : T(0);
}

// Keep bits of elements 32 * word ... 32 * word + 31 (bit j: element
// 32 * word + j kept), from the eight groups' draws: what the sm90 epilogue
// reads instead of drawing (cuda/dropout/dropout_pass.cu writes them).
GEMM_ACT_HD uint32_t dropout_keep_word(uint64_t seed, uint64_t word, uint64_t threshold) {
  uint32_t bits = 0;
#if defined(__CUDACC__) || defined(__HIPCC__)
#pragma unroll
#endif
  for (int g = 0; g < 8; ++g) {
    uint32_t draws[4];
    dropout_draws(seed, 8 * word + g, draws);
    for (int lane = 0; lane < 4; ++lane) {
      bits |= static_cast<uint32_t>(static_cast<uint64_t>(draws[lane]) < threshold) << (4 * g + lane);
    }
  }
  return bits;
}

// The pass every backend runs over N-element rows: out = residual + factor * z
// (residual null: out = factor * z, the backward's dZ = gY * mask * scale).
// All contiguous, row-major, of numel elements.
struct DropoutParams {
  void* out = nullptr;
  const void* z = nullptr;
  const void* residual = nullptr;  // null: none
  const int64_t* seed = nullptr;   // one element, on the tensors' device
  int64_t numel = 0;
  DropoutKeep keep;
};

}  // namespace gemm_act

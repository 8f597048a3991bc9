// Where the sm90 entry (sm90_gemm_act.cpp) leaves aligned operands to the
// library backend: a table of named rules, each boundary's number declared
// once and spelled from it for explain().
#pragma once

#include <cstdint>
#include <string>

#include "backend_args.h"
#include "cuda/library/cublaslt_epilogue.h"
#include "cuda/sm90/sm90_types.h"
#include "gemm_act.h"

namespace gemm_act {
namespace sm90 {

// Where the library is faster on aligned operands, each rule a measured
// boundary (docs/MEASUREMENTS.md, "sm90 dispatch rules").

// plain_gemm_is_eager: a plain GEMM (no activation, no C, at most a column
// bias) is eager F.linear's own cuBLASLt call, which the library runs; this
// family's 16-bit kernels win it only at short K or wide N.
constexpr int64_t kMaxPlainShortK = 1024;
constexpr int64_t kMinPlainWideN = 8192;
inline bool library_is_eager(const GemmActParams& p, Dtype dtype) {
  const bool plain = p.activation == Activation::None && p.c == nullptr &&
                     (p.bias_kind == BiasKind::None || p.bias_kind == BiasKind::PerColumn);
  const bool family_faster = dtype != Dtype::F32 && (p.k <= kMaxPlainShortK || p.n >= kMinPlainWideN);
  return plain && !family_faster;
}

// long_k: beyond this K cuBLAS's GEMM and eager's pass win.
constexpr int64_t kMaxDirectK = 4096;

// One tile row of this family's small-M tiles (library_is_faster_few_rows).
constexpr int64_t kMaxSmallTileM = 128;

// lt_epilogue: cuBLASLt's own GELU (tanh) epilogue, without Z, up to one
// tile row, at short K, and at long K with narrow N; never its RELU
// epilogue, which turns NaN into 0 (library::cublaslt_fuses_activation).
constexpr int64_t kMaxEpilogueShortK = 768;
constexpr int64_t kMinEpilogueLongK = 4096;
constexpr int64_t kMaxEpilogueLongN = 4096;
inline bool library_epilogue_is_faster(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  const bool epilogue_shape = p.m <= kMaxSmallTileM || p.k <= kMaxEpilogueShortK ||
                              (p.k >= kMinEpilogueLongK && p.n <= kMaxEpilogueLongN);
  return p.z == nullptr && epilogue_shape && library::cublaslt_fuses_activation(args);
}

// tall_long_k: long K, wide N, at least as tall as wide.
constexpr int64_t kMinTallK = 4096;
constexpr int64_t kMinTallN = 8192;
inline bool library_is_faster_tall(const GemmActParams& p) {
  return p.k >= kMinTallK && p.n >= kMinTallN && p.m >= p.n;
}

// small: below 2^32 multiply-adds cuBLAS's tiles and split-K fill the GPU
// where this family's tiles are too few.
constexpr int kMinDirectMultiplyAddsLog2 = 32;
inline bool library_is_faster_small(const GemmActParams& p) {
  return static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) <
         static_cast<double>(int64_t{1} << kMinDirectMultiplyAddsLog2);
}

// few_rows: two to six 128-row tiles fill the SMs in too few, uneven waves
// (cuBLAS splits K); up to one tile row the small-M tiles stream as fast.
constexpr int64_t kMaxFewRowsM = 768;
inline bool library_is_faster_few_rows(const GemmActParams& p) {
  return p.m > kMaxSmallTileM && p.m <= kMaxFewRowsM;
}

inline std::string num(int64_t v) { return std::to_string(v); }

// The rule's boundaries on aligned operands, tried in order; the first that
// applies leaves the case to the library. Named as in docs/MEASUREMENTS.md;
// `says` spells the boundary from the constants above, for explain().
struct LibraryRule {
  const char* name;
  bool (*applies)(const GemmActArgs& args, Dtype dtype);
  std::string (*says)();
};
inline const LibraryRule kLibraryRules[] = {
    {"plain_gemm_is_eager", [](const GemmActArgs& a, Dtype d) { return library_is_eager(a.params, d); },
     [] {
       return "no activation or C; fp32, or K > " + num(kMaxPlainShortK) + " and N < " + num(kMinPlainWideN) +
              ": eager's own cuBLASLt call";
     }},
    {"long_k", [](const GemmActArgs& a, Dtype) { return a.params.k > kMaxDirectK; },
     [] { return "K > " + num(kMaxDirectK); }},
    {"lt_epilogue", [](const GemmActArgs& a, Dtype) { return library_epilogue_is_faster(a); },
     [] {
       return "cuBLASLt's GELU epilogue, without Z: M <= " + num(kMaxSmallTileM) + ", K <= " +
              num(kMaxEpilogueShortK) + ", or K >= " + num(kMinEpilogueLongK) + " with N <= " + num(kMaxEpilogueLongN);
     }},
    {"tall_long_k", [](const GemmActArgs& a, Dtype) { return library_is_faster_tall(a.params); },
     [] { return "K >= " + num(kMinTallK) + ", N >= " + num(kMinTallN) + ", M >= N"; }},
    {"small", [](const GemmActArgs& a, Dtype) { return library_is_faster_small(a.params); },
     [] { return "below 2^" + num(kMinDirectMultiplyAddsLog2) + " multiply-adds"; }},
    {"few_rows", [](const GemmActArgs& a, Dtype) { return library_is_faster_few_rows(a.params); },
     [] { return num(kMaxSmallTileM + 1) + " to " + num(kMaxFewRowsM) + " rows"; }},
};

}  // namespace sm90
}  // namespace gemm_act

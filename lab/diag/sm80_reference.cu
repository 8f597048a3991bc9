// CUTLASS 2.x's own Ampere GEMM (mma.sync, cp.async multistage), bf16 with
// fp32 accumulation, D = A @ B or gelu(A @ B) (CUTLASS's LinearCombinationGELU,
// erf form): the reference the sm80 family's targets were set against,
// built outside PyTorch as a shared library that sm80_reference.py loads with
// ctypes and times beside the family in the same run. A [M, K] row-major, B an
// nn.Linear weight [N, K] row-major (column-major K x N), D [M, N] row-major.
//
//   nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 \
//       -I <cutlass>/include lab/diag/sm80_reference.cu -o build/lab/sm80_reference.so
//
// Only CUTLASS's public device API; nothing of it is copied here.
#include <cuda_runtime.h>

#include <cutlass/bfloat16.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/epilogue/thread/linear_combination_gelu.h>
#include <cutlass/gemm/device/gemm.h>

namespace {

using Element = cutlass::bfloat16_t;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

template <bool kGelu>
using EpilogueOf = typename std::conditional<
    kGelu, cutlass::epilogue::thread::LinearCombinationGELU<Element, 8, float, float>,
    cutlass::epilogue::thread::LinearCombination<Element, 8, float, float>>::type;

template <int TM, int TN, int TK, int WK, int Stages, bool kGelu>
using Gemm = cutlass::gemm::device::Gemm<
    Element, RowMajor, Element, ColumnMajor, Element, RowMajor, float, cutlass::arch::OpClassTensorOp,
    cutlass::arch::Sm80, cutlass::gemm::GemmShape<TM, TN, TK>, cutlass::gemm::GemmShape<64, 64, WK>,
    cutlass::gemm::GemmShape<16, 8, 16>, EpilogueOf<kGelu>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages>;

template <class G>
int run(const void* a, const void* b, void* d, int m, int n, int k, cudaStream_t stream) {
  typename G::Arguments args({m, n, k}, {static_cast<const Element*>(a), k},
                             {static_cast<const Element*>(b), k}, {static_cast<Element*>(d), n},
                             {static_cast<Element*>(d), n}, {1.0f, 0.0f});
  G gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return 2;
  return gemm(stream) == cutlass::Status::kSuccess ? 0 : 3;
}

// (name, CTA tile M, N, K, warp tile K, stages): CUTLASS's profiler's usual
// bf16 Ampere tiles with 64 x 64 warp tiles.
#define SM80_REFERENCE_CONFIGS(X) \
  X(cutlass_128x256x64_s3, 128, 256, 64, 64, 3) \
  X(cutlass_256x128x64_s3, 256, 128, 64, 64, 3) \
  X(cutlass_128x256x32_s3, 128, 256, 32, 32, 3) \
  X(cutlass_256x128x32_s3, 256, 128, 32, 32, 3) \
  X(cutlass_128x128x32_s4, 128, 128, 32, 32, 4)

#define SM80_REFERENCE_NAME(name, tm, tn, tk, wk, s) #name,
const char* const kNames[] = {SM80_REFERENCE_CONFIGS(SM80_REFERENCE_NAME)};

}  // namespace

extern "C" {

int sm80_reference_count() { return static_cast<int>(sizeof(kNames) / sizeof(kNames[0])); }

const char* sm80_reference_name(int config) { return kNames[config]; }

// 0 on success; 1: cannot implement, 2: initialize failed, 3: launch failed,
// 4: no such configuration.
int sm80_reference_gemm(int config, int gelu, const void* a, const void* b, void* d, int m, int n, int k,
                        void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  int index = 0;
#define SM80_REFERENCE_CASE(name, tm, tn, tk, wk, st)                                         \
  if (config == index++) {                                                                    \
    return gelu ? run<Gemm<tm, tn, tk, wk, st, true>>(a, b, d, m, n, k, s)                    \
                : run<Gemm<tm, tn, tk, wk, st, false>>(a, b, d, m, n, k, s);                  \
  }
  SM80_REFERENCE_CONFIGS(SM80_REFERENCE_CASE)
#undef SM80_REFERENCE_CASE
  return 4;
}

}  // extern "C"

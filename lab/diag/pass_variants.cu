// Shapes of the library's fp64 bias + GELU pass (csrc/cuda/library/
// epilogue_pass_kernels.cuh) behind a C entry point, for
// fp64_pass_vs_inductor.py to time beside Inductor's kernel on the same
// tensors. Built twice by that script: as is and with -maxrregcount=32
// (Inductor's kernel runs 30 registers a thread, ours 38-44).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icsrc -shared -Xcompiler -fPIC \
//     lab/diag/pass_variants.cu -o /tmp/pass_variants.so [-maxrregcount=32]
#include <cuda_runtime.h>

#include "cuda/library/epilogue_pass_kernels.cuh"

using namespace gemm_act;
using namespace gemm_act::gpu;
using namespace gemm_act::gpu::library;

namespace {
template <class Shape>
void launch(const double* acc, double* y, const double* bias, int64_t m, int64_t n, cudaStream_t s) {
  EpilogueParams<double> e;
  e.y = y;
  e.bias = bias;
  e.m = m;
  e.n = n;
  e.store_vector = 2;
  launch_pass<double, Activation::GELU, BiasKind::PerColumn, 2, Shape>(e, acc, s);
}
}  // namespace

// variant: 0 the shipped shape, then the others named by variant_name.
extern "C" int variant_count() { return 6; }
extern "C" const char* variant_name(int v) {
  static const char* names[] = {"shipped (128 threads, 2 rows)", "128 threads, 1 row", "256 threads, 1 row",
                                "128 threads, 4 rows", "256 threads, 2 rows", "512 threads, 1 row"};
  return names[v];
}
extern "C" int launch_variant(int v, const double* acc, double* y, const double* bias, int64_t m, int64_t n,
                              cudaStream_t s) {
  switch (v) {
    case 0: launch<PassShapeFor<double>>(acc, y, bias, m, n, s); break;
    case 1: launch<PassShape<128, 1, 1>>(acc, y, bias, m, n, s); break;
    case 2: launch<PassShape<256, 1, 1>>(acc, y, bias, m, n, s); break;
    case 3: launch<PassShape<128, 4, 1>>(acc, y, bias, m, n, s); break;
    case 4: launch<PassShape<256, 2, 1>>(acc, y, bias, m, n, s); break;
    case 5: launch<PassShape<512, 1, 1>>(acc, y, bias, m, n, s); break;
    default: return 1;
  }
  return int(cudaGetLastError());
}

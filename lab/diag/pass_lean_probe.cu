// A lean form of the library pass for its commonest call, a GEMM result
// plus a bias per column through an activation (no C, alpha 1, no Z), timed
// beside the shipped rows kernel (csrc/cuda/library/epilogue_pass_kernels.cuh)
// on fp64 GELU at 2048 x 2048, the op bench row where Inductor's fused kernel
// beats the pass (108 against 151 warp instructions per value under ncu,
// lab/diag/fp64_gelu_inductor.py). The lean kernel is Inductor's shape: 32-bit
// indices, one 16-byte vector a thread, 256 threads, a 2-D grid (rows on y),
// no per-element generality. Checks its output against the shipped kernel's.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icsrc -Ilab/diag lab/diag/pass_lean_probe.cu -o /tmp/lean
//   /tmp/lean
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <vector>

#include "cuda/library/epilogue_pass_kernels.cuh"
#include "probe_timing.cuh"

using namespace gemm_act;
using namespace gemm_act::gpu;
using namespace gemm_act::gpu::library;

template <class T, Activation kAct, int kThreads>
__global__ void __launch_bounds__(kThreads) lean_kernel(T* y, const T* __restrict__ acc, const T* __restrict__ bias,
                                                        int n, int rows_per_block) {
  constexpr int kW = 16 / sizeof(T);
  const int col0 = (blockIdx.x * kThreads + threadIdx.x) * kW;
  if (col0 >= n) return;  // n a multiple of kW
  const auto b = *reinterpret_cast<const AlignedArray<T, kW>*>(bias + col0);
  const int row_end = (blockIdx.y + 1) * rows_per_block;
  for (int row = blockIdx.y * rows_per_block; row < row_end; ++row) {
    const int offset = row * n + col0;
    auto v = *reinterpret_cast<const AlignedArray<T, kW>*>(acc + offset);
    AlignedArray<T, kW> out;
#pragma unroll
    for (int j = 0; j < kW; ++j) out.v[j] = activate<kAct, T>(v.v[j] + b.v[j], T(0));
    store_global_aligned(y + offset, out);
  }
}

template <class T>
__global__ void fill(T* p, int64_t n, uint32_t seed, double scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = T((double(h & 0xffffff) / double(1 << 23) - 1.0) * scale);
  }
}

int main() {
  const int m = 2048, n = 2048;
  double *acc, *y, *y_ref, *bias;
  CHECK(cudaMalloc(&acc, sizeof(double) * m * n));
  CHECK(cudaMalloc(&y, sizeof(double) * m * n));
  CHECK(cudaMalloc(&y_ref, sizeof(double) * m * n));
  CHECK(cudaMalloc(&bias, sizeof(double) * n));
  for (double scale : {3.0, 80.0}) {  // erf's full range; a GEMM output's (mostly saturated)
    fill<<<1024, 256>>>(acc, int64_t(m) * n, 1u, scale);
    fill<<<64, 256>>>(bias, n, 2u, 0.5);
    EpilogueParams<double> e;
    e.y = y_ref;
    e.bias = bias;
    e.m = m;
    e.n = n;
    e.store_vector = 2;
    auto shipped = [&] { launch_pass<double, Activation::GELU, BiasKind::PerColumn, 2, PassShapeFor<double>>(e, acc, nullptr); };
    std::printf("fp64 gelu + bias, 2048 x 2048, values in +-%g\n", scale);
    std::printf("  shipped rows kernel:          %8.2f us flushed %8.2f us back to back\n", time_ms(shipped, 30) * 1e3f,
                time_ms(shipped, 30, true) * 1e3f);
    std::vector<double> ref(size_t(m) * n), got(size_t(m) * n);
    CHECK(cudaMemcpy(ref.data(), y_ref, sizeof(double) * m * n, cudaMemcpyDeviceToHost));
    for (int rows : {1, 2, 4}) {
      const dim3 grid(n / 2 / 256, m / rows);
      auto lean = [&] { lean_kernel<double, Activation::GELU, 256><<<grid, 256>>>(y, acc, bias, n, rows); };
      const float flushed = time_ms(lean, 30) * 1e3f, b2b = time_ms(lean, 30, true) * 1e3f;
      CHECK(cudaMemcpy(got.data(), y, sizeof(double) * m * n, cudaMemcpyDeviceToHost));
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &ref[i], sizeof(double)) != 0;
      std::printf("  lean, 256 threads, %d row(s): %8.2f us flushed %8.2f us back to back%s\n", rows, flushed, b2b,
                  differ ? "  OUTPUT DIFFERS" : "");
    }
  }
  return 0;
}

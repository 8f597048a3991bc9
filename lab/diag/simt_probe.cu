// Times the SIMT kernel's tile configurations for exact fp32 against cuBLAS's
// sgemm (TF32 off) on one problem, outside PyTorch, and checks each against
// cuBLAS's result: for trying tile shapes without a rebuild of the extension
// (edit the list at the end of main).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -Icsrc lab/diag/simt_probe.cu -lcublas -o /tmp/simt_probe
//   /tmp/simt_probe [M K N]        (default 4096 4096 4096)
//
// A is [M, K]; B is the weight [N, K] (the nn.Linear case), then [K, N];
// no bias, no activation. Prints ms (median of 20, L2 flushed before each)
// and the ratio to cuBLAS.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/simt/simt_gemm_act_kernel.cuh"
#include "probe_timing.cuh"

using namespace gemm_act;
using namespace gemm_act::gpu::simt;

double max_rel_diff(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::fabs(double(x[i]) - ref[i]));
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return num / den;
}

// w_is_kn: the weight buffer holds B as [K, N] (N contiguous) instead of [N, K].
template <class Cfg>
void run(const char* name, const float* a, const float* w, bool w_is_kn, float* y, int m, int n, int k,
         const std::vector<float>& ref, float ref_ms) {
  SimtGemmActParams<float> kp;
  kp.a = a;
  kp.b = w;
  kp.m = m, kp.n = n, kp.k = k;
  kp.a_stride_m = k, kp.a_stride_k = 1;
  kp.b_stride_n = w_is_kn ? 1 : k, kp.b_stride_k = w_is_kn ? n : 1;
  kp.a_load = OperandLoad::kVectorAlongK;
  kp.b_load = w_is_kn ? OperandLoad::kVectorAlongMN : OperandLoad::kVectorAlongK;
  kp.tiles_m = (m + Cfg::BM - 1) / Cfg::BM;
  kp.tiles_n = (n + Cfg::BN - 1) / Cfg::BN;
  kp.epilogue.y = y;
  kp.epilogue.m = m;
  kp.epilogue.n = n;
  kp.epilogue.alpha = 1.0f;
  kp.epilogue.store_vector = 4;
  const dim3 grid(kp.tiles_m * kp.tiles_n);
  auto kernel = simt_gemm_act_kernel<Cfg, Activation::None, BiasKind::None>;
  CHECK(cudaMemset(y, 0xff, size_t(m) * n * sizeof(float)));  // NaN
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  auto launch = [&] { kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes>>>(kp); };
  const float t = time_ms(launch);
  CHECK(cudaGetLastError());
  std::vector<float> out(size_t(m) * n);
  CHECK(cudaMemcpy(out.data(), y, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  std::printf("%-28s %8.3f ms  %5.2fx cuBLAS  %6.1f TFLOP/s  regs %3d  err %.1e\n", name, t,
              t / ref_ms, 2.0 * m * n * k / t * 1e-9, attr.numRegs, max_rel_diff(out, ref));
}

int main(int argc, char** argv) {
  const int m = argc > 3 ? std::atoi(argv[1]) : 4096;
  const int k = argc > 3 ? std::atoi(argv[2]) : 4096;
  const int n = argc > 3 ? std::atoi(argv[3]) : 4096;
  std::vector<float> ha(size_t(m) * k), hw(size_t(n) * k);
  srand(1);
  for (auto& v : ha) v = rand() / float(RAND_MAX) - 0.5f;
  for (auto& v : hw) v = rand() / float(RAND_MAX) - 0.5f;
  float *a, *w, *y;
  CHECK(cudaMalloc(&a, ha.size() * 4));
  CHECK(cudaMalloc(&w, hw.size() * 4));
  CHECK(cudaMalloc(&y, size_t(m) * n * 4));
  CHECK(cudaMemcpy(a, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));

  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  const float one = 1, zero = 0;
  for (bool w_is_kn : {false, true}) {
    // cuBLAS, column-major: Y^T [N, M] = op(W) x A^T.
    auto sgemm = [&] {
      CHECK(cublasSgemm(h, w_is_kn ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w,
                        w_is_kn ? n : k, a, k, &zero, y, n));
    };
    const float ref_ms = time_ms(sgemm);
    std::vector<float> ref(size_t(m) * n);
    CHECK(cudaMemcpy(ref.data(), y, ref.size() * 4, cudaMemcpyDeviceToHost));
    std::printf("%dx%dx%d, B %s  cuBLAS sgemm %.3f ms  %.1f TFLOP/s\n", m, k, n,
                w_is_kn ? "[K, N]" : "[N, K]", ref_ms, 2.0 * m * n * k / ref_ms * 1e-9);
    run<SimtConfig<float>>("SimtConfig", a, w, w_is_kn, y, m, n, k, ref, ref_ms);
    run<SimtLargeConfig<float>::type>("SimtLargeConfig", a, w, w_is_kn, y, m, n, k, ref, ref_ms);
    run<SimtTileConfig<float, 128, 128, 8, 8, 8, 2>>("128x128x8 8x8 /2", a, w, w_is_kn, y, m, n, k, ref, ref_ms);
    run<SimtTileConfig<float, 128, 256, 16, 8, 16, 1>>("128x256x16 8x16 /1", a, w, w_is_kn, y, m, n, k, ref, ref_ms);
    run<SimtTileConfig<float, 256, 128, 8, 16, 8, 1>>("256x128x8 16x8 /1", a, w, w_is_kn, y, m, n, k, ref, ref_ms);
    run<SimtTileConfig<float, 256, 128, 16, 8, 8, 1>>("256x128x16 8x8 (512 thr) /1", a, w, w_is_kn, y, m, n, k, ref, ref_ms);
    std::printf("cuBLAS again %.3f ms\n", time_ms(sgemm));
  }
  return 0;
}

// Times the library backend's epilogue pass (csrc/cuda/library/
// epilogue_pass_kernels.cuh) in other shapes than the one it ships with
// (threads per block, rows per thread, vectors per thread of the flat
// kernel), outside PyTorch, on the problems where it lost to ATen's and
// Inductor's elementwise kernels, and checks every shape's output against
// the first's, bit for bit.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icsrc lab/diag/pass_probe.cu -o /tmp/pass_probe
//   /tmp/pass_probe
//
// Prints us per pass: the median of 30 launches with the L2 cache flushed
// before each, and the mean of 30 back to back (as torch.profiler times
// repeated calls).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/library/epilogue_pass_kernels.cuh"
#include "probe_timing.cuh"

using namespace gemm_act;
using namespace gemm_act::gpu;
using namespace gemm_act::gpu::library;

template <class T>
__global__ void fill(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = T(float(h & 0xffffff) / float(1 << 23) - 1.0f) * T(3.0f);  // about [-3, 3)
  }
}

struct Problem {
  const char* name;
  int64_t m, n;  // m == 1: the flat, activation-only pass
  bool bias;
};

template <class Element, class Shape>
void run(const Problem& pr, Element* acc, Element* y, const Element* bias, std::vector<unsigned char>* first) {
  constexpr int kW = 16 / sizeof(Element);
  EpilogueParams<Element> e;
  e.y = y;
  e.bias = pr.bias ? bias : nullptr;
  e.m = pr.m;
  e.n = pr.n;
  e.store_vector = kW;
  auto launch = [&] {
    if (pr.bias) {
      launch_pass<Element, Activation::GELU, BiasKind::PerColumn, kW, Shape>(e, acc, nullptr);
    } else {
      launch_pass<Element, Activation::GELU, BiasKind::None, kW, Shape>(e, acc, nullptr);
    }
  };
  const float flushed = time_ms(launch, 30) * 1e3f, b2b = time_ms(launch, 30, true) * 1e3f;
  const size_t bytes = size_t(pr.m) * pr.n * sizeof(Element);
  std::vector<unsigned char> out(bytes);
  CHECK(cudaMemcpy(out.data(), y, bytes, cudaMemcpyDeviceToHost));
  const bool same = first->empty() || std::memcmp(out.data(), first->data(), bytes) == 0;
  if (first->empty()) *first = out;
  std::printf("  threads %3d rows %d units %d: %8.2f us flushed %8.2f us back to back%s\n", Shape::kThreads,
              Shape::kRows, Shape::kUnits, flushed, b2b, same ? "" : "  OUTPUT DIFFERS");
}

template <class Element>
void problem(const Problem& pr) {
  const int64_t count = pr.m * pr.n;
  Element *acc, *y, *bias;
  CHECK(cudaMalloc(&acc, count * sizeof(Element)));
  CHECK(cudaMalloc(&y, count * sizeof(Element)));
  CHECK(cudaMalloc(&bias, pr.n * sizeof(Element)));
  fill<<<1024, 256>>>(acc, count, 1u);
  fill<<<64, 256>>>(bias, pr.n, 2u);
  CHECK(cudaDeviceSynchronize());
  std::printf("%s: %lld x %lld, %d-byte elements%s\n", pr.name, (long long)pr.m, (long long)pr.n,
              int(sizeof(Element)), pr.bias ? ", bias per column" : "");
  std::vector<unsigned char> first;
  run<Element, PassShapeFor<Element>>(pr, acc, y, bias, &first);  // shipped
  run<Element, PassShape<256, 4, 1>>(pr, acc, y, bias, &first);  // shipped to session 50
  run<Element, PassShape<128, 4, 1>>(pr, acc, y, bias, &first);
  run<Element, PassShape<256, 2, 2>>(pr, acc, y, bias, &first);
  run<Element, PassShape<128, 2, 2>>(pr, acc, y, bias, &first);
  run<Element, PassShape<256, 1, 4>>(pr, acc, y, bias, &first);
  run<Element, PassShape<128, 1, 4>>(pr, acc, y, bias, &first);
  run<Element, PassShape<128, 8, 8>>(pr, acc, y, bias, &first);
  run<Element, PassShape<512, 1, 1>>(pr, acc, y, bias, &first);
  CHECK(cudaFree(acc));
  CHECK(cudaFree(y));
  CHECK(cudaFree(bias));
}

int main() {
  // The act-only passes after cuBLASLt's bias epilogue, flattened; the
  // fp64 pass after torch.mm, with the bias.
  problem<float>({"fp32 gelu, 4096 x 4096 flattened", 1, 4096LL * 4096, false});
  problem<__nv_bfloat16>({"bf16 gelu, 16 x 16384 flattened", 1, 16LL * 16384, false});
  problem<__nv_bfloat16>({"bf16 gelu, 8192 x 16384 flattened", 1, 8192LL * 16384, false});
  problem<double>({"fp64 gelu + bias, 2048 x 2048", 2048, 2048, true});
  problem<double>({"fp64 gelu + bias, 256 x 256", 256, 256, true});
  problem<float>({"fp32 gelu + bias, 4096 x 4096", 4096, 4096, true});
  problem<__nv_bfloat16>({"bf16 gelu + bias, 8192 x 16384", 8192, 16384, true});
  return 0;
}

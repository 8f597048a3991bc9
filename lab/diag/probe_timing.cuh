// What the lab's standalone CUDA probes (simt_probe.cu, pass_probe.cu)
// share: a checked call, and a launch's time with the L2 cache flushed
// before each run (the median) or back to back (the mean), as the
// benchmarks time it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    auto e_ = (x);                                                                        \
    if (e_ != 0) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, int(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

// Larger than any GPU's L2 cache: writing it evicts what a run left there.
constexpr size_t kFlushBytes = size_t(256) << 20;

inline void* flush_buffer() {
  static void* buffer = [] {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, kFlushBytes));
    return p;
  }();
  return buffer;
}

// ms of launch(): the median of `runs`, each after the flush; with
// back_to_back, the mean of `runs` launched one after another instead.
template <class F>
float time_ms(F&& launch, int runs = 20, bool back_to_back = false) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  launch();  // warm-up
  float t = 0;
  if (back_to_back) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < runs; ++i) launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&t, a, b));
    t /= runs;
  } else {
    std::vector<float> ms;
    for (int i = 0; i < runs; ++i) {
      CHECK(cudaMemsetAsync(flush_buffer(), i, kFlushBytes));
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    t = ms[ms.size() / 2];
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaGetLastError());
  return t;
}

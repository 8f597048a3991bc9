"""Host microseconds per kernel launch by API, parameter size and cluster:
whether the sm90 family's launch (the runtime's cudaLaunchKernelExC with a
cluster attribute and CUTLASS's parameter block of a kilobyte or so) costs
the host more than the driver's cuLaunchKernelEx that cuBLAS's kernels go
through (docs/MEASUREMENTS.md has what it measured).

    python bench/diag/launch_cost.py [--launches 200] [--reps 7]

An empty kernel of 384 threads on 132 CTAs, its one argument a block of
the given size, is launched --launches times behind a spin kernel that
keeps the GPU busy, so no launch waits on the GPU; the loop runs in C++
and is timed there. Each API launches the same kernel: the runtime's
cudaLaunchKernelExC (as sm90_launch_template.cuh), the same with no
attribute (cluster 1), the runtime's triple-chevron launch, and the
driver's cuLaunchKernelEx on the function cudaGetFuncBySymbol returns.
"""

import argparse
import statistics

import torch
from torch.utils.cpp_extension import load_inline

SIZES = (64, 512, 1024, 2048)

CUDA_SOURCE = r"""
#include <cuda.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

template <int kBytes>
struct alignas(64) Blob { unsigned char data[kBytes]; };

template <int kBytes>
__global__ void __launch_bounds__(384) empty_kernel(const __grid_constant__ Blob<kBytes> blob) {
  if (blob.data[0] == 0x5a && threadIdx.x == 1000) asm volatile("trap;");
}

using LaunchEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <int kBytes>
double launches_us(const std::string& api, int cluster, int smem, int n) {
  const void* fn = reinterpret_cast<const void*>(&empty_kernel<kBytes>);
  check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem opt-in");
  Blob<kBytes> blob{};
  void* params[] = {&blob};
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const dim3 grid(132), block(384);
  static LaunchEx launch_ex = nullptr;
  CUfunction cu_fn = nullptr;
  if (api == "driver") {
    if (launch_ex == nullptr) {
      cudaDriverEntryPointQueryResult found;
      check(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", reinterpret_cast<void**>(&launch_ex),
                                             12000, cudaEnableDefault, &found), "cuLaunchKernelEx entry");
    }
    cudaFunction_t f;
    check(cudaGetFuncBySymbol(&f, fn), "cudaGetFuncBySymbol");
    cu_fn = reinterpret_cast<CUfunction>(f);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (api == "runtime_ex") {
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = cluster;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = grid;
      config.blockDim = block;
      config.dynamicSmemBytes = smem;
      config.stream = stream;
      config.attrs = &attr;
      config.numAttrs = cluster > 1 ? 1 : 0;
      check(cudaLaunchKernelExC(&config, fn, params), "cudaLaunchKernelExC");
    } else if (api == "chevron") {
      empty_kernel<kBytes><<<grid, block, smem, stream>>>(blob);
    } else if (api == "driver") {
      CUlaunchAttribute attr;
      attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attr.value.clusterDim.x = cluster;
      attr.value.clusterDim.y = 1;
      attr.value.clusterDim.z = 1;
      CUlaunchConfig config = {};
      config.gridDimX = grid.x; config.gridDimY = 1; config.gridDimZ = 1;
      config.blockDimX = block.x; config.blockDimY = 1; config.blockDimZ = 1;
      config.sharedMemBytes = smem;
      config.hStream = reinterpret_cast<CUstream>(stream);
      config.attrs = &attr;
      config.numAttrs = cluster > 1 ? 1 : 0;
      if (launch_ex(&config, cu_fn, params, nullptr) != CUDA_SUCCESS) throw std::runtime_error("cuLaunchKernelEx");
    } else {
      throw std::runtime_error("unknown api " + api);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  check(cudaGetLastError(), "launch");
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

double launch_cost(const std::string& api, int64_t bytes, int64_t cluster, int64_t smem, int64_t n) {
  if (api == "chevron" && cluster > 1) throw std::runtime_error("chevron launches take no cluster here");
  switch (bytes) {
    case 64: return launches_us<64>(api, cluster, smem, n);
    case 512: return launches_us<512>(api, cluster, smem, n);
    case 1024: return launches_us<1024>(api, cluster, smem, n);
    case 2048: return launches_us<2048>(api, cluster, smem, n);
  }
  throw std::runtime_error("bytes: one of 64, 512, 1024, 2048");
}
"""

CPP_SOURCE = ("double launch_cost(const std::string& api, int64_t bytes, int64_t cluster, int64_t smem, "
              "int64_t n);")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=200)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--smem", type=int, default=200 * 1024, help="dynamic shared memory per CTA, bytes")
    args = p.parse_args()
    ext = load_inline("launch_cost_probe", CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["launch_cost"],
                      extra_cuda_cflags=["-gencode=arch=compute_90a,code=sm_90a"])
    rows = [("runtime_ex", 2), ("runtime_ex", 1), ("driver", 2), ("driver", 1), ("chevron", 1)]
    print(f"host us per launch (median of {args.reps} x {args.launches}), {args.smem} B shared memory")
    print(f"{'api':<12}{'cluster':>8}" + "".join(f"{b:>9} B" for b in SIZES))
    for api, cluster in rows:
        cells = []
        for size in SIZES:
            times = []
            for r in range(args.reps + 1):
                torch.cuda.synchronize()
                torch.cuda._sleep(100_000_000)
                t = ext.launch_cost(api, size, cluster, args.smem, args.launches)
                if r:  # the first loads the kernel
                    times.append(t)
            cells.append(statistics.median(times))
        print(f"{api:<12}{cluster:>8}" + "".join(f"{c:>11.2f}" for c in cells), flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

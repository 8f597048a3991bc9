// Storage types and their compute types on the GPU, shared by the kernels.
//
// `Numeric<Element>` names, for each storage type a kernel reads and writes,
// the type it computes in (float for fp16/bf16/fp32, double for fp64) and the
// conversions between them, with round-to-nearest-even on the way down.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace gemm_act {
namespace gpu {

template <class Element>
struct Numeric;

template <>
struct Numeric<float> {
  using Compute = float;
  static constexpr const char* kName = "float32";
  __device__ __forceinline__ static float zero() { return 0.0f; }
  __device__ __forceinline__ static float load(const float* p) { return __ldg(p); }
  __device__ __forceinline__ static float to_compute(float x) { return x; }
  __device__ __forceinline__ static float from_compute(float x) { return x; }
};

template <>
struct Numeric<double> {
  using Compute = double;
  static constexpr const char* kName = "float64";
  __device__ __forceinline__ static double zero() { return 0.0; }
  __device__ __forceinline__ static double load(const double* p) { return __ldg(p); }
  __device__ __forceinline__ static double to_compute(double x) { return x; }
  __device__ __forceinline__ static double from_compute(double x) { return x; }
};

template <>
struct Numeric<__half> {
  using Compute = float;
  static constexpr const char* kName = "float16";
  __device__ __forceinline__ static __half zero() { return __ushort_as_half(0); }
  __device__ __forceinline__ static __half load(const __half* p) { return __ldg(p); }
  __device__ __forceinline__ static float to_compute(__half x) { return __half2float(x); }
  __device__ __forceinline__ static __half from_compute(float x) { return __float2half_rn(x); }
};

template <>
struct Numeric<__nv_bfloat16> {
  using Compute = float;
  static constexpr const char* kName = "bfloat16";
  __device__ __forceinline__ static __nv_bfloat16 zero() { return __ushort_as_bfloat16(0); }
  __device__ __forceinline__ static __nv_bfloat16 load(const __nv_bfloat16* p) { return __ldg(p); }
  __device__ __forceinline__ static float to_compute(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ __forceinline__ static __nv_bfloat16 from_compute(float x) { return __float2bfloat16_rn(x); }
};

// kCount elements of T moved as one aligned access (a 16-byte LDG/STG/LDS/STS
// when kCount * sizeof(T) == 16). The address must be aligned to the size.
template <class T, int kCount>
struct alignas(sizeof(T) * kCount) AlignedArray {
  T v[kCount];
};

// The raw bits of one element, as an unsigned integer of its size.
template <class T>
__device__ __forceinline__ auto element_bits(T x) {
  if constexpr (sizeof(T) == 2) {
    unsigned short b;
    memcpy(&b, &x, 2);
    return b;
  } else if constexpr (sizeof(T) == 4) {
    unsigned int b;
    memcpy(&b, &x, 4);
    return b;
  } else {
    static_assert(sizeof(T) == 8, "elements are 2, 4 or 8 bytes");
    unsigned long long b;
    memcpy(&b, &x, 8);
    return b;
  }
}

// 32-bit word w of an AlignedArray (little-endian, as in memory).
template <class T, int kCount>
__device__ __forceinline__ unsigned int array_word(const AlignedArray<T, kCount>& a, int w) {
  if constexpr (sizeof(T) == 2) {
    return static_cast<unsigned int>(element_bits(a.v[2 * w])) |
           (static_cast<unsigned int>(element_bits(a.v[2 * w + 1])) << 16);
  } else if constexpr (sizeof(T) == 4) {
    return element_bits(a.v[w]);
  } else {
    const unsigned long long b = element_bits(a.v[w / 2]);
    return static_cast<unsigned int>(w % 2 == 0 ? b : b >> 32);
  }
}

// *dst = a into shared memory as one st.shared instruction (dst aligned to
// sizeof(a)). Inline PTX: NVVM may otherwise split a vector store into
// element stores.
template <class T, int kCount>
__device__ __forceinline__ void store_shared_aligned(T* dst, const AlignedArray<T, kCount>& a) {
  constexpr int kBytes = sizeof(T) * kCount;
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (kBytes == 16) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(array_word(a, 0)),
                 "r"(array_word(a, 1)), "r"(array_word(a, 2)), "r"(array_word(a, 3))
                 : "memory");
  } else if constexpr (kBytes == 8) {
    asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(array_word(a, 0)), "r"(array_word(a, 1))
                 : "memory");
  } else {
    static_assert(kBytes == 4, "shared stores of 4, 8 or 16 bytes");
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(array_word(a, 0)) : "memory");
  }
}

// *dst = a into global memory as one st.global instruction (dst aligned to
// sizeof(a)); inline PTX as CUTLASS's global_store, for the same reason. No
// "memory" clobber: kernels never read what they store here, so loads may be
// scheduled across it.
template <class T, int kCount>
__device__ __forceinline__ void store_global_aligned(T* dst, const AlignedArray<T, kCount>& a) {
  constexpr int kBytes = sizeof(T) * kCount;
  if constexpr (kBytes == 16) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(array_word(a, 0)),
                 "r"(array_word(a, 1)), "r"(array_word(a, 2)), "r"(array_word(a, 3)));
  } else if constexpr (kBytes == 8) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(dst), "r"(array_word(a, 0)), "r"(array_word(a, 1)));
  } else if constexpr (kBytes == 4) {
    asm volatile("st.global.b32 [%0], %1;\n" ::"l"(dst), "r"(array_word(a, 0)));
  } else {
    static_assert(kCount == 1, "stores of 1, 4, 8 or 16 bytes");
    *dst = a.v[0];
  }
}

// True when `p` is aligned to `bytes` (a power of two).
inline bool is_aligned(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

}  // namespace gpu
}  // namespace gemm_act

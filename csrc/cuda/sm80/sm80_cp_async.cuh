// A CuTe copy atom for cp.async.cg (16 bytes, L2 only) that reads just the
// first `src_bytes` bytes of the source and zero-fills the rest.
//
// CuTe's SM80_CP_ASYNC_CACHEGLOBAL_ZFILL reads all 16 bytes or none; a K
// (or, for an N-major B, an N) that is not a multiple of 8 ends inside a
// 16-byte vector, whose tail must read as zero without being loaded: it may
// lie past the tensor's storage, and garbage there times a zero of the other
// operand could be NaN.
#pragma once

#include <cute/tensor.hpp>  // first: the atom headers below assume it

#include <cute/arch/copy_sm80.hpp>
#include <cute/arch/util.hpp>
#include <cute/atom/copy_traits.hpp>

namespace gemm_act {
namespace sm80 {

struct CpAsyncCgZfillBytes {
  using SRegisters = cute::uint128_t[1];
  using DRegisters = cute::uint128_t[1];

  // src_bytes in [0, 16]; 0 reads nothing (the address is not dereferenced).
  CUTE_HOST_DEVICE static void copy(cute::uint128_t const& gmem_src, cute::uint128_t& smem_dst,
                                    int src_bytes) {
#if defined(CUTE_ARCH_CP_ASYNC_SM80_ENABLED)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(
                     cute::cast_smem_ptr_to_uint(&smem_dst)),
                 "l"(&gmem_src), "r"(src_bytes));
#else
    CUTE_INVALID_CONTROL_PATH("cp.async needs sm_80");
#endif
  }
};

}  // namespace sm80
}  // namespace gemm_act

namespace cute {

template <>
struct Copy_Traits<gemm_act::sm80::CpAsyncCgZfillBytes> {
  using ThrID = Layout<_1>;
  using SrcLayout = Layout<Shape<_1, _128>>;  // (thr, bit)
  using DstLayout = Layout<Shape<_1, _128>>;
  using RefLayout = SrcLayout;

  int src_bytes = 16;

  // The atom that reads `bytes` bytes of its 16.
  CUTE_HOST_DEVICE constexpr Copy_Traits with(int bytes) const { return {bytes}; }

  template <class TS, class SLayout, class TD, class DLayout>
  CUTE_HOST_DEVICE friend constexpr void copy_unpack(Copy_Traits const& traits,
                                                     Tensor<TS, SLayout> const& src,
                                                     Tensor<TD, DLayout>& dst) {
    static_assert(is_gmem<TS>::value, "cp.async reads global memory");
    static_assert(is_smem<TD>::value, "cp.async writes shared memory");
    Tensor rs = recast<uint128_t>(src);
    Tensor rd = recast<uint128_t>(dst);
    CUTE_STATIC_ASSERT_V(size(rs) == Int<1>{}, "the source must be one contiguous 16-byte vector");
    CUTE_STATIC_ASSERT_V(size(rd) == Int<1>{}, "the destination must be one contiguous 16-byte vector");
    gemm_act::sm80::CpAsyncCgZfillBytes::copy(rs[0], rd[0], traits.src_bytes);
  }
};

}  // namespace cute

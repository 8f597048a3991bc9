// One-pass padded copies: for the sm90 family's staging (sm90_staging.h)
// and the backward's cuBLAS operands (the zero_pad operator). ATen's
// strided copy of a [rows, cols] block into a buffer with another row
// stride ran at about 1.9 TB/s on an H100 (0.071 ms for the unaligned
// benchmark shape's A), and the padding took a launch of its own. This
// writes the whole destination in one launch, with 16-byte stores on every
// 16-byte aligned chunk of its rows, however they are aligned (0.038 ms for
// that A).
#pragma once

#include <ATen/core/Tensor.h>

namespace gemm_act {
namespace gpu {

// dst[r, c] = src[r, c] where r < src.size(0) and c < src.size(1), and 0
// elsewhere in dst. Both 2-D CUDA tensors of one 2- or 4-byte dtype, on one
// device, with unit column stride, dst at least as large as src in each
// dimension. Returns false (copying nothing) for anything else, or a
// destination of 32 GiB or more, which the caller then copies with ATen.
bool pad_copy(const at::Tensor& src, const at::Tensor& dst);

// A [rows, cols] contiguous tensor holding `src` (2-D, at most that large)
// in its top-left corner and zeros elsewhere: pad_copy where it applies,
// ATen's copies otherwise (a column stride other than 1).
at::Tensor padded_copy(const at::Tensor& src, int64_t rows, int64_t cols);

}  // namespace gpu
}  // namespace gemm_act

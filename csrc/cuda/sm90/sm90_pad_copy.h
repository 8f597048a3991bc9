// One-pass padded copies into staging buffers (sm90_staging.h): ATen's
// strided copy of a [rows, cols] block into a buffer with another row
// stride ran at about 1.9 TB/s on an H100 (0.071 ms for the unaligned
// benchmark shape's A), and the padding took a launch of its own. This
// writes the whole buffer in one launch with 16-byte stores (0.038 ms there).
// Copying into rows that are not 16-byte aligned (a staged Y back to the
// caller's) is left to ATen: element-wise stores, one chunk per thread,
// measured 2.5x slower than ATen's copy (0.180 against 0.071 ms).
#pragma once

#include <ATen/core/Tensor.h>

namespace gemm_act {
namespace sm90 {

// dst[r, c] = src[r, c] where r < src.size(0) and c < src.size(1), and 0
// elsewhere in dst. Both 2-D CUDA tensors of one 2- or 4-byte dtype, on one
// device, with unit column stride, dst at least as large as src in each
// dimension, dst's rows 16-byte aligned in start and length. Returns false
// (copying nothing) for anything else, which the caller then copies with
// ATen.
bool pad_copy(const at::Tensor& src, const at::Tensor& dst);

}  // namespace sm90
}  // namespace gemm_act

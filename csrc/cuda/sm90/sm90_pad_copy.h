// One-pass padded copies for staging (sm90_staging.h): ATen's strided copy
// of a [rows, cols] block into a buffer with another row stride ran at
// about 1.9 TB/s on an H100 (0.071 ms for the unaligned benchmark shape's
// A), and the padding took a launch of its own. This writes the whole
// destination in one launch, with 16-byte stores on every 16-byte aligned
// chunk of its rows, however they are aligned (0.038 ms for that A).
#pragma once

#include <ATen/core/Tensor.h>

namespace gemm_act {
namespace sm90 {

// dst[r, c] = src[r, c] where r < src.size(0) and c < src.size(1), and 0
// elsewhere in dst. Both 2-D CUDA tensors of one 2- or 4-byte dtype, on one
// device, with unit column stride, dst at least as large as src in each
// dimension. Returns false (copying nothing) for anything else, or a
// destination of 32 GiB or more, which the caller then copies with ATen.
bool pad_copy(const at::Tensor& src, const at::Tensor& dst);

}  // namespace sm90
}  // namespace gemm_act

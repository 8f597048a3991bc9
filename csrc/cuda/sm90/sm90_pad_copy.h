// One-pass padded copies for staging (sm90_staging.h): ATen's strided copy
// of a [rows, cols] block into a buffer with another row stride runs at
// about 1.9 TB/s on an H100, and the padding needs a second launch. This
// writes the whole destination in one launch, moving 16 bytes per access on
// whichever side's rows are 16-byte aligned (the staging buffer's always
// are) and single elements on the other.
#pragma once

#include <ATen/core/Tensor.h>

namespace gemm_act {
namespace sm90 {

// dst[r, c] = src[r, c] where r < src.size(0) and c < src.size(1), and 0
// elsewhere in dst. Both 2-D CUDA tensors of one 2- or 4-byte dtype, on one
// device, with unit column stride, dst at least as large as src in each
// dimension. Returns false (copying nothing) for anything else, which the
// caller then copies with ATen.
bool pad_copy(const at::Tensor& src, const at::Tensor& dst);

}  // namespace sm90
}  // namespace gemm_act

// One-pass padded copies: for the sm90 family's staging (sm90_staging.h)
// and the backward's cuBLAS operands (the zero_pad operator); and the
// staged forward's results out of its aligned buffer, Z and Y = act(Z) in
// one pass (activate_copy). ATen's strided copy into a buffer of another
// row stride pads in a launch of its own; this writes the whole destination
// in one launch, with 16-byte stores on every 16-byte aligned chunk of its
// rows, however they are aligned (about twice as fast; docs/MEASUREMENTS.md,
// "Kernel shapes and helpers").
#pragma once

#include <ATen/core/Tensor.h>

#include "gemm_act.h"

namespace gemm_act {
namespace gpu {

// dst[r, c] = src[r, c] where r < src.size(0) and c < src.size(1), and 0
// elsewhere in dst. Both 2-D CUDA tensors of one 2- or 4-byte dtype, on one
// device, with unit column stride, dst at least as large as src in each
// dimension. Returns false (copying nothing) for anything else, or a
// destination of 32 GiB or more, which the caller then copies with ATen.
bool pad_copy(const at::Tensor& src, const at::Tensor& dst);

// Whether activate_copy takes (src, z, y): fp16, bf16 or fp32 on one
// device; z and y contiguous, of one shape, their rows equally aligned (the
// distance between them a multiple of 16 bytes); src 2-D with unit column
// stride, at least as large; fewer than 2^31 16-byte chunks.
bool activate_copy_applies(const at::Tensor& src, const at::Tensor& z, const at::Tensor& y);

// z = src and y = act(src) (activations.h, at the storage's precision)
// over z's rows and columns, in one pass. Checks activate_copy_applies.
void activate_copy(const at::Tensor& src, const at::Tensor& z, const at::Tensor& y, Activation act,
                   double negative_slope);

// A [rows, cols] contiguous tensor holding `src` (2-D, at most that large)
// in its top-left corner and zeros elsewhere: pad_copy where it applies,
// ATen's copies otherwise (a column stride other than 1).
at::Tensor padded_copy(const at::Tensor& src, int64_t rows, int64_t cols);

}  // namespace gpu
}  // namespace gemm_act

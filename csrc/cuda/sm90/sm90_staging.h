// Staging: how the sm90 kernel takes a case that TMA cannot address.
//
// TMA reads and writes whole 16-byte granules, so it needs 16-byte aligned
// base pointers and leading dimensions (K = 4095 in bf16 fails both for A).
// For such a case, when it is large enough for the copies to pay off, the
// operands are copied into aligned buffers with K and N rounded up to the
// granule and zero-filled past the edge (zeros add nothing to a dot product),
// the kernel runs on those, and Y (and Z) are copied back into the caller's
// tensors. B is staged K-major, the layout every dtype's kernel takes.
// Where both Y and Z are staged, the kernel writes Z alone (activation
// none) and one pass writes Z and Y = act(Z) from it (activate_copy): that
// saves a buffer's store and a read.
//
// The copies move about (M*K + N*K + 2*M*N) elements once, against the
// O(M*N*K) GEMM they let run on tensor cores, where cuBLAS runs such a shape
// on a much slower kernel (docs/MEASUREMENTS.md, "Kernel shapes and
// helpers").
#pragma once

#include <cstdint>

#include "backend_args.h"

namespace gemm_act {
namespace sm90 {

// Whether a case that TMA cannot take directly is worth staging: below this
// much work the copies' launches cost more than the fallback kernel saves.
bool worth_staging(const GemmActParams& p);

struct StagedCase {
  GemmActArgs args;   // aligned copies (or the caller's tensors where aligned)
  at::Tensor y_dest;  // the caller's Y when args.y is a staging buffer
  at::Tensor z_dest;  // the caller's Z when args.z (or args.y, below) is a staging buffer
  // args.y holds Z (the kernel runs with activation none and no Z): copy_out
  // writes z_dest and y_dest = activation(Z) from it.
  bool activate_out = false;
  Activation activation = Activation::None;
  double negative_slope = 0.0;
};

// Aligned copies of `in` for a kernel that needs every pointer and leading
// dimension to be a multiple of `align_elems` elements (16 bytes); B keeps
// a row-major layout only where `n_major_b_ok`.
StagedCase stage_operands(const GemmActArgs& in, int64_t align_elems, bool n_major_b_ok);

// Copies Y and Z from the staging buffers into the caller's tensors.
void copy_out(const StagedCase& staged);

}  // namespace sm90
}  // namespace gemm_act

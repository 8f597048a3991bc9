// What every backend receives after the one validation (checks.cpp): 2-D
// tensors (for backends that call ATen) and the raw parameter struct (for
// kernels). Backends assume everything here is valid and consistent.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "gemm_act.h"

namespace gemm_act {

struct GemmActArgs {
  at::Tensor a;     // [M, K], any strides
  at::Tensor b;     // [K, N], any strides
  at::Tensor c;     // [M, N], any strides; undefined when params.c is null
  at::Tensor bias;  // contiguous 1-D; undefined when BiasKind::None
  at::Tensor y;     // [M, N] contiguous, not yet written
  at::Tensor z;     // [M, N] contiguous, undefined when Z is not stored
  GemmActParams params;  // pointers and strides of the tensors above
  std::vector<int64_t> out_sizes;  // the shape of the returned Y (and Z): a's leading dims + [N]
};

struct ActivationBackwardArgs {
  at::Tensor grad_y;     // [M, N] contiguous
  at::Tensor saved;      // [M, N] contiguous: Y or Z per grad_from_output()
  at::Tensor grad_z;     // [M, N] contiguous, not yet written
  at::Tensor grad_bias;  // contiguous 1-D, undefined when BiasKind::None
  ActivationBackwardParams params;
  std::vector<int64_t> bias_sizes;  // the shape of the returned bias gradient
};

}  // namespace gemm_act

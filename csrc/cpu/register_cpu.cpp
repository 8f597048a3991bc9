#include <torch/library.h>

#include "checks.h"
#include "cpu/cpu_backend.h"

TORCH_LIBRARY_IMPL(gemm_act, CPU, m) {
  m.impl("gemm_act", &gemm_act::gemm_act_impl<gemm_act::gemm_act_cpu>);
  m.impl("activation_backward", &gemm_act::activation_backward_impl<gemm_act::activation_backward_cpu>);
}

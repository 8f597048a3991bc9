// The operators' schema, declared once. Each backend registers its
// implementation in a file of its own: cpu/register_cpu.cpp,
// cuda/register_cuda.cpp, autocast.cpp, autograd.cpp; the fake (meta)
// kernels are Python (torch_gemm_act/ops.py).
#include <torch/library.h>

TORCH_LIBRARY(gemm_act, m) {
  // Y = act(alpha * a @ b + beta * c + bias); returns (Y, Z) where Z is the
  // pre-activation when store_preact, else an empty tensor.
  m.def(
      "gemm_act(Tensor a, Tensor b, Tensor? bias, Tensor? c, str activation, float alpha, "
      "float beta, float negative_slope, bool store_preact) -> (Tensor, Tensor)");
  // dZ = grad_y * act'(saved) and dbias = dZ reduced to bias's shape (empty
  // when bias is None); saved is Y or Z as the activation's table row says.
  m.def(
      "activation_backward(Tensor grad_y, Tensor saved, Tensor? bias, str activation, "
      "float negative_slope) -> (Tensor, Tensor)");
  // What gemm_act would run for these arguments (backend, kernel), computing
  // nothing: torch_gemm_act.explain.
  m.def(
      "explain(Tensor a, Tensor b, Tensor? bias, Tensor? c, str activation, float alpha, "
      "float beta, float negative_slope, bool store_preact) -> str");
}

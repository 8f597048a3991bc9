// The gated activation, y = act(g) * u, and its gradients: the per-element
// math every backend's pass runs (cpu/glu_cpu.cpp, cuda/glu/glu_pass.cu).
//
// Layout: h [M, 2N] holds the two projections side by side, the gate's
// pre-activation g = h[:, :N] and the up projection u = h[:, N:]; y and gY
// are [M, N]; dH is [M, 2N] laid out as h. All contiguous, row-major.
#pragma once

#include <cstdint>

#include "activations.h"

namespace gemm_act {

struct GluParams {
  void* out = nullptr;         // y (forward) or dH (backward)
  const void* h = nullptr;
  const void* grad_y = nullptr;  // backward only
  int64_t m = 0, n = 0;
  double negative_slope = 0.01;
  Activation activation = Activation::None;
};

// act(g) * u for a result stored as `Stored`.
template <Activation kAct, class Stored, class T>
GEMM_ACT_HD T glu_forward(T g, T u, T slope) {
  return activate<kAct, Stored>(g, slope) * u;
}

// dg = gY * u * act'(g) and du = gY * act(g).
template <Activation kAct, class Stored, class T>
GEMM_ACT_HD void glu_backward(T g, T u, T grad_y, T slope, T& grad_g, T& grad_u) {
  constexpr bool kFromY = grad_from_output(kAct);
  const T a = activate<kAct, Stored>(g, slope);
  grad_u = grad_y * a;
  grad_g = grad_y * u * activation_grad<kAct, Stored>(kFromY ? a : g, slope);
}

}  // namespace gemm_act

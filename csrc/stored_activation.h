// The activation of a result stored as `Stored`, for the kernels outside
// the tensor-core families (the library's pass, SIMT, the staged copy-out,
// the CPU): for fp32 results, tanh and sigmoid to within an ulp or two (the
// math library's tanhf and expf, an IEEE division), since their backward
// reads Y, and 1 - y^2 and y (1 - y) keep none of the digits of an error in
// y near +-1; act_math.h's float forms are ~1e-6 relative, about 16 ulps.
// Everything else is activate<> (activations.h).
#pragma once

#include <cmath>
#include <type_traits>

#include "activations.h"

namespace gemm_act {

template <Activation kAct, class Stored, class T>
GEMM_ACT_HD T activate_stored(T z, T slope) {
  if constexpr (std::is_same_v<T, float> && sizeof(Stored) == 4) {
    if constexpr (kAct == Activation::Tanh) return tanhf(z);
    if constexpr (kAct == Activation::Sigmoid) return 1.0f / (1.0f + expf(-z));
  }
  return activate<kAct, Stored>(z, slope);
}

}  // namespace gemm_act

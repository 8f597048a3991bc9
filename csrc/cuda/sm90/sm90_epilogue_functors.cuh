// The per-element computation of the sm90 epilogues, as compute functors for
// CUTLASS's visitor tree (fusion::Sm90Compute instantiates Fn<float> to find
// Fn::Arguments, the run-time parameters passed to every call, and calls
// Fn<Array<float, N>> on fragments). Both only adapt the project's formulas:
// preact.h and activations.h.
#pragma once

#include "activations.h"
#include "cuda/sm90/sm90_cutlass.cuh"
#include "preact.h"

namespace gemm_act {
namespace sm90 {
namespace detail {

// z = alpha * acc + beta * c + bias on a fragment; `column_bias` holds
// bias[n] (or bias[0]), `row_bias` bias[m], where they exist.
template <class T>
struct PreactFn {
  using Arguments = PreactTerms<float>;

  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                     cutlass::Array<float, N> const& c,
                                                     cutlass::Array<float, N> const& column_bias,
                                                     cutlass::Array<float, N> const& row_bias,
                                                     Arguments const& args) const {
    cutlass::Array<float, N> z = acc;
    add_preact_terms<N>(
        z, args, [&](int i) { return c[i]; }, [&](int i) { return column_bias[i]; },
        [&](int i) { return row_bias[i]; });
    return z;
  }
};

struct ActArguments {
  float negative_slope = 0.01f;
};

// y = activate<kAct, Element>(z, slope), Element being what Y is stored as.
template <Activation kAct, class Element>
struct ActEpilogue {
  template <class T>
  struct Fn {
    using Arguments = ActArguments;

    template <int N>
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& z,
                                                       Arguments const& args) const {
      cutlass::Array<float, N> y;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) y[i] = activate<kAct, Element>(z[i], args.negative_slope);
      return y;
    }
  };
};

struct DactArguments {
  float alpha = 1.0f;
  float negative_slope = 0.01f;
};

// dA = act'(saved) * alpha * acc: the input gradient of a GEMM whose input
// was act(Z), with `saved` Y or Z as the activation's table row says, dA
// stored as Element.
template <Activation kAct, class Element>
struct DactEpilogue {
  template <class T>
  struct Fn {
    using Arguments = DactArguments;

    template <int N>
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                       cutlass::Array<float, N> const& saved,
                                                       Arguments const& args) const {
      cutlass::Array<float, N> out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) {
        out[i] = args.alpha * acc[i] * activation_grad<kAct, Element>(saved[i], args.negative_slope);
      }
      return out;
    }
  };
};

}  // namespace detail
}  // namespace sm90
}  // namespace gemm_act

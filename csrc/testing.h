// The one switch for tests and measurements: force a CUDA backend or a
// tensor-core family's kernel configuration, and poison outputs before kernels write them. Set
// from Python with torch_gemm_act.testing.override(...) (or, for the
// backend, TORCH_GEMM_ACT_BACKEND in the environment, read once at load);
// nothing else in csrc/ reads the environment. Unset, it costs one relaxed
// atomic load per call.
#pragma once

#include <string>

namespace gemm_act {
namespace testing {

struct Overrides {
  std::string cuda_backend;  // a name of the CUDA dispatch rule; empty: the rule decides
  std::string sm90_kernel;   // an sm90 configuration's name; empty: the heuristic decides
  std::string sm80_kernel;   // an sm80 configuration's name; empty: the heuristic decides
  int sm90_swizzle = 0;      // the sm90 tile scheduler's band of clusters (1, 2, 4, 8); 0: the heuristic decides
  bool poison_outputs = false;  // fill every output with NaN before its kernel runs
};

// Whether any override is set.
bool active();

// A copy of the current overrides.
Overrides overrides();

void set_overrides(Overrides o);

}  // namespace testing
}  // namespace gemm_act

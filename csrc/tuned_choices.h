// Tuned choices (torch_gemm_act.tune): for a problem the tuner timed, the
// CUDA backend the dispatch rule starts at, taking every case it can run as
// the testing switch's forced backend does, and optionally the kernel
// configuration of that backend's family ("sm90:pingpong_128x128_c1x2"),
// which the family runs where it can and its heuristic's choice where it
// cannot. A problem is the text of
// problem_key, which the tuner's cache on disk keys its choices by. Empty,
// the table costs each call one relaxed atomic load.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend_args.h"

namespace gemm_act {
namespace tuned {

// What decides a backend's speed on a call: dtype, activation, M, N, K, the
// operands' layouts and alignment, bias, C, Z, TF32 (fp32).
std::string problem_key(const GemmActArgs& args);

// The backend tuned for args' problem, if any (and, while recording, notes
// the problem).
std::optional<std::string> choice(const GemmActArgs& args);

// Replaces the table (problem key -> backend name).
void set_choices(std::unordered_map<std::string, std::string> choices);
std::unordered_map<std::string, std::string> choices();

// While on, every problem choice() sees is noted, in the order first seen;
// turning it off returns them.
void start_recording();
std::vector<std::string> stop_recording();

// A choice's backend: the text before its ':' (the whole text without one).
std::string backend_of(const std::string& choice);

// Whether `backend` is forced for the call running on this thread: by the
// testing switch or by a tuned choice (ScopedForce).
bool forced(const char* backend);

// The kernel configuration the tuned choice of the call running on this
// thread names for `backend`; empty where it names none.
std::string forced_kernel(const char* backend);

// For one call: the tuned backend that call forces.
class ScopedForce {
 public:
  explicit ScopedForce(const std::optional<std::string>& backend);
  ~ScopedForce();
  ScopedForce(const ScopedForce&) = delete;
  ScopedForce& operator=(const ScopedForce&) = delete;

 private:
  const std::string* previous_;
};

}  // namespace tuned
}  // namespace gemm_act

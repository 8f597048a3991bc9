#include "tuned_choices.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "activations.h"
#include "testing.h"

namespace gemm_act {
namespace tuned {
namespace {

std::mutex& lock() {
  static std::mutex m;
  return m;
}

// Any choice set, or recording on: the only state a call reads when neither is.
std::atomic<bool>& active() {
  static std::atomic<bool> flag{false};
  return flag;
}

struct State {
  std::shared_ptr<const std::unordered_map<std::string, std::string>> choices =
      std::make_shared<const std::unordered_map<std::string, std::string>>();
  bool recording = false;
  std::vector<std::string> recorded;
};

State& state() {
  static State s;
  return s;
}

void refresh_active() {
  const State& s = state();
  active().store(!s.choices->empty() || s.recording, std::memory_order_relaxed);
}

thread_local const std::string* forced_by_choice = nullptr;

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "fp16";
    case at::kBFloat16: return "bf16";
    case at::kFloat: return "fp32";
    case at::kDouble: return "fp64";
    default: return c10::toString(t);
  }
}

// row: unit stride along the second dimension; col: along the first; else strided.
const char* layout(int64_t stride_0, int64_t stride_1) {
  if (stride_1 == 1) return "row";
  if (stride_0 == 1) return "col";
  return "strided";
}

const char* bias_name(BiasKind kind) {
  switch (kind) {
    case BiasKind::None: return "none";
    case BiasKind::Scalar: return "scalar";
    case BiasKind::PerColumn: return "column";
    case BiasKind::PerRow: return "row";
  }
  return "?";
}

// Every operand's address and leading stride a multiple of 16 bytes.
bool aligned(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  const int64_t bytes = static_cast<int64_t>(args.y.element_size());
  const auto at16 = [](const void* ptr) { return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const auto lead16 = [bytes](int64_t s0, int64_t s1) { return (std::max(s0, s1) * bytes) % 16 == 0; };
  return at16(p.a) && at16(p.b) && at16(p.c) && at16(p.bias) && at16(p.y) && at16(p.z) &&
         lead16(p.a_stride_m, p.a_stride_k) && lead16(p.b_stride_k, p.b_stride_n) &&
         (p.c == nullptr || lead16(p.c_stride_m, p.c_stride_n)) && (p.n * bytes) % 16 == 0;
}

}  // namespace

std::string problem_key(const GemmActArgs& args) {
  const GemmActParams& p = args.params;
  const at::ScalarType dtype = args.y.scalar_type();
  std::string key = c10::str(dtype_name(dtype), " ", activation_name(p.activation), " m=", p.m, " n=", p.n,
                             " k=", p.k, " a=", layout(p.a_stride_m, p.a_stride_k),
                             " b=", layout(p.b_stride_k, p.b_stride_n), " bias=", bias_name(p.bias_kind),
                             " c=", p.c != nullptr, " z=", p.z != nullptr, " aligned=", aligned(args));
  if (dtype == at::kFloat) key += c10::str(" tf32=", at::globalContext().allowTF32CuBLAS());
  return key;
}

std::optional<std::string> choice(const GemmActArgs& args) {
  if (!active().load(std::memory_order_relaxed)) return std::nullopt;
  const std::string key = problem_key(args);
  std::shared_ptr<const std::unordered_map<std::string, std::string>> table;
  {
    std::lock_guard<std::mutex> guard(lock());
    State& s = state();
    if (s.recording && std::find(s.recorded.begin(), s.recorded.end(), key) == s.recorded.end()) {
      s.recorded.push_back(key);
    }
    table = s.choices;
  }
  const auto found = table->find(key);
  if (found == table->end()) return std::nullopt;
  return found->second;
}

void set_choices(std::unordered_map<std::string, std::string> choices) {
  std::lock_guard<std::mutex> guard(lock());
  state().choices = std::make_shared<const std::unordered_map<std::string, std::string>>(std::move(choices));
  refresh_active();
}

std::unordered_map<std::string, std::string> choices() {
  std::lock_guard<std::mutex> guard(lock());
  return *state().choices;
}

void start_recording() {
  std::lock_guard<std::mutex> guard(lock());
  state().recording = true;
  state().recorded.clear();
  refresh_active();
}

std::vector<std::string> stop_recording() {
  std::lock_guard<std::mutex> guard(lock());
  State& s = state();
  s.recording = false;
  refresh_active();
  return std::exchange(s.recorded, {});
}

std::string backend_of(const std::string& choice) { return choice.substr(0, choice.find(':')); }

bool forced(const char* backend) {
  if (forced_by_choice != nullptr && backend_of(*forced_by_choice) == backend) return true;
  return testing::active() && testing::overrides().cuda_backend == backend;
}

std::string forced_kernel(const char* backend) {
  if (forced_by_choice == nullptr) return {};
  const std::string& choice = *forced_by_choice;
  const size_t colon = choice.find(':');
  if (colon == std::string::npos || choice.compare(0, colon, backend) != 0) return {};
  return choice.substr(colon + 1);
}

ScopedForce::ScopedForce(const std::optional<std::string>& backend) : previous_(forced_by_choice) {
  if (backend.has_value()) forced_by_choice = &*backend;
}

ScopedForce::~ScopedForce() { forced_by_choice = previous_; }

}  // namespace tuned
}  // namespace gemm_act

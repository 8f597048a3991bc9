#include "testing.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace gemm_act {
namespace testing {
namespace {

std::mutex& lock() {
  static std::mutex m;
  return m;
}

std::atomic<bool>& any_set() {
  static std::atomic<bool> flag{false};
  return flag;
}

Overrides& state() {
  static Overrides o = [] {
    Overrides initial;
    if (const char* env = std::getenv("TORCH_GEMM_ACT_BACKEND")) initial.cuda_backend = env;
    any_set().store(!initial.cuda_backend.empty(), std::memory_order_relaxed);
    return initial;
  }();
  return o;
}

}  // namespace

bool active() { return any_set().load(std::memory_order_relaxed); }

Overrides overrides() {
  std::lock_guard<std::mutex> guard(lock());
  return state();
}

void set_overrides(Overrides o) {
  std::lock_guard<std::mutex> guard(lock());
  const bool any = !o.cuda_backend.empty() || !o.sm90_kernel.empty() || !o.sm80_kernel.empty() ||
                   o.sm90_swizzle != 0 || o.poison_outputs;
  state() = std::move(o);
  any_set().store(any, std::memory_order_relaxed);
}

namespace {
// Reads the environment when the library loads rather than at the first call.
[[maybe_unused]] const bool kReadAtLoad = (overrides(), true);
}  // namespace

}  // namespace testing
}  // namespace gemm_act

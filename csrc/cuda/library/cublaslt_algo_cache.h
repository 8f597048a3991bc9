// The algorithms cuBLASLt's heuristic chose for recent calls. The query
// costs the host several microseconds each call, more than a small GEMM
// takes on the GPU, and a training or inference loop asks the same
// question step after step. A call is described by every value the query
// reads (types, epilogue, shapes, leading dimensions, operand alignments,
// workspace, device); the answer for an equal description is reused.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace gemm_act {
namespace library {

struct AlgoKey {
  std::array<int64_t, 24> fields{};  // unused fields stay zero

  bool operator==(const AlgoKey& o) const { return fields == o.fields; }
};

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t f : k.fields) {
      h ^= static_cast<uint64_t>(f);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

class AlgoCache {
 public:
  std::optional<cublasLtMatmulAlgo_t> find(const AlgoKey& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = algos_.find(key);
    if (it == algos_.end()) return std::nullopt;
    return it->second;
  }

  void remember(const AlgoKey& key, const cublasLtMatmulAlgo_t& algo) {
    const std::lock_guard<std::mutex> lock(mutex_);
    // A model has a few dozen distinct GEMMs; a process sweeping shapes
    // starts over rather than growing without bound.
    if (algos_.size() >= kCapacity) algos_.clear();
    algos_[key] = algo;
  }

 private:
  static constexpr size_t kCapacity = 1024;
  std::mutex mutex_;
  std::unordered_map<AlgoKey, cublasLtMatmulAlgo_t, AlgoKeyHash> algos_;
};

}  // namespace library
}  // namespace gemm_act

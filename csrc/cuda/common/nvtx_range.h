// An NVTX range for the lifetime of the object, so a profile shows each op's
// GPU work by name.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace gemm_act {

class NvtxRange {
 public:
  explicit NvtxRange(const char* message) { nvtxRangePushA(message); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace gemm_act

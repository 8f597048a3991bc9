// What ops.cpp shares with the operators' autograd (autograd.cpp).
#pragma once

#include <string_view>

#include "gemm_act.h"

namespace gemm_act {

// The activation called `name` (DESIGN.md's names); a ValueError that lists
// the known names otherwise.
Activation parse_activation(std::string_view name);

}  // namespace gemm_act

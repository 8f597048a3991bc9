// gemm_act_chained's forward, one for every backend: it computes gemm_act
// of a; a_preact, a_bias and the chain flags matter only to its backward
// (autograd.cpp), which sends a's gradient through gemm_dact to a_preact.
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "checks.h"
#include "op_handles.h"

namespace gemm_act {
namespace {

std::tuple<at::Tensor, at::Tensor> gemm_act_chained(
    const at::Tensor& a, const std::optional<at::Tensor>& a_preact,
    const std::optional<at::Tensor>& a_bias, c10::string_view a_activation, double a_negative_slope,
    const at::Tensor& b, const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
    c10::string_view activation, double alpha, double beta, double negative_slope, bool store_preact,
    bool z_feeds_chain) {
  check_chained_input(a, a_preact, a_bias, a_activation, a_negative_slope);
  return op::gemm_act().call(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact);
}

}  // namespace
}  // namespace gemm_act

TORCH_LIBRARY_IMPL(gemm_act, CompositeExplicitAutograd, m) {
  m.impl("gemm_act_chained", &gemm_act::gemm_act_chained);
}

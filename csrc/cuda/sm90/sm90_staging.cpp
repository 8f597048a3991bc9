// Aligned copies of the operands a TMA kernel cannot read in place, and the
// copy of its results back (see sm90_staging.h). One-pass copies of our own
// (cuda/common/pad_copy.h), ATen's where those do not apply, all on the current
// stream: the kernel and the copies run in stream order.
#include "cuda/sm90/sm90_staging.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>

#include "cuda/common/pad_copy.h"
#include "cuda/sm90/sm90_tma_rules.h"

namespace gemm_act {
namespace sm90 {
namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

}  // namespace

bool worth_staging(const GemmActParams& p) {
  // Divided, not multiplied: M*N*K can overflow int64.
  return p.k > 0 && p.m * p.n >= kMinMultiplyAddsToAlign / p.k;
}

StagedCase stage_operands(const GemmActArgs& in, int64_t align, bool n_major_b_ok) {
  const GemmActParams& p = in.params;
  const int64_t k_pad = round_up(p.k, align);
  const int64_t n_pad = round_up(p.n, align);
  TORCH_CHECK(n_pad <= std::numeric_limits<int32_t>::max() &&
                  k_pad <= std::numeric_limits<int32_t>::max(),
              "gemm_act: N = ", p.n, " and K = ", p.k, " rounded up to a multiple of ", align,
              " must fit in int32");

  StagedCase s;
  s.args = in;
  GemmActParams& q = s.args.params;
  q.k = k_pad;
  q.n = n_pad;

  if (!a_fits_tma(p, align)) {
    s.args.a = gpu::padded_copy(in.a, p.m, k_pad);
    q.a = s.args.a.data_ptr();
    q.a_stride_m = k_pad;
    q.a_stride_k = 1;
  }
  // B is staged as the weight [N, K] (K-major), which every dtype can read.
  if (!b_fits_tma(p, align, n_major_b_ok).has_value()) {
    const at::Tensor weight = gpu::padded_copy(in.b.t(), n_pad, k_pad);
    s.args.b = weight.t();
    q.b = weight.data_ptr();
    q.b_stride_k = 1;
    q.b_stride_n = k_pad;
  }
  // The epilogue reads the bias and C at every column of the padded problem.
  if (n_pad != p.n && q.bias != nullptr && p.bias_kind == BiasKind::PerColumn) {
    s.args.bias = at::zeros({n_pad}, in.bias.options());
    s.args.bias.narrow(0, 0, p.n).copy_(in.bias);
    q.bias = s.args.bias.data_ptr();
  }
  if (n_pad != p.n && q.c != nullptr) {
    s.args.c = gpu::padded_copy(in.c, p.m, n_pad);
    q.c = s.args.c.data_ptr();
    q.c_stride_m = n_pad;
    q.c_stride_n = 1;
  }
  const bool stage_y = n_pad != p.n || !aligned16(p.y);
  const bool stage_z = p.z != nullptr && (n_pad != p.n || !aligned16(p.z));
  if (stage_y) {
    s.y_dest = in.y;
    s.args.y = at::empty({p.m, n_pad}, in.y.options());
    q.y = s.args.y.data_ptr();
  }
  if (stage_y && stage_z && gpu::activate_copy_applies(s.args.y, in.z, in.y)) {
    s.z_dest = in.z;
    s.args.z = at::Tensor();
    q.z = nullptr;
    s.activate_out = true;
    s.activation = p.activation;
    s.negative_slope = p.negative_slope;
    q.activation = Activation::None;
  } else if (stage_z) {
    s.z_dest = in.z;
    s.args.z = at::empty({p.m, n_pad}, in.z.options());
    q.z = s.args.z.data_ptr();
  }
  return s;
}

void copy_out(const StagedCase& s) {
  const auto copy = [](const at::Tensor& staged, const at::Tensor& dest) {
    const at::Tensor part = staged.narrow(1, 0, dest.size(1));
    if (!gpu::pad_copy(part, dest)) dest.copy_(part);
  };
  if (s.activate_out) {
    gpu::activate_copy(s.args.y, s.z_dest, s.y_dest, s.activation, s.negative_slope);
    return;
  }
  if (s.y_dest.defined()) copy(s.args.y, s.y_dest);
  if (s.z_dest.defined()) copy(s.args.z, s.z_dest);
}

}  // namespace sm90
}  // namespace gemm_act

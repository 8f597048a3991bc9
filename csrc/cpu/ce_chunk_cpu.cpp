// The language-model loss's chunk passes on the CPU (ce_chunk.h): one loop
// over rows.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include "ce_chunk.h"
#include "cpu/cpu_backend.h"

namespace gemm_act {
namespace {

constexpr int64_t kRowsPerTask = 16;

template <class scalar_t, bool kBackward>
void ce_rows(const CeChunkParams& p) {
  using Acc = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
  const Acc softcap = static_cast<Acc>(p.softcap);
  auto* z = static_cast<scalar_t*>(p.z);
  auto* lse = static_cast<Acc*>(p.lse);
  at::parallel_for(0, p.rows, kRowsPerTask, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      scalar_t* zr = z + row * p.ld;
      const int64_t t = p.target[row] - p.v0;  // the target's column here, if in [0, width)
      if constexpr (kBackward) {
        const Acc scale = static_cast<const Acc*>(p.scale)[row];
        const Acc smoothing = static_cast<Acc>(p.label_smoothing);
        const Acc inv_vocab = Acc(1) / static_cast<Acc>(p.vocab);
        for (int64_t j = 0; j < p.width; ++j) {
          const Acc l = ce::logit(static_cast<Acc>(zr[j]), softcap);
          zr[j] = static_cast<scalar_t>(ce::grad(l, lse[row], scale, j == t, smoothing, inv_vocab, softcap));
        }
      } else {
        Acc m = ce::minus_inf<Acc>(), s = 0, sum = 0;
        for (int64_t j = 0; j < p.width; ++j) {
          const Acc l[1] = {ce::logit(static_cast<Acc>(zr[j]), softcap)};
          ce::add(m, s, l);
          sum += l[0];
          if (j == t) static_cast<Acc*>(p.target_logit)[row] = l[0];
        }
        lse[row] = ce::logaddexp(lse[row], m + ce::log_(s));
        if (p.logit_sum != nullptr) static_cast<Acc*>(p.logit_sum)[row] += sum;
      }
    }
  });
}

template <bool kBackward>
void ce_chunk_cpu(const CeChunkParams& p, at::ScalarType dtype) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "ce_chunk_cpu",
                                  [&] { ce_rows<scalar_t, kBackward>(p); });
}

}  // namespace

void ce_chunk_forward_cpu(const CeChunkParams& p, at::ScalarType dtype) { ce_chunk_cpu<false>(p, dtype); }
void ce_chunk_backward_cpu(const CeChunkParams& p, at::ScalarType dtype) { ce_chunk_cpu<true>(p, dtype); }

}  // namespace gemm_act

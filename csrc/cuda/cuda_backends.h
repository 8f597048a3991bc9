// The CUDA forward backends and what the Python side may ask of them
// (torch_gemm_act.testing). The rule that chooses among them is in
// register_cuda.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <string>
#include <vector>

#include "backend_args.h"
#include "ce_chunk.h"
#include "dropout.h"
#include "glu.h"

namespace gemm_act {

// One backend of the CUDA forward. try_run runs the case on `stream` and
// returns true, or returns false having done nothing when it does not take
// the case; plan says what try_run would run (torch_gemm_act.explain), or
// nothing where it would decline; why_not, where a backend has a measured
// rule, says which of its rules declines a case.
struct CudaForwardBackend {
  const char* name;
  std::optional<std::string> (*plan)(const GemmActArgs& args);
  bool (*try_run)(const GemmActArgs& args, cudaStream_t stream);
  std::optional<std::string> (*why_not)(const GemmActArgs& args) = nullptr;
};

// A compiled kernel configuration of a tensor-core family.
struct KernelInfo {
  std::string family, name, dtype, b_layout;
  bool stores_z = true;
  std::string op = "gemm_act";  // or "gemm_dact", "gemm_glu", "gemm_dropout_add"
  std::string c_source = "gmem";  // how the epilogue reads C: "gmem" element-wise, "tma" through TMA
};

// The backends in the order the dispatch rule tries them.
std::vector<std::string> cuda_forward_backends();

// Every kernel configuration this build compiled, family by family.
std::vector<KernelInfo> compiled_kernels();

// The backward's elementwise pass (backward/activation_backward.cpp).
void activation_backward_cuda(const ActivationBackwardArgs& args);

// The gated activation's passes (glu/glu_pass.cu).
void glu_forward_cuda(const GluParams& params, at::ScalarType dtype);
void glu_backward_cuda(const GluParams& params, at::ScalarType dtype);

// The language-model loss's chunk passes (cross_entropy/ce_chunk.cu).
void ce_chunk_forward_cuda(const CeChunkParams& params, at::ScalarType dtype);
void ce_chunk_backward_cuda(const CeChunkParams& params, at::ScalarType dtype);

// Dropout's pass (dropout/dropout_pass.cu, dropout.h).
void dropout_cuda(const DropoutParams& params, at::ScalarType dtype);
// The keep bits of numel elements ((numel + 31) / 32 words, dropout_keep_word)
// for the seed at `seed` (device memory), on `stream`: what the sm90
// gemm_dropout_add epilogue reads.
void dropout_keep_bits_cuda(const int64_t* seed, uint64_t threshold, int64_t numel, uint32_t* words,
                            cudaStream_t stream);

}  // namespace gemm_act

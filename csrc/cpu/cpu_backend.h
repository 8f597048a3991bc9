// The CPU backend: ATen's GEMM, then one fused pass (gemm_act_cpu.cpp); the
// backward's dZ and bias gradient in one pass (activation_backward_cpu.cpp).
#pragma once

#include "backend_args.h"
#include "ce_chunk.h"
#include "dropout.h"
#include "glu.h"

namespace gemm_act {

void gemm_act_cpu(const GemmActArgs& args);
void activation_backward_cpu(const ActivationBackwardArgs& args);
// The gated activation's passes (glu_cpu.cpp, glu.h).
void glu_forward_cpu(const GluParams& params, at::ScalarType dtype);
void glu_backward_cpu(const GluParams& params, at::ScalarType dtype);
// The language-model loss's chunk passes (ce_chunk_cpu.cpp, ce_chunk.h).
void ce_chunk_forward_cpu(const CeChunkParams& params, at::ScalarType dtype);
void ce_chunk_backward_cpu(const CeChunkParams& params, at::ScalarType dtype);
// Dropout's pass (dropout_cpu.cpp, dropout.h).
void dropout_cpu(const DropoutParams& params, at::ScalarType dtype);

}  // namespace gemm_act

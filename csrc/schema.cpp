// The operators' schema, declared once. Each backend registers its
// implementation in a file of its own: cpu/register_cpu.cpp,
// cuda/register_cuda.cpp, chained.cpp, gated.cpp, dropout_add.cpp, autocast.cpp, autograd.cpp,
// gated_autograd.cpp, dropout_autograd.cpp; the fake (meta) kernels are Python
// (torch_gemm_act/ops.py).
#include <torch/library.h>

TORCH_LIBRARY(gemm_act, m) {
  // Y = act(alpha * a @ b + beta * c + bias); returns (Y, Z) where Z is the
  // pre-activation when store_preact, else an empty tensor.
  m.def(
      "gemm_act(Tensor a, Tensor b, Tensor? bias, Tensor? c, str activation, float alpha, "
      "float beta, float negative_slope, bool store_preact) -> (Tensor, Tensor)");
  // dZ = grad_y * act'(saved) and dbias = dZ reduced to bias's shape (empty
  // when bias is None); saved is Y or Z as the activation's table row says.
  m.def(
      "activation_backward(Tensor grad_y, Tensor saved, Tensor? bias, str activation, "
      "float negative_slope) -> (Tensor, Tensor)");
  // activation_backward with dZ written over grad_y; returns dbias (empty
  // when bias is None). The backward runs it on a gY it holds the only
  // reference to, so that dZ takes no memory of its own.
  m.def(
      "activation_backward_(Tensor(a!) grad_y, Tensor saved, Tensor? bias, str activation, "
      "float negative_slope) -> Tensor");
  // grad summed to bias's shape (bias broadcasts against grad as against
  // gemm_act's output): a bias's gradient where dZ needs no pass.
  m.def("bias_grad(Tensor grad, Tensor bias) -> Tensor");
  // src [r, c] in the top-left corner of a [rows, cols] tensor of zeros:
  // the backward's copies of a GEMM's operands with rows padded to 16 bytes
  // (cuBLAS runs unaligned rows on a much slower kernel).
  m.def("zero_pad(Tensor src, int rows, int cols) -> Tensor");
  // act'(saved) * (alpha * grad @ b): the gradient of a GEMM's input a =
  // act(Z) with respect to Z, in one GEMM where a backend fuses it (saved is
  // Y or Z as the activation's table row says); with a bias, also that
  // gradient summed to the bias's shape (the gradient of the bias that Z
  // includes), reduced in the same epilogue where the kernel does. Returns
  // (dZ, dbias), dbias empty without a bias. The backward of
  // gemm_act_chained; not itself differentiable.
  m.def(
      "gemm_dact(Tensor grad, Tensor b, Tensor saved, Tensor? bias, str activation, float alpha, "
      "float negative_slope) -> (Tensor, Tensor)");
  // gemm_act for a layer on a chain of layers (the MLP backward fused
  // across layers: torch_gemm_act.chain, fuse_linear_act): the same outputs.
  // With a_preact, a is the layer before's output a_activation(a_preact)
  // already, and a's gradient goes to a_preact (through gemm_dact) and not
  // to a; a_bias, when that layer was called with z_feeds_chain, is its bias,
  // whose gradient (from a_preact's) this op returns. With z_feeds_chain, Z
  // goes to the next layer's gemm_act_chained as its a_preact: a gradient
  // arriving on Z adds nothing to this op's bias gradient, which that layer
  // returns through its a_bias.
  m.def(
      "gemm_act_chained(Tensor a, Tensor? a_preact, Tensor? a_bias, str a_activation, "
      "float a_negative_slope, Tensor b, Tensor? bias, Tensor? c, str activation, float alpha, "
      "float beta, float negative_slope, bool store_preact, bool z_feeds_chain) -> (Tensor, Tensor)");
  // The gated activation, act(h[..., :N]) * h[..., N:]: h holds a gate's
  // pre-activation and an up projection side by side (glu.h).
  m.def("glu(Tensor h, str activation, float negative_slope) -> Tensor");
  // glu's gradient with respect to h (laid out as h) from its output's; not
  // itself differentiable.
  m.def("glu_backward(Tensor grad_y, Tensor h, str activation, float negative_slope) -> Tensor");
  // A gated MLP's first half, Y = act(a @ b_gate + bias_gate) * (a @ b_up +
  // bias_up) (b_gate and b_up [K, N]); returns (Y, H), H the two projections
  // side by side ([..., 2N], the gate's first) when store_preact, else an
  // empty tensor.
  m.def(
      "gemm_glu(Tensor a, Tensor b_gate, Tensor b_up, Tensor? bias_gate, Tensor? bias_up, "
      "str activation, float negative_slope, bool store_preact) -> (Tensor, Tensor)");
  // The language-model loss's two passes over a chunk of logits
  // (torch_gemm_act.linear_cross_entropy; ce_chunk.h): z [rows, width] holds
  // vocabulary columns [v0, v0 + width), target [rows] the class indices;
  // with softcap > 0 a logit is softcap * tanh(z / softcap). The forward
  // folds the chunk into each row's running log-sum-exp, sets target_logit
  // where the target falls in the chunk and adds the logits to logit_sum
  // where given (label smoothing), in place (fp32; float64 for float64 z).
  m.def(
      "ce_chunk_forward(Tensor z, Tensor target, int v0, float softcap, Tensor(a!) lse, "
      "Tensor(b!) target_logit, Tensor(c!)? logit_sum) -> ()");
  // Writes over z its gradient, scale * (exp(logit - lse) - (1 - smoothing)
  // at the target - smoothing / vocab), times softcap's derivative.
  m.def(
      "ce_chunk_backward(Tensor(a!) z, Tensor target, Tensor lse, Tensor scale, int v0, int vocab, "
      "float label_smoothing, float softcap) -> ()");
  // The two passes over every chunk of `chunk` vocabulary columns of the
  // logits hidden @ weight.T + bias (hidden [tokens, D], weight [vocab, D]),
  // each chunk one GEMM into one reused buffer: the forward folds each into
  // lse, target_logit and logit_sum (ce_chunk_forward); the backward turns
  // each into its gradient (ce_chunk_backward) and writes the chunk's rows
  // of grad_weight and grad_bias and adds its share to grad_hidden (in
  // grad_hidden's dtype), each gradient where given.
  m.def(
      "linear_ce_chunks_forward(Tensor hidden, Tensor weight, Tensor? bias, Tensor target, int chunk, "
      "float softcap, Tensor(a!) lse, Tensor(b!) target_logit, Tensor(c!)? logit_sum) -> ()");
  m.def(
      "linear_ce_chunks_backward(Tensor hidden, Tensor weight, Tensor? bias, Tensor target, Tensor lse, "
      "Tensor scale, int chunk, float label_smoothing, float softcap, Tensor(a!)? grad_hidden, "
      "Tensor(b!)? grad_weight, Tensor(c!)? grad_bias) -> ()");
  // The rows road: blocks of `rows` tokens, each over the whole vocabulary,
  // one GEMM into one reused buffer. Each block is folded into lse,
  // target_logit and logit_sum (which must start at -inf, 0, 0), turned into
  // its gradient at once (ce_chunk_backward, with scale as the chunk
  // backward's), and fed to hidden's rows of gradient (written) and to
  // weight's and bias's (added): each gradient where given, summed in its
  // dtype.
  m.def(
      "linear_ce_rows(Tensor hidden, Tensor weight, Tensor? bias, Tensor target, Tensor scale, "
      "int rows, float label_smoothing, float softcap, Tensor(a!) lse, Tensor(b!) target_logit, "
      "Tensor(c!)? logit_sum, Tensor(d!)? grad_hidden, Tensor(e!)? grad_weight, "
      "Tensor(f!)? grad_bias) -> ()");
  // residual + dropout(z): element i of z kept (times 2^32 / T) or dropped
  // as dropout.h draws it under seed (one int64 on z's device); a fresh seed
  // each call draws a fresh mask, the same seed the same mask.
  m.def("dropout_add(Tensor z, Tensor residual, float p, Tensor seed) -> Tensor");
  // grad * mask * 2^32 / T for the mask dropout_add drew under seed:
  // dropout's gradient, the mask drawn again rather than stored.
  m.def("dropout_scale(Tensor grad, float p, Tensor seed) -> Tensor");
  // Y = residual + dropout(a @ b + bias), residual of Y's shape: a
  // transformer block's output projection, in one GEMM where the epilogue
  // draws the mask (dropout_add's, element for element), else the GEMM and
  // then dropout_add. p = 0 is gemm_act with C = residual.
  m.def(
      "gemm_dropout_add(Tensor a, Tensor b, Tensor? bias, Tensor residual, float p, Tensor seed) "
      "-> Tensor");
  // What gemm_act would run for these arguments (backend, kernel), computing
  // nothing: torch_gemm_act.explain.
  m.def(
      "explain(Tensor a, Tensor b, Tensor? bias, Tensor? c, str activation, float alpha, "
      "float beta, float negative_slope, bool store_preact) -> str");
}

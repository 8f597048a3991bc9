"""The language-model head and its loss for bench/models.py's ``linear_ce_*``
cases: hidden [tokens, D] -> logits [tokens, V] -> cross-entropy, forward
and backward (hidden's and the weight's gradients), bf16.

Contenders: ``eager`` (F.linear + F.cross_entropy), ``compile`` (that,
torch.compile'd), ``compile_fusion`` (that, compiled with
enable_compile_fusion(lm_loss=True)), ``fused``
(torch_gemm_act.linear_cross_entropy), and the
peers where installed: ``cce`` (Apple's cut-cross-entropy) and ``liger``
(Liger-Kernel's fused linear cross-entropy). ``peak_bytes`` is the peak
allocated during loss + backward above what the inputs and the returned
gradients occupy. Each contender's loss and gradients are compared with an
fp32 computation of the same inputs beside eager's own error.
"""

import dataclasses

# name: (tokens, hidden width, vocabulary)
LINEAR_CE = {
    "linear_ce_gpt2": (8192, 768, 50257),
    "linear_ce_llama3": (16384, 4096, 128256),
}


@dataclasses.dataclass
class Built:
    hidden: object
    weight: object
    target: object
    fns: dict            # name -> () -> (loss, grad of hidden, grad of weight)
    missing: dict        # peer -> why it is not timed
    grads_bytes: int     # what the returned gradients occupy


def _peers():
    """name -> f(hidden, weight, target) -> loss, for the peers installed; and why not, for the others."""
    found, missing = {}, {}
    try:
        from cut_cross_entropy import linear_cross_entropy as cce
        found["cce"] = lambda h, w, t: cce(h, w, t)
    except ImportError as e:
        missing["cce"] = f"not installed ({e})"
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as liger
        found["liger"] = lambda h, w, t: liger(h, w, t)
    except ImportError as e:
        missing["liger"] = f"not installed ({e})"
    return found, missing


def build(case, device, dry_run, compiled=True):
    import torch
    import torch.nn.functional as F

    import torch_gemm_act

    tokens, width, vocab = (64, 32, 1000) if dry_run else LINEAR_CE[case]
    g = torch.Generator(device=device).manual_seed(0)
    dtype = torch.bfloat16
    hidden = torch.randn(tokens, width, device=device, generator=g).to(dtype)
    weight = (torch.randn(vocab, width, device=device, generator=g) / width ** 0.5).to(dtype)
    target = torch.randint(vocab, (tokens,), device=device, generator=g)
    target[::17] = -100

    def eager(h, w, t):
        return F.cross_entropy(F.linear(h, w), t)
    losses = {"eager": eager, "fused": torch_gemm_act.linear_cross_entropy}
    def eager_for_the_pass(h, w, t):  # its own code object, compiled afresh with the pass on
        return F.cross_entropy(F.linear(h, w), t)
    if compiled:
        losses["compile"] = torch.compile(eager)
        losses["compile_fusion"] = torch.compile(eager_for_the_pass)
    peers, missing = _peers() if device == "cuda" else ({}, {"cce": "CUDA only", "liger": "CUDA only"})
    losses.update(peers)

    def step_of(loss_fn):
        h = hidden.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)

        def run():
            loss = loss_fn(h, w, target)
            loss.backward()
            out = (loss.detach().float(), h.grad, w.grad)
            h.grad = w.grad = None
            return out
        return run
    fns = {name: step_of(fn) for name, fn in losses.items()}
    grads_bytes = (hidden.numel() + weight.numel()) * hidden.element_size()
    return Built(hidden, weight, target, fns, missing, grads_bytes)


def reference(built):
    """Loss and gradients from fp32 copies of the inputs (TF32 off)."""
    import torch.nn.functional as F

    from whole import _matmul_tf32

    h = built.hidden.float().requires_grad_(True)
    w = built.weight.float().requires_grad_(True)
    with _matmul_tf32(False):
        loss = F.cross_entropy(F.linear(h, w), built.target)
        loss.backward()
    return loss.detach().reshape(()), h.grad, w.grad

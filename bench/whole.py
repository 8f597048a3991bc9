"""Whole models for bench/models.py's ``whole_*`` cases: transformers' and
timm's own classes at real sizes from their configs, random weights, a
training step as their users write it (the library's own loss, then
backward) and an inference forward.

Dropout is off in every config (GPT-2's and BERT's default 0.1 included):
with it on, the fused and compiled contenders draw other masks than eager,
and no output could be checked. Each contender's output is checked against
an fp32 copy of the same weights (TF32 off, no autocast): its error from
that copy beside eager's own.
"""

import contextlib
import copy
import dataclasses

# name: (family, batch, tokens per sample (ViT: image side), weights' dtype, bf16 autocast)
WHOLE = {
    "whole_gpt2": ("gpt2", 8, 1024, "bfloat16", False),
    "whole_gpt2_autocast": ("gpt2", 8, 1024, "float32", True),
    "whole_llama": ("llama", 4, 2048, "bfloat16", False),
    "whole_bert": ("bert", 32, 512, "bfloat16", False),
    "whole_vit": ("vit", 64, 224, "bfloat16", False),
}
# A contender within this factor of eager's own error from the fp32 copy is
# correct (the MLP stacks' rule for two computations that round differently).
ERROR_FACTOR = 2.0


@dataclasses.dataclass
class Built:
    model: object
    infer: dict          # the inference forward's keyword arguments
    train: dict          # the training forward's
    loss: object         # forward output -> loss
    logits: object       # forward output -> logits
    probe: str           # a parameter whose gradient is checked (the input embedding)
    autocast: bool


def _gpt2(dry):
    import transformers
    small = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, bos_token_id=0,
                 eos_token_id=0) if dry else {}
    config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **small)
    return transformers.GPT2LMHeadModel(config), config.vocab_size, "transformer.wte.weight"


def _llama(dry):
    """Llama-3.2-1B's shapes: 2048 wide, 8192 hidden, 16 layers, 32 heads over 8 KV heads."""
    import transformers
    shape = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, max_position_embeddings=64) if dry else
             dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=2048))
    config = transformers.LlamaConfig(tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                                      pad_token_id=None, **shape)
    return transformers.LlamaForCausalLM(config), config.vocab_size, "model.embed_tokens.weight"


def _bert(dry):
    import transformers
    small = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 vocab_size=128, max_position_embeddings=64) if dry else {}
    config = transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **small)
    return transformers.BertForMaskedLM(config), config.vocab_size, "bert.embeddings.word_embeddings.weight"


def _vit(dry):
    import timm
    if dry:
        from timm.models.vision_transformer import VisionTransformer
        return VisionTransformer(img_size=32, patch_size=16, embed_dim=64, depth=2, num_heads=4,
                                 num_classes=128), 128, "patch_embed.proj.weight"
    return timm.create_model("vit_large_patch16_224", pretrained=False), 1000, "patch_embed.proj.weight"


FAMILIES = {"gpt2": _gpt2, "llama": _llama, "bert": _bert, "vit": _vit}


def build(case, device, dry_run):
    """The case's Built, its model on `device` in the case's dtype."""
    import torch
    import torch.nn.functional as F

    family, batch, length, dtype_name, autocast = WHOLE[case]
    if dry_run:  # ViT with about as many logits as a text model: over twenty, the error check is chance
        batch, length = (16, 32) if family == "vit" else (2, 16)
    with torch.device(device):
        model, classes, probe = FAMILIES[family](dry_run)
    model = model.to(dtype=getattr(torch, dtype_name)).train()
    if family == "vit":
        images = torch.randn(batch, 3, length, length, device=device, dtype=getattr(torch, dtype_name))
        target = torch.randint(classes, (batch,), device=device)
        return Built(model, {"x": images}, {"x": images}, lambda out: F.cross_entropy(out.float(), target),
                     lambda out: out, probe, autocast)
    ids = torch.randint(classes, (batch, length), device=device)
    # BERT's masked-LM labels: 15 % of the tokens, the rest ignored.
    labels = ids if family != "bert" else torch.where(torch.rand(ids.shape, device=device) < 0.15, ids, -100)
    return Built(model, {"input_ids": ids}, {"input_ids": ids, "labels": labels}, lambda out: out.loss,
                 lambda out: out.logits, probe, autocast)


def fuse(case, model):
    """The fused contender: fuse_linear_act, then fuse_loss."""
    import torch_gemm_act
    return fuse_loss(case, torch_gemm_act.fuse_linear_act(model))


def fuse_loss(case, model):
    """For the language models (GPT-2, Llama, BERT's masked LM), the head's
    loss through linear_cross_entropy (fuse_lm_loss): a model-level opt-in,
    as enable_compile_fusion() is. The compile pass cannot do it (the model
    returns its logits), so compile fusion's contender takes it too."""
    import torch_gemm_act
    return torch_gemm_act.fuse_lm_loss(model) if WHOLE[case][0] in ("gpt2", "llama", "bert") else model


def unwrap(model):
    """The module under torch.compile's wrapper and compiled.own_frame's."""
    while hasattr(model, "_orig_mod") or type(model).__name__ == "OwnFrame":
        model = getattr(model, "_orig_mod", None) or model.inner
    return model


def step_fn(model, built, mode):
    """One inference forward (-> (logits,)) or training step (-> (loss, the
    probe's gradient)) of model on built's inputs."""
    import torch

    device_type = next(unwrap(model).parameters()).device.type
    cast = (lambda: torch.autocast(device_type, torch.bfloat16)) if built.autocast else contextlib.nullcontext
    if mode == "inference":
        def run():
            with torch.no_grad(), cast():
                return (built.logits(model(**built.infer)),)
        return run
    probe = unwrap(model).get_parameter(built.probe)
    params = list(model.parameters())

    def run():
        with cast():
            loss = built.loss(model(**built.train))
        loss.backward()
        grad = probe.grad
        for p in params:
            p.grad = None
        return loss.detach().float().reshape(1), grad
    return run


def reference(built, mode):
    """The step's outputs from an fp32 copy of the weights: no autocast, TF32 off."""
    import torch

    def fp32(v):
        return v.float() if torch.is_tensor(v) and v.is_floating_point() else v

    ref = Built(copy.deepcopy(built.model).float(), {k: fp32(v) for k, v in built.infer.items()},
                {k: fp32(v) for k, v in built.train.items()}, built.loss, built.logits, built.probe, False)
    with torch.backends.cudnn.flags(allow_tf32=False), _matmul_tf32(False):
        out = step_fn(ref.model, ref, mode)()
    del ref
    return out


@contextlib.contextmanager
def _matmul_tf32(allowed):
    import torch
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def peers(case, eager):
    """name -> a peer's copy of the eager model, where one applies: Liger-Kernel
    on the Llama model (its RMSNorm, SwiGLU and fused linear cross-entropy,
    patched on the copy alone; its RoPE patch replaces a module-level function
    that eager would run too, so it stays off). A peer that is not installed
    is left out, with the reason in the second dict."""
    found, missing = {}, {}
    if WHOLE[case][0] != "llama":
        return found, missing
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        from transformers.models.llama import modeling_llama
    except ImportError as e:
        missing["liger"] = f"not installed ({e})"
        return found, missing
    # Liger also swaps the module's classes for models built later: restore them.
    saved = {name: getattr(modeling_llama, name) for name in ("LlamaRMSNorm", "LlamaMLP", "apply_rotary_pos_emb")}
    model = copy.deepcopy(eager)
    try:
        apply_liger_kernel_to_llama(rope=False, model=model)
    finally:
        for name, value in saved.items():
            setattr(modeling_llama, name, value)
    found["liger"] = model
    return found, missing

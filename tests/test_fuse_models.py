"""fuse_linear_act on the models people run: tiny random-weight transformers,
timm and torchvision models (built from their config classes, nothing
downloaded), fused by one call, compared with the unfused model in output
and in every parameter's gradient, with their state_dict unchanged."""

import copy
import importlib

import pytest
import torch
import transformers  # test dependencies, installed by scripts/setup.sh
from torch import nn

import torch_gemm_act as tga
from conftest import requires_cuda
from torch_gemm_act.activations import _FOREIGN, _torch_module

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere


@pytest.mark.parametrize("qualified", sorted(_FOREIGN))
def test_each_foreign_activation_computes_ours(qualified):
    module_name, cls_name = qualified.rsplit(".", 1)
    foreign = getattr(importlib.import_module(module_name), cls_name)()
    assert tga.activations._from_module(foreign) == (_FOREIGN[qualified], 0.01)
    x = torch.randn(4096, dtype=torch.float64) * 4
    torch.testing.assert_close(foreign(x), _torch_module(_FOREIGN[qualified])(x), rtol=1e-7, atol=1e-9)


def _tiny_transformer(name):
    """(model, the pairs fuse_linear_act fuses in it)."""
    t = transformers
    common = dict(num_attention_heads=2, num_hidden_layers=2)
    t5 = dict(d_model=32, d_ff=64, d_kv=16, num_heads=2, num_layers=2)
    builders = {
        # Each layer's intermediate, and the pooler's dense -> tanh.
        "bert": lambda: (t.BertModel(t.BertConfig(hidden_size=32, intermediate_size=64, **common)), 3),
        "vit": lambda: (t.ViTModel(t.ViTConfig(hidden_size=32, intermediate_size=64, image_size=16,
                                               patch_size=8, **common)), 3),
        "gpt2": lambda: (t.GPT2Model(t.GPT2Config(n_embd=32, n_head=2, n_layer=2)), 2),
        "t5": lambda: (t.T5Model(t.T5Config(feed_forward_proj="relu", **t5)), 4),
        # The gated layer whole (wi_0, its activation, the product with wi_1).
        "t5_gated": lambda: (t.T5Model(t.T5Config(feed_forward_proj="gated-gelu", **t5)), 4),
        "opt": lambda: (t.OPTModel(t.OPTConfig(hidden_size=32, ffn_dim=64, word_embed_proj_dim=32, **common)), 2),
        # The gated MLP whole: gate_proj, act_fn, the product with up_proj.
        "llama": lambda: (t.LlamaModel(t.LlamaConfig(hidden_size=32, intermediate_size=64,
                                                     num_key_value_heads=2, **common)), 2),
    }
    return builders[name]()


def _inputs(name, model):
    if name == "vit":
        return {"pixel_values": torch.randn(2, 3, 16, 16)}
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    if name.startswith("t5"):
        return {"input_ids": ids, "decoder_input_ids": ids[:, :5]}
    return {"input_ids": ids}


# fp32 on the CPU; bf16 on a GPU (the kernels people train with there).
DEVICE_DTYPES = [("cpu", torch.float32), pytest.param(("cuda", torch.bfloat16), marks=requires_cuda, id="cuda-bf16")]


def _close(actual, expected, name=""):
    # A fraction of the tensor's largest element (a gradient summed over
    # rows cancels in places, where an elementwise rtol would be too tight):
    # 1e-5 in fp32; 3e-2 in bf16, whose rounding a whole model compounds.
    tol = 1e-5 if expected.dtype == torch.float32 else 3e-2
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * scale, msg=name or None)


def _assert_same_training_step(eager, fused, run):
    """Outputs and every parameter's gradient equal (within the dtype's tolerance)."""
    out_e, out_f = run(eager), run(fused)
    _close(out_f, out_e)
    grad_out = torch.randn_like(out_e)
    out_e.backward(grad_out)
    out_f.backward(grad_out)
    params_f = dict(fused.named_parameters())
    for name, p in eager.named_parameters():
        if p.grad is None:
            assert params_f[name].grad is None, name
            continue
        _close(params_f[name].grad, p.grad, name)


@pytest.mark.parametrize("device_dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("name", ["bert", "vit", "gpt2", "t5", "t5_gated", "opt", "llama"])
def test_transformers_model_fused_by_one_call(name, device_dtype):
    device, dtype = device_dtype
    torch.manual_seed(0)
    eager, pairs = _tiny_transformer(name)
    eager = eager.to(device, dtype).eval()  # dropout off: both sides compute the same function
    fused, report = tga.fuse_linear_act(copy.deepcopy(eager), report=True)
    assert len(report.fused) == pairs, str(report)
    assert list(fused.state_dict()) == list(eager.state_dict())
    for key, value in eager.state_dict().items():
        assert torch.equal(fused.state_dict()[key], value), key
    kinds = (tga.LinearAct, tga.Conv1DAct, tga.LinearGate)
    if name in ("t5_gated", "llama"):
        assert all(act.startswith("geglu" if name == "t5_gated" else "swiglu") for _, _, act in report.fused)
        assert sum(isinstance(m, tga.LinearUp) for m in fused.modules()) == pairs
    # Besides the pairs: the second Linear of each chain (activation "none").
    assert sum(isinstance(m, kinds) and m.activation != "none" for m in fused.modules()) == pairs
    assert sum(isinstance(m, kinds) and m.activation == "none" for m in fused.modules()) <= len(report.chained)
    inputs = {k: v.to(device, dtype) if v.is_floating_point() else v.to(device)
              for k, v in _inputs(name, eager).items()}
    _assert_same_training_step(eager, fused, lambda m: m(**inputs).last_hidden_state)


def test_transformers_save_and_load_round_trip(tmp_path):
    """A fused model saves what the unfused one does; loading it back into the
    model's own class gives the same function."""
    t = transformers
    torch.manual_seed(0)
    eager = t.GPT2Model(t.GPT2Config(n_embd=32, n_head=2, n_layer=2)).eval()
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    fused.save_pretrained(tmp_path)
    loaded = t.GPT2Model.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 100, (2, 5))
    with torch.no_grad():
        _close(loaded(input_ids=ids).last_hidden_state, fused(input_ids=ids).last_hidden_state)


def test_fused_model_converts_with_its_parameters_shared():
    t = transformers
    torch.manual_seed(0)
    eager = t.BertModel(t.BertConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                     num_hidden_layers=1)).eval()
    fused = tga.fuse_linear_act(copy.deepcopy(eager)).double()
    layer = fused.encoder.layer[0].intermediate
    assert isinstance(layer.dense, tga.LinearAct) and layer.dense.weight.dtype == torch.float64
    assert layer.dense.weight is dict(fused.named_parameters())["encoder.layer.0.intermediate.dense.weight"]
    ids = torch.randint(0, 100, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(fused(input_ids=ids).last_hidden_state,
                                   eager.double()(input_ids=ids).last_hidden_state)


def _timm_or_torchvision(name):
    """(model, the pairs fuse_linear_act fuses in it, an input shape)."""
    from timm.layers import GluMlp, Mlp, SwiGLUPacked
    from timm.models.vision_transformer import VisionTransformer
    from torchvision.models.vision_transformer import VisionTransformer as TvViT
    from torchvision.ops import MLP
    builders = {
        "timm_vit": lambda: (VisionTransformer(img_size=16, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                                               num_classes=10), 2, (2, 3, 16, 16)),
        "timm_mlp": lambda: (Mlp(32, 64, act_layer=nn.SiLU), 1, (2, 5, 32)),
        # GluMlp splits fc1's output in two and gates one half (sigmoid: glu);
        # SwiGLUPacked is GluMlp with SiLU and the gate first.
        "timm_glu_mlp": lambda: (GluMlp(32, 64), 1, (2, 5, 32)),
        "timm_swiglu_packed": lambda: (SwiGLUPacked(32, 64), 1, (2, 5, 32)),
        "torchvision_vit": lambda: (TvViT(image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                          mlp_dim=64, num_classes=10), 2, (2, 3, 16, 16)),
        "torchvision_mlp": lambda: (MLP(32, [64, 64, 16]), 2, (2, 32)),
    }
    return builders[name]()


# The chains fuse_linear_act links in each: timm's Mlp through its dropout and
# identity norm, torchvision's MLPBlock through its dropout; none after ReLU
# (rule links) or a packed GLU.
_TIMM_TORCHVISION_CHAINS = {"timm_vit": 2, "timm_mlp": 1, "timm_glu_mlp": 0, "timm_swiglu_packed": 0,
                            "torchvision_vit": 2, "torchvision_mlp": 0}


@pytest.mark.parametrize("device_dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("name", ["timm_vit", "timm_mlp", "timm_glu_mlp", "timm_swiglu_packed", "torchvision_vit",
                                  "torchvision_mlp"])
def test_timm_and_torchvision_models_fused_by_one_call(name, device_dtype):
    device, dtype = device_dtype
    torch.manual_seed(0)
    eager, pairs, shape = _timm_or_torchvision(name)
    eager = eager.to(device, dtype).eval()
    fused, report = tga.fuse_linear_act(copy.deepcopy(eager), report=True)
    assert len(report.fused) == pairs, str(report)
    assert len(report.chained) == _TIMM_TORCHVISION_CHAINS[name], str(report)
    assert list(fused.state_dict()) == list(eager.state_dict())
    x = torch.randn(shape, device=device, dtype=dtype)
    _assert_same_training_step(eager, fused, lambda m: m(x))


class _Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x):
        if x.sum() > 0:  # control flow on a tensor's value: fx cannot trace it
            return self.act(self.fc(x))
        return self.fc(x)


class _Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.other = nn.Linear(8, 8)
        self.mish = nn.Mish()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)  # no activation: nothing reported

    def forward(self, x):
        h = self.fc(x)
        q = self.other(x)
        return self.act(h) + h + self.mish(q) + self.attn(q, q, q, need_weights=False)[0]


class _Listed(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.GELU()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_report_says_what_was_left_and_why():
    model = nn.Sequential(_Untraceable(), _Shared(), nn.Linear(8, 8), nn.SiLU(), _Listed())
    x = torch.randn(2, 3, 8)
    expected = model(x)
    fused, report = tga.fuse_linear_act(model, report=True)
    torch.testing.assert_close(fused(x), expected, rtol=1e-5, atol=1e-6)
    assert report.fused == [("2", "3", "silu")]
    left = dict(report.left)
    assert "could not be traced" in left["0"]
    assert "a container without a forward of its own" in left["4.layers"]
    assert "output is used by add as well" in left["1.fc -> 1.act"]
    assert "Mish is not an activation this project computes" in left["1.other -> 1.mish"]
    assert "fused 1 pair(s) and 0 residual output(s), left 4" in str(report)
    assert type(fused[0].fc) is nn.Linear and type(fused[1].fc) is nn.Linear


def test_conv1d_act_is_conv1d_then_its_activation():
    from transformers.pytorch_utils import Conv1D
    conv = Conv1D(24, 16)
    fused = tga.Conv1DAct.from_conv1d(conv, "gelu_tanh")
    assert fused.weight is conv.weight and fused.bias is conv.bias
    assert "nf=24, nx=16, activation='gelu_tanh'" in repr(fused)
    x = torch.randn(3, 5, 16)
    _close(fused(x), nn.functional.gelu(conv(x), approximate="tanh"))
    fresh = tga.Conv1DAct(24, 16, activation="relu")
    assert fresh.weight.shape == (16, 24) and list(fresh.state_dict()) == list(conv.state_dict())
    with pytest.raises(TypeError, match="expects a transformers Conv1D, got Linear"):
        tga.Conv1DAct.from_conv1d(nn.Linear(4, 4))


def test_forward_hooks_move_to_the_fused_module():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    seen = []
    model[0].register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    model[0].register_forward_hook(lambda mod, args, out: seen.append(bool((out >= 0).all())))
    fused, report = tga.fuse_linear_act(model, report=True)
    assert report.hooks_moved == ["0"] and "hooks of 0 moved to its fused module" in str(report)
    fused(torch.randn(4, 8))
    assert seen == ["pre", True]  # the forward hook now sees the activation's output

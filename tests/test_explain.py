"""torch_gemm_act.explain: what a call would run, said before running it."""

import pytest
import torch

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import random_operands


def test_explain_cpu():
    a, w = random_operands(5, 6, 7, torch.float32, "cpu")
    assert tga.explain(a, w.t(), activation="gelu") == \
        "cpu: ATen's GEMM, then one fused epilogue pass [Float]"


def test_explain_checks_arguments_as_gemm_act_does():
    a, w = random_operands(5, 6, 7, torch.float32, "cpu")
    with pytest.raises(ValueError, match="cannot be multiplied|must equal"):
        tga.explain(a, w)
    with pytest.raises(ValueError, match="activation"):
        tga.explain(a, w.t(), activation="nope")


def _case(dtype=torch.bfloat16):
    a, w = random_operands(64, 136, 200, dtype, "cuda")
    return a, w.t(), torch.randn(200, dtype=dtype, device="cuda")


LT = "library: cuBLASLt matmul with epilogue "
MM = "library: cuBLAS's GEMM, then one epilogue pass"


@requires_cuda
def test_explain_names_the_library_path_cuda():
    a, b, bias = _case()
    c_t = torch.randn(200, 64, dtype=a.dtype, device="cuda").t()
    with tga.testing.override(cuda_backend="library"):
        assert tga.explain(a, b, bias, activation="gelu_tanh") == LT + "GELU_BIAS [BFloat16]"
        assert tga.explain(a, b, bias, activation="gelu_tanh", return_preact=True) == \
            LT + "GELU_AUX_BIAS [BFloat16]"
        # Not cuBLASLt's RELU, which turns NaN into 0.
        assert tga.explain(a, b, None, activation="relu") == LT + "DEFAULT, then the activation pass [BFloat16]"
        # Z for the backward when an input requires grad, as gemm_act decides.
        assert tga.explain(a, b, bias.clone().requires_grad_(), activation="gelu_tanh") == \
            LT + "GELU_AUX_BIAS [BFloat16]"
        # Z of relu, and activations cuBLASLt lacks: its bias epilogue, then the pass.
        assert tga.explain(a, b, bias, activation="relu", return_preact=True) == \
            LT + "BIAS, then the activation pass [BFloat16]"
        assert tga.explain(a, b, bias, activation="gelu") == LT + "BIAS, then the activation pass [BFloat16]"
        # What cuBLASLt cannot take: a column-major C, a bias per row.
        assert tga.explain(a, b, bias, c_t, activation="gelu_tanh", beta=1.0) == MM + " [BFloat16]"
        row_bias = torch.randn(64, 1, dtype=a.dtype, device="cuda")
        assert tga.explain(a, b, row_bias, activation="relu") == MM + " [BFloat16]"


@requires_cuda
def test_explain_follows_the_dispatch_rule_cuda():
    with tga.testing.override(cuda_backend=""):  # the rule, whatever the environment forced
        _check_rule()


def _library(got, plan, rule, hopper):
    """`got` is the library's `plan`; on Hopper it names the sm90 rule that
    left the case to the library (after " | ")."""
    head, _, declined = got.partition(" | ")
    assert head == plan, got
    if hopper:
        # A table rule's name and text, as the rules table declares them.
        text = f" ({tga._rules.says(rule)})" if rule in tga._rules.RULES else ""
        assert declined.startswith(f"sm90 declined: {rule}{text}"), got
    elif "sm90" in tga.testing.cuda_backends():
        assert declined.startswith("sm90 declined: "), got


def _check_rule():
    hopper = "sm90" in tga.testing.cuda_backends() and torch.cuda.get_device_capability() == (9, 0)
    a, b, bias = _case()
    _library(tga.explain(a, b, bias), LT + "BIAS [BFloat16]", "small", hopper)
    # Below 2^32 multiply-adds the library on every GPU, above it the sm90 kernels on Hopper.
    small = tga.explain(a, b, bias, activation="gelu")
    _library(small, LT + "BIAS, then the activation pass [BFloat16]", "small", hopper)
    a2, w2 = random_operands(2048, 1024, 2048, torch.bfloat16, "cuda")
    bias2 = torch.randn(2048, dtype=torch.bfloat16, device="cuda")
    fused = tga.explain(a2, w2.t(), bias2, activation="gelu")
    if hopper:
        assert fused.startswith("sm90: ") and fused.endswith("kmajor B [BFloat16]"), fused
    else:
        _library(fused, LT + "BIAS, then the activation pass [BFloat16]", None, hopper)
    # gelu_tanh without Z: cuBLASLt's own epilogue on every GPU up to one
    # tile row, at short K and at long K with N <= 4096; elsewhere the sm90
    # kernels on Hopper. relu: the bias epilogue and the pass, or the sm90
    # kernels.
    a4, w4 = random_operands(1024, 4096, 8192, torch.bfloat16, "cuda")
    bias4 = torch.randn(8192, dtype=torch.bfloat16, device="cuda")
    wide = [tga.explain(a4, w4.t(), bias4, activation="gelu_tanh"),
            tga.explain(a4, w4.t(), bias4, activation="relu"),
            tga.explain(a4[:, :1024], w4[:, :1024].t(), bias4, activation="relu")]
    if hopper:
        assert all(plan.startswith("sm90: ") for plan in wide), wide
    else:
        for got, plan in zip(wide, ["GELU_BIAS", "BIAS, then the activation pass", "BIAS, then the activation pass"]):
            _library(got, LT + plan + " [BFloat16]", None, hopper)
    # At K = 4096, an output at least as tall as wide from 8192 columns: the
    # library on every GPU; one row less, the sm90 kernels on Hopper.
    a8, w8 = random_operands(8192, 4096, 8192, torch.bfloat16, "cuda")
    tall = tga.explain(a8, w8.t(), bias4, activation="gelu")
    _library(tall, LT + "BIAS, then the activation pass [BFloat16]", "tall_long_k", hopper)
    if hopper:
        wider = tga.explain(a8[:8191], w8.t(), bias4, activation="gelu")
        assert wider.startswith("sm90: "), wider
    del a8, w8
    short_k = tga.explain(a4[:, :768], w4[:, :768].t(), bias4, activation="gelu_tanh")
    _library(short_k, LT + "GELU_BIAS [BFloat16]", "lt_epilogue", hopper)
    narrow_n = tga.explain(a4, w4[:4096].t(), bias4[:4096], activation="gelu_tanh")
    _library(narrow_n, LT + "GELU_BIAS [BFloat16]", "lt_epilogue", hopper)
    _library(tga.explain(a4[:128], w4.t(), bias4, activation="gelu_tanh"), LT + "GELU_BIAS [BFloat16]",
             "lt_epilogue", hopper)
    # A plain GEMM (activation none): cuBLASLt's bias epilogue, eager's own
    # call, but on Hopper the sm90 kernels at K <= 1024 or from 8192 columns.
    plain = [tga.explain(a4[:, :768], w4[:, :768].t(), bias4), tga.explain(a4, w4.t(), bias4)]
    _library(tga.explain(a4, w4[:4096].t(), bias4[:4096]), LT + "BIAS [BFloat16]", "plain_gemm_is_eager", hopper)
    if hopper:
        assert all(p.startswith("sm90: ") for p in plain), plain
    else:
        for got in plain:
            _library(got, LT + "BIAS [BFloat16]", None, hopper)
    # With Z, or another activation: the sm90 kernels on Hopper from 769
    # rows on and up to 128 (its small-M tiles), the library between.
    with_z = tga.explain(a4, w4.t(), bias4, activation="gelu_tanh", return_preact=True)
    one_tile_row = tga.explain(a4[:128], torch.cat([w4, w4]).t(), None, activation="gelu")
    for rows in (129, 768):
        between = tga.explain(a4[:rows], w4.t(), bias4, activation="gelu")
        _library(between, LT + "BIAS, then the activation pass [BFloat16]", "few_rows", hopper)
    if hopper:
        assert with_z.startswith("sm90: ") and one_tile_row.startswith("sm90: "), (with_z, one_tile_row)
    # Beyond K = 4096 the library.
    a16, w16 = random_operands(2048, 8192, 2048, torch.bfloat16, "cuda")
    _library(tga.explain(a16, w16.t(), bias2, activation="gelu"), LT + "BIAS, then the activation pass [BFloat16]",
             "long_k", hopper)
    del a16, w16
    # Exact fp32 (TF32 not allowed) goes to the library on every GPU.
    a32, b32, bias32 = _case(torch.float32)
    assert not torch.backends.cuda.matmul.allow_tf32
    _library(tga.explain(a32, b32, bias32, activation="gelu"), LT + "BIAS, then the activation pass [Float]",
             "fp16, bf16 and TF32-allowed fp32 only", hopper)


@requires_cuda
def test_explain_names_the_tma_source_twin_cuda():
    """Rule tma_source: with a C of contiguous 16-byte-aligned rows the sm90
    heuristic runs its tile's tmac twin (ping-pong's up to a K); with any
    other C, or none, the tile."""
    if "sm90" not in tga.testing.cuda_backends() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family runs on compute capability 9.0 only")
    a, w = random_operands(2048, 1024, 2048, torch.bfloat16, "cuda")
    bias = torch.randn(2048, dtype=torch.bfloat16, device="cuda")
    rows = torch.randn(2048, 2048, dtype=torch.bfloat16, device="cuda")
    plain = {}
    with tga.testing.override(cuda_backend=""):
        for act in ("gelu", "none"):
            plain[act] = tga.explain(a, w.t(), bias, activation=act)
            assert plain[act].startswith("sm90: ") and "_tmac" not in plain[act], plain
            twin = tga.explain(a, w.t(), bias, rows, activation=act, beta=1.0)
            assert twin == plain[act].replace(",", "_tmac,", 1), (plain, twin)
    # The larger tile's twin gives way to ping-pong's up to K = MAX_TMA_SOURCE_PINGPONG_K (GPT-2's
    # c_proj), not beyond (ViT-L's fc2).
    max_k = tga._rules.NUMBERS["MAX_TMA_SOURCE_PINGPONG_K"]
    with tga.testing.override(cuda_backend=""):
        for k, tile in ((max_k, "pingpong_128x128_c1x2_tmac"), (max_k + 1024, "cooperative_128x256_c1x2_tmac")):
            a3, w3 = random_operands(8192, k, 768, torch.bfloat16, "cuda")
            r3 = torch.randn(8192, 768, dtype=torch.bfloat16, device="cuda")
            assert tga.explain(a3, w3.t(), bias[:768], activation="relu").startswith("sm90: cooperative_128x256_c1x2,")
            got = tga.explain(a3, w3.t(), bias[:768], r3, beta=1.0)
            assert got.startswith(f"sm90: {tile},"), (k, got)
    odd = torch.randn(2048 * 2048 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(2048, 2048)
    with tga.testing.override(cuda_backend=""):
        for act in ("gelu", "none"):
            for other in (rows.t(), odd, rows[0].expand(2048, 2048)):
                assert tga.explain(a, w.t(), bias, other, activation=act, beta=1.0) == plain[act], act


@requires_cuda
def test_explain_under_autocast_sees_the_cast_cuda():
    a, w = random_operands(64, 136, 200, torch.float32, "cuda")
    with tga.testing.override(cuda_backend="library"), torch.autocast("cuda", dtype=torch.bfloat16):
        assert tga.explain(a, w.t(), None, activation="gelu_tanh") == LT + "GELU [BFloat16]"


@requires_cuda
def test_explain_names_the_forced_sm80_configuration_cuda():
    if "sm80" not in tga.testing.cuda_backends() or torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("needs the sm80 family and a GPU from sm_80 on")
    a, b, bias = _case()
    with tga.testing.override(cuda_backend="sm80"):
        got = tga.explain(a, b, bias, activation="gelu")
        assert got.startswith("sm80: mma_") and got.endswith(", kmajor B [BFloat16]"), got
        got = tga.explain(a, b.contiguous(), bias, activation="gelu")
        assert got.endswith(", nmajor B [BFloat16]"), got
        # What the family cannot run (a misaligned A) goes to the library.
        a_odd = torch.randn(64, 137, dtype=a.dtype, device="cuda")[:, 1:]
        assert tga.explain(a_odd, b, bias, activation="gelu").startswith("library: ")
    with tga.testing.override(cuda_backend=""):
        assert not tga.explain(a, b, bias, activation="gelu").startswith("sm80: ")


def test_explain_names_a_fused_layers_road_and_its_rule_cpu():
    """explain(layer, x): what a fused module runs, and the policy's rule."""
    x = torch.randn(4, 16)
    for layer in (tga.LinearAct(16, 32, activation="relu"), tga.Conv1DAct(32, 16, activation="gelu")):
        assert tga.explain(layer, x) == "ATen's ops, as the modules it replaced ran them (rule cpu_atens)"
        with tga.testing.override(operator_everywhere=True):
            assert tga.explain(layer, x) == "the operator: cpu: ATen's GEMM, then one fused epilogue pass [Float]"
    with pytest.raises(TypeError, match="LinearAct or Conv1DAct"):
        tga.explain(torch.nn.Linear(16, 32), x)


@requires_cuda
def test_explain_names_a_fused_layers_road_and_its_rule_cuda():
    small = tga.LinearAct(256, 512, activation="relu", device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        assert tga.explain(small, x).startswith("ATen's ops, as the modules it replaced ran them (rule host_bound: ")
    # In training a host-bound relu layer records its own node.
    assert tga.explain(small, x).startswith("the operator through the layer's own node (rule own_node): ")
    with torch.no_grad():
        tanh_gelu = tga.LinearAct(256, 512, activation="gelu_tanh", device="cuda", dtype=torch.bfloat16)
        assert tga.explain(tanh_gelu, x) == "torch._addmm_activation, cuBLASLt's epilogue (rule host_bound: " \
            f"{64 * 256 * 512:.3g} multiply-adds < 2^30)"
    large = tga.LinearAct(1024, 1024, activation="gelu", device="cuda", dtype=torch.bfloat16)
    xl = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    assert tga.explain(large, xl) == "the operator: " + tga.explain(xl, large.weight.t(), large.bias, activation="gelu")

"""The fuzz's cases (fuzz.py): the space each route draws from, one case
from one integer seed, and the bars (FLOOR, UNIT) its checks use."""

import dataclasses
import math
import random

import torch

import torch_gemm_act as tga
from torch_gemm_act.activations import GATED, _USES_SLOPE


# "tuned": the rule with a tuned choice (torch_gemm_act.tune's) drawn for each
# problem of the case (fuzz_check.draw_tuned_choices).
CUDA_BACKENDS = ("rule", "tuned", "sm90", "sm80", "library", "simt")
BACKENDS = CUDA_BACKENDS + ("cpu",)

# The bar's floor: an error below it passes whatever PyTorch's own was.
# TF32 rounds the operands to fp16's 11 significant bits: fp16's floor.
FLOOR = {torch.float16: 3e-2, torch.bfloat16: 3e-2, torch.float32: 1e-4, "tf32": 3e-2, torch.float64: 1e-12}
# Unit roundoff of each computing precision, for the tie test.
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24, "tf32": 2.0 ** -11,
        torch.float64: 2.0 ** -53}
TIE_FACTOR = 16.0
RELU_FAMILY = ("relu", "leaky_relu")
INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}

# --------------------------------------------------------------------------
# Drawing a case


def _size(rng, small=False):
    r = rng.random()
    if r < 0.35 or small:
        return rng.randint(1, 40)
    if r < 0.55:
        return rng.choice((1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33))
    if r < 0.75:
        return 8 * rng.randint(1, 64)
    if r < 0.96:
        return rng.choice((63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1023, 1024, 1025))
    return rng.choice((1500, 1536, 2047, 2048, 2056, 3000))


def _dims(rng, device, big_ok=True):
    """(M, K, N), with now and then a problem big enough for the tensor-core
    rule (M*N*K >= 2^32) and K = 0 or 1."""
    if device == "cuda" and big_ok and rng.random() < 0.05:
        pick = (1024, 1536, 1500, 2048, 2047, 2056, 2304, 3072)
        m, k, n = rng.choice(pick), rng.choice(pick), rng.choice(pick)
        while m * n * k < 2 ** 32:
            m, n = 2 * m, n
        return m, k, n
    m, k, n = _size(rng), _size(rng), _size(rng)
    r = rng.random()
    if r < 0.03:
        k = 0
    elif r < 0.07:
        k = 1
    cap = 4e9 if device == "cuda" else 2e6
    while m * n * max(k, 1) > cap:
        big = max(range(3), key=lambda i: (m, k, n)[i])
        m, k, n = [max(1, v // 2) if i == big else v for i, v in enumerate((m, k, n))]
    if device == "cpu":
        m, k, n = min(m, 300), min(k, 300), min(n, 300)
    return m, k, n


def _lead(rng, m):
    """Leading dims of an input with M rows: (M,), or a split of M in two
    or three."""
    r = rng.random()
    if r < 0.7 or m < 2:
        return (m,)
    divisors = [d for d in range(2, min(m, 64) + 1) if m % d == 0]
    if not divisors:
        return (m,)
    d = rng.choice(divisors)
    if r < 0.9 or m // d < 2:
        return (d, m // d)
    rest = m // d
    e = next((x for x in range(2, rest + 1) if rest % x == 0), rest)
    return (d, e, rest // e)


def _precision(rng, device):
    """(dtype, tf32, autocast dtype or None)."""
    r = rng.random()
    if r < 0.3:
        return torch.bfloat16, False, None
    if r < 0.58:
        return torch.float16, False, None
    if r < 0.86:
        amp = None
        if rng.random() < 0.2:
            amp = rng.choice((torch.bfloat16, torch.float16)) if device == "cuda" else torch.bfloat16
        return torch.float32, device == "cuda" and rng.random() < 0.5, amp
    return torch.float64, False, None


@dataclasses.dataclass
class Case:
    seed: int
    route: str
    device: str
    p: dict
    draw: int = 0  # which draw of the data: 0 the case's own, others its redraws

    @property
    def data_seed(self):
        return self.seed if self.draw == 0 else (self.seed * 1000003 + self.draw) % 2 ** 48

    def describe(self):
        return " ".join(f"{k}={v}" for k, v in self.p.items())


def _common(rng, device, p):
    dtype, tf32, amp = _precision(rng, device)
    p.update(dtype=str(dtype).replace("torch.", ""), tf32=tf32, amp=str(amp).replace("torch.", "") if amp else None)
    p["scaled"] = rng.random() < 0.5
    p["reduced_reduction"] = rng.random() < 0.5
    p["train"] = rng.random() < 0.75


def _problem(rng, device):
    """The precision and the problem's size, every route's start."""
    p = {}
    _common(rng, device, p)
    m, k, n = _dims(rng, device)
    p.update(lead=_lead(rng, m), k=k, n=n)
    return p


def _activation(rng, p):
    p["act"] = rng.choice(tga.ACTIVATIONS)
    p["slope"] = rng.choice((0.01, 0.2, 0.0)) if p["act"] in _USES_SLOPE else 0.01


def _special(rng, p, where):
    """Now and then one NaN or +-Inf planted in an input."""
    p["special"] = None
    if rng.random() < 0.04:
        p["special"] = (rng.choice(where), rng.choice(("nan", "inf", "-inf")))


def draw_gemm_act(rng, device):
    p = _problem(rng, device)
    nd = len(p["lead"]) > 1
    p["a"] = rng.choice(("contiguous", "transposed", "offset", "offset_t", "padded", "strided")) if not nd else \
        rng.choice(("contiguous", "offset", "permuted", "strided"))
    p["b"] = rng.choice(("contiguous", "transposed", "offset", "offset_t", "padded", "strided"))
    _activation(rng, p)
    bias = rng.choice(("none", "none", "scalar()", "scalar(1,)", "scalar(1,1)", "column", "column(1,N)",
                       "column_expanded", "column_strided", "row", "row_lead", "row_strided"))
    if bias == "row_lead" and not nd:
        bias = "row"
    p["bias"] = bias
    p["c"] = rng.choice(("none", "wide_rows", "contiguous", "transposed", "offset", "expand_row", "expand_col",
                         "expand_all"))
    p["alpha"] = rng.choice((1.0, 1.0, 0.5, -2.0, 1.7))
    p["beta"] = 0.0 if p["c"] == "none" else rng.choice((0.0, 1.0, 0.7, -1.5))
    p["return_preact"] = rng.random() < 0.4
    p["entry"] = rng.choice(("functional", "functional", "torch_ops"))
    wants = [x for x in ("a", "b", "bias", "c") if rng.random() < 0.7]
    p["grads"] = tuple(x for x in wants if x in ("a", "b") or (x == "bias" and bias != "none")
                       or (x == "c" and p["c"] != "none")) if p["train"] else ()
    p["grad_z"] = p["return_preact"] and rng.random() < 0.5
    _special(rng, p, ("a", "b", "bias", "c"))
    return p


def draw_linear(rng, device, route):
    p = _problem(rng, device)
    p["x"] = rng.choice(("contiguous", "offset", "permuted", "strided")) if len(p["lead"]) > 1 else \
        rng.choice(("contiguous", "transposed", "offset", "strided"))
    p["w"] = rng.choice(("contiguous", "contiguous", "transposed", "offset"))
    _activation(rng, p)
    p["bias"] = rng.random() < 0.7
    if route == "linear_module":
        # fused: the operator at any size; policy: the shipped rule (ATen's
        # ops where host-bound, the C++ node for relu-family training).
        p["path"] = rng.choice(("fused", "policy"))
    p["grads"] = tuple(x for x in ("x", "weight", "bias") if rng.random() < 0.75 and (x != "bias" or p["bias"])) \
        if p["train"] else ()
    _special(rng, p, ("x", "weight"))
    return p


def draw_mlp(rng, device):
    p = _problem(rng, device)
    h = min(_size(rng), 300) if device == "cpu" else _size(rng)
    m = math.prod(p["lead"])
    while m * h * max(p["k"], p["n"], 1) > (4e9 if device == "cuda" else 2e6):
        m = max(1, m // 2)
    p.update(lead=_lead(rng, m), k=max(p["k"], 1), h=h)
    p["kind"] = rng.choice(("sequential", "gpt2", "three", "timm"))
    p["act"] = rng.choice(tga.ACTIVATIONS[1:])
    p["act2"] = rng.choice(tga.ACTIVATIONS[1:])
    p["slope"] = 0.01
    p["bias"] = rng.random() < 0.8
    p["dropout"] = rng.choice((None, 0.0))
    p["path"] = rng.choice(("fused", "policy"))
    p["grads"] = ("x",) if rng.random() < 0.5 else ()
    p["grads"] += ("params",) if p["train"] else ()
    if not p["train"]:
        p["grads"] = ()
    return p


def draw_glu(rng, device, route):
    p = _problem(rng, device)
    p["gated"] = rng.choice(tuple(GATED))
    p["bias"] = rng.random() < 0.5
    p["w"] = rng.choice(("transposed", "transposed", "contiguous", "offset"))
    p["x"] = rng.choice(("contiguous", "offset", "strided")) if len(p["lead"]) == 1 else "contiguous"
    p["return_preact"] = route == "gemm_glu" and rng.random() < 0.4
    if route == "packed_glu":
        p["gate_index"] = rng.choice((0, 1))
    p["grads"] = tuple(x for x in ("x", "params") if rng.random() < 0.8) if p["train"] else ()
    # gemm_glu on CUDA: half the cases one of the sm90 family's configurations
    # forced (the forced family takes every case its kernels can run).
    if route == "gemm_glu" and str(device).startswith("cuda"):
        configs = sorted({k["name"] for k in tga.testing.kernels("sm90", op="gemm_glu")})
        if configs and rng.random() < 0.5:
            p["sm90_kernel"] = rng.choice(configs)
    return p


def draw_compile(rng, device):
    p = {}
    _common(rng, device, p)
    # A small pool of compiled models (each compiled once per process), each
    # called at many row counts; global settings Dynamo guards on are fixed.
    p["model"] = rng.randrange(len(COMPILE_MODELS))
    p["dtype"], p["tf32"] = rng.choice((("bfloat16", False), ("float16", False), ("float32", True)))
    p.update(amp=None, reduced_reduction=False, scaled=True)
    p["m"] = rng.choice((rng.randint(2, 300), 8 * rng.randint(1, 128)))
    return p


# The compile route's models: (activation, K, N, bias, how the model writes
# it: "module", the activation's twin after an nn.Linear; "formula",
# transformers' NewGELUActivation (arithmetic) after one; "conv1d_formula",
# the same after transformers' Conv1D, an addmm between reshapes; "timm",
# timm's Mlp: the module form, then a dropout with p = 0, an identity and a
# second nn.Linear back to K, which the pass chains).
COMPILE_MODELS = (("gelu", 64, 96, True, "module"), ("relu", 128, 40, True, "module"),
                  ("silu", 96, 128, False, "module"), ("gelu_tanh", 80, 64, True, "formula"),
                  ("gelu_tanh", 64, 72, True, "conv1d_formula"), ("gelu", 48, 80, True, "timm"))


def draw_linear_ce(rng, device):
    """linear_cross_entropy: tokens (flat or [batch, sequence]), width,
    vocabulary (odd, chunk-sized, several chunks), bias, reduction, label
    smoothing, softcap, the share of ignored targets, now and then chunks
    of 128 columns (many chunks at small sizes), and the rows road's blocks
    forced (one row to all of them) where the rule would take the chunks or,
    at an aligned vocabulary, eager's ops (rule ce_eager)."""
    p = {}
    _common(rng, device, p)
    tokens = rng.choice((rng.randint(1, 300), 8 * rng.randint(1, 64)))
    p["lead"] = [tokens] if rng.random() < 0.7 or tokens % 4 else [4, tokens // 4]
    p["k"] = rng.choice((rng.randint(1, 96), 16 * rng.randint(1, 16)))
    p["vocab"] = rng.choice((rng.randint(1, 400), rng.randint(400, 5000), 128 * rng.randint(1, 40)))
    p["bias"] = rng.random() < 0.4
    p["reduction"] = rng.choice(("mean", "sum", "none"))
    p["smoothing"] = rng.choice((0.0, 0.0, 0.1, 0.3))
    p["softcap"] = rng.choice((None, None, 30.0, 5.0))
    p["ignored"] = rng.choice((0.0, 0.1, 0.5, 1.0))
    p["small_chunks"] = rng.random() < 0.5
    p["rows"] = rng.choice((None, rng.randint(1, 40), 8 * rng.randint(1, 64), 1 << 20))
    return p


def draw_lm_loss(rng, device):
    """fuse_lm_loss on a tiny transformers model (GPT-2, Llama, BERT's
    masked LM): its training loss against the model's own forward. Tokens,
    width, vocabulary, the share of labelled tokens, num_items_in_batch
    (the causal LMs), now and then chunks of 128 columns, or the rows road
    forced."""
    p = {}
    _common(rng, device, p)
    p["train"] = True  # the routed call is the training loss; any other is the model's own
    p["family"] = rng.choice(("gpt2", "llama", "bert"))
    p["lead"] = [rng.randint(1, 3), rng.randint(2, 40)]
    p["k"] = rng.choice((32, 64))
    p["vocab"] = rng.choice((rng.randint(50, 400), rng.randint(400, 1500)))
    p["labelled"] = rng.choice((0.15, 0.5, 1.0))
    p["num_items"] = p["family"] != "bert" and rng.random() < 0.3
    p["small_chunks"] = rng.random() < 0.5
    p["rows"] = rng.choice((None, rng.randint(1, 40), 1 << 20))
    return p


def draw_compile_lm_loss(rng, device):
    """enable_compile_fusion(lm_loss=True): a compiled loss over a Linear's
    logits as models write it (F.cross_entropy of the logits, of their fp32
    upcast, or nll_loss of their log_softmax; a softcap now and then), with
    linear_cross_entropy's sizes and options."""
    p = draw_linear_ce(rng, device)
    p.update(amp=None, small_chunks=False)  # under autocast the pass leaves the loss (its own test)
    p["rows"] = rng.choice((None, 16, 1 << 20))  # few values: each compiles its own graph
    p["form"] = rng.choice(("cross_entropy", "upcast", "nll"))
    if p["form"] == "nll":
        p.update(smoothing=0.0, softcap=None)
    if p["form"] == "upcast" and p["dtype"] == "float64":
        p["dtype"] = "float32"  # an fp32 upcast of float64 logits is a downcast, which the pass leaves
    return p


def draw_dropout_add(rng, device):
    """linear_dropout_add (nn.Linear's weight), gemm_dropout_add (a [K, N]
    weight, Conv1D's) or a residual output module fused by fuse_linear_act
    (its Linear or Conv1D, the sum's operands in either order, called with
    positional or keyword arguments): the residual's layout, a bias or
    none, p from 0 to 1, training or not; the mask fixed by the global seed
    the case sets."""
    p = _problem(rng, device)
    p["entry"] = rng.choice(("functional", "functional", "conv1d", "module", "conv1d_module"))
    p["branch_first"] = rng.random() < 0.5
    p["keywords"] = rng.random() < 0.3
    p["x"] = rng.choice(("contiguous", "offset", "strided")) if len(p["lead"]) == 1 else "contiguous"
    p["w"] = rng.choice(("contiguous", "contiguous", "transposed", "offset"))
    p["residual"] = rng.choice(("contiguous", "contiguous", "offset", "strided")) if len(p["lead"]) == 1 \
        else "contiguous"
    p["bias"] = rng.random() < 0.7
    p["dropout"] = rng.choice((0.0, 0.1, 0.1, 0.5, 0.9, 1.0))
    p["training"] = rng.random() < 0.85
    p["mask_seed"] = rng.randrange(2 ** 31)
    p["grads"] = tuple(x for x in ("x", "weight", "bias", "residual") if rng.random() < 0.75
                       and (x != "bias" or p["bias"])) if p["train"] else ()
    # On CUDA, half the cases the sm90 fused kernel forced (which only the testing switch chooses).
    if str(device).startswith("cuda"):
        configs = sorted({k["name"] for k in tga.testing.kernels("sm90", op="gemm_dropout_add")})
        if configs and rng.random() < 0.5:
            p["sm90_kernel"] = rng.choice(configs)
    return p


ROUTES = {
    "gemm_act": draw_gemm_act,
    "linear_act": lambda rng, dev: draw_linear(rng, dev, "linear_act"),
    "linear_module": lambda rng, dev: draw_linear(rng, dev, "linear_module"),
    "conv1d": lambda rng, dev: draw_linear(rng, dev, "conv1d"),
    "fuse_mlp": draw_mlp,
    "gemm_glu": lambda rng, dev: draw_glu(rng, dev, "gemm_glu"),
    "gated_linear_act": lambda rng, dev: draw_glu(rng, dev, "gated_linear_act"),
    "gated_module": lambda rng, dev: draw_glu(rng, dev, "gated_module"),
    "packed_glu": lambda rng, dev: draw_glu(rng, dev, "packed_glu"),
    "compile": draw_compile,
    "linear_cross_entropy": draw_linear_ce,
    "fuse_lm_loss": draw_lm_loss,
    "compile_lm_loss": draw_compile_lm_loss,
    "linear_dropout_add": draw_dropout_add,
}


def draw(route, seed, device):
    rng = random.Random(seed)
    return Case(seed, route, device, ROUTES[route](rng, device))


# --------------------------------------------------------------------------
# Data

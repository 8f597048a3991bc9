"""The differential fuzz: every road through the package against float64,
with PyTorch's own error for the same computation in the same dtype as the
bar.

A case is drawn from one integer (its seed): the shapes, layouts, storage
offsets, dtype, activation, bias, C, alpha, beta, which inputs require a
gradient, autocast and TF32, and then its data. It runs three times:
ours (the road under test), PyTorch's own unfused composite in the same
dtype, and that composite in float64 on the same device (the reference).
Each output and each gradient fails when its error, max |got - ref| over
max |ref|, exceeds max(3 x PyTorch's error, FLOOR[dtype]). In the same run:
no input and no incoming gradient is modified, no output aliases an input,
a second identical call is bitwise identical, and where an input holds NaN
or Inf the outputs are non-finite exactly where PyTorch's are.

A relu-family derivative at an element whose pre-activation is within
rounding of 0 may go either way (a tie): the reference takes there the side
the road under test took (from its output), and PyTorch's error is measured
with its own side.

A case that fails is drawn again with fresh data REDRAWS times; the failure
is confirmed (FAIL) when at least CONFIRM redraws fail too, and reported
apart (UNCONFIRMED) otherwise.

Command line (each failure prints one line that replays it):
    python tests/fuzz.py --route gemm_act --backend rule sm90 --cases 10000
    python tests/fuzz.py --route linear_module --replay 123456789
Routes: see ROUTES; backends: rule, sm90, sm80, library, simt (CUDA, the
testing switch) and cpu. Prints `fuzz <name>: <N> cases, <F> failed` per
route and backend.
"""

import argparse
import contextlib
import copy
import dataclasses
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_act as tga
from torch_gemm_act import testing
from torch_gemm_act.activations import GATED, GRAD_FROM_OUTPUT, USES_SLOPE, twin

CUDA_BACKENDS = ("rule", "sm90", "sm80", "library", "simt")
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
    p["slope"] = rng.choice((0.01, 0.2, 0.0)) if p["act"] in USES_SLOPE else 0.01


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
    p["c"] = rng.choice(("none", "none", "contiguous", "transposed", "offset", "expand_row", "expand_col",
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
    p["kind"] = rng.choice(("sequential", "gpt2", "three"))
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


# The compile route's models: (activation, K, N, bias).
COMPILE_MODELS = (("gelu", 64, 96, True), ("relu", 128, 40, True), ("silu", 96, 128, False))


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
}


def draw(route, seed, device):
    rng = random.Random(seed)
    return Case(seed, route, device, ROUTES[route](rng, device))


# --------------------------------------------------------------------------
# Data


class Data:
    """Random tensors from one generator on the case's device; `bases`
    keeps every storage made, to check that none is written."""

    def __init__(self, seed, device):
        self.device = device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.bases = []

    def randn(self, *shape, dtype=torch.float32, scale=1.0):
        t = torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float64) * scale
        t = t.to(dtype)
        self.bases.append(t)
        return t

    def matrix(self, rows, cols, layout, dtype, scale=1.0):
        """[rows, cols] laid out as asked: contiguous, transposed (column-major),
        offset / offset_t (1-5 elements into their storage), padded (a padded
        leading dimension, misaligned), strided (no unit stride)."""
        off = 1 + int(torch.randint(5, (), generator=self.gen, device=self.device))
        if layout == "contiguous":
            return self.randn(rows, cols, dtype=dtype, scale=scale)
        if layout == "transposed":
            return self.randn(cols, rows, dtype=dtype, scale=scale).t()
        if layout == "offset":
            return self.randn(rows * cols + off, dtype=dtype, scale=scale)[off:].view(rows, cols)
        if layout == "offset_t":
            return self.randn(rows * cols + off, dtype=dtype, scale=scale)[off:].view(cols, rows).t()
        if layout == "padded":
            return self.randn(rows + 1, cols + off, dtype=dtype, scale=scale)[1:, off - 1:off - 1 + cols]
        if layout == "strided":
            return self.randn(rows, 2 * cols + 1, dtype=dtype, scale=scale)[:, 1::2]
        raise ValueError(layout)

    def input(self, lead, cols, layout, dtype, scale=1.0):
        """[*lead, cols]: a matrix layout for a 2-D input; for N-D, contiguous,
        offset, permuted (leading dims transposed: no 2-D view) or strided."""
        if len(lead) == 1:
            return self.matrix(lead[0], cols, layout, dtype, scale)
        m = math.prod(lead)
        if layout == "contiguous":
            return self.randn(*lead, cols, dtype=dtype, scale=scale)
        if layout == "offset":
            return self.matrix(m, cols, "offset", dtype, scale).view(*lead, cols)
        if layout == "permuted":
            return self.randn(lead[1], lead[0], *lead[2:], cols, dtype=dtype, scale=scale).transpose(0, 1)
        if layout == "strided":
            return self.randn(*lead, 2 * cols, dtype=dtype, scale=scale)[..., ::2]
        raise ValueError(layout)

    def like(self, t):
        return self.randn(*t.shape, dtype=t.dtype)


def _plant(data, t, value):
    """One element of t (a view of a storage the case owns) set to value."""
    if t is None or t.numel() == 0:
        return
    flat_index = int(torch.randint(t.numel(), (), generator=data.gen, device=data.device))
    idx = []
    for s in reversed(t.shape):
        idx.append(flat_index % s)
        flat_index //= s
    with torch.no_grad():
        t[tuple(reversed(idx))] = float(value)


# --------------------------------------------------------------------------
# The float64 side: an activation whose relu-family derivative follows a
# hint at ties


class _TieAct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, act, slope, tie, positive):
        ctx.save_for_backward(z, tie, positive)
        ctx.act, ctx.slope = act, slope
        return twin(act, slope)(z)

    @staticmethod
    def backward(ctx, g):
        z, tie, positive = ctx.saved_tensors
        with torch.enable_grad():
            zz = z.detach().requires_grad_()
            (d,) = torch.autograd.grad(twin(ctx.act, ctx.slope)(zz), zz, g)
        if tie is not None:
            low = g * (0.0 if ctx.act == "relu" else ctx.slope)
            d = torch.where(tie, torch.where(positive, g, low), d)
        return d, None, None, None, None


def act64(z, mag, act, slope, hint, unit):
    """act(z) in float64; for the relu family, ties (|z| within rounding of 0,
    mag the sum of the magnitudes z adds up) take the side of `hint` (the
    road's output of this activation, or a tensor of its sign)."""
    if act not in RELU_FAMILY or hint is None:
        return twin(act, slope)(z)
    tie = z.detach().abs() <= TIE_FACTOR * unit * mag
    positive = (hint.detach() > 0).reshape(z.shape)
    return _TieAct.apply(z, act, slope, tie, positive)


# --------------------------------------------------------------------------
# Routes: each builds a Trial


@dataclasses.dataclass
class Trial:
    inputs: dict           # name -> tensor (requires_grad where its gradient is checked)
    ours: object           # () -> (outputs, hint)
    theirs: object         # () -> (outputs, hint)
    ref: object            # (inputs64, hint) -> outputs
    comp: object           # the computing precision (a dtype, or "tf32")
    grad_outputs: tuple = ()   # which outputs receive a gradient
    explain: object = None
    settings: object = None    # () -> context manager for every run
    theirs_alt: object = None  # PyTorch's other natural formulation, as theirs
    ties: bool = False         # whether a relu-family derivative follows the hint


def _dtype(p):
    return getattr(torch, p["dtype"])


def _comp(p):
    if p.get("amp"):
        return getattr(torch, p["amp"])
    if p["dtype"] == "float32" and p["tf32"]:
        return "tf32"
    return _dtype(p)


@contextlib.contextmanager
def _settings(p, device):
    matmul = torch.backends.cuda.matmul
    saved = (matmul.allow_tf32, matmul.allow_fp16_reduced_precision_reduction,
             matmul.allow_bf16_reduced_precision_reduction)
    matmul.allow_tf32 = bool(p.get("tf32"))
    matmul.allow_fp16_reduced_precision_reduction = bool(p.get("reduced_reduction"))
    matmul.allow_bf16_reduced_precision_reduction = bool(p.get("reduced_reduction"))
    try:
        yield
    finally:
        (matmul.allow_tf32, matmul.allow_fp16_reduced_precision_reduction,
         matmul.allow_bf16_reduced_precision_reduction) = saved


def _amp(p, device):
    if p.get("amp"):
        return torch.autocast(device, dtype=getattr(torch, p["amp"]))
    return contextlib.nullcontext()


def _bias_view(bias, kind, m, n):
    """bias as it broadcasts against the [M, N] pre-activation."""
    if kind.startswith("scalar"):
        return bias.reshape(())
    if kind.startswith("column"):
        return bias.reshape(n)
    return bias.reshape(m, 1)


def _mag(a2, b, alpha=1.0):
    return abs(alpha) * (a2.detach().abs() @ b.detach().abs())


def build_gemm_act(case, data):
    p, dev = case.p, case.device
    dtype, lead, k, n = _dtype(p), tuple(p["lead"]), p["k"], p["n"]
    m = math.prod(lead)
    bscale = 1.0 / math.sqrt(k) if p["scaled"] and k > 0 else 1.0
    a = data.input(lead, k, p["a"], dtype)
    b = data.matrix(k, n, p["b"], dtype, bscale)
    kind = p["bias"]
    bias = {
        "none": lambda: None,
        "scalar()": lambda: data.randn(dtype=dtype),
        "scalar(1,)": lambda: data.randn(1, dtype=dtype),
        "scalar(1,1)": lambda: data.randn(1, 1, dtype=dtype),
        "column": lambda: data.randn(n, dtype=dtype),
        "column(1,N)": lambda: data.randn(1, n, dtype=dtype),
        "column_expanded": lambda: data.randn(1, dtype=dtype).expand(n),
        "column_strided": lambda: data.randn(2 * n, dtype=dtype)[::2],
        "row": lambda: data.randn(m, 1, dtype=dtype),
        "row_lead": lambda: data.randn(*lead, 1, dtype=dtype),
        "row_strided": lambda: data.randn(m, 2, dtype=dtype)[:, :1],
    }[kind]()
    out_shape = (*lead, n)
    c = {
        "none": lambda: None,
        "contiguous": lambda: data.randn(*out_shape, dtype=dtype),
        "transposed": lambda: data.matrix(m, n, "transposed", dtype).reshape(out_shape) if len(lead) == 1 else
        data.input(lead, n, "permuted", dtype),
        "offset": lambda: data.matrix(m, n, "offset", dtype).view(out_shape),
        "expand_row": lambda: data.randn(n, dtype=dtype).expand(out_shape),
        "expand_col": lambda: data.randn(*lead, 1, dtype=dtype).expand(out_shape),
        "expand_all": lambda: data.randn(1, dtype=dtype).reshape([1] * len(out_shape)).expand(out_shape),
    }[p["c"]]()
    if p["special"]:
        where, value = p["special"]
        _plant(data, {"a": a, "b": b, "bias": bias, "c": c}[where], {"nan": math.nan, "inf": math.inf,
                                                              "-inf": -math.inf}[value])
    inputs = {"a": a, "b": b}
    if bias is not None:
        inputs["bias"] = bias
    if c is not None:
        inputs["c"] = c
    for name in p["grads"]:
        inputs[name].requires_grad_(True)
    act, slope, alpha, beta = p["act"], p["slope"], p["alpha"], p["beta"]
    preact = p["return_preact"]
    unit = UNIT[_comp(p)]

    def ours():
        t = inputs
        if p["entry"] == "torch_ops":
            store = preact or (act not in GRAD_FROM_OUTPUT and bool(p["grads"]))
            y, z = torch.ops.gemm_act.gemm_act(t["a"], t["b"], t.get("bias"), t.get("c"), act, alpha, beta,
                                               slope, store)
            outs = (y, z) if preact else (y,)
        else:
            out = tga.gemm_act(t["a"], t["b"], t.get("bias"), t.get("c"), activation=act, alpha=alpha, beta=beta,
                               negative_slope=slope, return_preact=preact)
            outs = tuple(out) if preact else (out,)
        return outs, outs[0]

    def composite(t, act_fn):
        a2 = t["a"].reshape(m, k)
        z = torch.matmul(a2, t["b"])
        if alpha != 1.0:
            z = z * alpha
        if "c" in t and beta != 0.0:
            z = z + beta * t["c"].reshape(m, n)
        if "bias" in t:
            z = z + _bias_view(t["bias"], kind, m, n)
        y = act_fn(z, t)
        return (y.reshape(out_shape), z.reshape(out_shape)) if preact else (y.reshape(out_shape),)

    def theirs():
        outs = composite(inputs, lambda z, t: twin(act, slope)(z))
        return outs, outs[0]

    def theirs_alt():
        # addmm's form: the GEMM's result rounded once with C and the bias added.
        t = inputs
        addend = torch.zeros((), dtype=t["a"].dtype, device=dev)
        if "c" in t and beta != 0.0:
            addend = addend + beta * t["c"].reshape(m, n)
        if "bias" in t:
            addend = addend + _bias_view(t["bias"], kind, m, n)
        z = torch.addmm(addend.expand(m, n), t["a"].reshape(m, k), t["b"], alpha=alpha)
        y = twin(act, slope)(z)
        outs = (y.reshape(out_shape), z.reshape(out_shape)) if preact else (y.reshape(out_shape),)
        return outs, outs[0]

    def ref(t64, hint):
        def act_fn(z, t):
            a2 = t["a"].reshape(m, k)
            mag = _mag(a2, t["b"], alpha)
            if "c" in t and beta != 0.0:
                mag = mag + abs(beta) * t["c"].detach().reshape(m, n).abs()
            if "bias" in t:
                mag = mag + _bias_view(t["bias"].detach(), kind, m, n).abs()
            return act64(z, mag, act, slope, hint, unit)
        return composite(t64, act_fn)

    grad_outputs = (True, p["grad_z"]) if preact else (True,)

    def explain():
        t = inputs
        return tga.explain(t["a"], t["b"], t.get("bias"), t.get("c"), activation=act, alpha=alpha, beta=beta,
                           negative_slope=slope, return_preact=preact)

    return Trial(inputs, ours, theirs, ref, _comp(p), grad_outputs, explain, theirs_alt=theirs_alt,
                 ties=act in RELU_FAMILY)


def _fused_everywhere():
    """The fused operator at any size and on the CPU, as the module tests
    run it (tests/conftest.py, operator_everywhere)."""
    return testing.override(operator_everywhere=True)


def build_linear(case, data):
    """linear_act, LinearAct (fused or the shipped policy) and Conv1DAct
    against nn.Linear / Conv1D's formula and the activation's module."""
    p, dev, route = case.p, case.device, case.route
    dtype, lead, k, n = _dtype(p), tuple(p["lead"]), p["k"], p["n"]
    m = math.prod(lead)
    wscale = 1.0 / math.sqrt(k) if p["scaled"] and k > 0 else 1.0
    x = data.input(lead, k, p["x"], dtype)
    conv = route == "conv1d"
    # The weight as the module holds it: [N, K] (Linear) or [K, N] (Conv1D).
    w = data.matrix(k, n, p["w"], dtype, wscale) if conv else data.matrix(n, k, p["w"], dtype, wscale)
    bias = data.randn(n, dtype=dtype) if p["bias"] else None
    if p["special"]:
        where, value = p["special"]
        _plant(data, {"x": x, "weight": w}[where], {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[value])
    act, slope = p["act"], p["slope"]
    inputs = {"x": x, "weight": w}
    if bias is not None:
        inputs["bias"] = bias
    for name in p["grads"]:
        inputs[name].requires_grad_(True)
    unit = UNIT[_comp(p)]

    if route == "linear_act":
        def run():
            return tga.linear_act(inputs["x"], inputs["weight"], inputs.get("bias"), act, slope)
        settings = None
    else:
        if conv:
            module = tga.Conv1DAct(n, k, activation=act, negative_slope=slope, device="meta")
        else:
            module = tga.LinearAct(k, n, bias=bias is not None, activation=act, negative_slope=slope, device="meta")
        # The case's tensors as the module's parameters (their layout kept).
        module.weight = nn.Parameter(w, requires_grad=w.requires_grad)
        module.bias = nn.Parameter(bias, requires_grad=bias.requires_grad) if bias is not None else None
        inputs["weight"] = module.weight
        if bias is not None:
            inputs["bias"] = module.bias

        def run():
            return module(inputs["x"])
        fused = route == "conv1d" or p["path"] == "fused"
        settings = _fused_everywhere if fused else None

    def ours():
        y = run()
        return (y,), y

    def formula(t, act_fn):
        x2 = t["x"].reshape(m, k)
        wt = t["weight"] if conv else t["weight"].t()
        z = x2 @ wt
        if "bias" in t:
            z = z + t["bias"]
        return (act_fn(z, x2, wt).reshape(*lead, n),)

    def theirs():
        if conv:  # Conv1D's own formula
            x2 = inputs["x"].reshape(m, k)
            z = torch.addmm(inputs["bias"], x2, inputs["weight"]) if "bias" in inputs else x2 @ inputs["weight"]
            outs = (twin(act, slope)(z).reshape(*lead, n),)
        else:
            outs = (twin(act, slope)(F.linear(inputs["x"], inputs["weight"], inputs.get("bias"))),)
        return outs, outs[0]

    def theirs_alt():
        outs = formula(inputs, lambda z, x2, wt: twin(act, slope)(z))
        return outs, outs[0]

    def ref(t64, hint):
        def act_fn(z, x2, wt):
            mag = _mag(x2, wt) + (t64["bias"].detach().abs() if "bias" in t64 else 0.0)
            return act64(z, mag, act, slope, hint, unit)
        return formula(t64, act_fn)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True,), settings=settings, theirs_alt=theirs_alt,
                 ties=act in RELU_FAMILY)


def _conv1d_class():
    try:
        from transformers.pytorch_utils import Conv1D
        return Conv1D
    except Exception:  # noqa: BLE001 - transformers absent: GPT-2's MLP built of Linears
        return None


class _Gpt2Mlp(nn.Module):
    """GPT-2's MLP: c_fc, act, c_proj, dropout (Conv1D where transformers is there)."""

    def __init__(self, k, h, n, act, dropout):
        super().__init__()
        conv = _conv1d_class()
        self.c_fc = conv(h, k) if conv else nn.Linear(k, h)
        self.act = act
        self.c_proj = conv(n, h) if conv else nn.Linear(h, n)
        self.dropout = nn.Dropout(dropout or 0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


def _weights_of(layer):
    """(W as [N, K], bias) of a Linear or Conv1D."""
    if isinstance(layer, nn.Linear):
        return layer.weight, layer.bias
    return layer.weight.t(), layer.bias


def build_mlp(case, data):
    """fuse_linear_act on an MLP against the unfused model."""
    p, dev = case.p, case.device
    dtype, lead, k, h, n = _dtype(p), tuple(p["lead"]), p["k"], p["h"], p["n"]
    m = math.prod(lead)
    act, act2 = p["act"], p["act2"]
    kind = p["kind"]
    torch.manual_seed(case.data_seed % (2 ** 31))
    if kind == "sequential":
        model = nn.Sequential(nn.Linear(k, h, bias=p["bias"]), twin(act), nn.Linear(h, n, bias=p["bias"]))
    elif kind == "three":
        model = nn.Sequential(nn.Linear(k, h, bias=p["bias"]), twin(act), nn.Linear(h, h, bias=p["bias"]),
                              twin(act2), nn.Linear(h, n, bias=p["bias"]))
    else:
        model = _Gpt2Mlp(k, h, n, twin(act), p["dropout"])
    model = model.to(device=dev, dtype=dtype)
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, generator=data.gen, device=dev, dtype=torch.float64)
                      * (1.0 / math.sqrt(prm.shape[-1]) if p["scaled"] else 1.0))
    fused = tga.fuse_linear_act(copy.deepcopy(model))
    x = data.input(lead, k, "contiguous", dtype)
    inputs = {"x": x}
    layers = [mod for mod in model.modules() if isinstance(mod, nn.Linear) or type(mod).__name__ == "Conv1D"]
    fused_layers = [mod for mod in fused.modules() if hasattr(mod, "weight") and mod.weight.dim() == 2]
    if "params" in p["grads"]:
        for i, mod in enumerate(fused_layers):
            inputs[f"w{i}"] = mod.weight
            if mod.bias is not None:
                inputs[f"b{i}"] = mod.bias
    else:
        for prm in fused.parameters():
            prm.requires_grad_(False)
    for prm in model.parameters():
        prm.requires_grad_(False)
    if "x" in p["grads"]:
        x.requires_grad_(True)
    acts = [act, act2] if kind == "three" else [act]
    unit = UNIT[_comp(p)]
    fused_acts = [mod for mod in fused.modules() if isinstance(mod, (tga.LinearAct, tga.Conv1DAct))
                  and mod.activation != "none"]

    def capture(modules):
        seen = []
        hooks = [mod.register_forward_hook(lambda mod, i, o: seen.append(o)) for mod in modules]
        return seen, hooks

    def ours():
        seen, hooks = capture(fused_acts)
        try:
            y = fused(inputs["x"])
        finally:
            for hk in hooks:
                hk.remove()
        return (y,), seen

    def theirs():
        mods = [mod for mod in model.modules() if type(mod) in (type(twin(a)) for a in acts)]
        seen, hooks = capture(mods)
        # The unfused model with the fused model's parameters (the same tensors).
        params = dict(model.named_parameters())
        saved = {name: prm for name, prm in params.items()}
        try:
            for (name, _), fprm in zip(model.named_parameters(), fused.parameters()):
                _set_param(model, name, fprm)
            y = model(inputs["x"])
        finally:
            for hk in hooks:
                hk.remove()
            for name, prm in saved.items():
                _set_param(model, name, prm)
        return (y,), seen

    def ref(t64, hints):
        params = [t64.get(f"w{i}") for i in range(len(fused_layers))]
        h_ = t64["x"].reshape(m, k)
        for i, mod in enumerate(fused_layers):
            w = params[i] if params[i] is not None else mod.weight.detach().to(torch.float64)
            bias = t64.get(f"b{i}")
            if bias is None and mod.bias is not None:
                bias = mod.bias.detach().to(torch.float64)
            wt = w if isinstance(mod, tga.Conv1DAct) or type(mod).__name__ == "Conv1D" else w.t()
            z = h_ @ wt
            mag = _mag(h_, wt)
            if bias is not None:
                z, mag = z + bias, mag + bias.detach().abs()
            if i < len(acts):
                hint = hints[i] if hints is not None and i < len(hints) else None
                h_ = act64(z, mag, acts[i], 0.01, hint, unit)
            else:
                h_ = z
        return (h_.reshape(*lead, n),)

    settings = _fused_everywhere if p["path"] == "fused" else None
    return Trial(inputs, ours, theirs, ref, _comp(p), (True,), settings=settings,
                 ties=any(a in RELU_FAMILY for a in acts))


def _set_param(model, dotted, value):
    *path, name = dotted.split(".")
    mod = model
    for part in path:
        mod = getattr(mod, part)
    mod._parameters[name] = value


class _GluMlp(nn.Module):
    """timm's GluMlp: fc1 packs both projections, split by chunk."""

    def __init__(self, k, n, act, gate_index, bias):
        super().__init__()
        self.fc1 = nn.Linear(k, 2 * n, bias=bias)
        self.act = act
        self.gate_index = gate_index

    def forward(self, x):
        x = self.fc1(x)
        x1, x2 = x.chunk(2, dim=-1)
        return x1 * self.act(x2) if self.gate_index == 1 else self.act(x1) * x2


class _LlamaMlp(nn.Module):
    def __init__(self, k, n, act, bias):
        super().__init__()
        self.gate_proj = nn.Linear(k, n, bias=bias)
        self.up_proj = nn.Linear(k, n, bias=bias)
        self.act_fn = act

    def forward(self, x):
        return self.act_fn(self.gate_proj(x)) * self.up_proj(x)


def build_glu(case, data):
    """gemm_glu, gated_linear_act, GatedLinearAct (through fuse_linear_act on
    a Llama MLP) and the packed form (fuse_linear_act on timm's GluMlp)."""
    p, dev, route = case.p, case.device, case.route
    dtype, lead, k, n = _dtype(p), tuple(p["lead"]), p["k"], p["n"]
    m = math.prod(lead)
    gated = p["gated"]
    gate_act = GATED[gated]
    wscale = 1.0 / math.sqrt(k) if p["scaled"] and k > 0 else 1.0
    x = data.input(lead, k, p["x"], dtype)
    # Weights [N, K] as nn.Linear holds them.
    wg = data.matrix(n, k, p["w"], dtype, wscale)
    wu = data.matrix(n, k, p["w"], dtype, wscale)
    bg = data.randn(n, dtype=dtype) if p["bias"] else None
    bu = data.randn(n, dtype=dtype) if p["bias"] else None
    unit = UNIT[_comp(p)]
    preact = p["return_preact"]
    inputs = {"x": x}
    settings = None
    if route in ("gemm_glu", "gated_linear_act"):
        inputs.update(wg=wg, wu=wu)
        if bg is not None:
            inputs.update(bg=bg, bu=bu)

        def run():
            t = inputs
            if route == "gemm_glu":
                out = tga.gemm_glu(t["x"], t["wg"].t(), t["wu"].t(), t.get("bg"), t.get("bu"), activation=gated,
                                   return_preact=preact)
                return tuple(out) if preact else (out,)
            return (tga.gated_linear_act(t["x"], t["wg"], t["wu"], t.get("bg"), t.get("bu"), gated),)
    else:
        if route == "gated_module":
            model = _LlamaMlp(k, n, twin(gate_act), p["bias"])
        else:
            model = _GluMlp(k, n, twin(gate_act), p["gate_index"], p["bias"])
        model = model.to(device=dev, dtype=dtype)
        with torch.no_grad():
            if route == "gated_module":
                model.gate_proj.weight.copy_(wg)
                model.up_proj.weight.copy_(wu)
                if bg is not None:
                    model.gate_proj.bias.copy_(bg)
                    model.up_proj.bias.copy_(bu)
            else:
                halves = (wg, wu) if p["gate_index"] == 0 else (wu, wg)
                model.fc1.weight.copy_(torch.cat(halves))
                if bg is not None:
                    model.fc1.bias.copy_(torch.cat((bg, bu) if p["gate_index"] == 0 else (bu, bg)))
        model = tga.fuse_linear_act(model)
        for name, prm in model.named_parameters():
            inputs[name] = prm
        settings = _fused_everywhere

        def run():
            return (model(inputs["x"]),)

    names = [name for name in inputs if name != "x"]
    if "params" in p["grads"]:
        for name in names:
            inputs[name].requires_grad_(True)
    else:
        for name in names:
            inputs[name].requires_grad_(False)
    if "x" in p["grads"]:
        x.requires_grad_(True)

    def weights(t):
        """(wg, wu, bg, bu) from the inputs (any route's parameter names)."""
        if "wg" in t:
            return t["wg"], t["wu"], t.get("bg"), t.get("bu")
        if "gate_proj.weight" in t:
            return t["gate_proj.weight"], t["up_proj.weight"], t.get("gate_proj.bias"), t.get("up_proj.bias")
        w1, b1 = t["fc1.weight"].chunk(2), (t["fc1.bias"].chunk(2) if "fc1.bias" in t else (None, None))
        order = (0, 1) if p["gate_index"] == 0 else (1, 0)
        return w1[order[0]], w1[order[1]], b1[order[0]], b1[order[1]]

    def formula(t, act_fn):
        w_g, w_u, b_g, b_u = weights(t)
        x2 = t["x"].reshape(m, k)
        g = x2 @ w_g.t()
        u = x2 @ w_u.t()
        if b_g is not None:
            g, u = g + b_g, u + b_u
        y = (act_fn(g, x2, w_g, b_g) * u).reshape(*lead, n)
        return (y, torch.cat([g, u], -1).reshape(*lead, 2 * n)) if preact else (y,)

    def ours():
        outs = run()
        return outs, outs[0]

    def theirs():
        outs = formula(inputs, lambda g, *_: twin(gate_act)(g))
        return outs, outs[0]

    def theirs_alt():
        # As nn.Linear computes each projection (its bias in the GEMM's epilogue).
        w_g, w_u, b_g, b_u = weights(inputs)
        g, u = F.linear(inputs["x"], w_g, b_g), F.linear(inputs["x"], w_u, b_u)
        y = twin(gate_act)(g) * u
        outs = (y, torch.cat([g, u], -1)) if preact else (y,)
        return outs, outs[0]

    def ref(t64, hint):
        def act_fn(g, x2, w_g, b_g):
            mag = _mag(x2, w_g.t()) + (b_g.detach().abs() if b_g is not None else 0.0)
            # y = relu(g) * u is nonzero exactly where relu passed g.
            positive = (hint.detach() != 0).reshape(g.shape).to(torch.float64) if hint is not None else None
            return act64(g, mag, gate_act, 0.01, positive, unit)
        return formula(t64, act_fn)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True, False) if preact else (True,), settings=settings,
                 theirs_alt=theirs_alt, ties=gate_act in RELU_FAMILY)


_COMPILED = {}


def build_compile(case, data):
    """The compile-fusion pass against compiled eager, both against float64."""
    p, dev = case.p, case.device
    dtype = _dtype(p)
    act, k, n, has_bias = COMPILE_MODELS[p["model"]]
    key = (p["model"], p["dtype"], p["train"], p["tf32"])
    if key not in _COMPILED:
        # Every pool model is an nn.Sequential (one code object for Dynamo):
        # past its recompile limit a model would run eagerly, untested.
        import torch._dynamo  # loaded by torch.compile, imported here before it
        config = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(config, name):
                setattr(config, name, max(getattr(config, name), 1024))
        torch.manual_seed(p["model"])
        base = nn.Sequential(nn.Linear(k, n, bias=has_bias), twin(act)).to(device=dev, dtype=dtype)
        tga.enable_compile_fusion(True)
        try:
            fused = torch.compile(copy.deepcopy(base), dynamic=True)
            fused(torch.randn(8, k, device=dev, dtype=dtype, requires_grad=p["train"]))
        finally:
            tga.enable_compile_fusion(False)
        eager = torch.compile(copy.deepcopy(base), dynamic=True)
        _COMPILED[key] = (base, fused, eager)
    base, fused, eager = _COMPILED[key]
    m = p["m"]
    x = data.randn(m, k, dtype=dtype)
    if p["train"]:
        x.requires_grad_(True)
    inputs = {"x": x}
    unit = UNIT[_comp(p)]
    lin = base[0]

    def ours():
        tga.enable_compile_fusion(True)
        try:
            y = fused(inputs["x"])
        finally:
            tga.enable_compile_fusion(False)
        return (y,), y

    def theirs():
        y = eager(inputs["x"])
        return (y,), y

    def theirs_alt():
        y = base(inputs["x"])
        return (y,), y

    def ref(t64, hint):
        w = lin.weight.detach().double()
        z = t64["x"] @ w.t()
        mag = _mag(t64["x"], w.t())
        if lin.bias is not None:
            z, mag = z + lin.bias.detach().double(), mag + lin.bias.detach().double().abs()
        return (act64(z, mag, act, 0.01, hint, unit),)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True,), theirs_alt=theirs_alt, ties=act in RELU_FAMILY)


BUILDERS = {"gemm_act": build_gemm_act, "linear_act": build_linear, "linear_module": build_linear,
            "conv1d": build_linear, "fuse_mlp": build_mlp, "gemm_glu": build_glu, "gated_linear_act": build_glu,
            "gated_module": build_glu, "packed_glu": build_glu, "compile": build_compile}

# --------------------------------------------------------------------------
# Running and checking a trial


def _storages(t):
    if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    s = t.untyped_storage()
    return (s.data_ptr(), s.data_ptr() + s.nbytes())


def _overlaps(x, y):
    return x is not None and y is not None and x[0] < y[1] and y[0] < x[1]


def _bits(t):
    t = t.detach()
    return t.view(INT_VIEW[t.dtype]).clone() if t.dtype in INT_VIEW else t.clone()


def _err_parts(got, ref):
    """(max |got - ref|, max |ref|) over the elements where both are finite,
    as 0-d float64 tensors on their device."""
    got, ref = got.detach().to(torch.float64), ref.detach().to(torch.float64)
    if ref.numel() == 0:
        return ref.new_zeros(()), ref.new_zeros(())
    finite = torch.isfinite(got) & torch.isfinite(ref)
    return torch.where(finite, got - ref, 0.0).abs().max(), torch.where(finite, ref, 0.0).abs().max()


def _nonfinite_pattern(t):
    """NaN, +Inf and -Inf positions, as one tensor of codes."""
    t = t.detach()
    return torch.where(torch.isnan(t), 1, 0) + torch.where(t == math.inf, 2, 0) + torch.where(t == -math.inf, 3, 0)


class Failure(Exception):
    pass


def _grads(outs, wrt, gouts, want):
    pairs = [(o, g) for o, g, w in zip(outs, gouts, want) if w and o is not None and o.requires_grad]
    if not pairs or not wrt:
        return [None] * len(wrt)
    return list(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True))


def run_case(case, determinism=True):
    """Runs one case; raises Failure with what went wrong."""
    p, dev = case.p, case.device
    data = Data(case.data_seed, dev)
    trial = BUILDERS[case.route](case, data)
    settings = trial.settings() if trial.settings else contextlib.nullcontext()
    with settings, _settings(p, dev):
        return _check(case, data, trial, determinism)


def _check(case, data, trial, determinism):
    """Runs the trial's three sides and checks them; the device's scalars are
    read back at once (a read per check would wait on the GPU each time)."""
    p, dev = case.p, case.device
    wrt_names = [name for name, t in trial.inputs.items() if t.requires_grad]
    wrt = [trial.inputs[name] for name in wrt_names]
    in_storages = [_storages(t) for t in data.bases]
    # Inputs are views of the case's storages, but for modules' own parameters.
    held = data.bases + [t for t in trial.inputs.values() if not any(_overlaps(_storages(t), s) for s in in_storages)]
    snapshot = [(t, _bits(t)) for t in held]
    in_storages = [_storages(t) for t in held]

    def call(fn):
        with _amp(p, dev):
            return fn()

    outs, hint = call(trial.ours)
    gouts = [data.randn(*o.shape, dtype=o.dtype) if want else None for o, want in zip(outs, trial.grad_outputs)]
    given = [g for g in gouts if g is not None]
    gsnap = [_bits(g) for g in given]
    grads = _grads(outs, wrt, gouts, trial.grad_outputs)
    problems = []  # found on the host
    flags = []     # (what is wrong if the device's 0-d bool is false, the bool)
    flags.append(("an input was modified", torch.stack([(_bits(t) == b).all() for t, b in snapshot]).all()))
    if given:
        flags.append(("an incoming gradient was modified",
                      torch.stack([(_bits(g) == b).all() for g, b in zip(given, gsnap)]).all()))
    for i, o in enumerate(list(outs) + [g for g in grads if g is not None]):
        if any(_overlaps(_storages(o), s) for s in in_storages):
            problems.append(f"output {i} aliases an input")
    if determinism:
        outs2, _ = call(trial.ours)
        grads2 = _grads(outs2, wrt, gouts, trial.grad_outputs)
        for name, x, y in zip([f"out{i}" for i in range(len(outs))] + wrt_names, list(outs) + grads,
                              list(outs2) + grads2):
            if (x is None) != (y is None) or (x is not None and (x.shape != y.shape or x.dtype != y.dtype)):
                problems.append(f"{name}: a second identical call differs")
            elif x is not None:
                flags.append((f"{name}: a second identical call differs", (_bits(x) == _bits(y)).all()))

    def pytorch(fn):
        touts, thint = call(fn)
        tgouts = [None if g is None else g.to(t.dtype) for g, t in zip(gouts, touts)]
        return list(touts) + _grads(touts, wrt, tgouts, trial.grad_outputs), thint

    theirs, thint = pytorch(trial.theirs)
    # Float64 references, the ties following each side's own.
    t64 = {name: t.detach().to(torch.float64).requires_grad_(t.requires_grad) for name, t in trial.inputs.items()}
    wrt64 = [t64[name] for name in wrt_names]
    g64 = [None if g is None else g.to(torch.float64) for g in gouts]

    def reference(h):
        r = trial.ref(t64, h)
        return [o.detach() for o in r] + _grads(r, wrt64, g64, trial.grad_outputs)
    ref = reference(hint)
    tref = reference(thint) if trial.ties else ref

    names = [f"out{i}" for i in range(len(outs))] + [f"grad_{n}" for n in wrt_names]
    ours = list(outs) + grads
    compared = []  # (name, ours, reference, PyTorch's, its reference)
    for i, (name, o, t) in enumerate(zip(names, ours, theirs)):
        r, tr = ref[i], tref[i]
        if r is None:
            # The reference does not read this input (C at beta = 0): its gradient is zero.
            r = tr = torch.zeros(trial.inputs[name[5:]].shape, dtype=torch.float64, device=dev)
        if o is not None:
            if tuple(o.shape) != tuple(r.shape):
                problems.append(f"{name}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
                continue
            expected = trial.inputs[name[5:]].dtype if name.startswith("grad_") else (
                t.dtype if not p.get("amp") else o.dtype)
            if o.dtype != expected:
                problems.append(f"{name}: dtype {o.dtype}, expected {expected}")
        o = torch.zeros_like(r) if o is None else o
        t = torch.zeros_like(r) if t is None else t
        if p.get("special") is None:
            flags.append((f"{name}: non-finite values where PyTorch's has none",
                          torch.isfinite(o).all() | ~torch.isfinite(t).all()))
        elif not name.startswith("grad_"):
            flags.append((f"{name}: NaN/Inf not where PyTorch's are",
                          (_nonfinite_pattern(o) == _nonfinite_pattern(t.to(o.dtype))).all()))
        else:
            flags.append((f"{name}: non-finite not where PyTorch's gradient is",
                          (torch.isfinite(o) == torch.isfinite(t)).all()))
        compared.append((i, name, o, r, t, tr))
    scalars = [f for _, f in flags] + [x for _, _, o, r, t, tr in compared
                                       for x in (*_err_parts(o, r), *_err_parts(t, tr))]
    values = torch.stack([x.to(device=dev, dtype=torch.float64) for x in scalars]).tolist() if scalars else []
    problems += [what for (what, _), ok in zip(flags, values) if not ok]
    errors = values[len(flags):]
    floor = FLOOR[trial.comp]
    over = []
    for j, (_, name, *_rest) in enumerate(compared):
        diff, scale, pdiff, pscale = errors[4 * j:4 * j + 4]
        e, e_pt = _ratio(diff, scale), _ratio(pdiff, pscale)
        if not e <= max(3.0 * e_pt, floor):
            over.append((j, name, e, e_pt))
    if over and trial.theirs_alt is not None:
        # PyTorch's own error is the larger of its two natural formulations'
        # (one rounding more or less in the pre-activation).
        alt, ahint = pytorch(trial.theirs_alt)
        aref = reference(ahint) if trial.ties else ref
        parts = [x for j, *_ in over for x in _err_parts(_or_zeros(alt[compared[j][0]], compared[j][3]),
                                                          _or_zeros(aref[compared[j][0]], compared[j][3]))]
        alt_values = torch.stack(parts).tolist()
        over = [(j, name, e, max(e_pt, _ratio(alt_values[2 * i], alt_values[2 * i + 1])))
                for i, (j, name, e, e_pt) in enumerate(over)]
    for j, name, e, e_pt in over:
        bar = max(3.0 * e_pt, floor)
        if not e <= bar:
            problems.append(f"{name}: error {e:.3g} against PyTorch's {e_pt:.3g} (bar {bar:.3g})")
            if VERBOSE:
                problems.append(_worst(*compared[j][2:]))
    if problems:
        raise Failure("; ".join(problems))


VERBOSE = False  # replay: the element each failing comparison is worst at


def _worst(o, r, t, tr):
    """Where |ours - reference| is largest, with PyTorch's and the magnitudes."""
    diff = (o.detach().double() - r).abs().nan_to_num(nan=math.inf)
    i = int(diff.reshape(-1).argmax())
    at = lambda x: float(x.detach().double().reshape(-1)[i])  # noqa: E731
    return (f"[worst at flat index {i} of {tuple(o.shape)}: ours {at(o):.6g}, float64 {at(r):.6g}, "
            f"PyTorch's {at(t):.6g} (its float64 {at(tr):.6g}); max |float64| {float(r.abs().max()):.4g}]")


def _or_zeros(t, like):
    return torch.zeros_like(like) if t is None else t


def _ratio(diff, scale):
    return diff / scale if scale > 0 else diff


# --------------------------------------------------------------------------
# Command line


def _backend_context(backend):
    if backend in CUDA_BACKENDS:
        return testing.override(cuda_backend="" if backend == "rule" else backend)
    return contextlib.nullcontext()


def replay_line(case, backend):
    return f"python tests/fuzz.py --route {case.route} --backend {backend} --replay {case.seed}"


# A failure is confirmed when at least CONFIRM of REDRAWS fresh draws of the
# same case's data (its shapes, layouts, dtype, activation and terms kept)
# fail too. One that does not is reported apart: an error that exceeded the
# bar once, in a sum that cancels (a bias gradient of a few rows, a
# saturated tanh), where PyTorch's own error is as much chance as ours.
REDRAWS, CONFIRM = 3, 2


def _fails(case):
    try:
        run_case(case, determinism=False)
    except Exception:  # noqa: BLE001 - any failure
        return True
    return False


def run(route, backend, cases, seed, log=print, time_limit=None, stop_after=None, determinism_every=4):
    """Runs `cases` cases of one route on one backend; returns (ran,
    failures, unconfirmed): the cases whose failure their redraws confirmed,
    and those whose redraws did not."""
    device = "cpu" if backend == "cpu" else "cuda"
    rng = random.Random(f"{seed}:{route}:{backend}")
    failures, unconfirmed = [], []
    start = time.time()
    ran = 0
    with testing.override(poison_outputs=True), _backend_context(backend):
        for i in range(cases):
            if time_limit is not None and time.time() - start > time_limit:
                break
            case_seed = rng.getrandbits(48)
            case = draw(route, case_seed, device)
            try:
                run_case(case, determinism=i % determinism_every == 0)
                what = None
            except Failure as f:
                what = f"{f} :: {_explain(case)}"
            except Exception as e:  # noqa: BLE001 - an unexpected error is a failure too, with its replay line
                what = f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ran += 1
            if what is None:
                continue
            redrawn = sum(_fails(dataclasses.replace(case, draw=d)) for d in range(1, REDRAWS + 1))
            confirmed = redrawn >= CONFIRM
            (failures if confirmed else unconfirmed).append(case)
            log(f"{'FAIL' if confirmed else 'UNCONFIRMED'} fuzz {route}[{backend}] {case.describe()} :: {what} :: "
                f"{redrawn} of {REDRAWS} redraws failed :: replay: {replay_line(case, backend)}")
            if stop_after is not None and len(failures) >= stop_after:
                break
    return ran, failures, unconfirmed


def _explain(case):
    if case.route != "gemm_act":
        return ""
    try:
        data = Data(case.data_seed, case.device)
        trial = build_gemm_act(case, data)
        with _settings(case.p, case.device), _amp(case.p, case.device):
            return trial.explain()
    except Exception as e:  # noqa: BLE001
        return f"(explain raised {type(e).__name__})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", nargs="+", default=["gemm_act"], choices=sorted(ROUTES) + ["all"])
    parser.add_argument("--backend", nargs="+", default=None, choices=BACKENDS)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one, printed")
    parser.add_argument("--replay", type=int, nargs="+", default=None, help="cases' seeds, from FAIL lines")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per route and backend")
    parser.add_argument("--verbose", action="store_true", help="with --replay: where each error is worst")
    args = parser.parse_args(argv)
    global VERBOSE
    VERBOSE = args.verbose
    routes = sorted(ROUTES) if "all" in args.route else args.route
    backends = args.backend or (["rule"] if torch.cuda.is_available() else ["cpu"])
    if args.replay is not None:
        failed = 0
        for route in routes:
            for backend in backends:
                device = "cpu" if backend == "cpu" else "cuda"
                for case_seed in args.replay:
                    case = draw(route, case_seed, device)
                    print(f"{route}[{backend}] {case.seed}: {case.describe()} :: {_explain(case)}")
                    with testing.override(poison_outputs=True), _backend_context(backend):
                        try:
                            run_case(case)
                            print("passed")
                        except Failure as f:
                            print(f"FAIL: {f}")
                            failed += 1
        return 1 if failed else 0
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"fuzz seed {seed}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}", flush=True)
    total_failed = 0
    for route in routes:
        for backend in backends:
            start = time.time()
            ran, failures, unconfirmed = run(route, backend, args.cases, seed, log=lambda s: print(s, flush=True),
                                             time_limit=args.time_limit)
            name = route if backend == "rule" and route != "gemm_act" else f"{route}[{backend}]"
            print(f"fuzz {name}: {ran} cases, {len(failures)} failed, {len(unconfirmed)} unconfirmed "
                  f"({time.time() - start:.0f} s)", flush=True)
            total_failed += len(failures)
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())

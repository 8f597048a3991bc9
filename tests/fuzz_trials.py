"""The fuzz's data and trials (fuzz.py): a case's tensors, the float64
reference with its tie handling, and the trials of the functional routes
(gemm_act, linear_act, the linear modules, Conv1DAct)."""

import contextlib
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_act as tga
from torch_gemm_act import testing
from torch_gemm_act.activations import _GRAD_FROM_OUTPUT, _twin

from fuzz_cases import RELU_FAMILY, TIE_FACTOR, UNIT


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
        return _twin(act, slope)(z)

    @staticmethod
    def backward(ctx, g):
        z, tie, positive = ctx.saved_tensors
        with torch.enable_grad():
            zz = z.detach().requires_grad_()
            (d,) = torch.autograd.grad(_twin(ctx.act, ctx.slope)(zz), zz, g)
        if tie is not None:
            low = g * (0.0 if ctx.act == "relu" else ctx.slope)
            d = torch.where(tie, torch.where(positive, g, low), d)
        return d, None, None, None, None


def act64(z, mag, act, slope, hint, unit):
    """act(z) in float64; for the relu family, ties (|z| within rounding of 0,
    mag the sum of the magnitudes z adds up) take the side of `hint` (the
    road's output of this activation, or a tensor of its sign)."""
    if act not in RELU_FAMILY or hint is None:
        return _twin(act, slope)(z)
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
        "wide_rows": lambda: data.randn(*lead, n + 8, dtype=dtype)[..., :n],  # rows of a wider buffer
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
            store = preact or (act not in _GRAD_FROM_OUTPUT and bool(p["grads"]))
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
        outs = composite(inputs, lambda z, t: _twin(act, slope)(z))
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
        y = _twin(act, slope)(z)
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
            outs = (_twin(act, slope)(z).reshape(*lead, n),)
        else:
            outs = (_twin(act, slope)(F.linear(inputs["x"], inputs["weight"], inputs.get("bias"))),)
        return outs, outs[0]

    def theirs_alt():
        outs = formula(inputs, lambda z, x2, wt: _twin(act, slope)(z))
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

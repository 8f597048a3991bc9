"""The op bench's (bench.py's) contenders and their checks: the shapes file,
the modes per group, the tolerances against eager, eager's code per
activation, and which activation torch._addmm_activation computes.

ADDMM NOTE: torch._addmm_activation(..., use_gelu=True) is the tanh-approximate
GELU on CUDA (cuBLASLt's GELU epilogue is the tanh form, and the non-Lt
fallback calls at::gelu_(result, "tanh")), but the exact erf GELU on CPU
(aten/src/ATen/native/LinearAlgebra.cpp calls at::gelu_(result) there). So on
the GPU it matches "gelu_tanh" and NOT the "gelu" (erf) rows of shapes.json;
rather than hard-code that, the script probes it per dtype at start-up on
exactly representable inputs and includes it only in rows it matches. For
activation "none" the same cuBLASLt bias epilogue is torch.addmm(bias, a, w.t()),
which is timed under the addmm_activation key (the row says which function ran).
"""

import json
import math
import os
import sys

from harness import HERE, REPO
from summarize import MODES

# Normwise tolerance: max |x - eager| / max |eager|. bf16/fp16: a few output
# ulps of the largest value; fp32 exact FMA: summation order only; TF32: 10-bit
# mantissa products.
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4, "float32+tf32": 1e-2, "float64": 1e-10}
# Gradients of relu / leaky_relu in fp16/bf16: gemm_act rounds Z once from
# fp32, eager rounds the GEMM's output and then adds the bias, so a few
# pre-activations within an ulp of 0 land on the other side of the kink and
# their whole gY flips in or out of dZ (measured: ~3e-2 normwise in dA, dW).
KINK_GRAD_TOLERANCE = 6e-2


def default_shapes_path():
    shared = os.path.normpath(os.path.join(REPO, "..", "shared", "shapes.json"))
    return shared if os.path.exists(shared) else os.path.join(HERE, "shapes.json")


def load_shapes(path):
    with open(path) as f:
        spec = json.load(f)
    groups = {k: v for k, v in spec.items() if isinstance(v, list)}
    if not groups:
        raise SystemExit(f"{path}: no groups of shapes (lists) found")
    return groups


def modes_for(group, row, args):
    if "modes" in row:
        modes = list(row["modes"])
    elif group in ("inference", "sm80"):
        modes = ["inference"]
    elif group == "cublaslt":
        modes = ["inference", "forward"]
    else:
        modes = list(MODES)
    if args.quick:
        modes = [m for m in modes if m != "forward_backward"]
    if args.modes:
        modes = [m for m in modes if m in args.modes]
    return modes


def rel_err(x, ref):
    """max |x - ref| / max |ref| (normwise, so near-zero outputs don't blow it
    up), in float64 where either is (a float64 reference resolves fp32's
    errors), else fp32; NaN -> inf."""
    import torch

    wide = torch.float64 if torch.float64 in (x.dtype, ref.dtype) else torch.float32
    x, ref = x.detach().to(wide), ref.detach().to(wide)
    if x.shape != ref.shape:
        return float("inf")
    d = (x - ref).abs().max().item() if x.numel() else 0.0
    r = ref.abs().max().item() if ref.numel() else 0.0
    del x, ref
    if not math.isfinite(d):
        return float("inf")
    return d / max(r, 1e-30)


def rms_rel_err(x, ref):
    """||x - ref|| / ||ref|| (Frobenius): every element's rounding counts,
    where rel_err's one largest element depends on where each computation
    happens to round. Float64; NaN -> inf."""
    import torch

    x, ref = x.detach().to(torch.float64), ref.detach().to(torch.float64)
    if x.shape != ref.shape:
        return float("inf")
    d = torch.linalg.vector_norm(x - ref).item() if x.numel() else 0.0
    r = torch.linalg.vector_norm(ref).item() if ref.numel() else 0.0
    del x, ref
    if not math.isfinite(d):
        return float("inf")
    return d / max(r, 1e-30)


def torch_act(name, negative_slope=0.01):
    """The activation's PyTorch twin (torch_gemm_act.activations), as its
    forward function: no module-call overhead in the eager contender."""
    import torch_gemm_act
    return torch_gemm_act.activations._torch_module(name, negative_slope).forward


def make_eager(activation):
    import torch.nn.functional as F
    import torch_gemm_act

    if activation in torch_gemm_act.GATED:
        gate = torch_act(torch_gemm_act.GATED[activation])

        def eager_gated(a, w_gate, w_up):
            # A Llama-style MLP's first half as transformers writes it.
            return gate(F.linear(a, w_gate)) * F.linear(a, w_up)
        return eager_gated
    act = torch_act(activation)

    def eager(a, w, bias):
        return act(F.linear(a, w, bias))
    return eager



def probe_addmm_gelu(dtype, device):
    """Which GELU torch._addmm_activation(use_gelu=True) computes here: 'erf', 'tanh' or 'unknown'.

    Z[m, n] = z_m + bias_n with z_m on a 1/16 grid over [-6, 2) and bias on a
    1/16 grid, all exact in every dtype and accumulator, so the only rounding
    is the output's. Where the two GELUs (in float64) differ by more than two
    output ulps, the output must sit closer to the one it computes (in >95% of
    those elements; else 'unknown', and the contender is left out).
    """
    import torch
    import torch.nn.functional as F
    M, K, N = 128, 8, 64
    a = torch.zeros(M, K, dtype=torch.float64)
    a[:, 0] = torch.arange(M, dtype=torch.float64) / 16 - 6
    w = torch.zeros(N, K, dtype=torch.float64)
    w[:, 0] = 1
    b = (torch.arange(N, dtype=torch.float64) % 17 - 8) / 16
    z = torch.addmm(b, a, w.t())
    try:
        with torch.no_grad():
            y = torch._addmm_activation(b.to(device, dtype), a.to(device, dtype),
                                        w.to(device, dtype).t(), use_gelu=True)
        y = y.double().cpu()
    except Exception as e:  # noqa: BLE001
        print(f"probe of _addmm_activation({dtype}) failed: {_short_err(e)}", file=sys.stderr)
        return "unknown"
    erf, tanh = F.gelu(z), F.gelu(z, approximate="tanh")
    eps = torch.finfo(dtype).eps
    diff = (erf - tanh).abs()
    # Far in the negative tail both round to ~0 (1 + erf(x) cancels): compare only
    # where the forms differ by > 2 output ulps and by > 1% of their largest gap.
    mask = (diff > 2 * eps * erf.abs()) & (diff > 1e-2 * diff.max()) & (z > -4.5)
    if int(mask.sum()) < 50:
        return "unknown"
    closer_to_erf = ((y - erf).abs() < (y - tanh).abs())[mask].double().mean().item()
    kind, ref = ("erf", erf) if closer_to_erf > 0.95 else ("tanh", tanh) if closer_to_erf < 0.05 else (None, None)
    # ...and it must be that GELU everywhere, within a couple of output ulps.
    if kind is None or (y - ref).abs().max().item() > 2 * eps * ref.abs().max().item():
        return "unknown"
    return kind


def _short_err(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"

"""A randomized sweep: shapes, strides, storage offsets, dtypes, activations,
bias kinds, C, alpha, beta and Z drawn afresh for each case (reproducibly
from the test's id), against the float64 reference. On the GPU machine the
suite runs once per CUDA backend (TORCH_GEMM_ACT_BACKEND), so each backend
meets every kind of case here."""

import pytest
import torch

import torch_gemm_act as tga
from reference import ACTIVATIONS, BIAS_KINDS, TOL, make_bias, reference64

CASES = 48
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _pick(options):
    return options[int(torch.randint(len(options), ()))]


def _size():
    # Mostly small and ragged; now and then a multiple of 8 (aligned rows for
    # the tensor-core families) or a size of several tiles.
    kind = _pick(("small", "aligned", "large"))
    if kind == "small":
        return int(torch.randint(1, 40, ()))
    if kind == "aligned":
        return 8 * int(torch.randint(1, 40, ()))
    return int(torch.randint(200, 700, ()))


def _matrix(rows, cols, dtype, device, layout, scale=1.0):
    """A [rows, cols] view with the given layout: contiguous, transposed
    (column-major), or a slice at an element offset with a padded leading
    dimension (misaligned)."""
    if layout == "contiguous":
        t = torch.randn(rows, cols, dtype=torch.float64) * scale
    elif layout == "transposed":
        t = (torch.randn(cols, rows, dtype=torch.float64) * scale).t()
    else:
        pad = int(torch.randint(1, 5, ()))
        t = (torch.randn(rows + 1, cols + pad, dtype=torch.float64) * scale)[1:, pad - 1:pad - 1 + cols]
    return t.to(dtype).to(device)


@pytest.mark.parametrize("case", range(CASES))
def test_random_case(case, device):
    dtype = _pick(DTYPES)
    m, k, n = _size(), _size(), _size()
    activation = _pick(ACTIVATIONS)
    bias_kind = _pick(BIAS_KINDS)
    a = _matrix(m, k, dtype, device, _pick(("contiguous", "transposed", "offset")))
    # B as a weight's transpose (the nn.Linear case), row-major, or a slice.
    b_layout = _pick(("transposed", "contiguous", "offset"))
    b = _matrix(k, n, dtype, device, b_layout, scale=1.0 / k ** 0.5)
    bias = make_bias(bias_kind, (m, n), dtype, device)
    c_kind = _pick(("none", "contiguous", "transposed", "broadcast"))
    if c_kind == "none":
        c = None
    elif c_kind == "broadcast":
        c = torch.randn(1, n, dtype=dtype, device=device).expand(m, n)
    else:
        c = _matrix(m, n, dtype, device, c_kind)
    alpha = _pick((1.0, 0.5, -1.25))
    beta = 0.0 if c is None else _pick((1.0, 0.5, -2.0))
    slope = _pick((0.01, 0.2))
    return_preact = bool(torch.randint(2, ()))
    args = dict(activation=activation, alpha=alpha, beta=beta, return_preact=return_preact)
    if activation == "leaky_relu":
        args["negative_slope"] = slope
    what = (f"{dtype} m={m} k={k} n={n} {activation} bias={bias_kind} b={b_layout} c={c_kind} "
            f"alpha={alpha} beta={beta}: {tga.explain(a, b, bias, c, **args)}")

    out = tga.gemm_act(a, b, bias, c, **args)
    y, z = out if return_preact else (out, None)
    y_ref, z_ref = reference64(a, b, bias, c, activation, alpha, beta, args.get("negative_slope", 0.01))
    # fp32 runs as torch.mm does: exact unless TF32 is allowed (it is not here).
    rtol, atol = TOL[dtype]
    # Outputs are sums of K terms of order one scaled by 1/sqrt(K), plus C and
    # bias: of order one, up to |alpha| + |beta| + 1.
    scale = abs(alpha) + abs(beta) + 1.0
    for got, ref in ((y, y_ref), (z, z_ref)):
        if got is None:
            continue
        assert got.shape == (m, n) and got.dtype == dtype, what
        torch.testing.assert_close(got.double().cpu(), ref, rtol=rtol, atol=atol * scale,
                                   equal_nan=True, msg=lambda msg: f"{what}\n{msg}")

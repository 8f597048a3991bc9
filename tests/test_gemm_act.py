"""Forward numerics of gemm_act / linear_act against a float64 reference."""

import itertools

import pytest
import torch

import torch_gemm_act as tga
from reference import (ACTIVATIONS, BIAS_KINDS, assert_close, linear_act_eager, make_bias,
                       random_operands, reference64)

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("with_c", [False, True])
def test_every_activation_bias_and_c(activation, bias_kind, with_c, device):
    dtype = torch.float32
    a, w = random_operands(37, 29, 43, dtype, device)
    b = w.t()
    bias = make_bias(bias_kind, (37, 43), dtype, device)
    c = torch.randn(37, 43, dtype=dtype, device=device) if with_c else None
    alpha, beta = (0.75, -1.5) if with_c else (1.25, 0.0)
    y, z = tga.gemm_act(a, b, bias, c, activation=activation, alpha=alpha, beta=beta,
                        negative_slope=0.1, return_preact=True)
    y_ref, z_ref = reference64(a, b, bias, c, activation, alpha, beta, 0.1)
    assert y.shape == z.shape == (37, 43) and y.dtype == z.dtype == dtype
    assert_close(z, z_ref, dtype)
    assert_close(y, y_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["gelu", "relu", "silu"])
def test_dtypes(dtype, activation, device):
    a, w = random_operands(65, 130, 67, dtype, device)
    bias = make_bias("column", (65, 67), dtype, device)
    y = tga.linear_act(a, w, bias, activation)
    assert y.dtype == dtype
    y_ref, _ = reference64(a, w.t(), bias, activation=activation)
    assert_close(y, y_ref, dtype)


SIZES = [1, 2, 7, 33, 257]


@pytest.mark.parametrize("m,k,n", [s for s in itertools.product(SIZES, SIZES, SIZES) if max(s) < 257 or s.count(257) == 1])
def test_odd_sizes(m, k, n, device):
    dtype = torch.float32
    a, w = random_operands(m, k, n, dtype, device)
    bias = make_bias("column", (m, n), dtype, device)
    y = tga.linear_act(a, w, bias, "gelu_tanh")
    y_ref, _ = reference64(a, w.t(), bias, activation="gelu_tanh")
    assert_close(y, y_ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_odd_shape(dtype, device):
    a, w = random_operands(1000, 1000, 1000, dtype, device)
    bias = make_bias("column", (1000, 1000), dtype, device)
    y = tga.linear_act(a, w, bias, "gelu")
    y_ref, _ = reference64(a, w.t(), bias, activation="gelu")
    assert_close(y, y_ref, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("layout", ["a_transposed", "a_strided", "b_row_major", "b_strided", "c_transposed", "c_broadcast_view"])
def test_layouts(dtype, layout, device):
    """Row- and column-major b, strided views of a, b and c (including stride 0)."""
    m, k, n = 19, 24, 21
    a, w = random_operands(m, k, n, dtype, device)
    b = w.t()  # column-major [K, N]
    c = torch.randn(m, n, dtype=dtype, device=device)
    if layout == "a_transposed":
        a = a.t().contiguous().t()
    elif layout == "a_strided":
        a = torch.randn(m, 2 * k + 3, dtype=dtype, device=device)[:, 1: 2 * k + 1: 2]
    elif layout == "b_row_major":
        b = b.contiguous()
    elif layout == "b_strided":
        b = (torch.randn(2 * k, n + 5, dtype=dtype, device=device) / k**0.5)[::2, 2: n + 2]
    elif layout == "c_transposed":
        c = c.t().contiguous().t()
    elif layout == "c_broadcast_view":
        c = torch.randn(1, n, dtype=dtype, device=device).expand(m, n)
    assert layout == "b_row_major" or not (a.is_contiguous() and b.is_contiguous() and c.is_contiguous())
    bias = make_bias("row", (m, n), dtype, device)
    y = tga.gemm_act(a, b, bias, c, activation="silu", beta=0.5)
    y_ref, _ = reference64(a, b, bias, c, "silu", 1.0, 0.5)
    assert_close(y, y_ref, dtype)


@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
def test_3d_input(bias_kind, device):
    dtype = torch.float32
    x = torch.randn(3, 5, 16, dtype=dtype, device=device)
    w = torch.randn(9, 16, dtype=dtype, device=device) / 4
    bias = make_bias(bias_kind, (3, 5, 9), dtype, device)
    c = torch.randn(3, 5, 9, dtype=dtype, device=device)
    y = tga.gemm_act(x, w.t(), bias, c, activation="tanh", beta=2.0)
    assert y.shape == (3, 5, 9)
    y_ref, _ = reference64(x, w.t(), bias, c, "tanh", 1.0, 2.0)
    assert_close(y, y_ref, dtype)


def test_per_row_bias_as_m_by_one_with_3d_input(device):
    x = torch.randn(2, 3, 8, device=device)
    w = torch.randn(3, 8, device=device)  # N == 3 == x.shape[1]: no guessing
    bias = torch.randn(6, 1, device=device)
    y = tga.linear_act(x, w, bias, "none")
    expected = (x.reshape(6, 8) @ w.t() + bias).reshape(2, 3, 3)
    assert_close(y, expected, torch.float32)


def test_square_column_bias_is_per_column(device):
    # M == N: a 1-D bias of length N broadcasts per column, as in F.linear.
    x = torch.randn(5, 4, device=device)
    w = torch.randn(5, 4, device=device)
    bias = torch.randn(5, device=device)
    assert_close(tga.linear_act(x, w, bias, "none"), x @ w.t() + bias, torch.float32)


def test_1d_input(device):
    x = torch.randn(8, device=device)
    w = torch.randn(3, 8, device=device)
    bias = torch.randn(3, device=device)
    y = tga.linear_act(x, w, bias, "relu")
    assert y.shape == (3,)
    assert_close(y, linear_act_eager(x, w, bias, "relu"), torch.float32)


@pytest.mark.parametrize("activation", ["gelu", "relu", "leaky_relu", "sigmoid"])
def test_k_zero_gives_activation_of_c_and_bias(activation, device):
    a = torch.randn(6, 0, device=device)
    b = torch.randn(0, 5, device=device)
    c = torch.randn(6, 5, device=device)
    bias = torch.randn(5, device=device)
    y = tga.gemm_act(a, b, bias, c, activation=activation, beta=0.5)
    y_ref, _ = reference64(a, b, bias, c, activation, 1.0, 0.5)
    assert_close(y, y_ref, torch.float32)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("m,k,n", [(0, 4, 5), (4, 5, 0), (0, 0, 0)])
def test_empty_outputs(m, k, n, device):
    a, w = random_operands(m, k, n, torch.float32, device)
    y = tga.linear_act(a, w, torch.randn(n, device=device), "gelu")
    assert y.shape == (m, n)


def test_beta_zero_ignores_nan_in_c(device):
    a, w = random_operands(4, 3, 5, torch.float32, device)
    c = torch.full((4, 5), float("nan"), device=device)
    y = tga.gemm_act(a, w.t(), None, c, activation="relu", beta=0.0)
    assert torch.isfinite(y).all()


def test_nan_and_inf_propagate(device):
    a = torch.randn(3, 4, device=device)
    a[0, 0] = float("nan")
    a[1, 0] = float("inf")
    b = torch.ones(4, 2, device=device)
    y = tga.gemm_act(a, b, activation="tanh")
    assert torch.isnan(y[0]).all()
    assert (y[1] == 1).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_repeated_calls_on_the_same_memory(dtype, device):
    # A loop reruns a call on the same addresses (the caching allocator's
    # reuse): new data, and any other alpha, beta or slope, must show
    # (the sm90 launch reuses the parameters of an identical earlier launch).
    a, w = random_operands(256, 128, 192, dtype, device)
    bias = torch.randn(192, dtype=dtype, device=device)
    c = torch.randn(256, 192, dtype=dtype, device=device)
    cases = [(1.0, 0.0, "gelu"), (1.0, 0.0, "gelu"), (2.0, 0.0, "gelu"), (0.0, 0.0, "gelu"),
             (1.0, 0.5, "gelu"), (1.0, -0.5, "gelu"), (1.0, 0.0, "leaky_relu")]
    for step, (alpha, beta, activation) in enumerate(cases):
        if step == 1:
            a.mul_(-1.5)  # same memory, new values
        y = tga.gemm_act(a, w.t(), bias, c, activation=activation, alpha=alpha, beta=beta,
                         negative_slope=0.2)
        ref, _ = reference64(a, w.t(), bias, c, activation, alpha, beta, 0.2)
        assert_close(y, ref, dtype)
        del y  # its memory goes to the next call's Y


def test_return_preact_gives_z_and_no_grad_gives_y(device):
    a, w = random_operands(8, 8, 8, torch.float32, device, requires_grad=True)
    with torch.no_grad():
        y = tga.linear_act(a, w, None, "gelu")
    assert isinstance(y, torch.Tensor) and y.shape == (8, 8)
    y, z = tga.gemm_act(a, w.t(), activation="gelu", return_preact=True)
    assert_close(z, a.detach().double() @ w.detach().double().t(), torch.float32)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("b_layout", ["weight_t", "row_major"])
@pytest.mark.parametrize("with_c", [False, True])
# 16-byte aligned K and N, several tiles with ragged edges. On sm90 the
# heuristic (csrc/cuda/sm90/sm90_heuristic.h) gives M <= 64 the 64x128
# ping-pong kernel with K = 128 per stage (K = 264: a partial last stage),
# M <= 128 the 128x64 one, M <= 256 the 128x128 one and
# K > 1024 at moderate N the cooperative one, for every activation
# (ping-pong exists for weight_t only).
@pytest.mark.parametrize("m,k,n", [(40, 264, 392), (100, 264, 392), (200, 264, 392),
                                   (300, 1096, 392)],
                         ids=["tiny_m", "mid_m", "small_m", "long_k"])
def test_tensor_core_shapes(activation, bias_kind, dtype, b_layout, with_c, m, k, n, device):
    """Shapes the tensor-core kernels take, with Y and Z checked."""
    a, w = random_operands(m, k, n, dtype, device)
    b = w.t() if b_layout == "weight_t" else w.t().contiguous()
    bias = make_bias(bias_kind, (m, n), dtype, device)
    c = torch.randn(m, n, dtype=dtype, device=device) if with_c else None
    beta = 0.5 if with_c else 0.0
    y, z = tga.gemm_act(a, b, bias, c, activation=activation, alpha=1.5, beta=beta,
                        negative_slope=0.1, return_preact=True)
    y_ref, z_ref = reference64(a, b, bias, c, activation, 1.5, beta, 0.1)
    assert_close(z, z_ref, dtype)
    assert_close(y, y_ref, dtype)
    y_only = tga.gemm_act(a, b, bias, c, activation=activation, alpha=1.5, beta=beta, negative_slope=0.1)
    # Bit for bit where the same kernel runs with and without Z (the rule
    # sends relu/gelu_tanh without Z from M = 256 to cuBLASLt's epilogue).
    args = dict(activation=activation, alpha=1.5, beta=beta, negative_slope=0.1)
    if tga.explain(a, b, bias, c, **args) == tga.explain(a, b, bias, c, return_preact=True, **args):
        assert torch.equal(y_only, y)
    else:
        assert_close(y_only, y_ref, dtype)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias_kind", ["column", "row"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fewer_waves_shape(activation, bias_kind, dtype, device):
    """On sm90, 1024x4224 with K = 1096 takes one wave of the cooperative
    kernel's 256x128 tiles against two of its 128x256 ones (sm90_heuristic.h),
    so the heuristic picks the former; Y and Z checked. Smaller on the CPU."""
    m, k, n = (1024, 1096, 4224) if device == "cuda" else (64, 72, 136)
    a, w = random_operands(m, k, n, dtype, device)
    bias = make_bias(bias_kind, (m, n), dtype, device)
    y, z = tga.gemm_act(a, w.t(), bias, activation=activation, negative_slope=0.1,
                        return_preact=True)
    y_ref, z_ref = reference64(a, w.t(), bias, activation=activation, negative_slope=0.1)
    assert_close(z, z_ref, dtype)
    assert_close(y, y_ref, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,k,n", [("large_odd", 0, 0), (64, 256, 128), (1, 8, 4096), (129, 72, 136)])
def test_aligned_and_misaligned_large(dtype, m, k, n, device):
    if m == "large_odd":  # the benchmark's unaligned shape; smaller on the CPU
        m, k, n = (8191, 4095, 4097) if device == "cuda" else (1023, 1001, 517)
    a, w = random_operands(m, k, n, dtype, device)
    bias = make_bias("column", (m, n), dtype, device)
    y = tga.linear_act(a, w, bias, "gelu_tanh")
    y_ref, _ = reference64(a, w.t(), bias, activation="gelu_tanh")
    assert_close(y, y_ref, dtype)


# Cases the Hopper kernel cannot read in place but takes through aligned
# copies (csrc/cuda/sm90/sm90_staging.h), each above its size threshold of
# 2^26 multiply-adds: K not a 16-byte multiple (A, B), N not one (B, Y, Z,
# the bias and C), and a row stride that is not (A a column slice).
STAGED_SHAPES = {
    "odd_k_and_n": (520, 509, 260),
    "odd_n": (520, 512, 265),
    "sliced_a": (520, 512, 264),
}


@pytest.mark.parametrize("case", list(STAGED_SHAPES))
@pytest.mark.parametrize("activation", ["gelu", "silu", "relu"])
@pytest.mark.parametrize("bias_kind", BIAS_KINDS)
@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_misaligned_operands_above_staging_threshold(case, activation, bias_kind, with_c, dtype,
                                                     device):
    m, k, n = STAGED_SHAPES[case]
    a, w = random_operands(m, k, n, dtype, device)
    if case == "sliced_a":  # the same values, one element off alignment, row stride K + 1
        a = torch.cat([a[:, :1], a], dim=1)[:, 1:]
        assert a.stride() == (k + 1, 1)
    bias = make_bias(bias_kind, (m, n), dtype, device)
    c = torch.randn(m, n, dtype=dtype, device=device) if with_c else None
    beta = -0.5 if with_c else 0.0
    y, z = tga.gemm_act(a, w.t(), bias, c, activation=activation, alpha=1.25, beta=beta,
                        return_preact=True)
    y_ref, z_ref = reference64(a, w.t(), bias, c, activation, 1.25, beta)
    assert y.is_contiguous() and z.is_contiguous()
    assert_close(z, z_ref, dtype)
    assert_close(y, y_ref, dtype)


TF32_TOL = (2e-3, 2e-3)  # TF32 keeps 10 mantissa bits of each input


@pytest.fixture(params=["allow_tf32", "precision_high"])
def tf32_allowed(request):
    """PyTorch's two ways of allowing TF32 for fp32 matmuls, restored after."""
    prev = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    if request.param == "allow_tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        torch.set_float32_matmul_precision("high")
    yield
    torch.backends.cuda.matmul.allow_tf32 = prev[0]
    torch.set_float32_matmul_precision(prev[1])


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("b_layout", ["weight_t", "row_major"])
@pytest.mark.parametrize("m,k,n", [(300, 264, 392), (520, 509, 260), (136, 1032, 200)])
def test_float32_with_tf32_allowed(activation, b_layout, m, k, n, tf32_allowed, device):
    """fp32 where TF32 is allowed: the tensor-core kernels on sm90 (ping-pong
    for K <= 1024, cooperative beyond and for row-major B, without Z's store
    buffers where no Z is stored; misaligned shapes through aligned copies);
    exact elsewhere."""
    dtype = torch.float32
    a, w = random_operands(m, k, n, dtype, device)
    b = w.t() if b_layout == "weight_t" else w.t().contiguous()
    bias = make_bias("column", (m, n), dtype, device)
    c = torch.randn(m, n, dtype=dtype, device=device)
    y, z = tga.gemm_act(a, b, bias, c, activation=activation, alpha=0.5, beta=2.0,
                        return_preact=True)
    y_alone = tga.gemm_act(a, b, bias, c, activation=activation, alpha=0.5, beta=2.0)
    y_ref, z_ref = reference64(a, b, bias, c, activation, 0.5, 2.0)
    for out, ref in ((z, z_ref), (y, y_ref), (y_alone, y_ref)):
        torch.testing.assert_close(out.double().cpu(), ref, rtol=TF32_TOL[0], atol=TF32_TOL[1])


@pytest.mark.parametrize("b_layout", ["weight_t", "row_major"])
def test_float32_exact_large_tiles(b_layout, device):
    """Exact fp32 with a 256 x 128 tile for every SM (on GPUs of up to 153
    SMs): the SIMT kernel's large tiles, ragged along M, N and K."""
    assert not torch.backends.cuda.matmul.allow_tf32
    m, k, n = 2053, 70, 2100
    a, w = random_operands(m, k, n, torch.float32, device)
    b = w.t() if b_layout == "weight_t" else w.t().contiguous()
    bias = make_bias("column", (m, n), torch.float32, device)
    c = torch.randn(m, n, device=device)
    y, z = tga.gemm_act(a, b, bias, c, activation="gelu", alpha=0.5, beta=2.0, return_preact=True)
    y_ref, z_ref = reference64(a, b, bias, c, "gelu", 0.5, 2.0)
    assert_close(z, z_ref, torch.float32)
    assert_close(y, y_ref, torch.float32)


def test_float32_is_exact_when_tf32_is_not_allowed(device):
    """The default: fp32 GEMMs that the TF32 kernel could take stay exact."""
    assert not torch.backends.cuda.matmul.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"
    a, w = random_operands(512, 512, 512, torch.float32, device)
    y = tga.linear_act(a, w, None, "none")
    y_ref, _ = reference64(a, w.t())
    assert_close(y, y_ref, torch.float32)


def test_direct_call_matches_torch_ops(device):
    # functional.gemm_act enters the operator through _C (ops.gemm_act) for plain tensors;
    # torch.ops.gemm_act.gemm_act is the same operator.
    a, w = random_operands(33, 40, 24, torch.float32, device)
    bias = torch.randn(24, device=device)
    y = tga.gemm_act(a, w.t(), bias, activation="silu", alpha=0.5)
    y_ops, _ = torch.ops.gemm_act.gemm_act(a, w.t(), bias, None, "silu", 0.5, 0.0, 0.01, False)
    assert torch.equal(y, y_ops)


def test_torch_function_mode_sees_the_operator(device):
    # A torch-function mode only sees calls made through torch.ops: under one,
    # gemm_act takes that path.
    from torch.overrides import TorchFunctionMode

    class Record(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(func)
            return func(*args, **(kwargs or {}))

    a, w = random_operands(5, 8, 4, torch.float32, device)
    with Record() as record:
        tga.linear_act(a, w, None, "gelu")
    assert torch.ops.gemm_act.gemm_act.default in record.seen

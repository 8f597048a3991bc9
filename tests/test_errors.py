"""Bad input gets a clear error that names what was given and what was expected."""

import pytest
import torch

import torch_gemm_act as tga
from conftest import requires_cuda


def _ab(m=4, k=5, n=3, **kw):
    return torch.randn(m, k, **kw), torch.randn(k, n, **kw)


def test_inner_dimension_mismatch():
    a, _ = _ab()
    with pytest.raises(ValueError, match=r"a\.shape\[-1\] \(5\) must equal b\.shape\[0\] \(6\)"):
        tga.gemm_act(a, torch.randn(6, 3))


def test_b_must_be_2d():
    a, _ = _ab()
    with pytest.raises(ValueError, match=r"b must be 2-D"):
        tga.gemm_act(a, torch.randn(5, 3, 1))


def test_a_must_have_a_dimension():
    with pytest.raises(ValueError, match=r"at least 1 dimension"):
        tga.gemm_act(torch.tensor(1.0), torch.randn(1, 3))


def test_weight_must_be_2d():
    with pytest.raises(ValueError, match=r"weight must be a 2-D tensor"):
        tga.linear_act(torch.randn(4, 5), torch.randn(5))


def test_dtype_mismatch():
    a, b = _ab()
    with pytest.raises(TypeError, match=r"expected b to have the dtype of a \(Float\), got Double"):
        tga.gemm_act(a, b.double())
    with pytest.raises(TypeError, match=r"bias"):
        tga.gemm_act(a, b, torch.randn(3, dtype=torch.float16))


def test_integer_dtype():
    with pytest.raises(TypeError, match=r"float16, bfloat16, float32 or float64, got Int"):
        tga.gemm_act(torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 2, dtype=torch.int32))


@requires_cuda
def test_device_mismatch_cpu_and_cuda():
    a, b = _ab()
    with pytest.raises(RuntimeError, match=r"expected b on the device of a"):
        tga.gemm_act(a.cuda(), b)
    with pytest.raises(RuntimeError, match=r"bias on the device of a"):
        tga.gemm_act(a.cuda(), b.cuda(), torch.randn(3))


@pytest.mark.parametrize("shape", [(2, 3), (3, 1, 1), (4, 3, 1), (7,), (2, 4, 3)])
def test_bad_bias_shape(shape):
    a, b = _ab()
    with pytest.raises(ValueError, match=r"bias of shape .* does not broadcast to the output \[4, 3\]"):
        tga.gemm_act(a, b, torch.randn(shape))


def test_bias_of_length_m_gets_a_hint():
    a, b = _ab()
    with pytest.raises(ValueError, match=r"for a bias per row pass shape \(4, 1\)"):
        tga.gemm_act(a, b, torch.randn(4))


def test_unknown_activation():
    a, b = _ab()
    with pytest.raises(ValueError, match=r"unknown activation 'swish'; expected one of"):
        tga.gemm_act(a, b, activation="swish")
    with pytest.raises(ValueError, match=r"unknown activation 'swish'"):
        torch.ops.gemm_act.gemm_act(a, b, None, None, "swish", 1.0, 0.0, 0.01, False)
    with pytest.raises(ValueError, match=r"unknown activation"):
        tga.LinearAct(4, 3, activation="swish")


def test_negative_slope_must_be_non_negative():
    a, b = _ab()
    with pytest.raises(ValueError, match=r"negative_slope >= 0, got -0.1"):
        tga.gemm_act(a, b, activation="leaky_relu", negative_slope=-0.1)
    with pytest.raises(ValueError, match=r"negative_slope >= 0"):
        torch.ops.gemm_act.gemm_act(a, b, None, None, "leaky_relu", 1.0, 0.0, -0.1, False)
    # Other activations ignore the slope.
    tga.gemm_act(a, b, activation="relu", negative_slope=-0.1)


def test_c_shape_and_beta_without_c():
    a, b = _ab()
    with pytest.raises(ValueError, match=r"c must have the output's shape \[4, 3\], got \[3, 4\]"):
        tga.gemm_act(a, b, c=torch.randn(3, 4), beta=1.0)
    with pytest.raises(ValueError, match=r"beta = 2 was given but c is None"):
        tga.gemm_act(a, b, beta=2.0)


def test_sizes_past_int32():
    a = torch.ones(1, 1).expand(2**31, 1)  # no memory behind the 2^31 rows
    with pytest.raises(RuntimeError, match=r"M \(rows of a\) = 2147483648 exceeds"):
        tga.gemm_act(a, torch.ones(1, 2))

"""The tables the package derives from C++ (activations, backends, kernel
configurations) and the one testing switch."""

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import torch_gemm_act as tga
from conftest import requires_cuda
from reference import assert_close, random_operands, reference64


def test_activation_table_matches_the_python_side():
    from torch_gemm_act import activations

    assert tga.ACTIVATIONS == activations.ACTIVATIONS and len(set(tga.ACTIVATIONS)) == len(tga.ACTIVATIONS)
    assert activations._GRAD_FROM_OUTPUT < set(tga.ACTIVATIONS)
    assert activations._USES_SLOPE <= activations._GRAD_FROM_OUTPUT
    for name in tga.ACTIVATIONS:
        module = activations._torch_module(name, 0.3)
        assert isinstance(module, nn.Module)
        # Every twin but the identity is recognised as what it is.
        expected = None if isinstance(module, nn.Identity) else (name, 0.3 if name in activations._USES_SLOPE else 0.01)
        assert activations._from_module(module) == expected


def test_check_activation_raises_as_the_operator_does():
    from torch_gemm_act import activations

    with pytest.raises(ValueError, match=r"unknown activation 'swish'; expected one of: none, relu"):
        activations._check_activation("swish")
    for name in activations._USES_SLOPE:
        with pytest.raises(ValueError, match=r"needs negative_slope >= 0, got -0.5"):
            activations._check_activation(name, -0.5)
        with pytest.raises(ValueError, match=r"needs negative_slope >= 0, got -0.5"):
            tga.gemm_act(torch.randn(2, 3), torch.randn(3, 4), activation=name, negative_slope=-0.5)


def test_override_validates_names_and_restores():
    before = tga.testing._C.testing_overrides()
    with pytest.raises(ValueError, match=r"no CUDA backend 'nope'"):
        with tga.testing.override(cuda_backend="nope"):
            pass
    with pytest.raises(ValueError, match=r"no sm90 kernel configuration 'nope'"):
        with tga.testing.override(sm90_kernel="nope"):
            pass
    with pytest.raises(ValueError, match=r"sm90_swizzle must be one of 0, 1, 2, 4, 8, got 3"):
        with tga.testing.override(sm90_swizzle=3):
            pass
    with tga.testing.override(poison_outputs=False, sm90_swizzle=8):
        assert tga.testing._C.testing_overrides()[2] is False
        assert tga.testing._C.testing_overrides()[4] == 8
    assert tga.testing._C.testing_overrides() == before


def test_a_cpp_error_reaches_python_as_an_exception():
    """The extension links the libstdc++ whose exceptions Python's process can
    catch: a C++ error raised inside the operator arrives as a Python error
    (it crashed the process when the extension carried its own copy)."""
    code = ("import torch, torch_gemm_act\n"
            "try:\n"
            "    torch.ops.gemm_act.gemm_act(torch.randn(4, 5), torch.randn(6, 3), None, None, 'none', 1.0, 0.0, 0.01, False)\n"
            "except ValueError as e:\n"
            "    print('raised', 'must equal' in str(e))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "raised True", result.stdout + result.stderr


@requires_cuda
def test_backends_and_kernels_listed_cuda():
    backends = tga.testing.cuda_backends()
    # In the rule's order; the families built only when asked for around the library.
    order = ["sm90", "sm80", "library", "simt"]
    assert "library" in backends and list(backends) == [b for b in order if b in backends], backends
    kernels = tga.testing.kernels()
    names = {(k["name"], k["dtype"], k["b_layout"]) for k in kernels}
    assert len(names) == len(kernels)
    if "sm90" in backends:
        assert {k["dtype"] for k in kernels} >= {"bf16", "f16", "f32"}


def _needs_backend(backend):
    if backend not in tga.testing.cuda_backends():
        pytest.skip(f"this build has no {backend} backend")
    capability = torch.cuda.get_device_capability()
    if (backend == "sm90" and capability != (9, 0)) or (backend == "sm80" and capability < (8, 0)):
        pytest.skip(f"this GPU (sm_{capability[0]}{capability[1]}) cannot run the {backend} backend")


@requires_cuda
@pytest.mark.parametrize("backend", ["simt", "sm90", "sm80", "library"])
def test_forced_backend_runs_the_case_cuda(backend):
    _needs_backend(backend)
    a, w = random_operands(200, 264, 136, torch.bfloat16, "cuda")
    with tga.testing.override(cuda_backend=backend):
        assert tga.explain(a, w.t(), activation="gelu").startswith(f"{backend}: ")
        y = tga.linear_act(a, w, None, "gelu")
    assert_close(y, reference64(a, w.t(), activation="gelu")[0], torch.bfloat16)


@requires_cuda
@pytest.mark.parametrize("swizzle", [1, 2, 4, 8])
def test_forced_sm90_band_computes_the_same_cuda(swizzle):
    """Every band of clusters the tile scheduler can take covers each tile
    once: a tile grid that no band divides (1100 x 1240 outputs) still comes
    out whole."""
    _needs_backend("sm90")
    a, w = random_operands(1100, 512, 1240, torch.bfloat16, "cuda")
    with tga.testing.override(cuda_backend="sm90", sm90_swizzle=swizzle, poison_outputs=True):
        y, z = tga.gemm_act(a, w.t(), activation="gelu", return_preact=True)
    y_ref, z_ref = reference64(a, w.t(), activation="gelu")
    assert_close(y, y_ref, torch.bfloat16)
    assert_close(z, z_ref, torch.bfloat16)


@requires_cuda
@pytest.mark.parametrize("backend", ["sm90", "sm80"])
def test_forced_backend_leaves_what_it_cannot_run_to_the_next_cuda(backend):
    """A forced backend starts the rule: a case it cannot run (fp64 here)
    goes to the backends after it, as on a GPU where it comes first."""
    _needs_backend(backend)
    a, w = random_operands(8, 8, 8, torch.float64, "cuda")
    with tga.testing.override(cuda_backend=backend):
        assert tga.explain(a, w.t(), activation="relu").startswith("library: ")
        y = tga.linear_act(a, w, None, "relu")
    assert_close(y, reference64(a, w.t(), activation="relu")[0], torch.float64)


@requires_cuda
def test_backend_from_the_environment_cuda():
    """TORCH_GEMM_ACT_BACKEND forces the backend for the whole process; a name
    the build lacks is an error at the first CUDA call."""
    code = ("import torch, torch_gemm_act as tga\n"
            "a = torch.randn(64, 64, device='cuda')\n"
            "print(tga.testing._C.testing_overrides()[0])\n"
            "try:\n"
            "    tga.gemm_act(a, a)\n"
            "except RuntimeError as e:\n"
            "    print('raised', 'does not exist in this build' in str(e))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name, expected in (("library", "library"), ("nope", "nope\nraised True")):
        env = {**os.environ, "TORCH_GEMM_ACT_BACKEND": name,
               "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                timeout=300)
        assert result.stdout.strip() == expected, result.stdout + result.stderr


@requires_cuda
def test_each_sm90_kernel_forced_cuda():
    """Every compiled sm90 configuration, forced, on a ragged case of each of
    its dtypes and B layouts, with Z where it stores Z; one that cannot run a
    case says so."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        for k in tga.testing.kernels("sm90"):
            dtype = dtypes[k["dtype"]]
            a, w = random_operands(200, 1096, 392, dtype, "cuda")
            b = w.t() if k["b_layout"] == "kmajor" else w.t().contiguous()
            bias = torch.randn(392, dtype=dtype, device="cuda")
            with tga.testing.override(sm90_kernel=k["name"], cuda_backend="sm90"):
                out = tga.gemm_act(a, b, bias, activation="silu", return_preact=k["stores_z"])
                if not k["stores_z"]:
                    with pytest.raises(RuntimeError, match=rf"forced sm90 kernel '{k['name']}' cannot run"):
                        tga.gemm_act(a, b, bias, activation="silu", return_preact=True)
            y_ref, z_ref = reference64(a, b, bias, activation="silu")
            tol = (2e-3, 2e-3) if dtype == torch.float32 else None
            y, z = out if k["stores_z"] else (out, None)
            for got, ref in ((y, y_ref), (z, z_ref)):
                if got is None:
                    continue
                if tol:
                    torch.testing.assert_close(got.double().cpu(), ref, rtol=tol[0], atol=tol[1])
                else:
                    assert_close(got, ref, dtype)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sm90_tma_source_kernels_forced_cuda(dtype):
    """Each sm90 configuration that loads C through TMA (tmac), forced: C
    contiguous rows (ragged M and N, alpha, beta, a bias, Z), against float64
    and poisoned outputs; C in a wider buffer; no C; and C it cannot address
    (an odd offset, transposed, broadcast rows) refused by name."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    names = [k["name"] for k in tga.testing.kernels("sm90")
             if k["c_source"] == "tma" and k["dtype"] == {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]]
    assert names, "the build lists no tmac configuration"
    m, k, n = 200, 1096, 392
    a, w = random_operands(m, k, n, dtype, "cuda")
    bias = torch.randn(n, dtype=dtype, device="cuda")
    wide = torch.randn(m, n + 24, dtype=dtype, device="cuda")
    cs = {"contiguous": torch.randn(m, n, dtype=dtype, device="cuda"), "rows of a wider buffer": wide[:, :n],
          "none": None}
    refused = {"odd offset": torch.randn(m * n + 1, dtype=dtype, device="cuda")[1:].view(m, n),
               "transposed": torch.randn(n, m, dtype=dtype, device="cuda").t(),
               "broadcast rows": torch.randn(n, dtype=dtype, device="cuda").expand(m, n)}
    for name in names:
        with tga.testing.override(sm90_kernel=name, cuda_backend="sm90", poison_outputs=True):
            for c in cs.values():
                beta = 0.75 if c is not None else 0.0
                y, z = tga.gemm_act(a, w.t(), bias, c, activation="gelu", alpha=1.25, beta=beta,
                                    return_preact=True)
                y_ref, z_ref = reference64(a, w.t(), bias, c, activation="gelu", alpha=1.25, beta=beta)
                assert_close(y, y_ref, dtype)
                assert_close(z, z_ref, dtype)
            for c in refused.values():
                with pytest.raises(RuntimeError, match=rf"'{name}' cannot run this case \(the configuration loads C "
                                                       r"through TMA"):
                    tga.gemm_act(a, w.t(), bias, c, activation="gelu", beta=0.75)


@requires_cuda
def test_each_sm80_kernel_forced_cuda():
    """Every compiled sm80 configuration, forced (on any GPU from sm_80 on),
    on ragged cases of its dtype and B layout with every bias kind, C and Z:
    M and N not multiples of the tile, K with a partial last k-tile."""
    names = tga.testing.kernels("sm80")
    if not names:
        pytest.skip("this build has no sm80 family (built with GEMM_ACT_SM80=1 where an 8.x or 9.0 arch is listed)")
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16}
    for k in names:
        dtype = dtypes[k["dtype"]]
        for m, kk, n in ((200, 1096, 392), (1, 8, 136), (300, 72, 264)):
            a, w = random_operands(m, kk, n, dtype, "cuda")
            b = w.t() if k["b_layout"] == "kmajor" else w.t().contiguous()
            c = torch.randn(m, n, dtype=dtype, device="cuda")
            for bias in (None, torch.randn(n, dtype=dtype, device="cuda"),
                         torch.randn(m, 1, dtype=dtype, device="cuda")):
                with tga.testing.override(cuda_backend="sm80", sm80_kernel=k["name"]):
                    y, z = tga.gemm_act(a, b, bias, c, activation="gelu", alpha=1.5, beta=-0.5,
                                        return_preact=True)
                y_ref, z_ref = reference64(a, b, bias, c, activation="gelu", alpha=1.5, beta=-0.5)
                assert_close(z, z_ref, dtype)
                assert_close(y, y_ref, dtype)

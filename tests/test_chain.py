"""The MLP backward fused across layers: gemm_dact, gemm_act_chained and
linear_act_linear (torch_gemm_act.chain)."""

import pytest
import torch

import torch_gemm_act as tga
from conftest import requires_cuda, sm90_configs, takes_a_preact
from reference import ACTIVATIONS, BIAS_KINDS, TOL, assert_close, make_bias, torch_twin
from torch_gemm_act.activations import _GRAD_FROM_OUTPUT
from torch_gemm_act.chain import _ChainLink, _chained_gemm, linear_act_linear

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


def _derivative64(z, activation, negative_slope=0.01):
    """act'(z) in float64, by autograd through the PyTorch twin."""
    z64 = z.detach().double().cpu().requires_grad_()
    y = torch_twin(activation, negative_slope)(z64)
    (d,) = torch.autograd.grad(y.sum(), z64)
    return d


def _saved(z, activation, negative_slope=0.01):
    """What the layer before kept for act': Y (rounded like z) or Z."""
    if activation in _GRAD_FROM_OUTPUT:
        return torch_twin(activation, negative_slope)(z.double()).to(z.dtype)
    return z


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_layout", ["nmajor", "kmajor"])
@pytest.mark.parametrize("shape", [(256, 128, 192), (37, 19, 45)])
@pytest.mark.parametrize("bias_kind", ["none", "column"])
def test_gemm_dact_matches_reference(activation, dtype, b_layout, shape, bias_kind, device):
    m, k, n = shape
    grad = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=torch.float64) / k ** 0.5
    b = (b if b_layout == "nmajor" else b.t().contiguous().t()).to(dtype=dtype, device=device)
    z = (2 * torch.randn(m, n, dtype=torch.float64)).to(dtype=dtype, device=device)
    saved = _saved(z, activation, 0.1)
    alpha = 0.75
    bias = make_bias(bias_kind, (m, n), dtype, device)
    out, grad_bias = torch.ops.gemm_act.gemm_dact(grad, b, saved, bias, activation, alpha, 0.1)
    expected = _derivative64(z, activation, 0.1) * alpha * (grad.double().cpu() @ b.double().cpu())
    assert out.dtype == dtype and out.shape == (m, n) and out.is_contiguous()
    rtol, atol = TOL[dtype]
    # bf16/fp16 Y or Z carry their rounding into act'.
    torch.testing.assert_close(out.double().cpu(), expected, rtol=rtol, atol=4 * atol)
    if bias is None:
        assert grad_bias.numel() == 0
    else:
        # The sum of dZ (the fused kernel sums it before rounding) over M rows.
        assert grad_bias.shape == bias.shape and grad_bias.dtype == dtype
        torch.testing.assert_close(grad_bias.double().cpu(), expected.sum(0), rtol=rtol,
                                   atol=4 * atol * m ** 0.5)


@pytest.mark.parametrize("bias_kind", [k for k in BIAS_KINDS if k != "none"])
def test_gemm_dact_bias_of_any_kind(bias_kind, device):
    """Whatever the bias's shape, its gradient is dZ summed to that shape
    (only a bias per column is reduced in the fused kernel's epilogue)."""
    m, k, n = 136, 64, 200
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    grad = torch.randn(m, k, device=device, dtype=dtype)
    b = (torch.randn(k, n, device=device) / k ** 0.5).to(dtype)
    z = torch.randn(m, n, device=device, dtype=dtype)
    bias = make_bias(bias_kind, (m, n), dtype, device)
    out, grad_bias = torch.ops.gemm_act.gemm_dact(grad, b, z, bias, "gelu", 1.0, 0.01)
    expected = out.double().sum_to_size(bias.shape)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(grad_bias.double(), expected, rtol=rtol, atol=4 * atol * m ** 0.5)


@requires_cuda
def test_gemm_dact_runs_the_fused_kernel_cuda():
    """On an H100 under the rule, gemm_dact is one kernel: the sm90 GEMM with
    the dact epilogue, and no separate backward pass."""
    if torch.cuda.get_device_capability() != (9, 0) or tga.testing._C.testing_overrides()[0]:
        pytest.skip("the fused kernel is the sm90 family's, and the rule must start there")
    grad = torch.randn(512, 256, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(256, 384, dtype=torch.bfloat16, device="cuda")
    z = torch.randn(512, 384, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(384, dtype=torch.bfloat16, device="cuda")
    for with_bias in (False, True):
        args = (grad, b, z, bias if with_bias else None, "gelu", 1.0, 0.01)
        with tga.testing.override(poison_outputs=False):  # no fill before the kernel
            torch.ops.gemm_act.gemm_dact(*args)  # warm up
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                torch.ops.gemm_act.gemm_dact(*args)
                torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        assert names and "DactEpilogue" in names[0], names
        # The bias's gradient: the epilogue's per-tile sums added up by one
        # small kernel, not a pass over dZ.
        assert len(names) == (2 if with_bias else 1), names
        assert not with_bias or "sum_columns_kernel" in names[1], names


@requires_cuda
@pytest.mark.parametrize("config", sm90_configs("gemm_dact"))
@pytest.mark.parametrize("b_layout", ["nmajor", "kmajor"])
@pytest.mark.parametrize("shape", [(136, 64, 200), (300, 1032, 264), (8320, 64, 200)])
def test_each_dact_kernel_matches_reference_cuda(config, b_layout, shape):
    """Each sm90 gemm_dact configuration forced (a build may compile more
    than the rule's): ragged tiles, dA and the bias gradient against float64;
    8320 rows give the bias sum 65 tile rows of partials, more than its
    summing kernel's loads in flight (64)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family's kernels need an sm_90 GPU")
    m, k, n = shape
    grad = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.float64) / k ** 0.5
    b = (b if b_layout == "nmajor" else b.t().contiguous().t()).to(dtype=torch.bfloat16, device="cuda")
    z = (2 * torch.randn(m, n, dtype=torch.float64)).to(dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    with tga.testing.override(sm90_kernel=config):
        out, grad_bias = torch.ops.gemm_act.gemm_dact(grad, b, z, bias, "gelu", 0.75, 0.01)
    expected = _derivative64(z, "gelu") * 0.75 * (grad.double().cpu() @ b.double().cpu())
    rtol, atol = TOL[torch.bfloat16]
    torch.testing.assert_close(out.double().cpu(), expected, rtol=rtol, atol=4 * atol)
    torch.testing.assert_close(grad_bias.double().cpu(), expected.sum(0), rtol=rtol, atol=4 * atol * m ** 0.5)


@requires_cuda
def test_gemm_dact_bias_gradient_is_deterministic_cuda():
    """The epilogue's per-tile column sums are added in row order: repeated
    calls agree bit for bit."""
    grad = torch.randn(4096, 768, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(768, 3072, dtype=torch.bfloat16, device="cuda") / 768 ** 0.5
    z = torch.randn(4096, 3072, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(3072, dtype=torch.bfloat16, device="cuda")
    first = torch.ops.gemm_act.gemm_dact(grad, b, z, bias, "gelu_tanh", 1.0, 0.01)
    for _ in range(3):
        again = torch.ops.gemm_act.gemm_dact(grad, b, z, bias, "gelu_tanh", 1.0, 0.01)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_gemm_dact_checks_saved(device):
    grad = torch.randn(4, 3, device=device)
    b = torch.randn(3, 5, device=device)
    with pytest.raises(ValueError, match=r"saved must have the shape of grad @ b, \[4, 5\], got \[4, 4\]"):
        torch.ops.gemm_act.gemm_dact(grad, b, torch.randn(4, 4, device=device), None, "gelu", 1.0, 0.01)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        torch.ops.gemm_act.gemm_dact(grad, b, torch.randn(4, 5, device=device), None, "swish", 1.0, 0.01)
    with pytest.raises(ValueError, match=r"bias of shape \[4\] does not broadcast to the output \[4, 5\]"):
        torch.ops.gemm_act.gemm_dact(grad, b, torch.randn(4, 5, device=device), torch.randn(4, device=device),
                                     "gelu", 1.0, 0.01)
    with pytest.raises(ValueError, match="a_preact must have a's shape"):
        torch.ops.gemm_act.gemm_act_chained(grad, grad[:, :2], None, "gelu", 0.01, b, None, None, "none",
                                            1.0, 0.0, 0.01, False, False)
    with pytest.raises(ValueError, match="got a_bias without a_preact"):
        torch.ops.gemm_act.gemm_act_chained(grad, None, grad[0], "gelu", 0.01, b, None, None, "none",
                                            1.0, 0.0, 0.01, False, False)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear_act_linear_gradcheck(activation, device):
    x = torch.randn(6, 5, dtype=torch.float64, device=device, requires_grad=True)
    w1 = torch.randn(7, 5, dtype=torch.float64, device=device, requires_grad=True)
    b1 = torch.randn(7, dtype=torch.float64, device=device, requires_grad=True)
    w2 = torch.randn(3, 7, dtype=torch.float64, device=device, requires_grad=True)
    b2 = torch.randn(3, dtype=torch.float64, device=device, requires_grad=True)
    # Clear of relu's kink, where finite differences mean nothing.
    with torch.no_grad():
        z = x @ w1.t() + b1
        b1 += torch.where(z.abs().min(0).values < 1e-2, 0.1, 0.0)

    def fn(x_, w1_, b1_, w2_, b2_):
        return linear_act_linear(x_, w1_, b1_, w2_, b2_, activation=activation, negative_slope=0.2)

    assert torch.autograd.gradcheck(fn, (x, w1, b1, w2, b2), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("activation", ["gelu", "relu", "silu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_act_linear_matches_eager(activation, dtype, device):
    """Output and every gradient as nn.Linear -> act -> nn.Linear, on shapes
    the sm90 kernels take on an H100."""
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch_twin(activation), torch.nn.Linear(256, 128))
    mlp = mlp.to(device=device, dtype=dtype)
    x = torch.randn(3, 96, 64, device=device, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y = linear_act_linear(x, mlp[0].weight, mlp[0].bias, mlp[2].weight, mlp[2].bias, activation=activation)
    y_ref = mlp(x_ref)
    assert_close(y, y_ref, dtype)
    grad = torch.randn_like(y)
    params = list(mlp.parameters())
    grads = torch.autograd.grad(y, [x, *params], grad)
    ref = torch.autograd.grad(y_ref, [x_ref, *params], grad)
    for g, r in zip(grads, ref):
        # The two paths round differently (ours applies act' before rounding dY1).
        scale = r.double().abs().max().clamp_min(1)
        torch.testing.assert_close((g.double() / scale).cpu(), (r.double() / scale).cpu(),
                                   rtol=TOL[dtype][0], atol=2 * TOL[dtype][1])


def test_opcheck_chain_operators(device):
    grad = torch.randn(8, 6, device=device)
    b = torch.randn(6, 5, device=device)
    saved = torch.randn(8, 5, device=device)
    torch.library.opcheck(torch.ops.gemm_act.gemm_dact.default, (grad, b, saved, None, "silu", 1.5, 0.01))
    torch.library.opcheck(torch.ops.gemm_act.gemm_dact.default,
                          (grad, b, saved, torch.randn(5, device=device), "silu", 1.5, 0.01))
    a_preact = torch.randn(8, 6, device=device, requires_grad=True)
    a = torch.nn.functional.gelu(a_preact).detach()
    a_bias = torch.randn(6, device=device, requires_grad=True)
    w = torch.randn(6, 5, device=device, requires_grad=True)
    bias = torch.randn(5, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.gemm_act.gemm_act_chained.default,
                          (a, a_preact, None, "gelu", 0.01, w, bias, None, "relu", 1.0, 0.0, 0.01, False, False))
    torch.library.opcheck(torch.ops.gemm_act.gemm_act_chained.default,
                          (a, a_preact, a_bias, "gelu", 0.01, w, bias, None, "relu", 1.0, 0.0, 0.01, True, True))
    torch.library.opcheck(torch.ops.gemm_act.gemm_act_chained.default,
                          (a_preact.detach().requires_grad_(), None, None, "none", 0.0, w, bias, None, "gelu",
                           1.0, 0.0, 0.01, True, True))


def test_chain_under_torch_compile(device):
    """A fused, chained MLP compiles without graph breaks and trains as eager
    (on CUDA in bf16 and large enough for the layers to chain there)."""
    torch._dynamo.reset()
    dtype, (m, k, h, n) = ((torch.float32, (4, 16, 32, 8)) if device == "cpu"
                           else (torch.bfloat16, (1024, 1024, 1024, 256)))
    mlp = torch.nn.Sequential(torch.nn.Linear(k, h), torch.nn.GELU(), torch.nn.Linear(h, n))
    mlp = mlp.to(device=device, dtype=dtype)
    tga.fuse_linear_act(mlp)
    assert mlp[0]._chain_out is mlp[2]._chain_in is not None
    x = torch.randn(m, k, device=device, dtype=dtype, requires_grad=True)
    if device == "cuda" and torch.cuda.get_device_capability() == (9, 0):
        out = []
        hook = mlp[2].register_forward_hook(lambda mod, args, y: out.append(takes_a_preact(y)))
        mlp(x)
        hook.remove()
        assert out[0]
    explain = torch._dynamo.explain(mlp)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    compiled = torch.compile(mlp, backend="aot_eager", fullgraph=True)
    x2 = x.detach().clone().requires_grad_()
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad()
    mlp(x2).sum().backward()
    # bf16 sums over 1024 rows: differences of an ulp of the largest value.
    for g, r in zip([*grads, x.grad], [*(p.grad for p in mlp.parameters()), x2.grad]):
        scale = r.double().abs().max().clamp_min(1)
        assert_close(g.double() / scale, r.double() / scale, dtype)


def _mlp64(device, requires_grad=(True, True, True, True, True)):
    shapes = ((6, 5), (7, 5), (7,), (3, 7), (3,))
    return [torch.randn(s, dtype=torch.float64, device=device).requires_grad_(r)
            for s, r in zip(shapes, requires_grad)]


@pytest.mark.parametrize("use", ["chain", "y1_elsewhere", "not_taken", "biases_only"])
def test_chain_bias_gradients(use, device):
    """The first layer's bias gradient arrives once, whatever else happens:
    from the chained layer's epilogue for the part through Z1 (the first
    layer leaves it out of its own sum), from the first layer for any other
    use of Y1, and from the first layer alone when the link is not taken.
    With only the biases trainable, the chained backward still computes
    dZ1 for them."""
    grads_wanted = (False, False, True, False, True) if use == "biases_only" else (True,) * 5
    x, w1, b1, w2, b2 = _mlp64(device, grads_wanted)

    def forward(chain):
        link = _ChainLink()
        if chain:
            y1 = _chained_gemm(x, w1.t(), b1, "gelu", 0.01, link_out=link, any_size=True)
        else:
            y1 = torch.nn.functional.gelu(x @ w1.t() + b1)
        x2 = y1 * 1.0 if use == "not_taken" else y1
        out = (_chained_gemm(x2, w2.t(), b2, "none", 0.01, link_in=link) if chain else x2 @ w2.t() + b2)
        if use == "y1_elsewhere":
            out = out + y1.sum(-1, keepdim=True) * 0.5
        return out

    leaves = [t for t in (x, w1, b1, w2, b2) if t.requires_grad]
    grad = torch.randn(6, 3, dtype=torch.float64, device=device)
    got = torch.autograd.grad(forward(True), leaves, grad)
    want = torch.autograd.grad(forward(False), leaves, grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@requires_cuda
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_chains_on_cuda_only_where_z_is_needed_cuda(activation):
    """On CUDA a layer chains where its activation's derivative needs Z
    (gelu); relu's comes from Y, and the layer stays as it would alone."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the fused gemm_dact kernel is sm90's")
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch_twin(activation), torch.nn.Linear(1024, 256))
    mlp = tga.fuse_linear_act(mlp.to(device="cuda", dtype=torch.bfloat16))
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    chained = []
    hook = mlp[2].register_forward_hook(lambda mod, args, y: chained.append(takes_a_preact(y)))
    mlp(x)
    hook.remove()
    assert chained[0] == (activation == "gelu"), chained


@pytest.mark.parametrize("bias_kind", [k for k in BIAS_KINDS if k != "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 37, 45), (512, 384), (2, 1)])
def test_bias_grad_sums_to_the_bias_shape(bias_kind, dtype, shape, device):
    grad = torch.randn(shape, dtype=dtype, device=device)
    bias = make_bias(bias_kind, shape, dtype, device)
    out = torch.ops.gemm_act.bias_grad(grad, bias)
    expected = grad.double().sum_to_size(bias.shape)
    assert out.shape == bias.shape and out.dtype == dtype
    scale = grad.shape[0] ** 0.5 if len(shape) > 1 else 1.0  # sums of randn grow as sqrt(count)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out.double(), expected, rtol=rtol, atol=atol * scale * 8)
    torch.library.opcheck(torch.ops.gemm_act.bias_grad.default, (grad, bias))


def test_direct_chained_call_matches_torch_ops(device):
    """_chained_gemm calls the chained operator through _C for plain tensors:
    the same operator as torch.ops', the same results and gradients; its
    arguments are checked as the operator's are."""
    x, w1, b1, w2, b2 = _mlp64(device, (True,) * 5)
    z1 = x @ w1.t() + b1
    y1 = torch.nn.functional.gelu(z1)
    args = (y1, z1, b1, "gelu", 0.01, w2.t(), b2, None, "none", 1.0, 0.0, 0.01, False, False)
    direct, via_ops = tga._C.gemm_act_chained(*args), torch.ops.gemm_act.gemm_act_chained(*args)
    torch.testing.assert_close(direct[0], via_ops[0], rtol=0, atol=0)
    grads = [torch.autograd.grad(out[0].sum(), (x, w1, b1, w2, b2), retain_graph=True)
             for out in (direct, via_ops)]
    for g_direct, g_ops in zip(*grads):
        torch.testing.assert_close(g_direct, g_ops, rtol=0, atol=0)
    with pytest.raises(TypeError, match="gemm_act_chained: a_preact must be a Tensor or None, got int"):
        tga._C.gemm_act_chained(y1, 1, None, "gelu", 0.01, w2.t(), b2, None, "none", 1.0, 0.0, 0.01, False,
                                False)


def test_direct_calls_take_a_weight(device):
    """The direct entries given a weight [N, K] with b_is_weight compute what
    they compute given weight.t(): the same outputs and gradients, the
    weight's gradient laid out as the weight."""
    x = torch.randn(9, 16, device=device, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, 16, device=device, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(12, device=device, dtype=torch.float64, requires_grad=True)
    calls = {
        "gemm_act": lambda b, flag: tga._C.gemm_act(x, b, bias, None, "gelu", 1.0, 0.0, 0.01, True, *flag),
        "gemm_act_chained": lambda b, flag: tga._C.gemm_act_chained(x, None, None, "none", 0.0, b, bias, None,
                                                                    "gelu", 1.0, 0.0, 0.01, True, False, *flag),
    }
    for name, call in calls.items():
        by_weight, by_view = call(w, (True,)), call(w.t(), ())
        for got, expected in zip(by_weight, by_view):
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=name)
        grads = [torch.autograd.grad(out[0].sum(), (x, w, bias)) for out in (by_weight, by_view)]
        for got, expected in zip(*grads):
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=name)
        assert grads[0][1].stride() == w.stride()
    with pytest.raises(ValueError, match="cannot be multiplied"):
        tga._C.gemm_act(x, w.t().contiguous(), None, None, "gelu", 1.0, 0.0, 0.01, False, True)


@requires_cuda
def test_bias_grad_counters_are_reused_across_launches_cuda():
    """The sums across blocks count arrivals in counters each launch leaves
    at zero for the next on the stream: calls of several shapes, in turn and
    again, each sum right against float64."""
    for shape, kind in [((8192, 64), "col"), ((6000, 96), "row"), ((8192, 64), "col"), ((3, 40000), "scalar"),
                        ((6000, 96), "row"), ((8192, 64), "col")]:
        grad = torch.randn(shape, device="cuda")
        bias = {"col": torch.zeros(shape[1], device="cuda"), "row": torch.zeros(shape[0], 1, device="cuda"),
                "scalar": torch.zeros((), device="cuda")}[kind]
        out = torch.ops.gemm_act.bias_grad(grad, bias)
        expected = grad.double().sum_to_size(bias.shape)
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-3, msg=f"{shape} {kind}")


def _shared_path_views(fn):
    """The reshapes, views, narrows and slices dispatched by the operators'
    shared host path (the autograd functions and the argument checks: an
    op's own direct children), in one call of fn on the CPU; the CPU
    backend's own reductions are not counted."""
    from torch.profiler import ProfilerActivity, profile
    shared = ("gemm_act::gemm_act", "gemm_act::gemm_act_chained", "gemm_act::gemm_dact",
              "GemmActBackward")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    found = []
    for event in prof.events():
        if event.name in ("aten::reshape", "aten::view", "aten::narrow", "aten::slice"):
            parent = event.cpu_parent.name if event.cpu_parent is not None else ""
            if parent.startswith(shared):
                found.append((event.name, parent))
    return found


def test_two_d_layers_dispatch_no_view_of_the_same_shape():
    # Each no-op view is a dispatched call: a fused block's forward and
    # backward made dozens, which cost a host-bound step more than the
    # fusion saved.
    x = torch.randn(8, 16, requires_grad=True)
    w1, b1 = torch.randn(32, 16, requires_grad=True), torch.randn(32, requires_grad=True)
    w2, b2 = torch.randn(16, 32, requires_grad=True), torch.randn(16, requires_grad=True)

    def chain():
        linear_act_linear(x, w1, b1, w2, b2, activation="gelu").sum().backward()

    def layer():
        tga.linear_act(x, w1, b1, activation="gelu").sum().backward()

    for fn in (chain, layer):
        fn()  # lazy initialisation outside the profile
        assert _shared_path_views(fn) == []
    # A 3-D input is flattened, so the check above can see a view.
    x3 = x.detach().view(2, 4, 16).requires_grad_()
    assert _shared_path_views(lambda: tga.linear_act(x3, w1, b1, activation="gelu").sum().backward())

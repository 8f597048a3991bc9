"""LinearAct looks and initialises like nn.Linear; fuse_linear_act keeps outputs."""

import copy
import io
import pytest
import torch
from torch import nn

import torch_gemm_act as tga
from conftest import OpNames, requires_cuda, takes_a_preact
from reference import assert_close
from torch_gemm_act.activations import _GRAD_FROM_OUTPUT

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere


def test_parameters_init_and_state_dict_like_linear():
    torch.manual_seed(0)
    linear = nn.Linear(20, 30)
    torch.manual_seed(0)
    fused = tga.LinearAct(20, 30, activation="relu")
    assert torch.equal(linear.weight, fused.weight) and torch.equal(linear.bias, fused.bias)
    assert fused.state_dict().keys() == linear.state_dict().keys()
    fused.load_state_dict(nn.Linear(20, 30).state_dict())
    no_bias = tga.LinearAct(3, 2, bias=False)
    assert no_bias.bias is None and list(no_bias.state_dict()) == ["weight"]


def test_factory_kwargs():
    m = tga.LinearAct(4, 5, device="cpu", dtype=torch.float64)
    assert m.weight.dtype == torch.float64 and m.weight.shape == (5, 4) and m.bias.shape == (5,)


def test_repr():
    assert repr(tga.LinearAct(4, 5, activation="leaky_relu", negative_slope=0.2)) == (
        "LinearAct(in_features=4, out_features=5, bias=True, activation='leaky_relu', negative_slope=0.2)")
    assert "activation='gelu'" in repr(tga.LinearAct(4, 5))


def test_from_linear_shares_parameters():
    linear = nn.Linear(6, 4)
    fused = tga.LinearAct.from_linear(linear, activation="silu")
    assert fused.weight is linear.weight and fused.bias is linear.bias
    x = torch.randn(3, 6)
    assert_close(fused(x), nn.functional.silu(linear(x)), torch.float32)
    with pytest.raises(TypeError, match="expects a plain nn.Linear \\(not a fused module\\), got ReLU"):
        tga.LinearAct.from_linear(nn.ReLU())
    # A LinearAct is an nn.Linear, but sharing its parameters would drop its activation.
    with pytest.raises(TypeError, match="got LinearAct"):
        tga.LinearAct.from_linear(fused, activation="relu")


def test_is_an_nn_linear():
    """What handles Linears by type handles LinearAct: a tensor-parallel
    plan (tests/test_distributed.py), an init or weight-decay rule."""
    fused = tga.LinearAct(4, 5, activation="relu")
    assert isinstance(fused, nn.Linear)
    touched = []
    nn.Sequential(fused).apply(lambda m: touched.append(m) if isinstance(m, nn.Linear) else None)
    assert touched == [fused]
    # Copies and pickles keep the activation.
    assert copy.deepcopy(fused).activation == "relu"


def _mlp():
    return nn.Sequential(
        nn.Linear(8, 16), nn.GELU(),
        nn.Linear(16, 16), nn.GELU(approximate="tanh"),
        nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.LeakyReLU(0.2)),
        nn.Linear(16, 16), nn.SiLU(),
        nn.Linear(16, 16), nn.Tanh(),
        nn.Linear(16, 16), nn.Sigmoid(),
        nn.Linear(16, 16), nn.Dropout(0.0),  # not an activation: left alone
        nn.Linear(16, 4),
    )


def test_fuse_linear_act_keeps_outputs(device):
    model = _mlp().to(device).double()
    x = torch.randn(5, 8, dtype=torch.float64, device=device)
    expected = model(x)
    keys = set(model.state_dict())
    returned = tga.fuse_linear_act(model)
    assert returned is model
    kinds = [m.activation for m in model.modules() if isinstance(m, tga.LinearAct)]
    # Sigmoid's derivative comes from Y: the Linear after it is on no chain
    # and stays plain (rule links), as does the one after the Dropout.
    assert kinds == ["gelu", "gelu_tanh", "relu", "leaky_relu", "silu", "tanh", "sigmoid"]
    assert sum(type(m) is nn.Linear for m in model.modules()) == 2
    assert set(model.state_dict()) == keys
    assert_close(model(x), expected, torch.float64)


def test_fuse_linear_act_chains_mlp_layers(device):
    """Linear -> act -> Linear: the two fused layers are chained (their
    backward fused across them) where act' needs Z (gelu, gelu_tanh, silu),
    not where it comes from Y (relu, leaky_relu, tanh, sigmoid: rule links),
    and training computes what the unfused model does, gradients included."""
    model = _mlp().to(device).double()
    reference = copy.deepcopy(model)
    _, report = tga.fuse_linear_act(model, report=True)
    assert sorted(report.chained) == [("0", "2"), ("5", "7")]
    assert "chained 0 -> 2" in str(report)
    for first in (model[4][0], model[4][2], model[7], model[9]):
        assert first._chain_out is None
    assert model[4][2]._chain_in is None and type(model[11]) is nn.Linear
    x = torch.randn(5, 8, dtype=torch.float64, device=device, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grad = torch.randn(5, 4, dtype=torch.float64, device=device)
    nodes = []
    model[7].register_forward_hook(lambda m, args, out: nodes.append((out.grad_fn, takes_a_preact(out))))
    model(x).backward(grad)
    # On CUDA, float64 has no fused kernel to chain through: each layer alone.
    assert nodes[0][1] == (device == "cpu"), nodes[0]
    with torch.no_grad():  # nothing to differentiate: each layer alone, nothing published
        model(x)
    assert nodes[1][0] is None and model[5]._chain_out.y is None
    reference(x_ref).backward(grad)
    assert_close(x.grad, x_ref.grad, torch.float64)
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.grad, p_ref.grad, torch.float64), name
    # A deep copy gets links of its own, empty.
    clone = copy.deepcopy(model)
    assert clone[0]._chain_out is clone[2]._chain_in and clone[0]._chain_out is not model[0]._chain_out


def test_mlp_trains_like_nn_linear():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1))
    fused = tga.fuse_linear_act(nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1)))
    fused.load_state_dict(ref.state_dict())
    x, t = torch.randn(64, 8), torch.randn(64, 1)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, fused)]
    for _ in range(5):
        for model, opt in zip((ref, fused), opts):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), t).backward()
            opt.step()
    for p, q in zip(ref.parameters(), fused.parameters()):
        assert_close(q, p, torch.float32)


def _check_chained_training(model, reference, first, second, p, device):
    """In eval mode and in training, model's output and gradients are the
    unfused reference's (the dropouts seeded alike); `second` takes Z from
    `first` exactly where the dropout passes its input on (on the CPU:
    float64 on CUDA never chains), and the link is empty after."""
    nodes = []
    second.register_forward_hook(lambda m, args, out: nodes.append(takes_a_preact(out)))
    x = torch.randn(5, 8, dtype=torch.float64, device=device)
    for training in (False, True):
        model.train(training)
        reference.train(training)
        torch.manual_seed(1)
        y = model(x)
        torch.manual_seed(1)
        y_ref = reference(x)
        assert_close(y, y_ref, torch.float64)
        grads = torch.autograd.grad(y.sum(), list(model.parameters()))
        grads_ref = torch.autograd.grad(y_ref.sum(), list(reference.parameters()))
        for g, r in zip(grads, grads_ref):
            assert_close(g, r, torch.float64)
        chained = device == "cpu" and (p == 0 or not training)
        assert nodes[-1] == chained, (training, nodes[-1])
        assert first._chain_out.y is None  # taken, or never published


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_chain_through_a_dropout_only_while_it_passes_its_input(p, device):
    """Linear -> act -> Dropout -> Linear chains; the chain is used where the
    dropout returns its input (p = 0, or eval mode), and otherwise nothing is
    published and each layer runs alone, its gradients as eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(p), nn.Linear(16, 4)).to(device).double()
    reference = copy.deepcopy(model)
    _, report = tga.fuse_linear_act(model, report=True)
    assert report.chained == [("0", "3")] and model[0]._chain_out.through == (model[2],)
    _check_chained_training(model, reference, model[0], model[3], p, device)


class _TimmStyleMlp(nn.Module):
    """timm's Mlp: fc1 -> act -> drop1 -> norm (an identity unless a norm
    layer is given) -> fc2 -> drop2."""

    def __init__(self, p, norm):
        super().__init__()
        self.fc1, self.act, self.drop1 = nn.Linear(8, 16), nn.GELU(), nn.Dropout(p)
        self.norm = nn.LayerNorm(16) if norm else nn.Identity()
        self.fc2, self.drop2 = nn.Linear(16, 4), nn.Dropout(p)

    def forward(self, x):
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_chain_through_a_dropout_and_an_identity(p, device):
    """Linear -> act -> Dropout -> Identity -> Linear (timm's Mlp) chains
    through both; the chain is used while the dropout returns its input, and
    training computes what the unfused model does, gradients included."""
    torch.manual_seed(0)
    model = _TimmStyleMlp(p, norm=False).to(device).double()
    reference = copy.deepcopy(model)
    _, report = tga.fuse_linear_act(model, report=True)
    assert report.chained == [("fc1", "fc2")] and model.fc1._chain_out.through == (model.drop1, model.norm)
    _check_chained_training(model, reference, model.fc1, model.fc2, p, device)
    # A copy's link passes through the copy's own modules.
    clone = copy.deepcopy(model)
    assert clone.fc1._chain_out.through == (clone.drop1, clone.norm)


def test_chain_through_a_dropout_that_returns_a_new_tensor(monkeypatch):
    """Traced by torch.compile, a dropout with p = 0 returns a new tensor of
    its input's values (not the input itself, as in eager mode): the chain
    still links, and training computes what the unfused model does; so does
    a deep copy, through its own modules, and a pickled and loaded model."""
    torch.manual_seed(0)
    model = _TimmStyleMlp(0.0, norm=False).double()
    reference = copy.deepcopy(model)
    tga.fuse_linear_act(model)
    dropout = nn.functional.dropout
    monkeypatch.setattr(nn.functional, "dropout",
                        lambda x, p=0.5, training=True, inplace=False: dropout(x, p, training, inplace).view_as(x))
    x = torch.randn(5, 8, dtype=torch.float64)
    y_ref = reference(x)
    grads_ref = torch.autograd.grad(y_ref.sum(), list(reference.parameters()))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for fused in (model, copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        nodes = []
        fused.fc2.register_forward_hook(lambda m, args, out: nodes.append(takes_a_preact(out)))
        y = fused(x)
        assert nodes == [True]
        assert_close(y, y_ref, torch.float64)
        for g, r in zip(torch.autograd.grad(y.sum(), list(fused.parameters())), grads_ref):
            assert_close(g, r, torch.float64)
        # One hook a module, on the module's own link.
        hooks = [h for h in fused.drop1._forward_hooks.values() if type(h).__name__ == "_PassOn"]
        assert len(hooks) == 1 and hooks[0].link is fused.fc1._chain_out


def test_no_chain_through_a_norm_layer():
    """A LayerNorm between the activation and the next Linear changes the
    tensor: the pair fuses, the layers do not chain."""
    model = _TimmStyleMlp(0.0, norm=True).double()
    x = torch.randn(5, 8, dtype=torch.float64)
    expected = model(x)
    _, report = tga.fuse_linear_act(model, report=True)
    assert [lin for lin, _, _ in report.fused] == ["fc1"] and report.chained == []
    assert model.fc1._chain_out is None and type(model.fc2) is nn.Linear
    assert_close(model(x), expected, torch.float64)


def test_chain_link_unpickles_the_old_single_module_form():
    """A link pickled when it held one dropout module (or none) loads as the
    tuple of modules it now holds."""
    from torch_gemm_act.chain import _ChainLink
    dropout = nn.Dropout(0.1)
    for state, through in ((dropout, (dropout,)), (None, ())):
        link = _ChainLink.__new__(_ChainLink)
        link.__setstate__(state)
        assert link.through == through and link.y is None and link.open() == (not through)


@requires_cuda
@pytest.mark.parametrize("activation", [nn.ReLU, nn.SiLU])
def test_small_model_inference_peaks_no_higher_than_eager_cuda(activation):
    """A small fused model in inference holds no more memory at its peak
    than the unfused one, which frees each block's input after its Linear."""
    eager = nn.Sequential(nn.Linear(256, 1024), activation(), nn.Linear(1024, 256),
                          nn.Linear(256, 1024), activation(), nn.Linear(1024, 256)).cuda()
    fused = tga.fuse_linear_act(copy.deepcopy(eager))
    x = torch.randn(512, 256, device="cuda")

    def peak(model):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.no_grad():
            out = model(x)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, out

    peak(fused)  # cuBLAS's workspace, allocated once
    fused_peak, out = peak(fused)
    eager_peak, expected = peak(eager)
    assert fused_peak <= eager_peak, (fused_peak, eager_peak)
    assert_close(out, expected, torch.float32)


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("subclass", [False, True])
def test_unfused_layer_activates_in_place_only_plain_tensors(activation, subclass, monkeypatch):
    """The unfused path (host-bound layers, CUDA only: forced here on the
    CPU) applies an activation differentiated from its output in place on
    a plain tensor, the twin out of place otherwise; the same values and
    gradients either way."""
    from torch.overrides import TorchFunctionMode

    class Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(tga.modules, "_runs_atens_ops", lambda x, n: True)
    fused = tga.LinearAct(8, 16, activation=activation, dtype=torch.float64)
    twin = tga.activations._torch_module(activation)
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    x_in = x.as_subclass(_Subclass) if subclass else x
    with Calls() as calls:
        y = fused(x_in)
    assert ("relu_" in calls.names) == (activation == "relu" and not subclass), calls.names
    expected = twin(nn.functional.linear(x, fused.weight, fused.bias))
    torch.testing.assert_close(y.as_subclass(torch.Tensor), expected)
    gy = torch.randn_like(expected)
    got = torch.autograd.grad(y, (x, fused.weight, fused.bias), gy)
    want = torch.autograd.grad(expected, (x, fused.weight, fused.bias), gy)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.as_subclass(torch.Tensor), w)


@pytest.mark.shipped_policy
@pytest.mark.parametrize("module", ["linear", "conv1d"])
@pytest.mark.parametrize("activation", tga.ACTIVATIONS)
def test_layers_on_the_cpu_run_atens_ops(activation, module):
    """On the CPU a fused layer in eager mode runs the ops of the modules it
    replaced at any size (the operator's CPU kernel is the reference, slower
    than ATen's vectorised activations), and computes what they compute bit
    for bit, with and without a backward; a chain of layers as well."""
    k, n = 32, 48
    kwargs = {"activation": activation, "negative_slope": 0.2, "dtype": torch.float64}
    fused = tga.LinearAct(k, n, **kwargs) if module == "linear" else tga.Conv1DAct(n, k, **kwargs)
    twin = tga.activations._torch_module(activation, 0.2)
    weight = fused.weight if module == "linear" else fused.weight.t()
    x = torch.randn(3, 5, k, dtype=torch.float64, requires_grad=True)
    with torch.no_grad(), OpNames() as calls:
        y = fused(x)
    assert not any(name.startswith("gemm_act") for name in calls.names), calls.names
    assert torch.equal(y, twin(nn.functional.linear(x, weight, fused.bias)))
    with OpNames() as calls:
        y = fused(x)
    assert not any(name.startswith("gemm_act") for name in calls.names), calls.names
    eager = twin(nn.functional.linear(x, weight, fused.bias))
    assert torch.equal(y, eager)
    gy = torch.randn_like(y)
    for g, e in zip(torch.autograd.grad(y, (x, fused.weight, fused.bias), gy),
                    torch.autograd.grad(eager, (x, fused.weight, fused.bias), gy)):
        assert torch.equal(g, e)

    model = nn.Sequential(nn.Linear(k, n), twin, nn.Linear(n, k)).double()
    reference = copy.deepcopy(model)
    tga.fuse_linear_act(model)
    with OpNames() as calls:
        y = model(x)
    assert not any(name.startswith("gemm_act") for name in calls.names), calls.names
    assert torch.equal(y, reference(x))


class _Doubled(nn.Module):
    def forward(self, w):
        return 2 * w


@pytest.mark.shipped_policy
@pytest.mark.parametrize("module", ["linear", "conv1d"])
@pytest.mark.parametrize("how", ["parametrized", "functional_call", "reassigned", "no_bias"])
def test_atens_path_reads_the_parameters_the_module_has(module, how):
    """The ATen path takes weight and bias from the module's _parameters
    where both are registered there (modules._weight_and_bias): a
    parametrized weight, parameters swapped by torch.func.functional_call,
    a weight reassigned as a plain attribute and a missing bias give what
    the same Linear computes (on the CPU, where fused modules run ATen's
    ops)."""
    torch.manual_seed(0)
    k, n = 8, 16
    if module == "linear":
        fused = tga.LinearAct(k, n, bias=how != "no_bias", activation="relu", dtype=torch.float64)
    else:
        fused = tga.Conv1DAct(n, k, activation="relu", dtype=torch.float64)
        if how == "no_bias":
            fused.bias = None
    as_linear = (lambda w: w) if module == "linear" else (lambda w: w.t())
    x = torch.randn(4, k, dtype=torch.float64, requires_grad=True)
    weight, bias = fused.weight, fused.bias
    if how == "parametrized":
        torch.nn.utils.parametrize.register_parametrization(fused, "weight", _Doubled())
        y = fused(x)
        weight = 2 * fused.parametrizations.weight.original
    elif how == "functional_call":
        weight = torch.randn_like(fused.weight)
        bias = torch.randn_like(fused.bias)
        y = torch.func.functional_call(fused, {"weight": weight, "bias": bias}, (x,))
    elif how == "reassigned":
        weight = torch.randn(fused.weight.shape, dtype=torch.float64)
        del fused.weight
        fused.weight = weight
        y = fused(x)
    else:
        y = fused(x)
    expected = torch.relu(nn.functional.linear(x, as_linear(weight), bias))
    assert torch.equal(y, expected)
    gy = torch.randn_like(y)
    torch.testing.assert_close(torch.autograd.grad(y, x, gy)[0], torch.autograd.grad(expected, x, gy)[0])


@requires_cuda
@pytest.mark.shipped_policy
@pytest.mark.parametrize("module", ["linear", "conv1d"])
def test_host_bound_layer_without_input_features_cuda(module):
    """K = 0 without a backward: act(bias) in every row (ATen's CUDA addmm,
    which the epilogue path would call, returns the bias itself there)."""
    fused = tga.LinearAct(0, 16, activation="relu", device="cuda") if module == "linear" else \
        tga.Conv1DAct(16, 0, activation="relu", device="cuda")
    with torch.no_grad():
        fused.bias.copy_(torch.linspace(-1, 1, 16))
        y = fused(torch.randn(4, 0, device="cuda"))
    torch.testing.assert_close(y, torch.relu(fused.bias.detach()).expand(4, 16))


@requires_cuda
@pytest.mark.shipped_policy
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("module", ["linear", "conv1d"])
@pytest.mark.parametrize("activation", tga.ACTIVATIONS)
def test_host_bound_layers_run_atens_ops_cuda(activation, dtype, module):
    """In eager mode a fused layer below _policy.HOST_BOUND_MULTIPLY_ADDS
    runs the ops of the modules it replaced (F.linear or Conv1D's addmm,
    then the activation, in place where it is differentiated from its
    output), whose host time is theirs; a larger one runs the fused
    operator; in training a host-bound LinearAct whose activation is
    differentiated from its output runs the operator too, recording its own
    node (modules._takes_node). All compute what those modules do, in
    training too: the unfused layer bit for bit, the operator within the
    dtype's tolerance of float64 (differentiated on the side of relu's kink
    its own output is: an output within rounding of zero may fall on
    either)."""
    k, n = 256, 1024
    kwargs = {"activation": activation, "negative_slope": 0.2, "device": "cuda", "dtype": dtype}
    fused = tga.LinearAct(k, n, **kwargs) if module == "linear" else tga.Conv1DAct(n, k, **kwargs)
    twin = tga.activations._torch_module(activation, 0.2)
    params64 = [p.detach().double().requires_grad_() for p in (fused.weight, fused.bias)]
    weight64 = params64[0] if module == "linear" else params64[0].t()
    boundary = tga._policy.HOST_BOUND_MULTIPLY_ADDS // (k * n)
    epilogue = tga.activations._addmm_epilogue(activation, dtype) is not None
    for rows in (1, 64, boundary - 1, boundary, boundary + 64):
        x = torch.randn(rows, k, device="cuda", dtype=dtype, requires_grad=True)
        x64 = x.detach().double().requires_grad_()
        z64 = nn.functional.linear(x64, weight64, params64[1])
        y64 = twin(z64)
        unfused = rows * k * n < tga._policy.HOST_BOUND_MULTIPLY_ADDS
        with torch.no_grad(), OpNames() as calls:
            y = fused(x)
        # Without a backward, bf16's tanh GELU is cuBLASLt's
        # epilogue through ATen's one op; the rest as in training.
        assert ("_addmm_activation.default" in calls.names) == (unfused and epilogue), (rows, calls.names)
        assert any(name.startswith("gemm_act") for name in calls.names) == (not unfused), (rows, calls.names)
        assert_close(y, y64, dtype)
        y = fused(x)
        node = unfused and module == "linear" and activation in _GRAD_FROM_OUTPUT - {"none"}
        through_operator = not unfused or node
        name = y.grad_fn.name()
        assert (name == "GemmActBackward") == through_operator, (rows, name)
        gy = torch.randn_like(y)
        got = torch.autograd.grad(y, (x, fused.weight, fused.bias), gy)
        if not through_operator:
            weight = fused.weight if module == "linear" else fused.weight.t()
            eager = twin(nn.functional.linear(x, weight, fused.bias))
            assert torch.equal(y, eager)
            for g, e in zip(got, torch.autograd.grad(eager, (x, fused.weight, fused.bias), gy)):
                assert torch.equal(g, e)
            continue
        assert_close(y, y64, dtype)
        if activation in ("relu", "leaky_relu"):
            y64 = torch.where(y.detach().double() > 0, z64, z64 * (0.2 if activation == "leaky_relu" else 0.0))
        want = torch.autograd.grad(y64, [x64] + params64, gy.double())
        for g, w in zip(got, want):
            assert_close(g, w, dtype, normwise=True)

"""LinearAct (nn.Linear followed by an activation) and Conv1DAct
(transformers' Conv1D followed by one), each as one fused op, and what the
fused modules share; the gated forms are in gated_modules.py."""

import torch
from torch import nn
# Imported by name: traced, `torch.compiler.is_compiling` from here would
# alias the `torch` other modules' traced code reaches, a guard Dynamo
# evaluates in Python on every call (PyTorch 2.11).
from torch.compiler import is_compiling

from ._policy import HOST_BOUND_MULTIPLY_ADDS as _HOST_BOUND, NODE_ACTIVATIONS as _NODE_ACTIVATIONS, \
    chain_pays as _chain_pays, compiles_as_eager as _compiles_as_eager, needs_grad as _needs_grad, \
    runs_atens_ops as _runs_atens_ops
from .activations import GELU, IDENTITY, _USES_SLOPE, _addmm_epilogue, _check_activation, _in_place_op, _shared_twin
from .chain import _chained_gemm
from .functional import _gemm_act_of_weight, _is_dtensor, explain, gemm_act

__all__ = ["LinearAct", "Conv1DAct"]


def _linear_parameters(module, in_features, out_features, bias, factory):
    """nn.Linear's parameters on `module`, initialised as nn.Linear's."""
    module.in_features = in_features
    module.out_features = out_features
    module.weight = nn.Parameter(torch.empty((out_features, in_features), **factory))
    if bias:
        module.bias = nn.Parameter(torch.empty(out_features, **factory))
    else:
        module.register_parameter("bias", None)
    nn.Linear.reset_parameters(module)


def _addmm_activation(x, b, bias, use_gelu):
    """act(x @ b + bias), b [K, N], as ATen's one op (x of any rank)."""
    if x.dim() == 2:
        return torch._addmm_activation(bias, x, b, use_gelu=use_gelu)
    y = torch._addmm_activation(bias, x.reshape(-1, x.shape[-1]), b, use_gelu=use_gelu)
    return y.view(*x.shape[:-1], b.shape[1])


_HOST_BOUND_LOG2 = _HOST_BOUND.bit_length() - 1

# What a fused module's call runs (_WithActivation._unfused_mode): the
# fused operator, or the unfused layer's ATen ops in eager mode or traced.
_FUSED, _EAGER, _TRACED = 0, 1, 2


class _Fused:
    """Marks this project's nn.Linear subclasses: Linears to whatever
    handles Linears by type, but not linear ones."""


def _sharing(cls, linear, **kwargs):
    """A cls made on the meta device whose parameters are ``linear``'s (no
    copy); kwargs: cls's own arguments."""
    # Sharing a fused module's parameters would drop what it fuses.
    if not isinstance(linear, nn.Linear) or isinstance(linear, _Fused):
        raise TypeError(f"from_linear expects a plain nn.Linear (not a fused module), got {type(linear).__name__}")
    module = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta", **kwargs)
    module.weight = linear.weight
    module.bias = linear.bias
    return module


def _weight_and_bias(module):
    """module.weight and module.bias in eager mode, taken from its
    _parameters where both are registered there (FSDP2 and torch.func swap
    tensors in that dict too). Read as attributes, each goes through
    nn.Module.__getattr__ after a failed lookup, a noticeable share of a
    small layer's host time. A parametrized or
    reassigned weight is no longer in _parameters and is read as an
    attribute."""
    params = module._parameters
    if "weight" in params and "bias" in params:
        return params["weight"], params["bias"]
    return module.weight, module.bias


class _WithActivation(_Fused):
    """What the fused modules share (a mixin before their nn.Module base):
    their activation, checked once, and the links fuse_linear_act may give
    them to the layer before and after (torch_gemm_act.chain: the MLP
    backward fused across layers)."""

    def _init_fused(self, activation, negative_slope):
        self.activation = activation
        self.negative_slope = float(negative_slope)
        if activation != IDENTITY:
            _shared_twin(activation, negative_slope)  # made now, outside any tracing
        # The links on the instance, not only the class: traced, an instance
        # attribute is guarded by one lookup in its dict, a class attribute
        # through the type's MRO, on every call of a compiled model.
        self._chain_in = None
        self._chain_out = None

    _chain_in = None   # _ChainLink from the layer whose output this one takes
    _chain_out = None  # _ChainLink to the layer that takes this one's output

    def _unfused_mode(self, x, n, why=False):
        """Whether this call (input x, n output columns) runs the unfused
        layer, ATen's ops: the ones the modules it replaced ran (_EAGER or
        _TRACED), or the fused operator (_FUSED, false).

        Under torch.compile, where the operator would take eager's formula
        anyway (rule compiles_as_eager, torch_gemm_act._policy), so Inductor
        fuses them itself. Through the chain and the operator's Python, each compiled
        call had cost more host time per fused block (guards, and
        chain-link writes replayed after the graph). A layer with no
        activation whose input no link hands over is F.linear itself: through
        the operator Inductor could not fuse its bias gradient.

        In eager mode on CUDA, where the layer is host-bound
        (rule host_bound): there a step's time is the host's. ATen's
        ops cost the host what eager's modules do; through the operator a
        training step took longer. Except in training, for a LinearAct whose
        activation is differentiated from its output (rule own_node): the
        operator's node taking the weight (functional._gemm_act_of_weight)
        has one node and four launches where eager's Linear and activation
        have three nodes and six. (Measured: docs/MEASUREMENTS.md, "Host-bound
        policy".)

        On the CPU, always (rule cpu_atens).

        With no backward to record, a half-precision tanh GELU layer with a
        bias runs one op where eager ran two (_epilogue_of), in eager mode or
        traced.

        Either way a chain's second layer still takes what the first
        published (the first layer's backward counts on it).

        With ``why``, (mode, the rule that chose it or None), and the chain
        link left as it is (explain)."""
        if is_compiling():
            if self.activation != IDENTITY and not _compiles_as_eager(x, self.activation,
                                                                      _needs_grad(x, self.weight, self.bias)):
                return (_FUSED, None) if why else _FUSED
            mode = _TRACED
        elif _runs_atens_ops(x, n):
            mode = _EAGER
        else:
            return (_FUSED, None) if why else _FUSED
        chain_in = self._chain_in
        if chain_in is None:
            if mode == _EAGER and self._takes_node(x):
                return (_FUSED, "own_node") if why else _FUSED
        elif chain_in.y is x:
            return (_FUSED, None) if why else _FUSED
        if why:
            return mode, "compiles_as_eager" if mode == _TRACED else "host_bound" if x.is_cuda else "cpu_atens"
        if chain_in is not None:
            chain_in.clear()  # what it holds is another input's
        return mode

    # Whether the fused call has a backward node of its own
    # (functional._gemm_act_of_weight: a weight [N, K]).
    _HAS_NODE = False

    def _takes_node(self, x):
        """Whether this host-bound eager call runs the fused operator after
        all: in training, on CUDA, where the call records the module's own
        node and the activation needs no Z (_unfused_mode)."""
        return self._HAS_NODE and x.is_cuda and self.activation in _NODE_ACTIVATIONS and torch.is_grad_enabled()

    def _explain(self, x):
        """What a call on x would run here, in eager mode, and the rule of
        torch_gemm_act._policy that chose it (torch_gemm_act.explain)."""
        b, n = self._b(), self._n()
        mode, rule = self._unfused_mode(x, n, why=True)
        if rule == "own_node":
            return "the operator through the layer's own node (rule own_node): " + \
                explain(x, b, self.bias, activation=self.activation, negative_slope=self.negative_slope)
        if mode:
            if rule == "host_bound":
                rule = f"host_bound: {x.numel() * n:.3g} multiply-adds < 2^{_HOST_BOUND_LOG2}"
            if not torch.is_grad_enabled() and self._epilogue_of(x, self.weight, self.bias) is not None:
                return f"torch._addmm_activation, cuBLASLt's epilogue (rule {rule})"
            return f"ATen's ops, as the modules it replaced ran them (rule {rule})"
        road = "the operator: " + explain(x, b, self.bias, activation=self.activation,
                                         negative_slope=self.negative_slope)
        link = self._chain_out
        if link is not None and link.open() and _chain_pays(x, b, self.bias, self.activation):
            road += "; Z published for the next layer (rule chain_pays)"
        return road

    def _epilogue_of(self, x, weight, bias):
        """use_gelu where this unfused call, made with grad mode off (the op
        has no autograd; the caller checks, which costs a training step's
        calls least), is torch._addmm_activation, else None: on CUDA, with a
        bias and an activation cuBLASLt applies in the GEMM's epilogue
        (activations._addmm_epilogue), on plain tensors outside autocast
        (whose casts F.linear takes). One op and one launch where the GEMM
        and the activation were two: in eager mode the host's time, which
        bounds these calls; traced, Inductor keeps the op as it is (an
        extern call) where it would launch the GEMM and a kernel of its own
        for the activation."""
        use_gelu = _addmm_epilogue(self.activation, x.dtype)
        # K = 0 left to F.linear: ATen's addmm returns the bias there before
        # any activation.
        if use_gelu is None or bias is None or not x.is_cuda or x.dim() == 0 or x.shape[-1] == 0:
            return None
        if torch.is_autocast_enabled("cuda") or type(x) is not torch.Tensor or _is_dtensor(weight) or \
                _is_dtensor(bias):
            return None
        return use_gelu

    def _activate(self, y, mode):
        """act(y), y the unfused layer's fresh GEMM result, the activation
        not none. Traced, the twin's forward itself (Dynamo traces through
        it), shared. In eager mode an activation differentiated from its
        output runs in place: y is this call's own, and the host, which
        bounds the step where a layer runs unfused, saves an allocation. A
        tensor subclass (a DTensor, say) keeps the twin: its in-place ops
        may not take what the out-of-place one would redistribute."""
        if mode == _EAGER and type(y) is torch.Tensor:
            op = _in_place_op(self.activation)
            if op is not None:
                return op(y, self.negative_slope)
        return _shared_twin(self.activation, self.negative_slope).forward(y)

    def _gemm(self, x, b, bias, b_is_weight=False):
        """act(x @ b + bias); with ``b_is_weight``, b is an nn.Linear weight
        [N, K] (its transpose taken where it costs least)."""
        if self._chain_in is None and self._chain_out is None:
            if b_is_weight:
                return _gemm_act_of_weight(x, b, bias, self.activation, self.negative_slope)
            return gemm_act(x, b, bias, activation=self.activation, negative_slope=self.negative_slope)
        return _chained_gemm(x, b, bias, self.activation, self.negative_slope, self._chain_in,
                            self._chain_out, b_is_weight=b_is_weight)

    def _activation_repr(self):
        text = f"activation={self.activation!r}"
        if self.activation in _USES_SLOPE:
            text += f", negative_slope={self.negative_slope}"
        return text


class LinearAct(_WithActivation, nn.Linear):
    """``act(x @ weight.T + bias)``: an ``nn.Linear`` (its parameters, init
    and state_dict) whose output is the activation's, in one fused op.

    It is an ``nn.Linear``, as PyTorch's own fused ``LinearReLU`` (QAT) is,
    so what handles Linears by type handles it too: a tensor-parallel plan
    (``ColwiseParallel``, ``RowwiseParallel``), weight-init and weight-decay
    rules. A tool that wraps or replaces Linears assuming they are linear
    (LoRA adapters, weight-only quantization swaps) must run before
    ``fuse_linear_act``, which leaves Linears that are not plain alone.

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: one of ``torch_gemm_act.ACTIVATIONS``.
        negative_slope: leaky_relu's slope (>= 0).
    """

    __constants__ = ["in_features", "out_features", "activation", "negative_slope"]
    _HAS_NODE = True

    def __init__(self, in_features, out_features, bias=True, activation=GELU,
                 negative_slope=0.01, device=None, dtype=None):
        _check_activation(activation, negative_slope)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self._init_fused(activation, negative_slope)

    @classmethod
    def from_linear(cls, linear, activation=GELU, negative_slope=0.01):
        """A LinearAct that shares ``linear``'s weight and bias (no copy)."""
        return _sharing(cls, linear, activation=activation, negative_slope=negative_slope)

    def _b(self):
        return self.weight.t()

    def _n(self):
        return self.out_features

    def forward(self, x):
        mode = self._unfused_mode(x, self.out_features)
        if mode:
            weight, bias = _weight_and_bias(self) if mode == _EAGER else (self.weight, self.bias)
            if not torch.is_grad_enabled():
                use_gelu = self._epilogue_of(x, weight, bias)
                if use_gelu is not None:
                    return _addmm_activation(x, weight.t(), bias, use_gelu)
            y = nn.functional.linear(x, weight, bias)
            return y if self.activation == IDENTITY else self._activate(y, mode)
        weight, bias = (self.weight, self.bias) if is_compiling() else _weight_and_bias(self)
        return self._gemm(x, weight, bias, b_is_weight=True)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, {self._activation_repr()}")


class Conv1DAct(_WithActivation, nn.Module):
    """``act(x @ weight + bias)`` with ``weight`` [in, out]: transformers'
    ``Conv1D`` (GPT-2's projections) followed by an activation, as one fused
    op. Its parameters, their names and shapes are Conv1D's, so a model's
    state_dict is unchanged when fuse_linear_act puts one in a Conv1D's place.

    Args:
        nf, nx: output and input features, as for ``Conv1D(nf, nx)``.
        activation, negative_slope: as for ``LinearAct``.
    """

    def __init__(self, nf, nx, activation=GELU, negative_slope=0.01, device=None, dtype=None):
        _check_activation(activation, negative_slope)
        super().__init__()
        self._init_fused(activation, negative_slope)
        factory = {"device": device, "dtype": dtype}
        self.nf = nf
        self.nx = nx
        self.weight = nn.Parameter(torch.empty((nx, nf), **factory))
        self.bias = nn.Parameter(torch.zeros(nf, **factory))
        nn.init.normal_(self.weight, std=0.02)  # Conv1D's own initialisation

    @classmethod
    def from_conv1d(cls, conv, activation=GELU, negative_slope=0.01):
        """A Conv1DAct that shares ``conv``'s weight and bias (no copy)."""
        weight = getattr(conv, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not hasattr(conv, "nf"):
            raise TypeError(f"from_conv1d expects a transformers Conv1D, got {type(conv).__name__}")
        module = cls(conv.nf, weight.shape[0], activation=activation, negative_slope=negative_slope,
                     device="meta")
        module.weight = conv.weight
        module.bias = conv.bias
        return module

    def _b(self):
        return self.weight

    def _n(self):
        return self.nf

    def forward(self, x):
        mode = self._unfused_mode(x, self.nf)
        if mode:  # Conv1D's own formula
            weight, bias = _weight_and_bias(self) if mode == _EAGER else (self.weight, self.bias)
            if not torch.is_grad_enabled():
                use_gelu = self._epilogue_of(x, weight, bias)
                if use_gelu is not None:
                    return _addmm_activation(x, weight, bias, use_gelu)
            # Rows counted, not inferred: reshape cannot infer them when nx is 0.
            rows = x.reshape(x.shape[:-1].numel(), self.nx)
            y = torch.addmm(bias, rows, weight) if bias is not None else rows.mm(weight)
            y = y.view(*x.shape[:-1], self.nf)
            return y if self.activation == IDENTITY else self._activate(y, mode)
        # weight is [K, N] already: the GEMM's B without a transpose.
        return self._gemm(x, self.weight, self.bias)

    def extra_repr(self):
        return f"nf={self.nf}, nx={self.nx}, {self._activation_repr()}"

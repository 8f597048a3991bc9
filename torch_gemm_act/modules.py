"""LinearAct (nn.Linear followed by an activation) and Conv1DAct
(transformers' Conv1D followed by one), each as one fused op."""

import torch
from torch import nn

from .activations import GELU, USES_SLOPE, check_activation
from .chain import chained_gemm
from .functional import gemm_act


class _WithActivation(nn.Module):
    """What the fused modules share: their activation, checked once, and the
    links fuse_linear_act may give them to the layer before and after
    (torch_gemm_act.chain: the MLP backward fused across layers)."""

    def __init__(self, activation, negative_slope):
        super().__init__()
        check_activation(activation, negative_slope)
        self.activation = activation
        self.negative_slope = float(negative_slope)

    _chain_in = None   # ChainLink from the layer whose output this one takes
    _chain_out = None  # ChainLink to the layer that takes this one's output

    def _gemm(self, x, b, bias):
        if self._chain_in is None and self._chain_out is None:
            return gemm_act(x, b, bias, activation=self.activation, negative_slope=self.negative_slope)
        return chained_gemm(x, b, bias, self.activation, self.negative_slope, self._chain_in,
                            self._chain_out)

    def _activation_repr(self):
        text = f"activation={self.activation!r}"
        if self.activation in USES_SLOPE:
            text += f", negative_slope={self.negative_slope}"
        return text


class LinearAct(_WithActivation):
    """``act(x @ weight.T + bias)``: nn.Linear's parameters, init and state_dict.

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: one of ``torch_gemm_act.ACTIVATIONS``.
        negative_slope: leaky_relu's slope (>= 0).
    """

    __constants__ = ["in_features", "out_features", "activation", "negative_slope"]

    def __init__(self, in_features, out_features, bias=True, activation=GELU,
                 negative_slope=0.01, device=None, dtype=None):
        super().__init__(activation, negative_slope)
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty((out_features, in_features), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        # nn.Linear's own initialisation, so both start from the same distribution.
        nn.Linear.reset_parameters(self)

    @classmethod
    def from_linear(cls, linear, activation=GELU, negative_slope=0.01):
        """A LinearAct that shares ``linear``'s weight and bias (no copy)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear expects an nn.Linear, got {type(linear).__name__}")
        module = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                     activation=activation, negative_slope=negative_slope, device="meta")
        module.weight = linear.weight
        module.bias = linear.bias
        return module

    def forward(self, x):
        return self._gemm(x, self.weight.t(), self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, {self._activation_repr()}")


class Conv1DAct(_WithActivation):
    """``act(x @ weight + bias)`` with ``weight`` [in, out]: transformers'
    ``Conv1D`` (GPT-2's projections) followed by an activation, as one fused
    op. Its parameters, their names and shapes are Conv1D's, so a model's
    state_dict is unchanged when fuse_linear_act puts one in a Conv1D's place.

    Args:
        nf, nx: output and input features, as for ``Conv1D(nf, nx)``.
        activation, negative_slope: as for ``LinearAct``.
    """

    def __init__(self, nf, nx, activation=GELU, negative_slope=0.01, device=None, dtype=None):
        super().__init__(activation, negative_slope)
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

    def forward(self, x):
        # weight is [K, N] already: the GEMM's B without a transpose.
        return self._gemm(x, self.weight, self.bias)

    def extra_repr(self):
        return f"nf={self.nf}, nx={self.nx}, {self._activation_repr()}"

"""LinearAct: nn.Linear followed by an activation, as one fused op."""

import torch
from torch import nn

from .activations import GELU, USES_SLOPE, check_activation
from .functional import linear_act


class LinearAct(nn.Module):
    """``act(x @ weight.T + bias)``: nn.Linear's parameters, init and state_dict.

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: one of ``torch_gemm_act.ACTIVATIONS``.
        negative_slope: leaky_relu's slope (>= 0).
    """

    __constants__ = ["in_features", "out_features", "activation", "negative_slope"]

    def __init__(self, in_features, out_features, bias=True, activation=GELU,
                 negative_slope=0.01, device=None, dtype=None):
        super().__init__()
        check_activation(activation, negative_slope)
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.activation = activation
        self.negative_slope = float(negative_slope)
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
        return linear_act(x, self.weight, self.bias, self.activation, self.negative_slope)

    def extra_repr(self):
        text = (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation!r}")
        if self.activation in USES_SLOPE:
            text += f", negative_slope={self.negative_slope}"
        return text

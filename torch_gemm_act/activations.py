"""Activation names of the public API and which of them differentiate from Y.

The formulas themselves live once, in csrc/activations.h.
"""

ACTIVATIONS = ("none", "relu", "leaky_relu", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu")

# act'(z) is a function of y = act(z) for these (leaky_relu with slope >= 0,
# which the op enforces): the backward uses Y and Z is never written.
GRAD_FROM_OUTPUT = frozenset({"none", "relu", "leaky_relu", "tanh", "sigmoid"})


def check_activation(activation, negative_slope=0.01):
    """Raises ValueError for an unknown activation or a bad leaky_relu slope."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}")
    if activation == "leaky_relu" and not negative_slope >= 0:
        raise ValueError(f"leaky_relu needs negative_slope >= 0, got {negative_slope}")

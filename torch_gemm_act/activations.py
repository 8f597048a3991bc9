"""The activations of the public API.

Their names, formulas and backward rules are declared once, in C++
(GEMM_ACT_FOR_EACH_ACTIVATION in csrc/gemm_act.h, Act<> in
csrc/activations.h); the lists here come from the compiled extension. What
this file adds is each one's PyTorch twin: the module whose output it
reproduces, which fuse_linear_act replaces and the tests compare against.
"""

import torch
from torch import nn

from . import _C

_TABLE = _C.activations()

ACTIVATIONS = tuple(name for name, _, _ in _TABLE)

# act'(z) is a function of y = act(z) for these: the backward uses Y and Z is
# never written.
GRAD_FROM_OUTPUT = frozenset(name for name, from_y, _ in _TABLE if from_y)

# These read negative_slope.
USES_SLOPE = frozenset(name for name, _, slope in _TABLE if slope)

# The defaults of the public API.
IDENTITY = "none"
GELU = "gelu"

# The gated forms, act(x W_gate + b_gate) * (x W_up + b_up): name -> the
# gate's activation (one of ACTIVATIONS; the operator takes that one).
GATED = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu", "glu": "sigmoid"}
GATED_BY_GATE = {gate: name for name, gate in GATED.items()}

# name -> (the twin module's class, the attributes that make it this one).
_TWINS = {
    "none": (nn.Identity, {}),
    "relu": (nn.ReLU, {}),
    "leaky_relu": (nn.LeakyReLU, {}),
    "tanh": (nn.Tanh, {}),
    "sigmoid": (nn.Sigmoid, {}),
    "gelu": (nn.GELU, {"approximate": "none"}),
    "gelu_tanh": (nn.GELU, {"approximate": "tanh"}),
    "silu": (nn.SiLU, {}),
}
# The in-place ATen op of each activation whose backward reads only its
# output (GRAD_FROM_OUTPUT, none aside), called as op(y, negative_slope).
# On a tensor nothing else holds (a GEMM's fresh result) it computes the
# twin's values without the twin's allocation, and autograd differentiates
# it from the output as it does the twin (in_place_op).
_IN_PLACE = {
    "relu": lambda y, slope: torch.relu_(y),
    "leaky_relu": lambda y, slope: nn.functional.leaky_relu_(y, slope),
    "tanh": lambda y, slope: torch.tanh_(y),
    "sigmoid": lambda y, slope: torch.sigmoid_(y),
}
# The activations ATen's torch._addmm_activation applies on CUDA in the
# epilogue of cuBLASLt's GEMM (GELU_BIAS), as one op without autograd:
# activation -> (its use_gelu, the dtypes where it computes ours; None:
# all). Its GELU is the tanh form, to within bf16's and fp16's rounding; in
# fp32 its approximation is coarser than the rounding (bench.py's probe
# finds it neither GELU there), so fp32 is not listed. Not its RELU_BIAS,
# which turns NaN into 0 where torch.relu keeps it.
_ADDMM_EPILOGUES = {
    "gelu_tanh": (True, frozenset((torch.float16, torch.bfloat16))),
}
# Other libraries' activation modules that compute one of ours exactly, by
# where their class is defined, so that neither library is imported here
# (tests/test_fuse_models.py checks each against the class's own forward).
_FOREIGN = {
    "transformers.activations.GELUActivation": "gelu",
    "transformers.activations.NewGELUActivation": "gelu_tanh",
    "transformers.activations.FastGELUActivation": "gelu_tanh",
    "transformers.activations.AccurateGELUActivation": "gelu_tanh",
    "transformers.activations.PytorchGELUTanh": "gelu_tanh",
    "transformers.activations.GELUTanh": "gelu_tanh",
    "transformers.activations.SiLUActivation": "silu",
    "timm.layers.activations.GELU": "gelu",
    "timm.layers.activations.GELUTanh": "gelu_tanh",
    "timm.layers.activations.Swish": "silu",
    "timm.layers.activations.Sigmoid": "sigmoid",
    "timm.layers.activations.Tanh": "tanh",
}

# Where activation modules live: one found there that is not ours to
# compute is reported by fuse_linear_act as an activation it cannot fuse.
ACTIVATION_MODULES = ("torch.nn.modules.activation", "transformers.activations", "timm.layers.activations")

if set(_TWINS) != set(ACTIVATIONS) or not set(GATED.values()) | set(_ADDMM_EPILOGUES) <= set(ACTIVATIONS):
    raise ImportError(f"torch_gemm_act: the PyTorch twins ({sorted(_TWINS)}) do not match the "
                      f"extension's activations ({sorted(ACTIVATIONS)}); rebuild it")
if set(_IN_PLACE) != GRAD_FROM_OUTPUT - {IDENTITY}:
    raise ImportError(f"torch_gemm_act: the in-place ops ({sorted(_IN_PLACE)}) do not match the "
                      f"activations differentiated from their output ({sorted(GRAD_FROM_OUTPUT)}); rebuild it")


def check_activation(activation, negative_slope=0.01):
    """Raises ValueError for an unknown activation or a slope it cannot take,
    as the operator would."""
    _C.check_activation(str(activation), float(negative_slope))


def gate_activation(gated):
    """The gate's activation of the gated form `gated` (a ValueError naming
    the forms for anything else)."""
    gate = GATED.get(gated) if isinstance(gated, str) else None
    if gate is None:
        raise ValueError(f"unknown gated activation {gated!r}; expected one of: {', '.join(GATED)}")
    return gate


def torch_module(activation, negative_slope=0.01):
    """The PyTorch module `activation` reproduces (nn.Identity for none)."""
    check_activation(activation, negative_slope)
    return twin(activation, negative_slope)


# (activation, slope) -> its twin module, shared (the modules hold no state).
_SHARED_TWINS = {}


def shared_twin(activation, negative_slope=0.01):
    """twin's module, one per (activation, slope), shared: for a path that
    applies it on every call. Building a module costs the host more than
    its call, and, traced by torch.compile, guards over nn.Module's
    machinery; a shared one traced is a dictionary entry's guards. So it is
    made outside tracing (a fused module makes its own when its activation
    is set) and only looked up within."""
    key = (activation, float(negative_slope))
    module = _SHARED_TWINS.get(key)
    if module is None:
        module = twin(activation, negative_slope)
        if not torch.compiler.is_compiling():
            _SHARED_TWINS[key] = module
    return module


def in_place_op(activation):
    """op(y, negative_slope) computing `activation` in y's own memory, for
    an activation differentiated from its output; None for the others."""
    return _IN_PLACE.get(activation)


def addmm_epilogue(activation, dtype):
    """torch._addmm_activation's use_gelu where that op computes `activation`
    on CUDA tensors of `dtype` (with a bias, cuBLASLt's epilogue), else None."""
    entry = _ADDMM_EPILOGUES.get(activation)
    if entry is None or (entry[1] is not None and dtype not in entry[1]):
        return None
    return entry[0]


def twin(activation, negative_slope=0.01):
    """torch_module without the operator's check of the slope (which
    torch.compile cannot trace into): the module computes any slope."""
    entry = _TWINS.get(activation) if isinstance(activation, str) else None
    if entry is None:
        raise ValueError(f"gemm_act: unknown activation {activation!r}; expected one of: {', '.join(ACTIVATIONS)}")
    cls, attrs = entry
    if activation in USES_SLOPE:
        attrs = {**attrs, "negative_slope": negative_slope}
    return cls(**attrs)


def qualified_class_name(module):
    return f"{type(module).__module__}.{type(module).__qualname__}"


def from_module(module):
    """(activation, negative_slope) for a module this project computes, else
    None. nn.Identity is no activation to fuse."""
    foreign = _FOREIGN.get(qualified_class_name(module))
    if foreign is not None:
        return foreign, 0.01
    for name, (cls, attrs) in _TWINS.items():
        if cls is nn.Identity or type(module) is not cls:
            continue
        if any(getattr(module, key, None) != value for key, value in attrs.items()):
            continue
        slope = float(module.negative_slope) if name in USES_SLOPE else 0.01
        try:
            check_activation(name, slope)
        except ValueError:
            return None
        return name, slope
    return None

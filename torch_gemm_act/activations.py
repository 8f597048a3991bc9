"""The activations of the public API.

Their names, formulas and backward rules are declared once, in C++
(GEMM_ACT_FOR_EACH_ACTIVATION in csrc/gemm_act.h, Act<> in
csrc/activations.h); the lists here come from the compiled extension. What
this file adds is each one's PyTorch twin: the module whose output it
reproduces, which fuse_linear_act replaces and the tests compare against.
"""

from typing import Callable, NamedTuple, Optional

import torch
from torch import nn

from . import _C

__all__ = ["ACTIVATIONS", "GATED"]

_TABLE = _C.activations()

ACTIVATIONS = tuple(name for name, _, _ in _TABLE)

# act'(z) is a function of y = act(z) for these: the backward uses Y and Z is
# never written.
_GRAD_FROM_OUTPUT = frozenset(name for name, from_y, _ in _TABLE if from_y)

# These read negative_slope.
_USES_SLOPE = frozenset(name for name, _, slope in _TABLE if slope)

# The defaults of the public API.
IDENTITY = "none"
GELU = "gelu"

# The gated forms, act(x W_gate + b_gate) * (x W_up + b_up): name -> the
# gate's activation (one of ACTIVATIONS; the operator takes that one).
GATED = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_tanh", "reglu": "relu", "glu": "sigmoid"}
_GATED_BY_GATE = {gate: name for name, gate in GATED.items()}

class _PyTorchForm(NamedTuple):
    """What PyTorch has of one activation.

    twin, attrs: the module whose output it reproduces and the attributes
    that make it this one. in_place: for an activation differentiated from
    its output, op(y, negative_slope) computing it in y's own memory: on a
    tensor nothing else holds (a GEMM's fresh result) the twin's values
    without its allocation, differentiated by autograd from the output as
    the twin is. addmm: where torch._addmm_activation computes it on CUDA in
    the epilogue of cuBLASLt's GEMM (one op, no autograd), (its use_gelu, the
    dtypes where it does). Its GELU is the tanh form to within bf16's and
    fp16's rounding (coarser than fp32's); not its RELU_BIAS, which turns NaN
    into 0 where torch.relu keeps it. calls, params: the functions (and
    Tensor method names) a graph Dynamo captured calls for it, and the names
    of their parameters after the input, which carry the twin's attrs (the
    compile pass reads them)."""
    twin: type
    attrs: dict = {}
    in_place: Optional[Callable] = None
    addmm: Optional[tuple] = None
    calls: tuple = ()
    params: tuple = ()


# Each activation's PyTorch form, one row per name (the names are the
# extension's; the import checks that they match).
_F = nn.functional
_PYTORCH = {
    "none": _PyTorchForm(nn.Identity),
    "relu": _PyTorchForm(nn.ReLU, in_place=lambda y, slope: torch.relu_(y),
                         calls=(torch.relu, _F.relu, torch.Tensor.relu, "relu"), params=("inplace",)),
    "leaky_relu": _PyTorchForm(nn.LeakyReLU, in_place=lambda y, slope: _F.leaky_relu_(y, slope),
                               calls=(_F.leaky_relu,), params=("negative_slope", "inplace")),
    "tanh": _PyTorchForm(nn.Tanh, in_place=lambda y, slope: torch.tanh_(y),
                         calls=(torch.tanh, _F.tanh, torch.Tensor.tanh, "tanh")),
    "sigmoid": _PyTorchForm(nn.Sigmoid, in_place=lambda y, slope: torch.sigmoid_(y),
                            calls=(torch.sigmoid, _F.sigmoid, torch.Tensor.sigmoid, "sigmoid")),
    "gelu": _PyTorchForm(nn.GELU, {"approximate": "none"}, calls=(_F.gelu,), params=("approximate",)),
    "gelu_tanh": _PyTorchForm(nn.GELU, {"approximate": "tanh"},
                              addmm=(True, frozenset((torch.float16, torch.bfloat16))),
                              calls=(_F.gelu,), params=("approximate",)),
    "silu": _PyTorchForm(nn.SiLU, calls=(_F.silu,), params=("inplace",)),
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
_ACTIVATION_MODULES = ("torch.nn.modules.activation", "transformers.activations", "timm.layers.activations")

if set(_PYTORCH) != set(ACTIVATIONS) or not set(GATED.values()) <= set(ACTIVATIONS):
    raise ImportError(f"torch_gemm_act: the PyTorch forms ({sorted(_PYTORCH)}) do not match the "
                      f"extension's activations ({sorted(ACTIVATIONS)}); rebuild it")
if {name for name, form in _PYTORCH.items() if form.in_place} != _GRAD_FROM_OUTPUT - {IDENTITY}:
    raise ImportError("torch_gemm_act: the in-place ops do not match the activations differentiated from "
                      f"their output ({sorted(_GRAD_FROM_OUTPUT)}); rebuild it")


# Each twin as built with its defaults: what a call's omitted arguments are.
_TWIN_DEFAULTS = {name: form.twin() for name, form in _PYTORCH.items()}


def _check_activation(activation, negative_slope=0.01):
    """Raises ValueError for an unknown activation or a slope it cannot take,
    as the operator would."""
    _C.check_activation(str(activation), float(negative_slope))


def _gate_activation(gated):
    """The gate's activation of the gated form `gated` (a ValueError naming
    the forms for anything else)."""
    gate = GATED.get(gated) if isinstance(gated, str) else None
    if gate is None:
        raise ValueError(f"unknown gated activation {gated!r}; expected one of: {', '.join(GATED)}")
    return gate


def _torch_module(activation, negative_slope=0.01):
    """The PyTorch module `activation` reproduces (nn.Identity for none)."""
    _check_activation(activation, negative_slope)
    return _twin(activation, negative_slope)


# (activation, slope) -> its twin module, shared (the modules hold no state).
_SHARED_TWINS = {}


def _shared_twin(activation, negative_slope=0.01):
    """_twin's module, one per (activation, slope), shared: for a path that
    applies it on every call. Building a module costs the host more than
    its call, and, traced by torch.compile, guards over nn.Module's
    machinery; a shared one traced is a dictionary entry's guards. So it is
    made outside tracing (a fused module makes its own when its activation
    is set) and only looked up within."""
    key = (activation, float(negative_slope))
    module = _SHARED_TWINS.get(key)
    if module is None:
        module = _twin(activation, negative_slope)
        if not torch.compiler.is_compiling():
            _SHARED_TWINS[key] = module
    return module


def _in_place_op(activation):
    """op(y, negative_slope) computing `activation` in y's own memory, for
    an activation differentiated from its output; None for the others."""
    form = _PYTORCH.get(activation)
    return form.in_place if form is not None else None


def _addmm_epilogue(activation, dtype):
    """torch._addmm_activation's use_gelu where that op computes `activation`
    on CUDA tensors of `dtype` (with a bias, cuBLASLt's epilogue), else None."""
    form = _PYTORCH.get(activation)
    if form is None or form.addmm is None or dtype not in form.addmm[1]:
        return None
    return form.addmm[0]


def _twin(activation, negative_slope=0.01):
    """_torch_module without the operator's check of the slope (which
    torch.compile cannot trace into): the module computes any slope."""
    form = _PYTORCH.get(activation) if isinstance(activation, str) else None
    if form is None:
        raise ValueError(f"gemm_act: unknown activation {activation!r}; expected one of: {', '.join(ACTIVATIONS)}")
    cls, attrs = form.twin, form.attrs
    if activation in _USES_SLOPE:
        attrs = {**attrs, "negative_slope": negative_slope}
    return cls(**attrs)


def _from_call(target, args, kwargs):
    """(activation, negative_slope) for a call of ``target`` (a function, or
    a Tensor method's name) on one tensor followed by ``args`` and
    ``kwargs``, as a captured graph records it: one this project computes,
    not in place, its arguments the twin's attributes; else None."""
    for name, form in _PYTORCH.items():
        if target not in form.calls or len(args) > len(form.params) or set(kwargs) - set(form.params):
            continue
        given = {**dict(zip(form.params, args)), **kwargs}
        if given.get("inplace", False):
            return None
        defaults = _TWIN_DEFAULTS[name]
        if any(given.get(key, getattr(defaults, key)) != value for key, value in form.attrs.items()):
            continue
        slope = given.get("negative_slope", getattr(defaults, "negative_slope", 0.01))
        if not isinstance(slope, (int, float)) or isinstance(slope, bool):
            return None
        try:
            _check_activation(name, float(slope))
        except ValueError:
            return None
        return name, float(slope)
    return None


def _qualified_class_name(module):
    return f"{type(module).__module__}.{type(module).__qualname__}"


def _from_module(module):
    """(activation, negative_slope) for a module this project computes, else
    None. nn.Identity is no activation to fuse."""
    foreign = _FOREIGN.get(_qualified_class_name(module))
    if foreign is not None:
        return foreign, 0.01
    for name, form in _PYTORCH.items():
        cls, attrs = form.twin, form.attrs
        if cls is nn.Identity or type(module) is not cls:
            continue
        if any(getattr(module, key, None) != value for key, value in attrs.items()):
            continue
        slope = float(module.negative_slope) if name in _USES_SLOPE else 0.01
        try:
            _check_activation(name, slope)
        except ValueError:
            return None
        return name, slope
    return None

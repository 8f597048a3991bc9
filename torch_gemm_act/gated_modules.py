"""The gated modules: GatedLinearAct (a Llama-style MLP's gate_proj, act_fn
and up_proj as one operator), made of a LinearGate and a LinearUp, and the
packed form, LinearPackedGlu with its PackedGluActivation (timm's GluMlp)."""

from torch import nn
# Imported by name, as in modules.py (a guard Dynamo would evaluate otherwise).
from torch.compiler import is_compiling

from ._policy import cpu_eager as _cpu_eager
from .activations import _gate_activation, _shared_twin
from .functional import SWIGLU, _is_dtensor, gated_linear_act
from .modules import _Fused, _linear_parameters, _sharing

__all__ = ["GatedLinearAct", "LinearGate", "LinearUp", "LinearPackedGlu", "PackedGluActivation"]


class _AppliedByGate:
    """What a LinearUp returns in eager mode: its projection is already a
    factor of its LinearGate's output, and the forward's product of the two
    leaves that output as it is (``y * APPLIED_BY_GATE is y``, no kernel)."""

    __slots__ = ()

    def __mul__(self, other):
        return other

    __rmul__ = __mul__

    def __repr__(self):
        return "APPLIED_BY_GATE"


APPLIED_BY_GATE = _AppliedByGate()


class LinearUp(_Fused, nn.Linear):
    """The up projection of a gated MLP whose LinearGate computes the whole
    gated product: an nn.Linear (the model's ``up_proj.weight`` stays where
    it was) that returns APPLIED_BY_GATE (1 under torch.compile), so the
    forward's ``act(gate(x)) * up(x)`` is the gate's output. Under tensor
    parallelism (its weight a DTensor) it computes its own projection, and
    its LinearGate the activation of its own: the unfused formula, on
    shards."""

    @classmethod
    def from_linear(cls, linear):
        """A LinearUp sharing ``linear``'s parameters."""
        return _sharing(cls, linear)

    def forward(self, x):
        if _is_dtensor(self.weight):
            return nn.functional.linear(x, self.weight, self.bias)
        # Under torch.compile, 1: Dynamo traces a product with it, which
        # Inductor removes (a multiply by 1 is one of its no-ops).
        return 1 if is_compiling() else APPLIED_BY_GATE

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, applied by its LinearGate")


class LinearGate(_Fused, nn.Linear):
    """``act(x @ weight.T + bias) * up(x)`` in one operator, ``up`` the
    LinearUp it is paired with (``pair``): a gated MLP's gate projection,
    activation and product (gated_linear_act). An nn.Linear with the gate's
    parameters. Under tensor parallelism (both weights DTensors, sharded
    alike by the plan) it computes ``act(x @ weight.T + bias)`` alone and
    its LinearUp the other factor, as the unfused module does.

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: a gated form, one of ``torch_gemm_act.GATED``.
    """

    def __init__(self, in_features, out_features, bias=True, activation=SWIGLU, device=None, dtype=None):
        _gate_activation(activation)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.activation = activation
        # Not a submodule (set through __dict__, read through `up`): the up
        # projection's parameters stay under their own name in the state_dict.
        self.__dict__["_up"] = None

    @property
    def up(self):
        """The LinearUp this gate is paired with (``pair``), or None."""
        return self.__dict__["_up"]

    def pair(self, up):
        """Takes the up projection from ``up`` (a LinearUp of the same
        features), which stays a module of its own: its parameters keep
        their name in the model's state_dict."""
        if not isinstance(up, LinearUp) or (up.in_features, up.out_features) != (self.in_features,
                                                                                 self.out_features):
            raise ValueError(f"LinearGate({self.in_features}, {self.out_features}) pairs with a LinearUp "
                             f"of the same features, got {up!r}")
        self.__dict__["_up"] = up
        return self

    @classmethod
    def from_linear(cls, linear, up, activation=SWIGLU):
        """A LinearGate sharing ``linear``'s parameters, paired with ``up``."""
        return _sharing(cls, linear, activation=activation).pair(up)

    def forward(self, x):
        up = self.up
        if up is None:
            raise RuntimeError("LinearGate: no up projection; pair it with a LinearUp first")
        sharded = (_is_dtensor(self.weight), _is_dtensor(up.weight))
        if any(sharded):
            if not all(sharded):
                raise ValueError("LinearGate: a tensor-parallel plan must shard the gate and up projections "
                                 "alike (both ColwiseParallel); got the gate's weight "
                                 f"{'a DTensor' if sharded[0] else 'a plain tensor'} and the up projection's "
                                 f"{'a DTensor' if sharded[1] else 'a plain tensor'}")
            return _shared_twin(_gate_activation(self.activation))(nn.functional.linear(x, self.weight, self.bias))
        if _cpu_eager(x):  # the replaced modules' own ops
            gate = nn.functional.linear(x, self.weight, self.bias)
            return _shared_twin(_gate_activation(self.activation))(gate) * nn.functional.linear(x, up.weight, up.bias)
        return gated_linear_act(x, self.weight, up.weight, self.bias, up.bias, self.activation)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation!r}")


class _PackedHalves:
    """What a LinearPackedGlu returns in eager mode: the gated product, whose
    ``chunk(2, dim=-1)`` (the forward's split of the packed projection) is
    (product, APPLIED_BY_GATE); the forward's ``x1 * act(x2)`` or
    ``act(x1) * x2``, its activation passing its input through, is then the
    product."""

    __slots__ = ("product",)

    def __init__(self, product):
        self.product = product

    def chunk(self, chunks, dim=0):
        if chunks != 2 or dim not in (-1, self.product.dim() - 1):
            raise ValueError(f"LinearPackedGlu's output splits only as chunk(2, dim=-1), got "
                             f"chunk({chunks}, dim={dim})")
        return self.product, APPLIED_BY_GATE


class LinearPackedGlu(nn.Module):
    """A Linear whose output packs a gated MLP's two projections side by
    side, split by the forward and gated there (timm's ``GluMlp``: ``x1, x2
    = fc1(x).chunk(2, dim=-1)``, then ``x1 * act(x2)``, or ``act(x1) * x2``),
    computing the gated product in one operator. Its parameters are the
    Linear's ([2N, K] and [2N]; the gate is the half ``gate_index`` names),
    taken as views. In eager mode it returns _PackedHalves, whose split gives
    the product; under torch.compile the Linear's output, which the
    activation's slot (a PackedGluActivation) then gates as the unfused
    forward does, for Inductor to fuse.

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``
            (``out_features`` even: both halves).
        activation: a gated form, one of ``torch_gemm_act.GATED``.
        gate_index: 0 when the first half is the gate, 1 when the second is.
    """

    def __init__(self, in_features, out_features, bias=True, activation=SWIGLU, gate_index=1,
                 device=None, dtype=None):
        _gate_activation(activation)
        if out_features % 2 or gate_index not in (0, 1):
            raise ValueError(f"LinearPackedGlu: out_features must be even and gate_index 0 or 1, got "
                             f"out_features={out_features}, gate_index={gate_index}")
        super().__init__()
        self.activation = activation
        self.gate_index = gate_index
        _linear_parameters(self, in_features, out_features, bias, {"device": device, "dtype": dtype})

    @classmethod
    def from_linear(cls, linear, activation=SWIGLU, gate_index=1):
        """A LinearPackedGlu sharing ``linear``'s parameters."""
        return _sharing(cls, linear, activation=activation, gate_index=gate_index)

    def _halves(self, t, dim=0):
        """(gate, up) halves of t along dim. One split, not two slices: its
        backward writes the gradient once (a cat of the halves'), where each
        slice's would write a zero-filled full-size gradient, then both be
        added."""
        first, second = t.split(t.shape[dim] // 2, dim)
        return (first, second) if self.gate_index == 0 else (second, first)

    def forward(self, x):
        if is_compiling():
            return nn.functional.linear(x, self.weight, self.bias)
        if _cpu_eager(x):  # the replaced modules' own ops: one GEMM, split, gated
            gate, up = self._halves(nn.functional.linear(x, self.weight, self.bias), dim=-1)
            return _PackedHalves(_shared_twin(_gate_activation(self.activation))(gate) * up)
        gate_w, up_w = self._halves(self.weight)
        gate_b, up_b = self._halves(self.bias) if self.bias is not None else (None, None)
        return _PackedHalves(gated_linear_act(x, gate_w, up_w, gate_b, up_b, self.activation))

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation!r}, gate_index={self.gate_index}")


class PackedGluActivation(nn.Module):
    """The activation's slot beside a LinearPackedGlu: in eager mode it
    passes its input through (the product is computed already); under
    torch.compile it is the activation it replaced."""

    def __init__(self, activation):
        super().__init__()
        self.activation = activation

    def forward(self, x):
        return self.activation(x) if is_compiling() else x


class GatedLinearAct(nn.Module):
    """``act(x @ gate_proj.weight.T + gate_proj.bias) * (x @ up_proj.weight.T +
    up_proj.bias)``: a Llama-style MLP's first half as one operator, its
    parameters named and initialised as two nn.Linear's (``gate_proj``,
    ``up_proj``).

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: a gated form, one of ``torch_gemm_act.GATED``.
    """

    def __init__(self, in_features, out_features, bias=False, activation=SWIGLU, device=None, dtype=None):
        super().__init__()
        self.gate_proj = LinearGate(in_features, out_features, bias, activation, device=device, dtype=dtype)
        self.up_proj = LinearUp(in_features, out_features, bias, device=device, dtype=dtype)
        self.gate_proj.pair(self.up_proj)

    def forward(self, x):
        return self.gate_proj(x)

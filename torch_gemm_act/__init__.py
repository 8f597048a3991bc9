"""torch_gemm_act: Y = act(alpha * A @ B + beta * C + bias) as one fused GEMM."""

from .activations import ACTIVATIONS
from .functional import explain, gemm_act, linear_act
from .fuse import fuse_linear_act
from .modules import LinearAct
from . import testing  # noqa: F401  (torch_gemm_act.testing: the switch for tests and measurements)

__all__ = ["ACTIVATIONS", "explain", "gemm_act", "linear_act", "LinearAct", "fuse_linear_act"]

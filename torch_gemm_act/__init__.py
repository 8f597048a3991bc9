"""torch_gemm_act: Y = act(alpha * A @ B + beta * C + bias) as one fused GEMM."""

from .activations import ACTIVATIONS, GATED
from .chain import linear_act_linear
from .cross_entropy import LinearCrossEntropy, linear_cross_entropy
from .functional import explain, gated_linear_act, gemm_act, gemm_glu, linear_act, linear_dropout_add
from .fuse import FusionReport, fuse_linear_act
from .lm_loss import fuse_lm_loss
from .gated_modules import GatedLinearAct, LinearGate, LinearPackedGlu, LinearUp, PackedGluActivation
from .modules import Conv1DAct, LinearAct
from .tuning import TuneReport, tune
from . import testing  # noqa: F401  (torch_gemm_act.testing: the switch for tests and measurements)

__all__ = ["ACTIVATIONS", "GATED", "explain", "gemm_act", "linear_act", "linear_act_linear", "gemm_glu",
           "gated_linear_act", "linear_dropout_add", "LinearAct", "Conv1DAct", "GatedLinearAct", "LinearGate", "LinearUp",
           "LinearPackedGlu", "PackedGluActivation", "fuse_linear_act", "FusionReport", "enable_compile_fusion",
           "linear_cross_entropy", "LinearCrossEntropy", "fuse_lm_loss", "tune", "TuneReport"]


def enable_compile_fusion(enabled=True, *, lm_loss=False):
    """With ``enabled``, every later ``torch.compile`` (Inductor) runs this
    project's operator for the Linear -> activation pairs it captures, forward
    and backward, and with ``lm_loss`` linear_cross_entropy for a Linear's
    logits that only a cross-entropy uses; ``False`` turns that off
    (torch_gemm_act.compile_fusion, imported on first use: it loads Inductor)."""
    from .compile_fusion import enable_compile_fusion as enable
    enable(enabled, lm_loss=lm_loss)

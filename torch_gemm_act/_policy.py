"""Which road a call takes: every rule the Python side applies before the
extension picks a kernel, each named once here. The kernel choice is the
extension's (csrc/cuda/register_cuda.cpp; sm90's rule table in
csrc/cuda/sm90/sm90_gemm_act.cpp), and ``explain()`` names the rule that
fired there. Each rule's measurement is in docs/MEASUREMENTS.md, under the
topic ``RULES`` gives."""

import torch

from . import _C
from .activations import GRAD_FROM_OUTPUT, IDENTITY

# The rules, by name: what each decides, and where its measurement is.
RULES = {
    "host_bound": "a fused module's layer below HOST_BOUND_MULTIPLY_ADDS on CUDA, in eager mode, runs "
                  "ATen's ops (MEASUREMENTS.md, 'Host-bound policy')",
    "own_node": "except, in training, a LinearAct whose activation is differentiated from Y "
                "(NODE_ACTIVATIONS): the operator, its one node taking the weight (MEASUREMENTS.md, "
                "'Host-bound policy')",
    "cpu_atens": "on the CPU the fused modules run ATen's ops, eager or compiled (MEASUREMENTS.md, 'CPU policy')",
    "compiles_as_eager": "under torch.compile, exact fp32/fp64 and relu-family training take eager's formula "
                         "(MEASUREMENTS.md, 'Compiled policy')",
    "compiles_to_glu": "under torch.compile, gemm_glu only in inference where its fused kernel runs, from "
                       "FUSED_GLU_MIN_ROWS rows (MEASUREMENTS.md, 'Compiled policy')",
    "hopper_fused": "gemm_glu and gemm_dact are fused kernels on compute capability 9.0 in fp16/bf16 only",
    "links": "fuse_linear_act links a layer to the next Linear only where act' needs Z "
             "(MEASUREMENTS.md, 'Links and chains')",
    "chains": "a linked layer chains on CUDA where gemm_dact is the fused kernel (hopper_fused); "
              "on the CPU always",
    "chain_pays": "a chained layer publishes Z in training, on plain tensors, where it is not host_bound",
}

# host_bound: below about this many multiply-adds a layer's GEMM takes less
# time than the host spends on the call.
HOST_BOUND_MULTIPLY_ADDS = 1 << 30

# compiles_to_glu: the C++ rule's bound (glu_rows); None where the build has
# no fused gated kernel.
FUSED_GLU_MIN_ROWS = _C.fused_glu_min_rows()

# own_node: the activations a host-bound layer in training runs through the
# operator's node, those differentiated from Y.
NODE_ACTIVATIONS = GRAD_FROM_OUTPUT - {IDENTITY}

# Operands the direct call takes: tensors that are no subclass with a
# __torch_function__ of its own (nn.Parameter's is disabled).
PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))

# testing.override(operator_everywhere=True): runs_atens_ops and cpu_atens
# off, so that tests reach the operators through the modules at any size
# and on the CPU.
_operator_everywhere = False


def needs_grad(*operands):
    """Whether a call on these operands (None: absent) has a backward."""
    if not torch.is_grad_enabled():
        return False
    for t in operands:
        if t is not None and t.requires_grad:
            return True
    return False


def cpu_atens(x):
    """Rule cpu_atens: x is a CPU tensor, whose layers run ATen's ops rather
    than the operators' CPU kernels (the references)."""
    return x.is_cpu and not _operator_everywhere


def cpu_eager(x):
    """cpu_atens outside torch.compile: where the fused modules, gated ones
    included, run the replaced modules' own ops."""
    return cpu_atens(x) and not torch.compiler.is_compiling()


def host_bound(x, n):
    """Rule host_bound: a layer taking x ([..., K]) to n columns on CUDA, in
    eager mode, below HOST_BOUND_MULTIPLY_ADDS; never on the CPU, and not
    under torch.compile, where the graph's launches replace the calls."""
    return not torch.compiler.is_compiling() and x.is_cuda and x.numel() * n < HOST_BOUND_MULTIPLY_ADDS


def runs_atens_ops(x, n):
    """Whether a fused module's layer taking x to n columns runs ATen's ops
    in eager mode: host_bound or cpu_atens (own_node aside, which the module
    decides)."""
    # Written out: called on every layer of a host-bound step, where each
    # nested call costs host time.
    if torch.compiler.is_compiling() or _operator_everywhere:
        return False
    if x.is_cuda:
        return x.numel() * n < HOST_BOUND_MULTIPLY_ADDS
    return x.is_cpu


# Whether each CUDA device runs the sm90 family (compute capability 9.0).
_HOPPER = {}


def hopper_fused(x):
    """Rule hopper_fused: whether the operators fuse on x's GPU what no
    library call does: gemm_glu's fused kernel and gemm_dact's, fp16/bf16 on
    compute capability 9.0. Elsewhere both are cuBLAS GEMMs and a pass,
    which saves neither a chain nor compiled code anything."""
    if not (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)):
        return False
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    fused = _HOPPER.get(index)
    if fused is None:
        fused = _HOPPER[index] = torch.cuda.get_device_capability(index) == (9, 0)
    return fused


def compiles_as_eager(a, activation=None, needs_grad=False):
    """Rule compiles_as_eager: whether, under torch.compile, a call on `a`
    takes eager's formula instead of the operator: on the CPU (cpu_atens);
    on CUDA exact fp32 and fp64, where the operator runs cuBLAS's GEMM as
    eager does and Inductor fuses the rest itself; in training, activations
    differentiated from Y, which do not chain on CUDA and through the
    operator were no faster at a higher peak."""
    if not isinstance(a, torch.Tensor):
        return False
    if not a.is_cuda:
        # is_cuda first: traced, Dynamo folds it, where is_cpu would be a node of the graph.
        return cpu_atens(a)
    # PyTorch's TF32 switch read directly: traced, torch.backends.cuda.matmul's
    # Python __getattr__ adds guards evaluated in Python on every call.
    exact = a.dtype == torch.float64 or (a.dtype == torch.float32 and not torch._C._get_cublas_allow_tf32())
    return exact or (needs_grad and activation in GRAD_FROM_OUTPUT)


def compiles_to_glu(a, needs_grad):
    """Rule compiles_to_glu: whether compiled code takes gemm_glu over
    Inductor's own kernels: in inference where the fused kernel runs
    (hopper_fused, from FUSED_GLU_MIN_ROWS rows; with the rows symbolic the
    operator decides when it runs, and no guard is added)."""
    if needs_grad or FUSED_GLU_MIN_ROWS is None or not hopper_fused(a):
        return False
    # Imported here, under torch.compile, which has loaded it: at the
    # package's import it would load sympy.
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    rows = a.numel() // a.shape[-1] if a.shape[-1] != 0 else 0
    return not statically_known_true(rows < FUSED_GLU_MIN_ROWS)


def links(activation):
    """Rule links: whether fuse_linear_act links a fused layer with
    `activation` to the Linear its output feeds: where act' needs Z. One
    taking it from Y never chains on CUDA, and the link would only make that
    Linear a fused module, with its host time and guards."""
    return activation not in GRAD_FROM_OUTPUT


def chains(x, activation):
    """Rule chains: whether a layer with `activation` on x chains to the
    next: on the CPU always (nothing there is fused, but the chain's numerics
    are tested there); on CUDA where gemm_dact is the fused kernel, for the
    activations links() links (chaining relu & co. writes a Z the layer would
    not store to save a pass that moves as many bytes)."""
    if not x.is_cuda:
        return True
    return links(activation) and hopper_fused(x)


def chain_pays(x, b, bias, activation, any_size=False, b_is_weight=False):
    """Rule chain_pays: whether a layer on a chain publishes its Z for the
    next: in training, on plain tensors, where it chains and, unless
    ``any_size``, where it is not host_bound (the chained operator's extra
    arguments and the stored Z would only add to its host time).
    ``b_is_weight``: b is given as a weight [N, K]."""
    # chains first: the cheaper test, and the one a relu layer on CUDA fails.
    if not chains(x, activation):
        return False
    if type(x) not in PLAIN or type(b) not in PLAIN or not needs_grad(x, b, bias):
        return False
    return any_size or not host_bound(x, b.shape[0] if b_is_weight else b.shape[1])

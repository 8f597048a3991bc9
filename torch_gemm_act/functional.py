"""The functional API: gemm_act and linear_act, and their gated forms
gemm_glu and gated_linear_act."""

import torch

from . import _C, ops
from .activations import GELU, GRAD_FROM_OUTPUT, IDENTITY, USES_SLOPE, gate_activation, twin


def gemm_act(a, b, bias=None, c=None, *, activation=IDENTITY, alpha=1.0, beta=0.0,
             negative_slope=0.01, return_preact=False):
    """Y = act(alpha * a @ b + beta * c + bias) in one fused GEMM.

    a: [..., K]; b: [K, N] with any strides (``weight.t()`` goes in without a
    copy); c: like the output [..., N]; bias: a scalar, per column ((N,) or
    (1, N)) or per row ((M, 1) or a.shape[:-1] + (1,)). All share one dtype
    and device. With ``return_preact=True`` returns (Y, Z) where Z is the
    pre-activation. As in ``torch.addmm``, c is not read when beta == 0.
    """
    # The operator checks every argument (csrc/checks.cpp); nothing is re-checked here.
    if torch.compiler.is_compiling() and _compiles_as_eager(a, activation, _needs_grad(a, b, bias, c)):
        return _eager_formula(a, b, bias, c, activation, alpha, beta, negative_slope, return_preact)
    store_preact = _stores_preact(a, b, bias, c, activation, return_preact)
    if _direct_call(a, b, activation):
        # The same operator, called without torch.ops' per-call argument matching.
        y, z = _C.gemm_act(a, b, bias, c, activation, float(alpha), float(beta),
                           float(negative_slope), store_preact)
    else:
        if _is_dtensor(a) or _is_dtensor(b):
            from . import dtensor  # noqa: F401  (its sharding strategies, registered on first use)
        y, z = ops.gemm_act_op(a, b, bias, c, activation, float(alpha), float(beta),
                               float(negative_slope), store_preact)
    return (y, z) if return_preact else y


def _is_dtensor(t):
    # By name: torch.distributed may be absent from a build.
    return type(t).__name__ == "DTensor"


def _gemm_act_of_weight(x, weight, bias, activation, negative_slope):
    """``gemm_act(x, weight.t(), bias, ...)`` for a module's weight [N, K]:
    on the direct path in C++ (csrc/linear_node.h), where the transpose
    costs the host a fraction of what Python's ``.t()`` does and, in
    training, the backward is one node taking the weight itself."""
    if not _direct_call(x, weight, activation):
        return gemm_act(x, weight.t(), bias, activation=activation, negative_slope=negative_slope)
    return _C.linear_act(x, weight, bias, activation, float(negative_slope))


def _direct_call(a, b, activation):
    """Whether an operator can be called through its direct _C entry (no
    torch.ops argument matching): on plain tensors, outside torch.compile
    (which cannot trace into _C) and torch-function modes (which only
    torch.ops honours)."""
    return (type(a) in _PLAIN and type(b) in _PLAIN and type(activation) is str
            and not torch.compiler.is_compiling() and not torch._C._is_torch_function_mode_enabled())


def _compiles_as_eager(a, activation=None, needs_grad=False):
    """Whether, under torch.compile, a call on `a` takes eager's formula
    instead of the operator: on the CPU always (cpu_atens); on CUDA:
    - exact fp32 and fp64, where the operator runs the library's cuBLAS GEMM
      as eager does and Inductor fuses the rest itself (through the
      operator: the custom op's host time and a pass Inductor would have
      fused);
    - in training, activations whose derivative comes from Y (relu & co):
      they do not chain on CUDA (chain.chains), and through the operator a
      compiled training step was no faster at a higher peak (the operator's
      backward pass writes a new dZ where Inductor's own kernel may take
      gY's dead buffer).
    Measured: docs/MEASUREMENTS.md, "Compiled policy"."""
    if not isinstance(a, torch.Tensor):
        return False
    if cpu_atens(a):
        return True
    if not a.is_cuda:
        return False
    # PyTorch's TF32 switch read directly: traced, torch.backends.cuda.matmul's
    # Python __getattr__ adds guards evaluated in Python on every call.
    exact = a.dtype == torch.float64 or (a.dtype == torch.float32 and not torch._C._get_cublas_allow_tf32())
    return exact or (needs_grad and activation in GRAD_FROM_OUTPUT)


def _eager_formula(a, b, bias, c, activation, alpha, beta, negative_slope, return_preact):
    z = torch.matmul(a, b)
    if alpha != 1.0:
        z = alpha * z
    if c is not None and beta != 0.0:
        z = z + beta * c
    if bias is not None:
        z = z + bias
    y = twin(activation, negative_slope)(z)
    return (y, z) if return_preact else y


# Operands the direct call takes: tensors that are no subclass with a
# __torch_function__ of its own (nn.Parameter's is disabled).
_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))

# Below about this many multiply-adds a layer on CUDA is bound by host time:
# its GEMM takes a few microseconds (bf16; tens in exact fp32), less than
# the host spends on the call. There a chain (chain.chain_pays) publishes no
# Z: the chained operator's extra arguments would add to host time what it
# saves the GPU. A fused module there runs ATen's ops, the replaced
# modules' own, but for a relu-family LinearAct in training, which records
# its own node (modules._WithActivation._unfused_mode). The functional API
# runs the operator at any size: a caller who calls it asks for it.
HOST_BOUND_MULTIPLY_ADDS = 1 << 30


# Whether each CUDA device runs the sm90 family (compute capability 9.0).
_HOPPER = {}


def hopper_fused(x):
    """Whether the operators fuse on x's GPU what no library call does: the
    sm90 family's gemm_glu (both projections and the gate in one GEMM) and
    gemm_dact (the activation's derivative in the epilogue of the GEMM
    before it), which take fp16/bf16 on compute capability 9.0. Elsewhere
    both are cuBLAS GEMMs and a pass, which saves neither a chain of layers
    nor compiled code (Inductor builds the same) anything."""
    if not (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)):
        return False
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    fused = _HOPPER.get(index)
    if fused is None:
        fused = _HOPPER[index] = torch.cuda.get_device_capability(index) == (9, 0)
    return fused


# The fewest rows at which gemm_glu runs its fused kernel under the rule (the
# C++ side's bound); None where the build has no fused gated kernel.
FUSED_GLU_MIN_ROWS = _C.fused_glu_min_rows()


def _compiles_to_glu(a, needs_grad):
    """Whether compiled code takes gemm_glu over Inductor's own kernels: in
    inference where the fused kernel runs (hopper_fused, from
    FUSED_GLU_MIN_ROWS rows; with the rows symbolic, the operator decides
    when it runs, and no guard is added). Elsewhere the operator is the two
    GEMMs and one pass Inductor builds itself, and in training the fused
    kernel's backward was no faster than compiled eager at a higher peak
    (docs/MEASUREMENTS.md, "Compiled policy")."""
    if needs_grad or FUSED_GLU_MIN_ROWS is None or not hopper_fused(a):
        return False
    # Imported here, under torch.compile, which has loaded it: at the
    # package's import it would load sympy.
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    rows = a.numel() // a.shape[-1] if a.shape[-1] != 0 else 0
    return not statically_known_true(rows < FUSED_GLU_MIN_ROWS)


def host_bound(x, n):
    """Whether a layer taking x ([..., K]) to n columns is host-bound on
    CUDA (``HOST_BOUND_MULTIPLY_ADDS``), in eager mode; never on the CPU, and
    not under torch.compile, where the graph's launches replace the calls."""
    return not torch.compiler.is_compiling() and x.is_cuda and x.numel() * n < HOST_BOUND_MULTIPLY_ADDS


def runs_atens_ops(x, n):
    """Whether a fused module's layer taking x ([..., K]) to n columns runs
    ATen's ops, the replaced modules' own, rather than the operator, in
    eager mode: where it is host-bound on CUDA (host_bound), and always on
    the CPU, where the operator's kernel is the reference (ATen's GEMM, then
    a scalar pass per element) that ATen's vectorised activations outrun
    (docs/MEASUREMENTS.md, "CPU policy")."""
    # host_bound(x, n) or cpu_eager(x), written out: called on every layer
    # of a host-bound step, where each nested call costs host time.
    if torch.compiler.is_compiling():
        return False
    if x.is_cuda:
        return x.numel() * n < HOST_BOUND_MULTIPLY_ADDS
    return cpu_atens(x)


def cpu_eager(x):
    """Whether x is a CPU tensor outside torch.compile: where the fused
    modules, gated ones included, run ATen's ops (the gated operator's CPU
    kernel too is a reference; docs/MEASUREMENTS.md, "CPU policy")."""
    return cpu_atens(x) and not torch.compiler.is_compiling()


def cpu_atens(x):
    """Whether x is a CPU tensor, whose layers run ATen's ops rather than
    the operators' CPU kernels, the references: in eager mode (cpu_eager)
    and, as eager's formula Inductor compiles, under torch.compile
    (_compiles_as_eager; docs/MEASUREMENTS.md, "CPU policy"). The tests
    patch this to keep the operators on the CPU."""
    return x.is_cpu


def _stores_preact(a, b, bias, c, activation, return_preact):
    # Z is written only when asked for or when the backward needs it.
    if return_preact:
        return True
    return activation not in GRAD_FROM_OUTPUT and _needs_grad(a, b, bias, c)


def _needs_grad(*operands):
    """Whether a call on these operands (None: absent) has a backward."""
    if not torch.is_grad_enabled():
        return False
    for t in operands:
        if t is not None and t.requires_grad:
            return True
    return False


def explain(a, b, bias=None, c=None, *, activation=IDENTITY, alpha=1.0, beta=0.0,
            negative_slope=0.01, return_preact=False):
    """What ``gemm_act`` with the same arguments would run here, as a short
    description (backend, kernel configuration), computing nothing.

    It follows gemm_act exactly: autocast's casts, whether Z is stored (grad
    mode and ``requires_grad``), PyTorch's matmul precision setting and
    torch_gemm_act.testing's overrides.
    """
    store_preact = _stores_preact(a, b, bias, c, activation, return_preact)
    device = a.device.type if isinstance(a, torch.Tensor) else "cpu"
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)

        def cast(t):
            # As autocast casts gemm_act's operands (csrc/autocast.cpp).
            return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and \
                t.dtype != torch.float64 else t
        a, b, bias, c = (cast(t) for t in (a, b, bias, c))
    return ops.explain_op(a, b, bias, c, activation, float(alpha), float(beta),
                          float(negative_slope), store_preact)


def linear_act(x, weight, bias=None, activation=GELU, negative_slope=0.01):
    """act(F.linear(x, weight, bias)) in one kernel; weight is [N, K] as in nn.Linear."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"linear_act: weight must be a 2-D tensor [out_features, in_features], got {shape}")
    return _gemm_act_of_weight(x, weight, bias, activation, negative_slope)


SWIGLU = "swiglu"


def gemm_glu(a, b_gate, b_up, bias_gate=None, bias_up=None, *, activation=SWIGLU, negative_slope=0.01,
             return_preact=False):
    """Y = act(a @ b_gate + bias_gate) * (a @ b_up + bias_up): a gated MLP's
    two projections and its gate as one operator.

    a: [..., K]; b_gate, b_up: [K, N] with any strides (``weight.t()`` goes in
    without a copy); biases (N,) or None. ``activation``: a gated form, one of
    ``torch_gemm_act.GATED`` (swiglu, geglu, geglu_tanh, reglu, glu). With
    ``return_preact=True`` returns (Y, H), H = [gate, up] pre-activations
    side by side ([..., 2N]).
    """
    gate = gate_activation(activation)
    compiled_unfused = torch.compiler.is_compiling() and not _compiles_to_glu(
        a, _needs_grad(a, b_gate, b_up, bias_gate, bias_up))
    if compiled_unfused or _is_dtensor(a) or _is_dtensor(b_gate):
        # Compiled where the fused kernel does not pay (_compiles_to_glu), and
        # on DTensors (no sharding strategy yet), the projections and the
        # product run as they run unfused.
        g, u = (torch.matmul(a, b) if bias is None else torch.matmul(a, b) + bias
                for b, bias in ((b_gate, bias_gate), (b_up, bias_up)))
        y = twin(gate, negative_slope)(g) * u
        return (y, torch.cat([g, u], -1)) if return_preact else y
    # A slope no gate reads stays a constant: under torch.compile(dynamic=True)
    # Dynamo would make the default a symbolic float, guarded and recompiled.
    slope = float(negative_slope) if gate in USES_SLOPE else 0.01
    y, h = ops.gemm_glu_op(a, b_gate, b_up, bias_gate, bias_up, gate, slope, bool(return_preact))
    return (y, h) if return_preact else y


def gated_linear_act(x, gate_weight, up_weight, gate_bias=None, up_bias=None, activation=SWIGLU):
    """``act(F.linear(x, gate_weight, gate_bias)) * F.linear(x, up_weight, up_bias)``
    in one operator (a Llama-style MLP's gate_proj, act_fn and up_proj);
    weights [N, K] as in nn.Linear."""
    for name, w in (("gate_weight", gate_weight), ("up_weight", up_weight)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"gated_linear_act: {name} must be a 2-D tensor [out_features, in_features], "
                             f"got {shape}")
    return gemm_glu(x, gate_weight.t(), up_weight.t(), gate_bias, up_bias, activation=activation)

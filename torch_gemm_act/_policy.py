"""Which road a call takes: the predicates of the Python side's rules,
applied before the extension picks a kernel. Every rule, this side's and
the extension's, is named, described and given its numbers once, in the
rules table (_rules.py); ``explain()`` names the rule that fired. Each
rule's measurement is in docs/MEASUREMENTS.md, under its name."""

import torch

from . import _C
from ._rules import NUMBERS, RULES as _TABLE, says as _says
from .activations import _GRAD_FROM_OUTPUT, IDENTITY

# This side's rules, by name: what each decides.
RULES = {name: _says(name) for name, (where, _, _) in _TABLE.items() if where in ("python", "both")}

# host_bound: below about this many multiply-adds a layer's GEMM takes less
# time than the host spends on the call.
HOST_BOUND_MULTIPLY_ADDS = 1 << NUMBERS["HOST_BOUND_MULTIPLY_ADDS_LOG2"]

# compiles_to_glu: rule glu_rows's bound; None where the build has no fused
# gated kernel (no sm90 family).
FUSED_GLU_MIN_ROWS = NUMBERS["MIN_GLU_ROWS"] if "sm90" in _C.cuda_backends() else None

# ce_chunk: a chunk's logits in linear_cross_entropy's chunked path take about this many bytes.
CE_CHUNK_BYTES = 1 << NUMBERS["CE_CHUNK_BYTES_LOG2"]

# ce_rows: a block of linear_cross_entropy's rows road has at least this many rows x width.
CE_ROWS_MIN_PRODUCT = 1 << NUMBERS["CE_ROWS_MIN_PRODUCT_LOG2"]
# ce_eager: logits below this many bytes at an aligned vocabulary take eager's ops.
CE_EAGER_MAX_LOGITS_BYTES = 1 << NUMBERS["CE_EAGER_MAX_LOGITS_BYTES_LOG2"]

# tuned: the share by which a backend must beat the rule's own choice.
TUNE_MARGIN = NUMBERS["TUNE_MARGIN_PERCENT"] / 100

# own_node: the activations a host-bound layer in training runs through the
# operator's node, those differentiated from Y.
NODE_ACTIVATIONS = _GRAD_FROM_OUTPUT - {IDENTITY}

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


def computes_in(x):
    """The dtype a GEMM on x computes in: autocast's where it is on for x's
    device and casts x (fp32, as csrc/autocast.cpp casts, like F.linear),
    else x's own. Traced, Dynamo folds both autocast reads into guards."""
    if x.dtype == torch.float32 and torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


# Whether each CUDA device runs the sm90 family (rule hopper_fused).
_HOPPER = {}


def hopper_fused(x):
    """Rule hopper_fused: whether the operators fuse on x's GPU what no
    library call does: gemm_glu's fused kernel and gemm_dact's, fp16/bf16
    (autocast's casts applied: computes_in) on sm_90. Elsewhere both are
    cuBLAS GEMMs and a pass, which saves neither a chain nor compiled code
    anything."""
    if not (isinstance(x, torch.Tensor) and x.is_cuda and computes_in(x) in (torch.float16, torch.bfloat16)):
        return False
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    fused = _HOPPER.get(index)
    if fused is None:
        major, minor = torch.cuda.get_device_capability(index)
        fused = _HOPPER[index] = major * 10 + minor == NUMBERS["SM90_CAPABILITY"]
    return fused


def compiles_as_eager(a, activation=None, needs_grad=False):
    """Rule compiles_as_eager: whether, under torch.compile, a call on `a`
    takes eager's formula instead of the operator: on the CPU (cpu_atens);
    on CUDA exact fp32 and fp64 (autocast's casts applied: computes_in),
    where the operator runs cuBLAS's GEMM as eager does and Inductor fuses
    the rest itself; in training, activations differentiated from Y, which
    do not chain on CUDA and through the operator were no faster at a
    higher peak."""
    if not isinstance(a, torch.Tensor):
        return False
    if not a.is_cuda:
        # is_cuda first: traced, Dynamo folds it, where is_cpu would be a node of the graph.
        return cpu_atens(a)
    # PyTorch's TF32 switch read directly: traced, torch.backends.cuda.matmul's
    # Python __getattr__ adds guards evaluated in Python on every call.
    dtype = computes_in(a)
    exact = dtype == torch.float64 or (dtype == torch.float32 and not torch._C._get_cublas_allow_tf32())
    return exact or (needs_grad and activation in _GRAD_FROM_OUTPUT)


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


def fuses_residual(x, n, p):
    """Rule fuses_residual: whether a ResidualOutput (fuse_linear_act's)
    whose layer takes x ([..., K]) to n columns, with dropout p, computes
    its sum as gemm_dropout_add: in eager mode with dropout on (p > 0)
    where the layer does not run ATen's ops (runs_atens_ops). Without
    dropout the replaced forward's ops (the operator's gemm_act with the
    residual as C measured no faster over a whole step); under
    torch.compile never, Inductor folding the add and the dropout into the
    next norm kernel itself."""
    return p > 0 and not torch.compiler.is_compiling() and not runs_atens_ops(x, n)


def links(activation):
    """Rule links: whether fuse_linear_act links a fused layer with
    `activation` to the Linear its output feeds: where act' needs Z. One
    taking it from Y never chains on CUDA, and the link would only make that
    Linear a fused module, with its host time and guards."""
    return activation not in _GRAD_FROM_OUTPUT


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


def ce_chunk(tokens, width, vocab, element_size):
    """Rule ce_chunk: the vocabulary columns per chunk of linear_cross_entropy's
    chunked path over hidden [tokens, width], a multiple of 128: about
    CE_CHUNK_BYTES of logits of `element_size` bytes each, or hidden's fp32
    gradient's bytes where more."""
    chunk_bytes = max(CE_CHUNK_BYTES, 4 * tokens * width)
    columns = chunk_bytes // (element_size * max(tokens, 1))
    return min(vocab, max(128, columns // 128 * 128))


def padded_vocab(vocab, element_size):
    """The vocabulary rounded up to a whole number of 16-byte units of
    `element_size`: the rows road's block rows and weight-gradient rows
    (cuBLAS runs its unaligned kernels on a contiguous dimension that is not)."""
    unit = max(1, 16 // element_size)
    return -(-vocab // unit) * unit


def ce_eager(tokens, vocab, element_size):
    """Rule ce_eager: whether linear_cross_entropy, a gradient wanted and
    no log-sum-exp asked for, runs eager's ops over logits [tokens, vocab]
    of `element_size` bytes each."""
    return padded_vocab(vocab, element_size) == vocab and tokens * vocab * element_size < CE_EAGER_MAX_LOGITS_BYTES


def ce_rows(tokens, width, vocab, element_size, sum_size):
    """Rule ce_rows: the tokens per block of linear_cross_entropy's rows
    road over hidden [tokens, width], or 0 for the chunk road. The block
    (rows a whole number of 16-byte units wide), the gradients summed in
    `sum_size` bytes (weight's, hidden's, bias's) and a padded copy of the
    weight where needed fit in what compiled eager holds at its peak: the
    logits (and, at an unaligned vocabulary, their padded copy) and those
    gradients in the inputs' dtype (`element_size` each). The blocks are as
    few and as even as fit; where there are several, each has at least
    CE_ROWS_MIN_PRODUCT rows x width. An answer of at least `tokens` is one
    block."""
    padded = padded_vocab(vocab, element_size)
    grads = vocab * width + tokens * width + vocab
    held, logits = sum_size * grads, tokens * vocab
    if padded != vocab:
        held += padded * width * element_size
        logits += tokens * padded
    room = element_size * (logits + grads) - held  # bytes left for the block
    if tokens * width < CE_ROWS_MIN_PRODUCT:
        # One block (a constant above tokens: no symbolic size reaches the operator) or none; under
        # a compiled graph's dynamic shapes, guards linear in tokens alone.
        return CE_ROWS_MIN_PRODUCT if room >= tokens * padded * element_size else 0
    most = room // (padded * element_size)
    if most < 1:
        return 0
    rows = -(-tokens // -(-tokens // most))
    return rows if rows * width >= CE_ROWS_MIN_PRODUCT else 0


def tuned(rule_us, backend_us, eager_us):
    """Rule tuned: torch_gemm_act.tune() keeps a backend that took
    backend_us where the rule's own choice took rule_us and eager's ops
    eager_us (medians): a clear win over the rule's choice, or any win
    where that choice is clearly slower than eager."""
    clearly_slower_than_eager = rule_us > (1 + TUNE_MARGIN) * eager_us
    return backend_us < (1 - TUNE_MARGIN) * rule_us or (clearly_slower_than_eager and backend_us < rule_us)

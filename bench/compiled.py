"""The contenders of bench/models.py under torch.compile: each compiled
under a frame and module classes of its own, compile fusion's first call
under the pass with Inductor's caches off, and the code Inductor generates
for each, to tell which contenders run the same kernels."""

import contextlib
import copy

import harness


def own_frame(model, name):
    """`model` under a forward whose code object is its own (named for the
    contender). Dynamo keeps compilations per code object and, parameters
    being graph inputs, guards on the modules' types rather than on their
    identity: compiled under one Sequential.forward, all contenders' graphs
    would share one cache, each call checking the others' guards before its
    own; a copy of the eager model would reuse the eager model's
    compilation, and compile fusion's too, made without the pass. A user's
    model has its compilations to itself."""
    from torch import nn

    class OwnFrame(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            return self.inner(*args, **kwargs)
    OwnFrame.forward.__code__ = OwnFrame.forward.__code__.replace(co_name=f"forward_{name}")
    _own_classes(model, name)
    return OwnFrame(model)


_CLASSES = {}


def _own_classes(model, name):
    """Each module of `model` made an instance of a class of the contender's
    own (a subclass, named as its class). Where a forward breaks the graph
    (whole models), Dynamo resumes in the inner modules' frames, whose code
    objects every copy of the model shares: their types' guards then keep
    the contenders' compilations apart there too."""
    for module in model.modules():
        cls = type(module)
        if (name, cls) not in _CLASSES:
            _CLASSES[name, cls] = type(cls.__name__, (cls,), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
        module.__class__ = _CLASSES[name, cls]


def contenders(eager, fused, compiled, control=False, peers=None, in_process=True, compile_fusion=None):
    """name -> model: eager and fused (and ``peers``, name -> model), or,
    compiled, each under torch.compile and compile fusion's (the eager
    model compiled with the pass; its first call must run under
    first_call). With ``control``, also ``eager_copy``: a copy of the eager
    model, compiled or not as eager is, timed as a contender of its own. It
    runs eager's computation, so its ratio to eager is what the bench reads
    between two identical steps (their order and the clock's drift), the
    spread any other ratio of the row carries. ``in_process``: Inductor
    compiles in this process (harness.compile_in_process), else with its pool
    of workers (the whole models: many kernels, a GPU-bound step).
    ``compile_fusion``: compile fusion's model, if not a copy of eager's."""
    import torch

    models = {"eager": eager, "fused": fused, **(peers or {})}
    if control:
        models["eager_copy"] = copy.deepcopy(eager)
    if not compiled:
        return models
    if in_process:
        harness.compile_in_process()
    else:
        torch._inductor.config.compile_threads = torch._inductor.config.decide_compile_threads()
    torch.compiler.reset()
    models["compile_fusion"] = copy.deepcopy(eager) if compile_fusion is None else compile_fusion
    return {name: torch.compile(own_frame(m, name)) for name, m in models.items()}


@contextlib.contextmanager
def first_call(name):
    """Around a contender's first (compiling) call: the fusion pass on (the
    LM loss's rewrite too) for compile_fusion only, whose graphs are compiled afresh, not from
    Inductor's caches (a cached graph would skip the pass, and its count)."""
    import torch

    import torch_gemm_act

    torch_gemm_act.enable_compile_fusion(name == "compile_fusion", lm_loss=True)
    try:
        if name != "compile_fusion":
            yield
        else:
            with torch._inductor.config.patch(fx_graph_cache=False), \
                    torch._functorch.config.patch(enable_autograd_cache=False):
                yield
    finally:
        torch_gemm_act.enable_compile_fusion(False)


@contextlib.contextmanager
def generated_code(into, name):
    """into[name]: the code Inductor generates, or loads from its caches,
    for the graphs compiled inside, comments dropped (they name the source
    nodes, which differ between identical graphs). Two contenders with the
    same code run the same kernels the same way: their ratio is the
    bench's spread, what eager_copy reads."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    sources = []
    with mock.patch.object(GraphLowering, "save_output_code", sources.append):
        yield
    into[name] = "\n".join(line.split("#", 1)[0].rstrip() for src in sources for line in src.splitlines())

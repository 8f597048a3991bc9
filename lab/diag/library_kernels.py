"""The kernels eager F.linear + activation and gemm_act with the library
backend forced run per call (inference), and how long each takes (ms per
call, summed over its launches): where the library path loses to eager.

    python lab/diag/library_kernels.py [--only 8192x4096x16384]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mm_kernels import kernels  # noqa: E402

# (M, K, N, activation, dtype): the rows the library lost to eager on.
CASES = [
    (8192, 4096, 16384, "gelu", torch.bfloat16), (4096, 4096, 11008, "silu", torch.bfloat16),
    (8191, 4095, 4097, "gelu", torch.bfloat16), (16384, 1024, 4096, "none", torch.bfloat16),
    (1000, 1000, 1000, "gelu", torch.bfloat16),
]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes")
    args = p.parse_args()
    import torch_gemm_act as tga

    for m, k, n, act, dtype in CASES:
        if args.only and f"{m}x{k}x{n}" not in args.only.split(","):
            continue
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        bias = torch.randn(n, device="cuda", dtype=dtype)
        twin = tga.activations.torch_module(act)

        def eager():
            with torch.no_grad():
                return twin(torch.nn.functional.linear(a, w, bias))

        def library():
            with torch.no_grad(), tga.testing.override(cuda_backend="library"):
                return tga.linear_act(a, w, bias, act)

        with tga.testing.override(cuda_backend="library"):
            plan = tga.explain(a, w.t(), bias, activation=act)
        print(f"{m}x{k}x{n} {act} {dtype}: library = {plan}")
        for label, fn in (("eager", eager), ("library", library)):
            per_call = kernels(fn, runs=10, per_call=True)
            print(f"  {label}: {sum(per_call.values()):.3f} ms of kernels per call")
            for name, ms in sorted(per_call.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.3f} ms  {name[:150]}")


if __name__ == "__main__":
    main()

"""The kernels eager F.linear + activation, gemm_act under the dispatch
rule and with the library backend forced run per call, and how long each
takes (ms per call, summed over its launches): where the library path
loses to eager. Inference by default; --grad times the forward of a
training step (inputs that require grad: Z stored), --compiled adds
torch.compile of the eager formula (Inductor's kernels).

    python lab/diag/library_kernels.py [--only 8192x4096x16384] [--grad] [--compiled]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mm_kernels import kernels  # noqa: E402

# (M, K, N, activation, dtype[, tf32]): the rows the library lost to eager
# or to compile on.
CASES = [
    (8192, 4096, 16384, "gelu", torch.bfloat16), (4096, 4096, 11008, "silu", torch.bfloat16),
    (8191, 4095, 4097, "gelu", torch.bfloat16), (16384, 1024, 4096, "none", torch.bfloat16),
    (1000, 1000, 1000, "gelu", torch.bfloat16), (16, 4096, 16384, "gelu", torch.bfloat16),
    (4096, 4096, 4096, "gelu", torch.float32, True), (2048, 2048, 2048, "gelu", torch.float64),
]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes")
    p.add_argument("--grad", action="store_true", help="inputs that require grad (the forward stores Z)")
    p.add_argument("--compiled", action="store_true", help="also torch.compile of eager's formula")
    args = p.parse_args()
    import torch_gemm_act as tga

    for m, k, n, act, dtype, *tf32 in CASES:
        if args.only and f"{m}x{k}x{n}" not in args.only.split(","):
            continue
        torch.backends.cuda.matmul.allow_tf32 = bool(tf32 and tf32[0])
        a = torch.randn(m, k, device="cuda", dtype=dtype, requires_grad=args.grad)
        w = (torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5).requires_grad_(args.grad)
        bias = torch.randn(n, device="cuda", dtype=dtype, requires_grad=args.grad)
        twin = tga.activations.torch_module(act)
        grad = torch.enable_grad if args.grad else torch.no_grad

        def formula(a, w, bias):
            return twin(torch.nn.functional.linear(a, w, bias))

        def eager():
            with grad():
                return formula(a, w, bias)

        def rule():
            with grad():
                return tga.linear_act(a, w, bias, act)

        def library():
            with grad(), tga.testing.override(cuda_backend="library"):
                return tga.linear_act(a, w, bias, act)

        contenders = {"eager": eager, "gemm_act": rule, "library": library}
        if args.compiled:
            compiled = torch.compile(formula, dynamic=False)

            def compile_():
                with grad():
                    return compiled(a, w, bias)
            contenders["compile"] = compile_
        with grad():
            plan = tga.explain(a, w.t(), bias, activation=act)
            with tga.testing.override(cuda_backend="library"):
                lib_plan = tga.explain(a, w.t(), bias, activation=act)
        print(f"{m}x{k}x{n} {act} {dtype}{' tf32' if tf32 and tf32[0] else ''}"
              f"{' grad' if args.grad else ''}: gemm_act = {plan}; library = {lib_plan}")
        for label, fn in contenders.items():
            per_call = kernels(fn, runs=10, per_call=True)
            print(f"  {label}: {sum(per_call.values()):.4f} ms of kernels per call")
            for name, ms in sorted(per_call.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.4f} ms  {name[:150]}")


if __name__ == "__main__":
    main()

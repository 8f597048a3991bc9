"""Host microseconds per call of one MLP block of a bench/models.py case
and of the pieces its calls are made of, eager beside fused, at the case's
real sizes: the GPU is held by a spin kernel while the host makes the calls,
so no call waits on it and the times are the host's alone.

    python lab/diag/layer_host_time.py [--case gpt2_small_mlp] [--calls 20]
"""

import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import models  # noqa: E402
from host_bound_variants import through_operator  # noqa: E402

import torch_gemm_act as tga  # noqa: E402
from torch_gemm_act import chain, functional  # noqa: E402
from torch_gemm_act.activations import shared_twin  # noqa: E402

SPIN_CYCLES = 200_000_000  # about 0.1 s


def host_us(fn, calls, reps=7, untimed=None):
    """Median over reps of host us per fn() call; untimed() runs before each
    call outside the clock and passes fn its result."""
    times = []
    for r in range(reps + 1):
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)
        total = 0.0
        for _ in range(calls):
            arg = untimed() if untimed is not None else None
            t0 = time.perf_counter()
            fn(arg) if untimed is not None else fn()
            total += time.perf_counter() - t0
        if r:  # the first rep warms the allocator
            times.append(total / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="gpt2_small_mlp", choices=sorted(models.CASES))
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    eager, fused, x0, gy = models.build(args.case, "cuda", False)
    fc1, act, fc2 = eager[0], eager[1], eager[2]
    ffc1, fact, ffc2 = fused[0], fused[1], fused[2]
    print(f"{args.case}: block 0 = {type(ffc1).__name__}, {type(fact).__name__}, {type(ffc2).__name__}")
    x = x0.detach().requires_grad_(True)
    w1t, b1 = fc1.weight.t(), fc1.bias
    act_name = ffc1.activation
    with torch.no_grad():
        z1 = fc1(x0)
        y1 = act(z1)
    params = list(eager.parameters()) + list(fused.parameters())

    def clear():
        x.grad = None
        for q in params:
            q.grad = None

    def eager_block():
        return fc2(act(fc1(x)))

    def fused_block():
        return ffc2(fact(ffc1(x)))

    def backward(y):
        y.backward(gy)
        clear()

    rows = [
        ("eager block forward", lambda: eager_block()),
        ("fused block forward", lambda: fused_block()),
        ("eager fc1 (nn.Linear)", lambda: fc1(x)),
        ("eager act module", lambda: act(z1)),
        ("fused fc1 (publishes)", lambda: ffc1(x)),
        ("eager fc1 + act", lambda: act(fc1(x))),
        ("fused fc1 + act, operator", lambda: fact(op_fc1(x))),
        ("F.linear, grad", lambda: F.linear(x, fc1.weight, b1)),
        ("_C.gemm_act (no Z), grad", lambda: tga._C.gemm_act(x, w1t, b1, None, act_name, 1.0, 0.0, 0.01, False)),
        ("_C.gemm_act (no Z), weight given, grad", lambda: tga._C.gemm_act(
            x, fc1.weight, b1, None, act_name, 1.0, 0.0, 0.01, False, True)),
        ("_C.linear_act (its own node), grad", lambda: tga._C.linear_act(x, fc1.weight, b1, act_name, 0.01)),
        ("weight.t()", lambda: fc1.weight.t()),
        ("chain_pays", lambda: chain.chain_pays(x, w1t, b1, act_name)),
        ("host_bound", lambda: functional.host_bound(x, 3072)),
        ("_stores_preact", lambda: functional._stores_preact(x, w1t, b1, None, act_name, False)),
        ("_direct_call", lambda: functional._direct_call(x, w1t, act_name)),
        ("_C.gemm_act_chained (Z, publish)", lambda: tga._C.gemm_act_chained(
            x, None, None, "none", 0.0, w1t, b1, None, act_name, 1.0, 0.0, 0.01, True, True)),
        ("_C.gemm_act_chained, weight given", lambda: tga._C.gemm_act_chained(
            x, None, None, "none", 0.0, fc1.weight, b1, None, act_name, 1.0, 0.0, 0.01, True, True, True)),
        ("_C.gemm_act (Z), grad", lambda: tga._C.gemm_act(x, w1t, b1, None, act_name, 1.0, 0.0, 0.01, True)),
        ("torch.addmm, grad", lambda: torch.addmm(b1, x, w1t)),
    ]
    op_fc1 = through_operator(copy.copy(ffc1))  # its parameters ffc1's
    print(f"{'piece':40s} {'host us/call':>12s}")
    for name, fn in rows:
        print(f"{name:40s} {host_us(fn, args.calls):12.1f}", flush=True)
    twin = shared_twin(act_name)
    with torch.no_grad():
        for name, fn in [
            ("no_grad _C.gemm_act (no Z)", lambda: tga._C.gemm_act(x0, w1t, b1, None, act_name, 1.0, 0.0, 0.01,
                                                                  False)),
            ("no_grad eager block forward", lambda: fc2(act(fc1(x0)))),
            ("no_grad fused block forward", lambda: ffc2(fact(ffc1(x0)))),
            ("no_grad twin module call", lambda: twin(z1)),
            ("no_grad twin .forward", lambda: twin.forward(z1)),
            ("no_grad F.linear", lambda: F.linear(x0, fc1.weight, b1)),
            ("no_grad torch._addmm_activation", lambda: torch._addmm_activation(b1, x0, w1t)),
            ("no_grad F.gelu", lambda: F.gelu(z1)),
            ("no_grad torch.mm", lambda: torch.mm(x0, w1t)),
            ("no_grad torch.empty_like", lambda: torch.empty_like(z1)),
            ("no_grad bias_grad op", lambda: torch.ops.gemm_act.bias_grad(z1, b1)),
            ("no_grad z1.sum(0)", lambda: z1.sum(0)),
        ]:
            print(f"{name:40s} {host_us(fn, args.calls):12.1f}", flush=True)
    def operator_block():
        return ffc2(fact(op_fc1(x)))

    for name, fwd in (("eager block backward", eager_block), ("fused block backward", fused_block),
                      ("operator block backward", operator_block)):
        print(f"{name:40s} {host_us(backward, args.calls, untimed=fwd):12.1f}", flush=True)


if __name__ == "__main__":
    main()

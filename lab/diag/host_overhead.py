"""Host time per call of the op beside eager's, on problems small enough for
the host to be the bottleneck: what the dispatcher, the checks, autograd and
the launch path cost, and (--profile) which calls the time goes to.

    python lab/diag/host_overhead.py [--size 1000 | --shape M,K,N] [--dtype bfloat16]
                                     [--activation gelu] [--calls 2000]
                                     [--profile [NAME ...]] [--engine-threads]

Prints the median over 7 repetitions of the wall time per call (the GPU
synchronised once per repetition) for inference and forward + backward, for
eager F.linear + the activation, linear_act under the dispatch rule and with each
CUDA backend forced, and for the pieces a call is made of. --profile adds
torch.profiler's table of host time per operator and CUDA API call for the
named contenders' forward (grad mode on) and forward + backward (default:
eager and linear_act).
--engine-threads adds each contender's forward alone (with grad) and its
forward + backward with the autograd engine's device threads off (the
backward then runs on the calling thread: no hand-over between threads).
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

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


def profile(name, fn, calls):
    from torch.profiler import ProfilerActivity, profile as prof
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    print(f"\n--- {name}: {calls} calls, host time per operator / CUDA API call")
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1000, help="M = K = N")
    p.add_argument("--shape", default=None, help="M,K,N (instead of --size)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--activation", default="gelu", help="one of torch_gemm_act.ACTIVATIONS")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--profile", nargs="*", default=None, metavar="NAME",
                   help="contenders to profile (none named: eager and linear_act)")
    p.add_argument("--engine-threads", action="store_true",
                   help="also time the forward alone and the backward on the calling thread")
    args = p.parse_args()
    m, k, n = (int(v) for v in args.shape.split(",")) if args.shape else (args.size,) * 3
    dt = getattr(torch, args.dtype)
    act = args.activation
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt) * k ** -0.5
    b = torch.randn(n, device="cuda", dtype=dt)
    ag, wg, bg = (t.clone().requires_grad_() for t in (a, w, b))
    gy = torch.randn(m, n, device="cuda", dtype=dt)
    ins = (ag, wg, bg)
    twin = tga.activations.shared_twin(act)

    def eager(x, wt, bias):
        return twin(F.linear(x, wt, bias))

    def ours(x, wt, bias):
        return tga.linear_act(x, wt, bias, activation=act)

    def forced(backend):
        def run(x, wt, bias):
            before = tga.testing._C.testing_overrides()
            tga.testing._C.set_testing_overrides(backend, *before[1:])
            try:
                return ours(x, wt, bias)
            finally:
                tga.testing._C.set_testing_overrides(*before)
        return run

    contenders = {"eager": eager, "linear_act": ours}
    for backend in tga.testing.cuda_backends():
        contenders[f"linear_act:{backend}"] = forced(backend)

    op = torch.ops.gemm_act.gemm_act.default
    ab = torch.ops.gemm_act.activation_backward.default
    z = torch.randn(m, n, device="cuda", dtype=dt)
    pieces = {
        "torch.mm": lambda: torch.mm(a, w.t()),
        "F.linear": lambda: F.linear(a, w, b),
        "gemm_act op (no Z)": lambda: op(a, w.t(), b, None, act, 1.0, 0.0, 0.01, False),
        "gemm_act op (Z)": lambda: op(a, w.t(), b, None, act, 1.0, 0.0, 0.01, True),
        "activation_backward op": lambda: ab(gy, z, b, act, 0.01),
        "activation module": lambda: twin(z),
        "z.sum(0)": lambda: z.sum(0),
    }
    print(f"M, K, N = {m}, {k}, {n}, {args.dtype}, {act}, bias per column; us per call (wall, host-bound)")
    print(f"{'contender':28s} {'inference':>10s} {'fwd+bwd':>10s}")
    for name, f in contenders.items():
        def inference(f=f):
            with torch.no_grad():
                return f(a, w, b)

        def train(f=f):
            y = f(*ins)
            return torch.autograd.grad(y, ins, gy)
        print(f"{name:28s} {per_call_us(inference, args.calls):10.1f} {per_call_us(train, args.calls // 4):10.1f}")
    if args.engine_threads:
        print(f"\n{'contender':28s} {'fwd (grad)':>10s} {'fwd+bwd':>10s} {'1 thread':>10s}")
        for name in ("eager", "linear_act"):
            f = contenders[name]

            def forward(f=f):
                return f(*ins)

            def train(f=f):
                return torch.autograd.grad(f(*ins), ins, gy)

            threaded = per_call_us(train, args.calls // 4)
            with torch.autograd.set_multithreading_enabled(False):
                single = per_call_us(train, args.calls // 4)
            print(f"{name:28s} {per_call_us(forward, args.calls):10.1f} {threaded:10.1f} {single:10.1f}")
    print()
    with torch.no_grad():
        for name, f in pieces.items():
            print(f"{name:28s} {per_call_us(f, args.calls):10.1f}")
    if args.profile is not None:
        for name in args.profile or ("eager", "linear_act"):
            f = contenders[name]

            def train(f=f):
                y = f(*ins)
                return torch.autograd.grad(y, ins, gy)
            profile(f"{name} forward (grad)", lambda f=f: f(*ins), 200)
            profile(f"{name} forward + backward", train, 200)


if __name__ == "__main__":
    main()

"""The benches' timer before session 46, kept for the lab's comparisons:
triton.testing.do_bench (median of ~rep ms of one contender) taken in
rounds, contender after contender. bench.time_in_turns replaced it: on the
lent hosts a round of ~100 ms fell in or out of a slow episode whole
(bench/README.md, "Model level")."""

import inspect
import statistics
import time


def round_order(order, r):
    """The contenders' order in round r. Under the board's power cap a kernel
    timed right after a heavy one runs at a lower clock (bench/README.md);
    each round starts one contender later, which alone keeps every
    contender behind the same one, so every other round also runs
    backwards: a contender's predecessor alternates between its two
    neighbours."""
    shift = r % len(order)
    turned = order[shift:] + order[:shift]
    return turned[::-1] if r % 2 else turned


def make_timer(args, device):
    if device == "cpu":  # --cpu-dry-run only: checks the plumbing, numbers mean little
        def cpu_time(fn):
            fn()
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(ts)
        return cpu_time, "perf_counter median of 3 (CPU dry run)"

    from triton.testing import do_bench
    params = inspect.signature(do_bench).parameters
    if "return_mode" in params:
        def t(fn):
            return float(do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median"))
        how = "median"
    else:
        def t(fn):
            r = do_bench(fn, warmup=args.warmup, rep=args.rep, quantiles=[0.5])
            return float(r[0] if isinstance(r, (list, tuple)) else r)
        how = "quantiles=[0.5]"
    return t, (f"triton.testing.do_bench(warmup={args.warmup}, rep={args.rep}, {how}), "
               f"median of {args.rounds} rounds taken in turns (round_order: each round starting one contender "
               f"later, every other one backwards)")

"""What every benchmark script shares: the run's identity (commit, csrc
tree), the host's speed, Inductor's compile workers, and the timer that
has contenders take turns call by call."""

import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # the package, also when built in place without pip install
    sys.path.insert(0, REPO)


def _git(*args):
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    s = out.stdout.strip()
    return s if out.returncode == 0 and s else None


def source_ids():
    """(commit, csrc_tree, where from, dirty): GEMM_ACT_COMMIT / GEMM_ACT_CSRC_TREE
    when set (a copied tree may carry a stale .git), else git if this is a checkout."""
    if os.environ.get("GEMM_ACT_COMMIT"):
        ids = os.environ["GEMM_ACT_COMMIT"], os.environ.get("GEMM_ACT_CSRC_TREE", "")
        # Whole object ids: a short one cannot be matched to the tree it measured once history grows.
        for name, value in zip(("GEMM_ACT_COMMIT", "GEMM_ACT_CSRC_TREE"), ids):
            if not re.fullmatch(r"[0-9a-f]{40}", value):
                raise ValueError(f"{name} must be a full 40-digit git object id "
                                 f"(git rev-parse HEAD / HEAD:csrc), got {value!r}")
        return ids[0], ids[1], "env", None
    top = _git("rev-parse", "--show-toplevel")
    # A copy of the working tree without .git must not pick up a parent repository.
    if top and os.path.realpath(top) == os.path.realpath(REPO):
        commit, tree = _git("rev-parse", "HEAD"), _git("rev-parse", "HEAD:csrc")
        if commit:
            dirty = _git("status", "--porcelain", "--", "csrc", "torch_gemm_act", "setup.py")
            return commit, tree or "unknown", "git", bool(dirty)
    return "unknown", "unknown", "none", None


def compile_in_process():
    """Inductor compiles in this process from now on. Its pool of compile
    workers starts with the first compilation and again with any after a
    minute idle (quiesced); the workers' start competes for the host's
    cores while the contenders after it are timed, and a host-bound one
    reads that as its own time (not measured apart: the compiled GPT-2
    rows were level with compile fusion's once it was gone). The code
    Inductor generates is the same."""
    import torch
    torch._inductor.config.compile_threads = 1


def host_launch_us(device, calls=500):
    """This host's speed at what host-bound rows spend their time on: the
    median host us per launch of a one-element in-place add, the GPU held
    by a spin kernel meanwhile (so no call waits on it, and `calls` stay
    well below the launch queue's depth, beyond which the host would wait
    for the GPU); None on the CPU.
    Host-bound rows of two runs compare only beside it: the same code read
    0.336 and 0.631 ms a step on two hosts (bench/README.md)."""
    import torch
    if device != "cuda":
        return None
    x = torch.zeros(1, device="cuda")
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)
        t0 = time.perf_counter()
        for _ in range(calls):
            x.add_(1)
        times.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(times), 2)


def time_in_turns(fns, args, device, seed=0, errors=None):
    """name -> (median ms per call, interquartile range / median): the
    contenders take turns call by call, in a fresh random order each turn,
    the L2 cache flushed before each call and every call timed by its own
    pair of CUDA events, for about args.rounds * args.rep ms each after
    args.warmup ms each of warm-up in turns. With ``errors`` (a dict), a
    contender whose call raises is recorded there (name -> the exception)
    and left out from then on; without, the exception propagates.

    Why turns of one call rather than do_bench's runs of ~100 ms one
    contender after another: on the lent hosts a model step's time drifts
    in episodes of about that length, and a run falls in or out of them
    whole (two identical models read far apart); in turns of one call each
    episode costs all contenders alike (docs/MEASUREMENTS.md, "Timing")."""
    import random

    import torch

    names = [n for n in fns if errors is None or n not in errors]

    def call(n):
        """fns[n](); False where it raised and errors takes the exception."""
        try:
            fns[n]()
            return True
        except Exception as e:  # noqa: BLE001
            if errors is None:
                raise
            errors[n] = e
            names.remove(n)
            if device == "cuda":
                torch.cuda.empty_cache()
            return False

    if device == "cpu":  # --cpu-dry-run only: checks the plumbing
        times = {n: [] for n in names}
        for _ in range(3):
            for n in list(names):
                t0 = time.perf_counter()
                if call(n):
                    times[n].append((time.perf_counter() - t0) * 1e3)
        return {n: (statistics.median(times[n]), 0.0) for n in names}

    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for n in list(names):
        call(n)
    torch.cuda.synchronize()
    if not names:
        return {}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        for n in list(names):
            cache.zero_()
            call(n)
    end.record()
    torch.cuda.synchronize()
    per_call = max(start.elapsed_time(end) / (3 * len(names)), 1e-3)
    warmup = max(1, int(args.warmup / per_call))
    calls = max(4, int(args.rounds * args.rep / per_call))
    for _ in range(warmup):
        for n in list(names):
            call(n)
    events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(calls)] for n in names}
    rng = random.Random(seed)
    for i in range(calls):
        turn = list(names)
        rng.shuffle(turn)
        for n in turn:
            cache.zero_()
            s, e = events[n][i]
            s.record()
            if call(n):
                e.record()
    torch.cuda.synchronize()
    out = {}
    for n in names:
        q1, q2, q3 = statistics.quantiles([s.elapsed_time(e) for s, e in events[n]], n=4)
        out[n] = (q2, (q3 - q1) / q2)
    return out


TURNS_DESC = ("median of each contender's calls, timed call by call by CUDA events with the L2 cache flushed "
              "before each, the contenders taking turns in a fresh random order each turn (time_in_turns)")

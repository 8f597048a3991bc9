"""The differential fuzz: every road through the package against float64,
with PyTorch's own error for the same computation in the same dtype as the
bar.

A case is drawn from one integer (its seed): the shapes, layouts, storage
offsets, dtype, activation, bias, C, alpha, beta, which inputs require a
gradient, autocast and TF32, and then its data. It runs three times:
ours (the road under test), PyTorch's own unfused composite in the same
dtype, and that composite in float64 on the same device (the reference).
Each output and each gradient fails when its error, max |got - ref| over
max |ref|, exceeds max(3 x PyTorch's error, FLOOR[dtype]). In the same run:
no input and no incoming gradient is modified, no output aliases an input,
a second identical call is bitwise identical, and where an input holds NaN
or Inf the outputs are non-finite exactly where PyTorch's are.

A relu-family derivative at an element whose pre-activation is within
rounding of 0 may go either way (a tie): the reference takes there the side
the road under test took (from its output), and PyTorch's error is measured
with its own side.

A case that fails is drawn again with fresh data REDRAWS times; the failure
is confirmed (FAIL) when at least CONFIRM redraws fail too, and reported
apart (UNCONFIRMED) otherwise.

Over a run, the median of our error over PyTorch's per precision and output
is reported where it is PRECISION_RATIO or more (a PRECISION line, not a
failure): an extra rounding passes each case's bar and shows only there.

Command line (each failure prints one line that replays it):
    python tests/fuzz.py --route gemm_act --backend rule sm90 --cases 10000
    python tests/fuzz.py --route linear_module --replay 123456789
Routes: see ROUTES; backends: rule, sm90, sm80, library, simt (CUDA, the
testing switch), tuned (the rule with a tuned choice drawn for each of the
case's problems) and cpu. Prints `fuzz <name>: <N> cases, <F> failed` per
route and backend.
"""

import argparse
import dataclasses
import os
import random
import sys
import time

import torch

from torch_gemm_act import testing

import fuzz_check

from fuzz_cases import BACKENDS, CUDA_BACKENDS, ROUTES, draw  # noqa: F401  (CUDA_BACKENDS: test_fuzz's)
from fuzz_trials import Data, _amp, _fused_everywhere, _settings, build_gemm_act  # noqa: F401  (test_fuzz's)
from fuzz_check import (CONFIRM, REDRAWS, Failure, _backend_context, _fails, draw_tuned_choices, replay_line,
                        run_case)


def run(route, backend, cases, seed, log=print, time_limit=None, stop_after=None, determinism_every=4,
        precision=None):
    """Runs `cases` cases of one route on one backend; returns (ran,
    failures, unconfirmed): the cases whose failure their redraws confirmed,
    and those whose redraws did not. Each passing case's errors go to
    `precision` (a Precision) where one is given."""
    device = "cpu" if backend == "cpu" else "cuda"
    rng = random.Random(f"{seed}:{route}:{backend}")
    failures, unconfirmed = [], []
    start = time.time()
    ran = 0
    with testing.override(poison_outputs=True), _backend_context(backend):
        for i in range(cases):
            if time_limit is not None and time.time() - start > time_limit:
                break
            case_seed = rng.getrandbits(48)
            case = draw(route, case_seed, device)
            try:
                if backend == "tuned":
                    draw_tuned_choices(case)
                errors = run_case(case, determinism=i % determinism_every == 0)
                what = None
                if precision is not None:
                    precision.add(case, errors)
            except Failure as f:
                what = f"{f} :: {_explain(case)}"
            except Exception as e:  # noqa: BLE001 - an unexpected error is a failure too, with its replay line
                what = f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ran += 1
            if what is None:
                continue
            redrawn = sum(_fails(dataclasses.replace(case, draw=d)) for d in range(1, REDRAWS + 1))
            confirmed = redrawn >= CONFIRM
            (failures if confirmed else unconfirmed).append(case)
            log(f"{'FAIL' if confirmed else 'UNCONFIRMED'} fuzz {route}[{backend}] {case.describe()} :: {what} :: "
                f"{redrawn} of {REDRAWS} redraws failed :: replay: {replay_line(case, backend)}")
            if stop_after is not None and len(failures) >= stop_after:
                break
    return ran, failures, unconfirmed


def _explain(case):
    if case.route != "gemm_act":
        return ""
    try:
        data = Data(case.data_seed, case.device)
        trial = build_gemm_act(case, data)
        with _settings(case.p, case.device), _amp(case.p, case.device):
            return trial.explain()
    except Exception as e:  # noqa: BLE001
        return f"(explain raised {type(e).__name__})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", nargs="+", default=["gemm_act"], choices=sorted(ROUTES) + ["all"])
    parser.add_argument("--backend", nargs="+", default=None, choices=BACKENDS)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one, printed")
    parser.add_argument("--replay", type=int, nargs="+", default=None, help="cases' seeds, from FAIL lines")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per route and backend")
    parser.add_argument("--verbose", action="store_true", help="with --replay: where each error is worst")
    args = parser.parse_args(argv)
    fuzz_check.VERBOSE = args.verbose
    routes = sorted(ROUTES) if "all" in args.route else args.route
    backends = args.backend or (["rule"] if torch.cuda.is_available() else ["cpu"])
    if args.replay is not None:
        failed = 0
        for route in routes:
            for backend in backends:
                device = "cpu" if backend == "cpu" else "cuda"
                for case_seed in args.replay:
                    case = draw(route, case_seed, device)
                    print(f"{route}[{backend}] {case.seed}: {case.describe()} :: {_explain(case)}")
                    with testing.override(poison_outputs=True), _backend_context(backend):
                        try:
                            if backend == "tuned":
                                draw_tuned_choices(case)
                            run_case(case)
                            print("passed")
                        except Failure as f:
                            print(f"FAIL: {f}")
                            failed += 1
        return 1 if failed else 0
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"fuzz seed {seed}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}", flush=True)
    total_failed = 0
    for route in routes:
        for backend in backends:
            start = time.time()
            precision = fuzz_check.Precision()
            ran, failures, unconfirmed = run(route, backend, args.cases, seed, log=lambda s: print(s, flush=True),
                                             time_limit=args.time_limit, precision=precision)
            name = route if backend == "rule" and route != "gemm_act" else f"{route}[{backend}]"
            for (label, output), (ratio, n) in sorted(precision.medians(PRECISION_CASES).items()):
                if ratio >= PRECISION_RATIO:
                    print(f"PRECISION fuzz {name} {label} {output}: our error {ratio:.2f} x PyTorch's, the median "
                          f"of {n} passing cases", flush=True)
            print(f"fuzz {name}: {ran} cases, {len(failures)} failed, {len(unconfirmed)} unconfirmed "
                  f"({time.time() - start:.0f} s)", flush=True)
            total_failed += len(failures)
    return 1 if total_failed else 0


# A run reports (without failing) each precision and output whose error is,
# over at least PRECISION_CASES passing cases, a median PRECISION_RATIO x
# PyTorch's or more (fuzz_check.Precision): a road that rounds once more than
# PyTorch's passes each case's bar and shows only there.
PRECISION_RATIO, PRECISION_CASES = 1.25, 30


if __name__ == "__main__":
    sys.exit(main())

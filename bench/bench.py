#!/usr/bin/env python3
"""Side-by-side benchmark: torch_gemm_act against cuBLAS and PyTorch, in one run.

    python bench/bench.py [--quick] [--out DIR] [--shapes PATH] [--max-autotune]

For every shape of shapes.json (A [M, K], weight [N, K], B = weight.t(),
bias [N]; activation from the row, default gelu; dtype from the row) and mode
it times, in turns call by call (time_in_turns: each contender's median, the
L2 cache flushed before each call):

  torch_mm          torch.mm(a, w.t()) alone: the bare cuBLAS GEMM, the reference
                    (forward_backward: the three GEMMs of a linear's fwd + bwd)
  eager             act(F.linear(a, w, bias))
  addmm_activation  torch._addmm_activation(bias, a, w.t(), use_gelu=...): cuBLASLt's
                    fused epilogue; only where it computes exactly the row's
                    activation (see ADDMM NOTE below); inference only
  compile           torch.compile(eager code), default mode, dynamic=False per shape
  gemm_act          torch_gemm_act.linear_act(a, w, bias, activation)
  gemm_act:<name>   the same with one CUDA backend forced (--forced; default
                    sm80 and library, where the build has them)

Modes: inference (torch.no_grad), forward (a, w, bias require grad: the training
forward, which for gemm_act also writes Z when the backward needs it) and
forward_backward (forward + torch.autograd.grad with a fixed random gY). The
"inference" and "sm80" groups run only inference, "cublaslt" inference and
forward, the others all three (--quick: no forward_backward). Last it lists
the rows where gemm_act, and gemm_act with the library backend forced, took
longer than eager. Before timing, each contender's output (and in
forward_backward its gradients) is checked against eager; a contender outside
the dtype's tolerance is reported as WRONG and its time is kept out of "ms".

Writes <UTC time>_<short commit>.json and a .png beside it to bench/results/
(or --out DIR) and prints a table last. Without a CUDA GPU: prints a message
and exits 0. `python bench/summarize.py RESULTS.json --plot` redraws the plot
and prints a markdown table on any machine.

ADDMM NOTE: see op_contenders.probe_addmm_gelu.
"""

import argparse
import datetime
import gc
import json
import math
import os
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)   # summarize.py: the table and the plot live there
sys.path.insert(0, REPO)   # the package, also when built in place without pip install

import summarize  # noqa: E402
from op_contenders import (  # noqa: E402  (tolerances, eager's code, the addmm probe)
    KINK_GRAD_TOLERANCE, TOLERANCE, _short_err, default_shapes_path, load_shapes, make_eager, modes_for, probe_addmm_gelu, rel_err)
from harness import TURNS_DESC, compile_in_process, host_launch_us, source_ids, time_in_turns  # noqa: E402,F401

CONTENDERS = summarize.CONTENDERS
MODES = summarize.MODES


def _finite_or_str(x):
    """Keep the JSON strict: a NaN/inf error is stored as the string "inf"."""
    return x if math.isfinite(x) else "inf"


# --------------------------------------------------------------------------- one shape

def bench_shape(group, spec, modes, ctx):
    import torch
    import torch_gemm_act as tga

    dev, args = ctx["device"], ctx["args"]
    M, K, N = int(spec["M"]), int(spec["K"]), int(spec["N"])
    act = spec.get("activation", "gelu")
    dtype_name = spec.get("dtype", "bfloat16")
    dtype = getattr(torch, dtype_name)

    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    if dtype == torch.float32 and "tf32" in spec:
        # Same setting for every contender (cuBLAS, compile and gemm_act all read it).
        torch.backends.cuda.matmul.allow_tf32 = bool(spec["tf32"])
    tf32 = bool(torch.backends.cuda.matmul.allow_tf32) if dtype == torch.float32 else None
    tol = TOLERANCE["float32+tf32" if tf32 else dtype_name]
    kinked = act in ("relu", "leaky_relu") and dtype_name in ("float16", "bfloat16")
    grad_tol = KINK_GRAD_TOLERANCE if kinked else tol

    gated = act in tga.GATED
    rows = []
    try:
        g = torch.Generator(device=dev).manual_seed(zlib.crc32(f"{M},{K},{N},{dtype_name},{act}".encode()))
        # Fresh random inputs, scaled so Z = A W^T + b is O(1) (the activation's
        # interesting range); never zeros.
        a = torch.randn(M, K, device=dev, dtype=dtype, generator=g)
        w = torch.randn(N, K, device=dev, dtype=dtype, generator=g).mul_(K ** -0.5)
        bias = torch.randn(N, device=dev, dtype=dtype, generator=g).mul_(0.5)
        # A gated row's contenders take the up projection's weight where the
        # others take the bias.
        third = torch.randn(N, K, device=dev, dtype=dtype, generator=g).mul_(K ** -0.5) if gated else bias
        gY = (torch.randn(M, N, device=dev, dtype=dtype, generator=g)
              if "forward_backward" in modes else None)
        eager = make_eager(act)

        compiled = None
        if not args.no_compile:
            # One compiled function per shape, static shapes: reset dynamo so its
            # cache for this code object holds only this shape's entries (no_grad
            # and grad), far below the recompile limit, and guards stay cheap.
            torch.compiler.reset()
            compiled = torch.compile(eager, dynamic=False, mode=ctx["compile_mode"])

        # The cuBLASLt fused epilogue, only where it computes exactly this activation.
        addmm = None
        if gated:
            pass
        elif act == "relu":
            addmm = ("torch._addmm_activation(use_gelu=False)",
                     lambda: torch._addmm_activation(bias, a, w.t(), use_gelu=False))
        elif act in ("gelu", "gelu_tanh"):
            kind = ctx["addmm_gelu"].get(dtype_name)
            if kind is None:
                kind = ctx["addmm_gelu"][dtype_name] = probe_addmm_gelu(dtype, dev)
            if (act, kind) in (("gelu", "erf"), ("gelu_tanh", "tanh")):
                addmm = ("torch._addmm_activation(use_gelu=True)",
                         lambda: torch._addmm_activation(bias, a, w.t(), use_gelu=True))
            elif act == "gelu" and kind == "tanh" and args.addmm_tanh_for_gelu:
                # Opt-in: a different function (tanh GELU standing in for erf GELU),
                # timed for its speed only; the row records that.
                addmm = ("torch._addmm_activation(use_gelu=True) [tanh GELU, not erf: speed reference only]",
                         lambda: torch._addmm_activation(bias, a, w.t(), use_gelu=True))
        elif act == "none":
            addmm = ("torch.addmm", lambda: torch.addmm(bias, a, w.t()))

        for mode in modes:
            row = {"group": group, "M": M, "K": K, "N": N, "dtype": dtype_name, "activation": act,
                   "mode": mode, "ms": {}}
            if tf32 is not None:
                row["tf32"] = tf32
                row["float32_matmul_precision"] = torch.get_float32_matmul_precision()
            row["tol"] = tol
            if grad_tol != tol:
                row["grad_tol"] = grad_tol
            errors, unverified, errs = {}, {}, {}

            # ---- contenders of this mode: name -> zero-argument callable; in
            # forward_backward the callables return (y, dA, dW, dbias)
            fns = {}
            weights = (w, third) if gated else (w,)  # the GEMMs eager runs, once per weight
            if mode == "forward_backward":
                def mm3():
                    with torch.no_grad():
                        return tuple(t for v in weights
                                     for t in (torch.mm(a, v.t()), torch.mm(gY, v), torch.mm(gY.t(), a)))
                fns["torch_mm"] = mm3
            else:
                def mm1():
                    with torch.no_grad():
                        return tuple(torch.mm(a, v.t()) for v in weights)
                fns["torch_mm"] = mm1

            if mode == "inference":
                grad_ctx = torch.no_grad
                ins = (a, w, third)
            else:
                grad_ctx = torch.enable_grad
                ins = tuple(t.detach().requires_grad_(True) for t in (a, w, third))

            def gemm_act_fwd(x, wt, b):
                if gated:
                    return tga.gated_linear_act(x, wt, b, activation=act)
                return tga.linear_act(x, wt, b, activation=act)

            fwd = {"eager": eager, "gemm_act": gemm_act_fwd}
            if compiled is not None:
                fwd["compile"] = compiled
            # A gated row forced: sm90 or sm80 runs its fused kernel at any
            # rows, the library the composite (two GEMMs and a pass).
            for backend in ctx["forced"] + list(spec.get("forced", ())):
                if backend not in ctx["backends"]:
                    continue

                def forced(x, wt, b, backend=backend):
                    # The switch set directly: override()'s checks would add host time.
                    before = tga.testing._C.testing_overrides()
                    tga.testing._C.set_testing_overrides(backend, *before[1:])
                    try:
                        return gemm_act_fwd(x, wt, b)
                    finally:
                        tga.testing._C.set_testing_overrides(*before)
                fwd[summarize.FORCED[backend]] = forced

            for name, f in fwd.items():
                if mode == "forward_backward":
                    def run(f=f):
                        y = f(*ins)
                        return (y,) + tuple(torch.autograd.grad(y, ins, gY))
                else:
                    def run(f=f):
                        return f(*ins)
                fns[name] = run
            if mode == "inference" and addmm is not None:
                fns["addmm_activation"] = addmm[1]
                row["addmm_activation_fn"] = addmm[0]

            order = [c for c in CONTENDERS if c in fns]

            with grad_ctx():
                # ---- correctness first, against eager in the same mode
                ref = None
                try:
                    ref = fns["eager"]()
                    ref = ref if isinstance(ref, tuple) else (ref,)
                except Exception as e:  # noqa: BLE001
                    errors["eager"] = _short_err(e)
                for name in order:
                    if name in ("torch_mm", "eager"):
                        continue
                    try:
                        t0 = time.perf_counter()
                        out = fns[name]()
                        if dev == "cuda":
                            torch.cuda.synchronize()
                        if name == "compile":
                            row["compile_s"] = round(time.perf_counter() - t0, 2)
                        out = out if isinstance(out, tuple) else (out,)
                        if ref is not None:
                            parts = [rel_err(o, r) for o, r in zip(out, ref)]
                            if name == "gemm_act" and len(parts) == 4:
                                names = ("y", "a", "gate_weight", "up_weight") if gated else ("y", "a", "weight", "bias")
                                row["grad_rel_err"] = dict(zip(names, parts))
                            # Gradients are judged by grad_tol, expressed in units of tol.
                            errs[name] = max([parts[0]] + [p_ * tol / grad_tol for p_ in parts[1:]])
                        del out
                    except Exception as e:  # noqa: BLE001
                        errors[name] = _short_err(e)
                del ref

                # ---- timings: the contenders take turns call by call
                # (time_in_turns), so a clock or host that drifts over the
                # run (power, heat) costs them all alike.
                failed = {}
                timed = time_in_turns({n: fns[n] for n in order if n not in errors}, args, dev, errors=failed)
                errors.update({name: _short_err(e) for name, e in failed.items()})
                for name in order:
                    if name in errors:
                        continue
                    ms = timed[name][0]
                    if name in errs and not errs[name] <= tol:
                        unverified[name] = ms   # wrong results don't get to look fast
                    else:
                        row["ms"][name] = ms

            if "gemm_act" in errs:
                row["max_rel_err"] = _finite_or_str(errs["gemm_act"])
                row["correct"] = bool(errs["gemm_act"] <= tol)
            if "grad_rel_err" in row:
                row["grad_rel_err"] = {k: _finite_or_str(v) for k, v in row["grad_rel_err"].items()}
            others = {k: _finite_or_str(v) for k, v in errs.items() if k != "gemm_act"}
            if others:
                row["max_rel_err_others"] = others
            if unverified:
                row["ms_unverified"] = unverified
            if errors:
                row["errors"] = errors
            rows.append(row)
            _progress(row)
            del fns, ins
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return rows


def _progress(row):
    ms = row["ms"]
    parts = [f"{c}={ms[c]:.3f}" for c in CONTENDERS if c in ms]
    extra = ""
    if "max_rel_err" in row:
        e = row["max_rel_err"]
        extra += f" err={e:.1e}" if isinstance(e, float) else f" err={e}"
        extra += "" if row.get("correct") else " WRONG"
    if "ms_unverified" in row:
        extra += f" unverified={sorted(row['ms_unverified'])}"
    if "errors" in row:
        extra += f" errors={row['errors']}"
    if "compile_s" in row:
        extra += f" compile={row['compile_s']}s"
    print(f"  {summarize.shape_label(row):<17} {summarize.dtype_label(row):<9} {row['activation']:<10} "
          f"{row['mode']:<16} ms: " + " ".join(parts) + extra, flush=True)


# --------------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description="torch_gemm_act benchmark (see the module docstring)")
    p.add_argument("--quick", action="store_true", help="inference + forward only (no forward_backward)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="directory for the JSON and PNG")
    p.add_argument("--shapes", default=None,
                   help="shapes JSON (default: ../shared/shapes.json from the repo root, else bench/shapes.json)")
    p.add_argument("--max-autotune", action="store_true",
                   help="compile with mode='max-autotune-no-cudagraphs' (slow to compile; "
                        "no CUDA graphs, so every contender is measured the same way)")
    p.add_argument("--addmm-tanh-for-gelu", action="store_true",
                   help="also time torch._addmm_activation(use_gelu=True) in 'gelu' (erf) rows although "
                        "on CUDA it computes the tanh GELU (marked in the row's addmm_activation_fn)")
    p.add_argument("--no-compile", action="store_true", help="leave the torch.compile contender out")
    p.add_argument("--forced", nargs="*", default=["sm80", "library"], choices=sorted(summarize.FORCED),
                   help="CUDA backends also timed forced, each as its own gemm_act:<backend> column "
                        "(where the build has them; a row of shapes.json may add more with \"forced\")")
    p.add_argument("--groups", nargs="+", default=None, help="only these groups of shapes.json")
    p.add_argument("--modes", nargs="+", choices=MODES, default=None, help="only these modes")
    p.add_argument("--warmup", type=int, default=25, help="warm-up per contender, ms")
    p.add_argument("--rep", type=int, default=40, help="see --rounds")
    p.add_argument("--rounds", type=int, default=5,
                   help="each contender is timed for about rounds x rep ms, in turns with the others")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="for testing this script only: run on the CPU (give a tiny --shapes file)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    if args.cpu_dry_run:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("bench.py: no CUDA GPU available (torch.cuda.is_available() is False); "
              "nothing to benchmark. Exiting without running.")
        return 0

    shapes_path = args.shapes or default_shapes_path()
    groups = load_shapes(shapes_path)
    if args.groups:
        missing = set(args.groups) - set(groups)
        if missing:
            raise SystemExit(f"no such group(s) in {shapes_path}: {sorted(missing)}; have {sorted(groups)}")
        groups = {k: v for k, v in groups.items() if k in args.groups}

    import torch_gemm_act  # noqa: F401  - fail early, before any timing, if it isn't built

    if device == "cuda":
        import triton
        triton_version = triton.__version__
        device_name = torch.cuda.get_device_name()
    else:
        triton_version = None
        device_name = "cpu (dry run)"
    timer_desc = TURNS_DESC + f", about {args.rounds} x {args.rep} ms each (warm-up {args.warmup} ms)"
    compile_mode = "max-autotune-no-cudagraphs" if args.max_autotune else None
    commit, csrc_tree, ids_from, dirty = source_ids()

    stamp = datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"{stamp.strftime('%Y%m%dT%H%M%SZ')}_{commit[:7] if commit else 'unknown'}")
    json_path, png_path = base + ".json", base + ".png"

    import torch_gemm_act as tga
    ctx = {"device": device, "args": args, "compile_mode": compile_mode, "addmm_gelu": {},
           "backends": tga.testing.cuda_backends() if device == "cuda" else (), "forced": list(args.forced)}
    results = {
        "commit": commit,
        "csrc_tree": csrc_tree,
        "device": device_name,
        "torch": torch.__version__,
        "rows": [],
        "meta": {
            "created_utc": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "complete": False,
            "ids_from": ids_from,
            "source_dirty": dirty,
            "cuda": torch.version.cuda,
            "triton": triton_version,
            "timer": timer_desc,
            "compile_mode": compile_mode or "default",
            "host_launch_us": host_launch_us(device),
            "quick": args.quick,
            "addmm_tanh_for_gelu": args.addmm_tanh_for_gelu,
            "shapes": os.path.relpath(shapes_path, REPO),
            "addmm_activation_gelu": ctx["addmm_gelu"],
            "notes": [
                "ms: median over runs with the L2 cache flushed before each run.",
                "torch_mm: torch.mm(a, w.t()) alone; in forward_backward the three GEMMs of a "
                "linear's forward and backward (Y = A W^T, dA = gY W, dW = gY^T A).",
                "addmm_activation: torch._addmm_activation(bias, a, w.t(), use_gelu) only where it "
                "computes the row's activation exactly (on CUDA use_gelu=True is the tanh GELU, so "
                "not in 'gelu' (erf) rows; see meta.addmm_activation_gelu); torch.addmm for 'none'; "
                "inference mode only.",
                "compile: torch.compile(eager, dynamic=False" +
                (", mode='max-autotune-no-cudagraphs')" if compile_mode else ") in default mode") +
                "; its first-call time is compile_s.",
                "max_rel_err: gemm_act vs eager in the same mode, max|diff| / max|eager| over Y "
                "(and dA, dW, dbias in forward_backward); rows beyond tol list the time in "
                "ms_unverified instead of ms.",
            ],
        },
    }

    def save():
        tmp = json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1, allow_nan=False)
        os.replace(tmp, json_path)

    print(f"device: {device_name} · torch {torch.__version__} · triton {triton_version} · "
          f"commit {commit} ({ids_from}) · csrc {csrc_tree}", flush=True)
    print(f"shapes: {shapes_path} · timer: {timer_desc} · compile: "
          f"{'off' if args.no_compile else compile_mode or 'default'} · host us per launch: "
          f"{results['meta']['host_launch_us']}", flush=True)
    if not args.no_compile:
        compile_in_process()
    t_start = time.perf_counter()
    for group, specs in groups.items():
        print(f"[{group}]", flush=True)
        for spec in specs:
            modes = modes_for(group, spec, args)
            if not modes:
                continue
            try:
                results["rows"].extend(bench_shape(group, spec, modes, ctx))
            except Exception as e:  # noqa: BLE001 - e.g. OOM making inputs; keep going
                print(f"  {spec}: skipped, {_short_err(e)}", flush=True)
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
            save()  # partial results survive a run that gets cut off
    if not args.no_compile:
        torch.compiler.reset()

    results["meta"]["complete"] = True
    results["meta"]["wall_s"] = round(time.perf_counter() - t_start, 1)
    save()
    print(f"\nresults: {json_path}")
    if summarize.plot(results, png_path):
        print(f"plot:    {png_path}")
    print(f"wall time: {results['meta']['wall_s']} s\n")

    wrong = [r for r in results["rows"] if r.get("correct") is False]
    failed = [r for r in results["rows"] if "gemm_act" in r.get("errors", {})]
    if wrong or failed:
        print(f"FAILED: {len(wrong)} row(s) with gemm_act beyond tolerance (WRONG), "
              f"{len(failed)} with gemm_act errors\n")
    print(summarize.text_table(results))
    for contender in ("gemm_act", "gemm_act:library"):
        slower = summarize.slower_than_eager(results, contender)
        print(f"\n{contender} slower than eager in {len(slower)} row(s)" + (":" if slower else ""))
        print("\n".join(slower)) if slower else None
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())

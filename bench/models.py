#!/usr/bin/env python3
"""Model-level benchmark: MLP stacks as people write them (nn.Linear,
activation module, nn.Linear, in nn.Sequential) and whole models as their
libraries build them (bench/whole.py: GPT-2, a Llama-style 1B, BERT-base,
ViT-L/16; `whole_*` cases), eager against the same model fused with
torch_gemm_act.fuse_linear_act, side by side in one run.

    python bench/models.py [--out DIR] [--cases NAME ...] [--modes inference training]
                           [--no-compile | --compiled-only] [--tuned] [--cpu-dry-run [--dry-run-compile]]

For each case, mode (inference: a no_grad forward; training: forward and
backward, with a fixed random output gradient for a stack, the library's
own loss for a whole model) and compilation (eager mode, torch.compile), it
times the eager and the fused model (harness.time_in_turns: the median of
each one's calls, taken in turns call by call), the peers where one applies
(whole.peers), and, compiled, the eager model compiled unchanged with
torch_gemm_act.enable_compile_fusion(lm_loss=True) on (`compile_fusion`; a causal LM
with its loss fused too, whole.fuse_loss), and with --tuned the fused model
under torch_gemm_act.tune's choices (`tuned`); records the
peak memory of one step of each; and checks the outputs (and in training
the input's or the embedding's gradient): a stack's against eager's, a
whole model's against an fp32 copy, beside eager's own error. Writes
<UTC time>_<short commit>_models.json (after every row) and a .png to
bench/results/ (or --out), recording the commit, csrc tree and device, and
prints a table.
"""

import argparse
import contextlib
import copy
import datetime
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402  (source ids, the timer, the repository on sys.path)
import lm_head  # noqa: E402  (the linear_ce_* cases)
import whole  # noqa: E402  (the whole_* cases)
from compiled import contenders, first_call, generated_code  # noqa: E402
from op_contenders import rel_err, rms_rel_err  # noqa: E402

# name: (blocks, tokens, d_model, d_hidden, activation module name, dtype)
CASES = {
    "gpt2_small_mlp": (12, 8192, 768, 3072, "gelu_tanh", "bfloat16"),
    "vit_l_mlp": (8, 12608, 1024, 4096, "gelu", "bfloat16"),
    "llm_relu_mlp_fp16": (2, 4096, 4096, 11008, "relu", "float16"),
    "small_mlp_fp32": (6, 512, 256, 1024, "relu", "float32"),
    # Llama-7B's MLP as transformers writes it: down(silu(gate(x)) * up(x)), no biases.
    "llama_swiglu_mlp": (2, 4096, 4096, 11008, "swiglu", "bfloat16"),
    # timm's GluMlp as SwiGLUPacked configures it (both projections one Linear
    # with biases, split by chunk), at a ViT-L width and a hidden size of 8/3.
    "timm_glu_packed_mlp": (4, 12608, 1024, 2816, "swiglu_packed", "bfloat16"),
}
# Normwise tolerance of the fused model against eager (max |diff| / max |eager|).
# A row whose error exceeds it is still correct where the fused model is
# within twice eager's own error from a float64 run of the same model: the
# fp16 LLM case's input gradient is 3.8e-2 from float64 in eager itself, so
# two correct fp16 computations that round differently differ by about that.
TOLERANCE = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 1e-4}


def gated_mlp(d_model, d_hidden):
    """A Llama-style MLP block (transformers' LlamaMLP, written out)."""
    from torch import nn

    class GatedMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(d_model, d_hidden, bias=False)
            self.up_proj = nn.Linear(d_model, d_hidden, bias=False)
            self.down_proj = nn.Linear(d_hidden, d_model, bias=False)
            self.act_fn = nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
    return GatedMLP()


def packed_glu_mlp(d_model, d_hidden):
    """timm's GluMlp with SwiGLUPacked's settings (gate first), written out."""
    from torch import nn

    class PackedGluMlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(d_model, 2 * d_hidden)
            self.act = nn.SiLU()
            self.fc2 = nn.Linear(d_hidden, d_model)

        def forward(self, x):
            x1, x2 = self.fc1(x).chunk(2, dim=-1)
            return self.fc2(self.act(x1) * x2)
    return PackedGluMlp()


def activation_module(name):
    from torch import nn
    return {"gelu_tanh": lambda: nn.GELU(approximate="tanh"), "gelu": nn.GELU, "relu": nn.ReLU}[name]()


def build(case, device, dry_run):
    """(eager model, fused copy, input, output gradient) of a case."""
    import torch
    from torch import nn

    import torch_gemm_act

    blocks, tokens, d_model, d_hidden, act, dtype_name = CASES[case]
    if dry_run:  # the plumbing only
        blocks, tokens, d_model, d_hidden = 2, 16, 32, 64
    dtype = getattr(torch, dtype_name)
    layers = []
    for _ in range(blocks):
        if act == "swiglu":
            layers.append(gated_mlp(d_model, d_hidden))
        elif act == "swiglu_packed":
            layers.append(packed_glu_mlp(d_model, d_hidden))
        else:
            layers += [nn.Linear(d_model, d_hidden), activation_module(act), nn.Linear(d_hidden, d_model)]
    eager = nn.Sequential(*layers).to(device=device, dtype=dtype)
    fused = torch_gemm_act.fuse_linear_act(copy.deepcopy(eager))
    x = torch.randn(tokens, d_model, device=device, dtype=dtype)
    gy = torch.randn(tokens, d_model, device=device, dtype=dtype)
    return eager, fused, x, gy


def step_fn(model, x, gy, mode):
    import torch

    if mode == "inference":
        def run():
            with torch.no_grad():
                return (model(x),)
        return run
    xg = x.detach().requires_grad_(True)

    def run():
        y = model(xg)
        y.backward(gy)
        grad = xg.grad
        xg.grad = None
        for p in model.parameters():
            p.grad = None
        return y.detach(), grad
    return run


def peak_bytes(fn, device):
    import torch

    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def measure(case, mode, compiled, ctx):
    import torch

    args, device = ctx["args"], ctx["device"]
    row = {"case": case, "mode": mode, "compiled": compiled, "ms": {}, "peak_bytes": {}}
    peers = {}
    if case in lm_head.LINEAR_CE:
        built = lm_head.build(case, device, args.cpu_dry_run,
                              compiled=not args.cpu_dry_run or args.dry_run_compile)
        row.update(dtype="bfloat16", peers_missing=built.missing)
        fns = built.fns
        peers = {name: None for name in fns if name in ("cce", "liger")}
        ref = lm_head.reference(built)
    elif case in whole.WHOLE:
        built = whole.build(case, device, args.cpu_dry_run)
        eager = built.model
        fused = whole.fuse(case, copy.deepcopy(eager))
        peers, row["peers_missing"] = whole.peers(case, eager)
        row.update(dtype=whole.WHOLE[case][3], autocast=built.autocast)
        models = contenders(eager, fused, compiled, args.control, peers, in_process=False,
                            compile_fusion=whole.fuse_loss(case, copy.deepcopy(eager)) if compiled else None)
        fns = {name: whole.step_fn(m, built, mode) for name, m in models.items()}
        ref = whole.reference(built, mode)
    else:
        eager, fused, x, gy = build(case, device, args.cpu_dry_run)
        row["dtype"] = CASES[case][5]
        models = contenders(eager, fused, compiled, args.control)
        fns = {name: step_fn(m, x, gy, mode) for name, m in models.items()}
    outs, codes = {}, {}
    for name, fn in list(fns.items()):  # the first call compiles
        with first_call(name), generated_code(codes, name) if compiled else contextlib.nullcontext():
            try:
                outs[name] = fn()
            except Exception as e:  # noqa: BLE001  a peer's failure is its row's note, not the run's end
                if name not in peers:
                    raise
                row.setdefault("peer_errors", {})[name] = f"{type(e).__name__}: {e}"[:500]
                del fns[name]
                continue
            if name == "compile_fusion":
                # The pairs the pass replaced: 0 would mean the row timed
                # compiled eager again.
                fusion_pass = torch._inductor.config.pre_grad_custom_pass
                row["compile_fusion_pairs"] = fusion_pass.fused
                row["compile_fusion_chained"] = fusion_pass.chained
                row["compile_fusion_glu"] = fusion_pass.glu
                row["compile_fusion_gated"] = fusion_pass.gated
                row["compile_fusion_losses"] = fusion_pass.losses
    if args.tuned and device == "cuda" and "fused" in fns:
        fns["tuned"], row["tuned"] = _tuned(fns["fused"])
        outs["tuned"] = fns["tuned"]()
    if compiled:
        row["same_code_as_eager"] = {name: code == codes["eager"] for name, code in codes.items()
                                     if name != "eager" and name in outs}
    if case in whole.WHOLE or case in lm_head.LINEAR_CE:
        _check_whole(row, outs, ref, peers)
        del ref
    else:
        _check_stack(row, outs, eager, x, gy, mode)
    del outs
    for name, fn in fns.items():
        peak = peak_bytes(fn, device)
        if peak is not None and case in lm_head.LINEAR_CE:
            peak -= built.grads_bytes  # above the gradients it returns, too
        row["peak_bytes"][name] = peak
    timing = args if case in CASES else argparse.Namespace(**{**vars(args), "rep": args.whole_rep})
    timed = harness.time_in_turns(fns, timing, device)
    row["ms"] = {name: ms for name, (ms, _) in timed.items()}
    row["iqr_rel"] = {name: round(iqr, 4) for name, (_, iqr) in timed.items()}
    return row


def _tuned(fused_step):
    """The fused step with torch_gemm_act.tune's choices for its problems
    (timed afresh, a cache of this run's own), set around each call and
    cleared after, so that the other contenders run the untuned rule; and
    the tuning's entries, problem by problem."""
    import tempfile

    import torch_gemm_act
    from torch_gemm_act import _C

    with tempfile.TemporaryDirectory() as folder:
        report = torch_gemm_act.tune(fused_step, cache=os.path.join(folder, "tuned.json"))
    choices = dict(_C.tuned_choices())
    _C.set_tuned_choices({})

    def run():
        _C.set_tuned_choices(choices)
        try:
            return fused_step()
        finally:
            _C.set_tuned_choices({})
    return run, {key: {"backend": e["backend"], "us": {n: round(us, 2) for n, us in e["us"].items()}}
                 for key, e in report.problems.items()}


def _check_stack(row, outs, eager, x, gy, mode):
    """An MLP stack's row: every contender against eager (TOLERANCE), or,
    beyond it, within twice eager's own error from a float64 run."""
    errs = [rel_err(g, r) for other in ("fused", "compile_fusion", "eager_copy", "tuned") if other in outs
            for g, r in zip(outs[other], outs["eager"])]
    row["max_rel_err"] = max(errs)
    row["correct"] = row["max_rel_err"] <= TOLERANCE[row["dtype"]]
    if not row["correct"]:
        ref64 = step_fn(copy.deepcopy(eager).double(), x.double(), gy.double(), mode)()
        err64 = {name: max(rel_err(g, r) for g, r in zip(out, ref64)) for name, out in outs.items()}
        row["max_rel_err_fp64"] = err64
        row["correct"] = all(e <= 2 * err64["eager"] for name, e in err64.items() if name != "eager")


def _check_whole(row, outs, ref, peers):
    """A whole model's row: each contender's error from the fp32 copy
    (logits; or loss and the input embedding's gradient), within
    whole.ERROR_FACTOR of eager's own. A peer beyond it is named in
    ``peers_wrong``; the row's verdict is this project's contenders'."""
    err = {name: max(rel_err(g, r) for g, r in zip(out, ref)) for name, out in outs.items()}
    row["err_vs_fp32"] = err
    # The same outputs' normwise error: whether ours is further from fp32 than eager's on the whole.
    row["rms_err_vs_fp32"] = {name: max(rms_rel_err(g, r) for g, r in zip(out, ref)) for name, out in outs.items()}
    bound = max(whole.ERROR_FACTOR * err["eager"], 1e-5)
    ours = [e for name, e in err.items() if name != "eager" and name not in peers]
    row["max_rel_err"] = max(ours)
    row["correct"] = all(e <= bound for e in ours)
    wrong = sorted(name for name in peers if name in err and err[name] > bound)
    if wrong:
        row["peers_wrong"] = wrong


def table(rows):
    head = (f'{"case":<20} {"mode":<10} {"compiled":<8} {"eager ms":>9} {"fused ms":>9} {"fused/eager":>11} '
            f'{"cfusion/eager":>13} {"copy/eager":>10} {"peak MiB e/f":>14} err')
    lines = [head, "-" * len(head)]

    def ratio(r, name, width):
        v = r["ms"].get(name)
        return f"{v / r['ms']['eager']:>{width - 1}.3f}x" if v is not None else f'{"-":>{width}}'

    known = ("eager", "fused", "compile_fusion", "eager_copy")
    for r in rows:
        e, f = r["ms"]["eager"], r["ms"]["fused"]
        peers = "".join(f" {n} {v / e:.3f}x" for n, v in r["ms"].items() if n not in known)
        pb = r["peak_bytes"]
        mem = ("-" if pb.get("eager") is None
               else f'{pb["eager"] / 2**20:.0f}/{pb["fused"] / 2**20:.0f}')
        lines.append(f'{r["case"]:<20} {r["mode"]:<10} {str(r["compiled"]):<8} {e:>9.3f} {f:>9.3f} '
                     f'{f / e:>10.3f}x {ratio(r, "compile_fusion", 13)} {ratio(r, "eager_copy", 10)} {mem:>14} '
                     f'{r["max_rel_err"]:.1e}{"" if r["correct"] else " WRONG"}'
                     + (f' (eager {r["err_vs_fp32"]["eager"]:.1e} from fp32)' if "err_vs_fp32" in r else "")
                     + (" rms from fp32 ÷ eager's: " + ", ".join(
                         f"{n} {v / max(r['rms_err_vs_fp32']['eager'], 1e-30):.2f}"
                         for n, v in r["rms_err_vs_fp32"].items() if n != "eager") if "rms_err_vs_fp32" in r else "")
                     + peers + "".join(f" [{n}: WRONG]" for n in r.get("peers_wrong", ()))
                     + "".join(f" [{n}: {why}]" for n, why in {**r.get("peers_missing", {}),
                                                                 **r.get("peer_errors", {})}.items())
                     + ("" if "same_code_as_eager" not in r else " same code: "
                        + (",".join(n for n, same in r["same_code_as_eager"].items() if same) or "-"))
                     + (" (from float64: " + ", ".join(f"{k} {v:.1e}" for k, v in r["max_rel_err_fp64"].items())
                        + ")" if "max_rel_err_fp64" in r else ""))
    return "\n".join(lines)


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f'{r["case"]}\n{r["mode"]}{" compiled" if r["compiled"] else ""}' for r in rows]
    ratios = [r["ms"]["fused"] / r["ms"]["eager"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.8), 4))
    ax.bar(range(len(rows)), ratios, color=["#2ca02c" if v <= 1 else "#d62728" for v in ratios])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("fused time / eager time")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --cases' groups: the MLP stacks (the default), the whole models (whose
# compiled rows take minutes each) and the LM head's loss.
_GROUPS = {"stacks": tuple(CASES), "whole": tuple(whole.WHOLE), "lm_head": tuple(lm_head.LINEAR_CE)}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--cases", nargs="+",
                   choices=sorted(CASES) + sorted(whole.WHOLE) + sorted(lm_head.LINEAR_CE) + sorted(_GROUPS),
                   default=["stacks"], help="cases, or groups of them: " +
                   "; ".join(f"{g}: {', '.join(names)}" for g, names in _GROUPS.items()))
    p.add_argument("--modes", nargs="+", choices=("inference", "training"), default=["inference", "training"])
    p.add_argument("--no-compile", action="store_true", help="eager mode only")
    p.add_argument("--compiled-only", action="store_true", help="the compiled rows only")
    p.add_argument("--rounds", type=int, default=5,
                   help="each contender is timed for about rounds x rep ms, in turns with the others")
    p.add_argument("--control", action="store_true",
                   help="also time a copy of the eager model (ms.eager_copy): the spread between identical steps")
    p.add_argument("--tuned", action="store_true",
                   help="also time the fused model with torch_gemm_act.tune's choices (ms.tuned; CUDA only)")
    p.add_argument("--warmup", type=int, default=25, help="warm-up per contender, ms")
    p.add_argument("--rep", type=int, default=100, help="see --rounds")
    p.add_argument("--whole-rep", type=int, default=400, help="--rep of the whole models (steps of 20-200 ms)")
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="for testing this script only: tiny models on the CPU, eager mode only")
    p.add_argument("--dry-run-compile", action="store_true",
                   help="with --cpu-dry-run: the compiled rows too")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not args.cpu_dry_run:
        return _run(args)
    # The CPU leaves its layers to ATen, eager or compiled; the dry run checks
    # the fused models' plumbing, the operators and the fusion pass's
    # included, as the module tests do (operator_everywhere).
    import torch_gemm_act
    with torch_gemm_act.testing.override(operator_everywhere=True):
        return _run(args)


def _run(args):
    import torch

    if args.cpu_dry_run:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("no CUDA GPU: nothing to measure (--cpu-dry-run checks the script)")
        return 0
    commit, csrc_tree, ids_from, dirty = harness.source_ids()
    host_us = {"before": harness.host_launch_us(device)}
    ctx = {"args": args, "device": device}
    rows = []
    t0 = time.perf_counter()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"{stamp}_{commit[:7]}_models")
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__, "commit": commit, "csrc_tree": csrc_tree,
               "ids_from": ids_from, "dirty": dirty,
               "timer": f"{harness.TURNS_DESC}, about {args.rounds} x {args.rep} ms each "
                        f"({args.whole_rep} ms for the whole models)",
               "host_launch_us": host_us, "rows": rows}

    def write():  # after every row: a run cut short keeps what it measured
        results["wall_s"] = round(time.perf_counter() - t0, 1)
        with open(base + ".json", "w") as f:
            json.dump(results, f, indent=1)
    cases = [name for c in args.cases for name in _GROUPS.get(c, (c,))]
    for case in dict.fromkeys(cases):
        if case in lm_head.LINEAR_CE:  # training only; its compiled contender is one of the row's
            if "training" in args.modes and not args.compiled_only:
                rows.append(measure(case, "training", False, ctx))
                write()
                print(table(rows[-1:]).splitlines()[-1], flush=True)
            continue
        eager_only = args.no_compile or (args.cpu_dry_run and not args.dry_run_compile)
        for compiled in (False,) if eager_only else (True,) if args.compiled_only else (False, True):
            for mode in args.modes:
                rows.append(measure(case, mode, compiled, ctx))
                write()
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    host_us["after"] = harness.host_launch_us(device)
    write()
    drew = plot(rows, base + ".png")
    print(f"\nresults: {base}.json" + (f"\nplot:    {base}.png" if drew else ""))
    print(table(rows))
    if device == "cuda":
        print(f"host us per launch of a one-element add (the host's speed; before / after): "
              f"{host_us['before']} / {host_us['after']}")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

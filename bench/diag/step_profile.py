"""Where a whole model's step (bench/whole.py) spends its time, eager
against fused, compiled or not: per contender, the step's time (CUDA
events, median), the host's time to issue it, the GPU time of its kernels
and their count (torch.profiler), the kernels that take the most, and the
kernel families whose time differs most between the two.

    python bench/diag/step_profile.py --case whole_gpt2 [--mode training] [--compiled]
        [--contenders eager fused mlp head]

Contenders: eager, fused (bench/whole.py's), mlp (fuse_linear_act alone),
head (fuse_lm_loss alone), liger (Liger-Kernel's Llama, where installed),
eager_dropout and fused_dropout (the residual branches' dropout on, p 0.1:
what such a dropout costs), and with --compiled compile_fusion and
compile_fusion_dropout (eager's model compiled under
enable_compile_fusion()); each after the first is compared with the first.

--cpu-dry-run runs a tiny model on the CPU (the script's plumbing, not its
numbers: wall-clock times, the profiler's CPU events).
"""

import argparse
import copy
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import compiled as compiled_  # noqa: E402
import whole  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--case", default="whole_gpt2", choices=sorted(whole.WHOLE))
    p.add_argument("--mode", default="training", choices=("training", "inference"))
    p.add_argument("--compiled", action="store_true")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=14)
    p.add_argument("--contenders", nargs="+", default=["eager", "fused"], choices=sorted(CONTENDERS))
    p.add_argument("--host", action="store_true", help="also the host's ops by their own CPU time, and their differences")
    p.add_argument("--cpu-dry-run", action="store_true", help="a tiny model on the CPU: for testing this script")
    args = p.parse_args()
    device = "cpu" if args.cpu_dry_run else "cuda"
    built = whole.build(args.case, device, args.cpu_dry_run)
    models = {name: CONTENDERS[name](args.case, copy.deepcopy(built.model)) for name in args.contenders}
    if args.compiled:
        torch._inductor.config.compile_threads = torch._inductor.config.decide_compile_threads()
        models = {name: torch.compile(compiled_.own_frame(m, name)) for name, m in models.items()}
    if device == "cuda":
        sync, activity, unit = torch.cuda.synchronize, torch.profiler.ProfilerActivity.CUDA, "kernels"

        def stamp():
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        def elapsed_ms(start):
            end = stamp()
            end.synchronize()
            return start.elapsed_time(end)

        def own_time(e):  # a kernel's own time; a CPU op's (--host) is its kernels', counted there
            return e.self_device_time_total
    else:
        sync, activity, unit = (lambda: None), torch.profiler.ProfilerActivity.CPU, "ops"
        stamp = time.perf_counter

        def elapsed_ms(start):
            return (time.perf_counter() - start) * 1e3

        def own_time(e):
            return e.self_cpu_time_total
    print(f"=== {args.case} {args.mode}{' compiled' if args.compiled else ''}")
    profiles = {}  # contender -> {kernel family: (ms per step, launches per step)}
    host_profiles = {}  # contender -> {host op: (own CPU ms per step, calls per step)}, with --host
    for name, model in models.items():
        run = whole.step_fn(model, built, args.mode)
        with compiled_.first_call("compile_fusion" if name.startswith("compile_fusion") else name):
            run()  # compiles (compile fusion's under the pass)
        for _ in range(2):
            run()
        sync()
        times, host = [], []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            start = stamp()
            run()
            host.append((time.perf_counter() - t0) * 1e3)
            times.append(elapsed_ms(start))
        host_too = args.host and device == "cuda"
        with torch.profiler.profile(activities=[activity, torch.profiler.ProfilerActivity.CPU] if host_too
                                    else [activity]) as prof:
            for _ in range(args.steps):
                run()
            sync()
        # On the GPU its kernels; on the CPU the ATen ops with no child op.
        kernels = [e for e in prof.key_averages() if own_time(e) > 0]
        busy = sum(own_time(e) for e in kernels) / 1e3 / args.steps
        count = sum(e.count for e in kernels) / args.steps
        print(f"--- {name}: step {sorted(times)[len(times) // 2]:.3f} ms median, host {sorted(host)[len(host) // 2]:.3f} ms "
              f"to issue it, {busy:.3f} ms of {device.upper()} time in {count:.0f} {unit}")
        for e in sorted(kernels, key=lambda e: -own_time(e))[:args.top]:
            print(f"  {own_time(e) / 1e3 / args.steps:8.3f} ms  x{e.count / args.steps:<5.0f} {e.key[:110]}")
        profiles[name] = families(kernels, own_time, args.steps)
        if host_too:
            ops = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
            print(f"  host: {sum(e.self_cpu_time_total for e in ops) / 1e3 / args.steps:.3f} ms of own CPU time "
                  "under the profiler, the most:")
            for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:args.top]:
                print(f"  {e.self_cpu_time_total / 1e3 / args.steps:8.3f} ms  x{e.count / args.steps:<5.0f} {e.key[:110]}")
            host_profiles[name] = families(ops, lambda e: e.self_cpu_time_total, args.steps)
        del run
    base, *others = args.contenders
    for name in others:
        print(f"+++ {name} - {base}, by kernel family (Inductor's kernel numbers dropped), the largest differences:")
        for key, ms, before, after in differences(profiles[base], profiles[name])[:args.top]:
            print(f"  {ms:+8.3f} ms  x{before:.0f} -> x{after:.0f}  {key[:110]}")
        if host_profiles:
            print(f"+++ {name} - {base}, host ops by own CPU time, the largest differences:")
            for key, ms, before, after in differences(host_profiles[base], host_profiles[name])[:args.top]:
                print(f"  {ms:+8.3f} ms  x{before:.0f} -> x{after:.0f}  {key[:110]}")


def _mlp(case, model):
    import torch_gemm_act
    return torch_gemm_act.fuse_linear_act(model)


def _liger(case, model):
    found, missing = whole.peers(case, model)
    if "liger" not in found:
        raise SystemExit(f"step_profile: no liger contender for {case}: "
                         f"{missing.get('liger', 'Liger-Kernel patches the Llama model only')}")
    return found["liger"]


# The dropouts on each block's residual branch (after an out-projection), by the
# module names the libraries give them; the configs' default rate, which whole.py turns off.
_RESIDUAL_DROPOUTS = {"gpt2": ("attn.resid_dropout", "mlp.dropout"), "bert": ("output.dropout",),
                      "vit": ("attn.proj_drop", "mlp.drop2")}
RESIDUAL_DROPOUT_P = 0.1


def _residual_dropout(then):
    """A contender with the residual branches' dropout on (p 0.1), then `then` applied."""
    def make(case, model):
        names = _RESIDUAL_DROPOUTS.get(whole.WHOLE[case][0])
        if not names:
            raise SystemExit(f"step_profile: {case} has no dropout on its residual branches")
        drops = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout) and n.endswith(names)]
        if not drops:
            raise SystemExit(f"step_profile: no dropout module named {names} in {case}")
        for m in drops:
            m.p = RESIDUAL_DROPOUT_P
        return then(case, model)
    return make


CONTENDERS = {"eager": lambda case, model: model, "fused": whole.fuse, "mlp": _mlp, "head": whole.fuse_loss,
              "liger": _liger}
CONTENDERS["compile_fusion"] = CONTENDERS["eager"]  # compiled under the pass (main)
CONTENDERS.update({f"{name}_dropout": _residual_dropout(CONTENDERS[name])
                   for name in ("eager", "fused", "compile_fusion")})


def families(kernels, own_time, steps):
    """{kernel family: (ms per step, launches per step)}: a kernel's name
    without the number Inductor appends (triton_poi_fused_add_6), so that
    two compiled graphs' kernels of one kind meet."""
    out = {}
    for e in kernels:
        key = re.sub(r"_\d+$", "", e.key)
        ms, count = out.get(key, (0.0, 0.0))
        out[key] = (ms + own_time(e) / 1e3 / steps, count + e.count / steps)
    return out


def differences(before, after):
    """[(family, ms after - before, launches before, launches after)], the
    largest differences in time first."""
    rows = [(key, after.get(key, (0.0, 0))[0] - before.get(key, (0.0, 0))[0], before.get(key, (0.0, 0))[1],
             after.get(key, (0.0, 0))[1]) for key in set(before) | set(after)]
    return sorted(rows, key=lambda row: -abs(row[1]))


if __name__ == "__main__":
    main()

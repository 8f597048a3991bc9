"""Measures the sm90 kernel's tile configurations against each other and
torch.mm, to choose the rules in csrc/cuda/sm90/sm90_heuristic.h.

Configurations 0, 1, 4, 13 and 22 (and "auto", the heuristic's own choice)
exist in every build for fp16/bf16 (fp32: 0, 1 and 25, the cooperative
kernel without Z's store buffers, for cases that store no Z); the others are
candidates compiled only with GEMM_ACT_SM90_SWEEP=1, for bf16 and every
activation (15-17, the rotating kernel; 25). Forcing a configuration that is
not compiled for a case is an error, so the sweep skips those cases (and
leaves out of a row one that the build turns out to lack).
TORCH_GEMM_ACT_SM90_CONFIG, which the
extension reads on every call, picks the configuration. For each problem
torch.mm and the configurations take turns, --rounds times, and each keeps
the median of its rounds: a GPU clock that drifts with heat and power costs
them all alike (separate processes one after the other measured the same
kernel up to 10% apart). Each round starts one contender later, so none is
always the one timed right after torch.mm (2-3% slower under the power cap).

    GEMM_ACT_SM90_SWEEP=1 python setup.py build_ext --inplace
    python bench/sm90_sweep.py [--configs auto,0,1] [--out sweep.json]
"""

import argparse
import json
import os
import statistics

# KernelConfig in csrc/cuda/sm90/sm90_launch.h.
CONFIGS = {
    "auto": "heuristic",
    "0": "coop128x256",
    "1": "pp128x128",
    "13": "pp128x64",
    "22": "pp64x128/k128/c1x1",
    "4": "coop256x128/c2x1",
    "15": "rot2x128x128",
    "16": "rot3x128x96",
    "17": "rot3x64x192",
    "25": "coop128x256/noZ",
}
# In every build, for fp16/bf16 (fp32: auto, 0, 1 and 25).
RELEASE_CONFIGS = ("auto", "0", "1", "4", "13", "22")
ENV = "TORCH_GEMM_ACT_SM90_CONFIG"


def runs_case(cfg, act, dt, store_z):
    """Whether configuration `cfg` exists for the case."""
    if cfg == "25":  # no Z store; in release builds for TF32, in sweep builds for bf16 too
        return dt in ("bf16", "tf32") and not store_z
    if dt == "tf32":
        return cfg in ("auto", "0", "1")
    if cfg in RELEASE_CONFIGS:
        return True
    return dt == "bf16"  # sweep-only candidates: bf16, every activation

# (M, K, N, activation, store Z, dtype)
CASES = [
    (8192, 4096, 16384, "gelu", False, "bf16"), (8192, 4096, 16384, "gelu", True, "bf16"),
    (8192, 16384, 4096, "none", False, "bf16"),
    (4096, 4096, 4096, "gelu", False, "bf16"), (4096, 4096, 4096, "gelu", True, "bf16"),
    (4096, 4096, 4096, "relu", False, "fp16"), (4096, 4096, 4096, "relu", False, "bf16"),
    (16384, 1024, 4096, "none", False, "bf16"), (16384, 1024, 4096, "gelu", False, "bf16"),
    (16384, 1024, 4096, "gelu", True, "bf16"),
    (32768, 768, 3072, "none", False, "bf16"), (32768, 768, 3072, "gelu", False, "bf16"),
    (32768, 768, 3072, "gelu", True, "bf16"),
    (4096, 4096, 11008, "silu", True, "bf16"),
    (16, 4096, 16384, "gelu", False, "bf16"), (128, 4096, 16384, "gelu", False, "bf16"),
    (16384, 1024, 4096, "gelu_tanh", False, "bf16"), (16384, 1024, 4096, "gelu_tanh", True, "bf16"),
    (4096, 4096, 4096, "gelu_tanh", True, "bf16"), (16384, 1024, 4096, "tanh", False, "bf16"),
    (4096, 4096, 4096, "gelu", False, "tf32"), (4096, 4096, 4096, "gelu", True, "tf32"),
    (16384, 1024, 4096, "gelu", True, "tf32"), (8192, 4096, 16384, "gelu", True, "tf32"),
    (16, 4096, 16384, "gelu", False, "tf32"), (128, 4096, 16384, "gelu", False, "tf32"),
    (8191, 4095, 4097, "gelu", False, "bf16"), (8191, 4095, 4097, "gelu", True, "bf16"),
]


def use_config(cfg):
    if cfg == "auto":
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = cfg


def measure(configs, rounds, rep, only=None):
    import torch
    from triton.testing import do_bench

    import torch_gemm_act as tga

    def bench(fn):
        return do_bench(fn, warmup=10, rep=rep, return_mode="median")

    out = []
    for case in CASES:
        m, k, n, act, store_z, dt = case
        if only and f"{m}x{k}x{n}" not in only:
            continue
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dt]
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        bias = torch.randn(n, device="cuda", dtype=dtype)
        z_ref = torch.nn.functional.linear(a.float(), w.float(), bias.float())
        twin = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
                "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
                "tanh": torch.tanh, "relu": torch.relu, "none": lambda t: t}[act]
        y_ref = twin(z_ref)

        def run():
            return tga.gemm_act(a, w.t(), bias, activation=act, return_preact=store_z)

        ran = [c for c in configs if runs_case(c, act, dt, store_z)]
        errs = {}
        for cfg in list(ran):
            use_config(cfg)
            try:
                got = run()
            except RuntimeError as e:  # a candidate this build did not compile (release build)
                if "cannot run this case" not in str(e):
                    raise
                ran.remove(cfg)
                continue
            got = got[0] if store_z else got
            errs[cfg] = ((got.float() - y_ref).abs().max() / y_ref.abs().max()).item()
        times = {cfg: [] for cfg in ["mm", *ran]}
        turns = list(times)
        for r in range(rounds):
            shift = r % len(turns)  # each round starts one contender later
            for cfg in turns[shift:] + turns[:shift]:
                if cfg == "mm":
                    times["mm"].append(bench(lambda: torch.mm(a, w.t())))
                else:
                    use_config(cfg)
                    times[cfg].append(bench(run))
        use_config("auto")
        mm_ms = statistics.median(times.pop("mm"))
        out.append({"M": m, "K": k, "N": n, "activation": act, "z": store_z, "dtype": dt,
                    "mm_ms": mm_ms, "ms": {c: statistics.median(t) for c, t in times.items()},
                    "err": errs})
        del a, w, bias, z_ref, y_ref
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=",".join(RELEASE_CONFIGS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep", type=int, default=20, help="do_bench time per round, ms")
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes to run")
    p.add_argument("--out", default=None)
    p.add_argument("--profile", metavar="M,K,N,ACT,Z",
                   help="run one bf16 case three times and exit (for ncu --launch-skip 2)")
    args = p.parse_args()
    if args.profile:
        profile_one(*args.profile.split(","))
        return
    configs = args.configs.split(",")
    results = measure(configs, args.rounds, args.rep, args.only.split(",") if args.only else None)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"configs": {c: CONFIGS.get(c, "?") for c in configs}, "rows": results}, f, indent=1)

    print(f"\ntime / torch.mm (bias per column; median of {args.rounds} interleaved rounds); "
          "* marks the best, ! a wrong result, - not run")
    print(f"{'M x K x N':<18}{'dt':<5}{'act':<10}{'Z':<3}{'mm ms':>8}"
          + "".join(f"{CONFIGS.get(c, c):>24}" for c in configs))
    for r in results:
        ratios = {c: ms / r["mm_ms"] for c, ms in r["ms"].items()}
        best = min(ratios, key=ratios.get) if ratios else None  # none of them runs this case
        cells = "".join(
            f"{ratios[c]:>22.3f}{'*' if c == best else ' '}{'!' if r['err'][c] > 2e-2 else ' '}"
            if c in ratios else f"{'-':>24}" for c in configs)
        shape = f"{r['M']}x{r['K']}x{r['N']}"
        print(f"{shape:<18}{r['dtype']:<5}{r['activation']:<10}"
              f"{'y' if r['z'] else 'n':<3}{r['mm_ms']:>8.3f}" + cells)


def profile_one(m, k, n, act, store_z):
    import torch

    import torch_gemm_act as tga

    m, k, n = int(m), int(k), int(n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        tga.gemm_act(a, w.t(), bias, activation=act, return_preact=store_z == "1")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

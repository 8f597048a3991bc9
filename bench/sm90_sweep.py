"""Measures the sm90 kernel's tile configurations against each other and
torch.mm, to choose the rules in csrc/cuda/sm90/sm90_heuristic.h.

Needs an extension built with GEMM_ACT_SM90_SWEEP=1 (which compiles the extra
candidate configurations for bf16, `none` and `gelu`). Each configuration
runs in its own process with TORCH_GEMM_ACT_SM90_CONFIG set (the extension
reads it once); "auto" is the heuristic's own choice.

    GEMM_ACT_SM90_SWEEP=1 python setup.py build_ext --inplace
    python bench/sm90_sweep.py [--configs auto,0,1] [--out sweep.json]
"""

import argparse
import json
import os
import subprocess
import sys

# KernelConfig in csrc/cuda/sm90/sm90_launch.h.
CONFIGS = {
    "auto": "heuristic",
    "0": "coop128x256",
    "1": "pp128x128",
    "2": "coop128x256/epi128x32",
    "3": "pp128x128/epi64x32",
    "4": "coop256x128/c2x1",
    "5": "pp64x128",
    "6": "pp128x128/epi64x128",
    "7": "coop128x256/noZ",
    "8": "pp128x128/noZ",
    "9": "pp64x128/c1x1",
}
# Configurations without the Z store: they decline launches that write Z.
NO_Z_CONFIGS = {"7", "8"}

# (M, K, N, activation, store Z)
CASES = [
    (8192, 4096, 16384, "gelu", False), (8192, 4096, 16384, "gelu", True),
    (8192, 16384, 4096, "none", False),
    (4096, 4096, 4096, "gelu", False), (4096, 4096, 4096, "gelu", True),
    (16384, 1024, 4096, "none", False), (16384, 1024, 4096, "gelu", False),
    (16384, 1024, 4096, "gelu", True),
    (32768, 768, 3072, "none", False), (32768, 768, 3072, "gelu", False),
    (32768, 768, 3072, "gelu", True),
    (4096, 4096, 11008, "gelu", True),
    (16, 4096, 16384, "gelu", False), (128, 4096, 16384, "gelu", False),
]


def measure(rep):
    import torch
    from triton.testing import do_bench

    import torch_gemm_act as tga

    out = []
    no_z = os.environ.get("TORCH_GEMM_ACT_SM90_CONFIG") in NO_Z_CONFIGS
    for m, k, n, act, store_z in CASES:
        if store_z and no_z:
            out.append({"M": m, "K": k, "N": n, "activation": act, "z": store_z, "mm_ms": float("nan"),
                        "ms": float("nan"), "err": 0.0})
            continue
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        z_ref = torch.nn.functional.linear(a.float(), w.float(), bias.float())
        y_ref = torch.nn.functional.gelu(z_ref) if act == "gelu" else z_ref
        mm_ms = do_bench(lambda: torch.mm(a, w.t()), warmup=25, rep=rep, return_mode="median")

        def run():
            return tga.gemm_act(a, w.t(), bias, activation=act, return_preact=store_z)

        got = run()
        got = got[0] if store_z else got
        err = ((got.float() - y_ref).abs().max() / y_ref.abs().max()).item()
        ms = do_bench(run, warmup=25, rep=rep, return_mode="median")
        out.append({"M": m, "K": k, "N": n, "activation": act, "z": store_z, "mm_ms": mm_ms,
                    "ms": ms, "err": err})
        del a, w, bias
    return out


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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--rep", type=int, default=60)
    p.add_argument("--out", default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profile", metavar="M,K,N,ACT,Z",
                   help="run one case three times and exit (for ncu --launch-skip 2)")
    args = p.parse_args()
    if args.profile:
        profile_one(*args.profile.split(","))
        return
    if args.child:
        print(json.dumps(measure(args.rep)))
        return

    results = {}
    for cfg in args.configs.split(","):
        env = dict(os.environ)
        env.pop("TORCH_GEMM_ACT_SM90_CONFIG", None)
        if cfg != "auto":
            env["TORCH_GEMM_ACT_SM90_CONFIG"] = cfg
        r = subprocess.run([sys.executable, __file__, "--child", "--rep", str(args.rep)], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"config {cfg}: failed\n{r.stderr[-2000:]}", flush=True)
            continue
        results[cfg] = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"config {cfg} ({CONFIGS.get(cfg, '?')}): done", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    cfgs = list(results)
    print("\ntime / torch.mm (bf16, bias per column); * marks the best, ! a wrong result")
    print(f"{'M x K x N':<18}{'act':<6}{'Z':<3}{'mm ms':>8}" + "".join(f"{CONFIGS[c]:>24}" for c in cfgs))
    for i, (m, k, n, act, z) in enumerate(CASES):
        ratios = {c: results[c][i]["ms"] / results[c][i]["mm_ms"] for c in cfgs}
        ratios = {c: r for c, r in ratios.items() if r == r}  # NaN: not run
        if not ratios:
            continue
        bad = {c for c in cfgs if results[c][i]["err"] > 2e-2}
        best = min(ratios, key=ratios.get)
        cells = "".join(f"{ratios[c]:>22.3f}{'*' if c == best else ' '}{'!' if c in bad else ' '}"
                        if c in ratios else f"{'-':>24}" for c in cfgs)
        mm_ms = min(results[c][i]["mm_ms"] for c in cfgs if c in ratios)
        print(f"{f'{m}x{k}x{n}':<18}{act:<6}{'y' if z else 'n':<3}{mm_ms:>8.3f}"
              + cells)


if __name__ == "__main__":
    main()

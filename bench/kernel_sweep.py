"""Measures one tensor-core family's kernel configurations against each other
and torch.mm, to choose the rules of its heuristic
(csrc/cuda/<family>/<family>_heuristic.h).

The configurations are the ones this build compiled, by name, as the package
lists them (torch_gemm_act.testing.kernels(family), from the family's table),
"auto", the heuristic's own choice, and "library", the backend the rule falls
back to (cuBLASLt's fused epilogue or cuBLAS and a pass), against which a
family must win.
Each case runs only the configurations compiled for its dtype
(B = weight.t(), K-major) that can store what it stores; the family's
backend and configuration are forced through torch_gemm_act.testing.override. For each
problem torch.mm and the configurations take turns, --rounds times, and each
keeps the median of its rounds: a GPU clock that drifts with heat and power
costs them all alike. Each round takes them in a fresh random order (seeded),
so none is always the one timed right after torch.mm (slower under the power
cap); a rotation would keep that neighbour in all rounds but one.

    python bench/kernel_sweep.py [--family sm80] [--configs auto,pingpong_128x128_c1x2] [--out sweep.json]

A configuration written NAME@S (sm90: "auto@8", "cooperative_128x256_c1x2@4")
runs with its tiles taken in bands of S clusters (the testing switch's
sm90_swizzle) instead of the heuristic's band.
"""

import argparse
import json
import random
import statistics

SWEEP_DTYPES = {"bf16": "bf16", "fp16": "f16", "tf32": "f32"}  # case dtype -> kernel table dtype


def compiled_configs(family):
    import torch_gemm_act
    return torch_gemm_act.testing.kernels(family)


def split_band(cfg):
    """(configuration name, band of clusters or None) of NAME[@S]."""
    name, _, band = cfg.partition("@")
    return name, int(band) if band else None


def runs_case(cfg, dt, store_z, kernels):
    """Whether configuration `cfg` exists for the case (weight.t(): a K-major B; no C, so none that
    loads C through TMA)."""
    cfg, _ = split_band(cfg)
    if cfg in ("auto", "library"):
        return True
    return any(k["name"] == cfg and k["dtype"] == SWEEP_DTYPES[dt] and k["b_layout"] == "kmajor"
               and (k["stores_z"] or not store_z) and k["c_source"] == "gmem" for k in kernels)


# (M, K, N, activation, store Z, dtype)
CASES = [
    (8192, 8192, 8192, "none", False, "bf16"), (8192, 8192, 8192, "gelu", False, "bf16"),
    (8192, 4096, 16384, "none", False, "bf16"),
    (8192, 4096, 16384, "gelu", False, "bf16"), (8192, 4096, 16384, "gelu", True, "bf16"),
    (8192, 16384, 4096, "none", False, "bf16"),
    (4096, 4096, 4096, "gelu", False, "bf16"), (4096, 4096, 4096, "gelu", True, "bf16"),
    (4096, 4096, 4096, "relu", False, "fp16"), (4096, 4096, 4096, "relu", False, "bf16"),
    (16384, 1024, 4096, "none", False, "bf16"), (16384, 1024, 4096, "gelu", False, "bf16"),
    (16384, 1024, 4096, "gelu", True, "bf16"),
    (32768, 768, 3072, "none", False, "bf16"), (32768, 768, 3072, "gelu", False, "bf16"),
    (32768, 768, 3072, "gelu", True, "bf16"),
    (12608, 1024, 4096, "gelu", False, "bf16"), (12608, 1024, 4096, "gelu", True, "bf16"),
    (12608, 4096, 1024, "none", False, "bf16"),
    (4096, 4096, 11008, "silu", True, "bf16"),
    (4096, 4096, 11008, "relu", False, "fp16"), (4096, 11008, 4096, "none", False, "fp16"),
    (16, 4096, 16384, "gelu", False, "bf16"), (128, 4096, 16384, "gelu", False, "bf16"),
    (16384, 1024, 4096, "gelu_tanh", False, "bf16"), (16384, 1024, 4096, "gelu_tanh", True, "bf16"),
    (4096, 4096, 4096, "gelu_tanh", True, "bf16"), (16384, 1024, 4096, "tanh", False, "bf16"),
    (4096, 4096, 4096, "gelu", False, "tf32"), (4096, 4096, 4096, "gelu", True, "tf32"),
    (16384, 1024, 4096, "gelu", True, "tf32"), (8192, 4096, 16384, "gelu", True, "tf32"),
    (16, 4096, 16384, "gelu", False, "tf32"), (128, 4096, 16384, "gelu", False, "tf32"),
    (8191, 4095, 4097, "gelu", False, "bf16"), (8191, 4095, 4097, "gelu", True, "bf16"),
    # Inference where cuBLASLt's own epilogue computes the activation (relu,
    # gelu_tanh without Z): which backend the rule should take, by shape.
    (8192, 4096, 16384, "relu", False, "bf16"), (8192, 4096, 16384, "gelu_tanh", False, "bf16"),
    (4096, 4096, 11008, "relu", False, "bf16"), (4096, 4096, 11008, "gelu_tanh", False, "bf16"),
    (4096, 4096, 4096, "gelu_tanh", False, "bf16"), (32768, 768, 3072, "gelu_tanh", False, "bf16"),
    (12608, 1024, 4096, "gelu_tanh", False, "bf16"), (8192, 768, 3072, "gelu_tanh", False, "bf16"),
    # GPT-2's MLP in training (Z stored), where the compiled step is measured.
    (8192, 768, 3072, "gelu_tanh", True, "bf16"),
    (8192, 4096, 11008, "relu", False, "fp16"), (2048, 4096, 11008, "relu", False, "fp16"),
    # Both operands larger than the L2: the tile order's band decides how
    # often each is read from memory.
    (16384, 4096, 16384, "gelu", False, "bf16"), (16384, 4096, 16384, "gelu", True, "bf16"),
    (8192, 4096, 8192, "gelu", False, "bf16"), (8192, 4096, 8192, "gelu", True, "bf16"),
    (8192, 2048, 16384, "gelu", False, "bf16"), (8192, 4096, 12288, "gelu", False, "bf16"),
    (16384, 4096, 11008, "silu", True, "bf16"), (16384, 4096, 11008, "relu", False, "fp16"),
]


def measure(family, configs, rounds, rep, only=None):
    import torch
    from triton.testing import do_bench

    import torch_gemm_act as tga

    def bench(fn):
        return do_bench(fn, warmup=10, rep=rep, return_mode="median")

    kernels = compiled_configs(family)
    dtypes = {k["dtype"] for k in kernels}

    def forced(cfg):
        cfg, band = split_band(cfg)
        if cfg == "library":
            return tga.testing.override(cuda_backend="library")
        bands = {"sm90_swizzle": band} if band is not None else {}
        return tga.testing.override(cuda_backend=family,
                                    **{f"{family}_kernel": None if cfg == "auto" else cfg}, **bands)

    out = []
    for case in CASES:
        m, k, n, act, store_z, dt = case
        if (only and f"{m}x{k}x{n}" not in only) or SWEEP_DTYPES[dt] not in dtypes:
            continue
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dt]
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
        bias = torch.randn(n, device="cuda", dtype=dtype)
        z_ref = torch.nn.functional.linear(a.float(), w.float(), bias.float())
        twin = tga.activations._torch_module(act)
        y_ref = twin(z_ref)

        def run():
            return tga.gemm_act(a, w.t(), bias, activation=act, return_preact=store_z)

        ran = [c for c in configs if runs_case(c, dt, store_z, kernels)]
        errs = {}
        for cfg in ran:
            with forced(cfg):
                got = run()
            got = got[0] if store_z else got
            errs[cfg] = ((got.float() - y_ref).abs().max() / y_ref.abs().max()).item()
        times = {cfg: [] for cfg in ["mm", *ran]}
        turns = list(times)
        rng = random.Random(len(out))  # seeded: each run takes the same orders
        for _ in range(rounds):
            rng.shuffle(turns)
            for cfg in turns:
                if cfg == "mm":
                    times["mm"].append(bench(lambda: torch.mm(a, w.t())))
                else:
                    with forced(cfg):
                        times[cfg].append(bench(run))
        mm_ms = statistics.median(times.pop("mm"))
        out.append({"M": m, "K": k, "N": n, "activation": act, "z": store_z, "dtype": dt,
                    "mm_ms": mm_ms, "ms": {c: statistics.median(t) for c, t in times.items()},
                    "err": errs})
        del a, w, bias, z_ref, y_ref
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="sm90", choices=["sm90", "sm80"])
    p.add_argument("--configs", default=None,
                   help="comma-separated configuration names, auto and/or library (default: all of them)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rep", type=int, default=20, help="do_bench time per round, ms")
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes to run")
    p.add_argument("--out", default=None)
    p.add_argument("--profile", metavar="M,K,N,ACT,Z[,CONFIG]",
                   help="run one bf16 case three times and exit (for ncu --launch-skip 2)")
    args = p.parse_args()
    if args.profile:
        profile_one(args.family, *args.profile.split(","))
        return
    configs = (args.configs.split(",") if args.configs
               else ["auto", "library", *dict.fromkeys(k["name"] for k in compiled_configs(args.family))])
    results = measure(args.family, configs, args.rounds, args.rep, args.only.split(",") if args.only else None)
    if args.out:
        import harness  # the source ids (GEMM_ACT_COMMIT / GEMM_ACT_CSRC_TREE, else git)
        commit, csrc_tree, ids_from, _ = harness.source_ids()
        with open(args.out, "w") as f:
            json.dump({"commit": commit, "csrc_tree": csrc_tree, "ids_from": ids_from, "family": args.family,
                       "configs": configs, "rows": results}, f, indent=1)

    print(f"\n{args.family}: time / torch.mm (bias per column; median of {args.rounds} interleaved rounds); "
          "* marks the best, ! a wrong result, - not run; TFLOP/s of the best")
    print(f"{'M x K x N':<18}{'dt':<5}{'act':<10}{'Z':<3}{'mm ms':>8}{'TFLOP/s':>9}"
          + "".join(f"{c:>28}" for c in configs))
    for r in results:
        ratios = {c: ms / r["mm_ms"] for c, ms in r["ms"].items()}
        best = min(ratios, key=ratios.get) if ratios else None  # none of them runs this case
        cells = "".join(
            f"{ratios[c]:>26.3f}{'*' if c == best else ' '}{'!' if r['err'][c] > 2e-2 else ' '}"
            if c in ratios else f"{'-':>28}" for c in configs)
        shape = f"{r['M']}x{r['K']}x{r['N']}"
        tflops = 2 * r["M"] * r["N"] * r["K"] / (r["ms"][best] * 1e9) if best else float("nan")
        print(f"{shape:<18}{r['dtype']:<5}{r['activation']:<10}"
              f"{'y' if r['z'] else 'n':<3}{r['mm_ms']:>8.3f}{tflops:>9.0f}" + cells)


def profile_one(family, m, k, n, act, store_z, config=None):
    import torch

    import torch_gemm_act as tga

    m, k, n = int(m), int(k), int(n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    with tga.testing.override(cuda_backend=family, **{f"{family}_kernel": config}):
        for _ in range(3):
            tga.gemm_act(a, w.t(), bias, activation=act, return_preact=store_z == "1")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

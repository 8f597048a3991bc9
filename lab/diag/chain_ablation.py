"""What the MLP backward fused across layers buys per model case: each
case's training step (eager mode) with the chain as built, with no chain
for activations whose derivative comes from Y (relu: the chain then stores
a Z it would not otherwise write), and with no chain at all; each beside
eager in the same round.

    python lab/diag/chain_ablation.py [--cases llm_relu_mlp_fp16 ...] [--rounds 3]
"""

import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

import models  # noqa: E402

from torch_gemm_act import chain  # noqa: E402
from torch_gemm_act.activations import GRAD_FROM_OUTPUT  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", nargs="+", default=["llm_relu_mlp_fp16", "gpt2_small_mlp", "vit_l_mlp"])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from triton.testing import do_bench

    built = chain.chain_pays
    variants = {
        "chain": built,
        "no chain from Y": None,  # set per case below
        "no chain": lambda *a, **k: False,
    }
    print(f"{torch.cuda.get_device_name()}: training step, time / eager (median of {args.rounds} rounds)")
    for case in args.cases:
        eager, fused, x, gy = models.build(case, "cuda", False)
        act = models.CASES[case][4]
        variants["no chain from Y"] = (lambda *a, **k: False) if act in GRAD_FROM_OUTPUT else built
        run_eager = models.step_fn(eager, x, gy, "training")
        run_fused = models.step_fn(fused, x, gy, "training")
        times = {name: [] for name in ["eager", *variants]}
        for r in range(args.rounds):
            times["eager"].append(do_bench(run_eager, warmup=25, rep=100, return_mode="median"))
            for name, pays in variants.items():
                chain.chain_pays = pays
                try:
                    times[name].append(do_bench(run_fused, warmup=25, rep=100, return_mode="median"))
                finally:
                    chain.chain_pays = built
        ms = {k: statistics.median(v) for k, v in times.items()}
        print(f"{case:20s} eager {ms['eager']:.3f} ms  " +
              "  ".join(f"{k} {ms[k] / ms['eager']:.3f}" for k in variants), flush=True)


if __name__ == "__main__":
    main()

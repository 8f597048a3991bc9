"""Which kernels torch.mm (cuBLAS) runs for the benchmark's shapes, and how
long each takes: the tile shapes, cluster sizes and schedules in cuBLAS's
kernel names say what the library found best for each problem.

    python scripts/diag/mm_kernels.py [--shapes ../shared/shapes.json]
"""

import argparse
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))


def kernels(fn, runs=5):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
            out[e.key] = e.device_time_total / e.count / 1e3  # ms per call
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", default=os.path.join(HERE, "..", "..", "bench", "shapes.json"))
    args = p.parse_args()
    with open(args.shapes) as f:
        shapes = json.load(f)
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    for group in ("training", "inference", "fp32", "odd"):
        for s in shapes.get(group, []):
            torch.backends.cuda.matmul.allow_tf32 = bool(s.get("tf32", False))
            dt = dtypes[s["dtype"]]
            a = torch.randn(s["M"], s["K"], device="cuda", dtype=dt)
            w = torch.randn(s["N"], s["K"], device="cuda", dtype=dt)
            print(f"{group} {s['M']}x{s['K']}x{s['N']} {s['dtype']}"
                  f"{' tf32' if s.get('tf32') else ''}:")
            for name, ms in sorted(kernels(lambda: torch.mm(a, w.t())).items(), key=lambda kv: -kv[1]):
                print(f"  {ms:8.3f} ms  {name[:160]}")
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()

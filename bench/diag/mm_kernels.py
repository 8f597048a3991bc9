"""Which kernels torch.mm (cuBLAS) runs for the benchmark's shapes, and how
long each takes: the tile shapes, cluster sizes and schedules in cuBLAS's
kernel names say what the library found best for each problem. With
--gemm-act, also the kernels of gemm_act (inference and forward, gelu) and
of torch.compile's code: where a staged (unaligned) case spends its time.
Times are ms per launch of each kernel, averaged over its launches (a
kernel launched three times per call shows one third of its share).

    python bench/diag/mm_kernels.py [--shapes ../shared/shapes.json] [--only 8191x4095x4097] [--gemm-act]
"""

import argparse
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))


def kernels(fn, runs=5, per_call=False):
    """ms of each CUDA kernel fn launches: per launch (averaged over its
    launches), or with per_call summed over its launches in one call of fn."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.count:
            out[e.key] = e.device_time_total / (runs if per_call else e.count) / 1e3
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", default=os.path.join(HERE, "..", "..", "bench", "shapes.json"))
    p.add_argument("--only", default=None, help="comma-separated MxKxN shapes")
    p.add_argument("--gemm-act", action="store_true", help="also profile torch_gemm_act.linear_act")
    args = p.parse_args()
    with open(args.shapes) as f:
        shapes = json.load(f)
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    for group in ("training", "inference", "fp32", "odd"):
        for s in shapes.get(group, []):
            if args.only and f"{s['M']}x{s['K']}x{s['N']}" not in args.only.split(","):
                continue
            torch.backends.cuda.matmul.allow_tf32 = bool(s.get("tf32", False))
            dt = dtypes[s["dtype"]]
            a = torch.randn(s["M"], s["K"], device="cuda", dtype=dt)
            w = torch.randn(s["N"], s["K"], device="cuda", dtype=dt)
            print(f"{group} {s['M']}x{s['K']}x{s['N']} {s['dtype']}"
                  f"{' tf32' if s.get('tf32') else ''}:")
            runs = {"torch.mm": lambda: torch.mm(a, w.t())}
            if args.gemm_act:
                import torch_gemm_act

                bias = torch.randn(s["N"], device="cuda", dtype=dt)
                a_grad = a.clone().requires_grad_()

                def inference():
                    with torch.no_grad():
                        return torch_gemm_act.linear_act(a, w, bias)

                runs["gemm_act inference"] = inference
                runs["gemm_act forward"] = lambda: torch_gemm_act.linear_act(a_grad, w, bias)
                compiled = torch.compile(lambda x, wt, b: torch.nn.functional.gelu(
                    torch.nn.functional.linear(x, wt, b)), dynamic=False)

                def compiled_inference():
                    with torch.no_grad():
                        return compiled(a, w, bias)

                runs["torch.compile inference"] = compiled_inference
            for label, fn in runs.items():
                print(f"  {label}:")
                for name, ms in sorted(kernels(fn).items(), key=lambda kv: -kv[1]):
                    print(f"    {ms:8.3f} ms  {name[:160]}")
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()

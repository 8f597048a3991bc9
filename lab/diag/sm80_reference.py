"""The sm80 family (forced) beside CUTLASS 2.x's own Ampere GEMM
(sm80_reference.cu, built as a shared library) and torch.mm, in one run, on
the `sm80` group of bench/shapes.json: TFLOP/s per contender, and each
contender's GELU time over its own `none` time per shape pair. The
contenders take turns, every other round in reverse order, so that the
GPU's clock under its power cap is shared alike.

    python lab/diag/sm80_reference.py --lib build/lab/sm80_reference.so [--rounds 5]
"""

import argparse
import ctypes
import json
import os
import statistics

import torch
import triton.testing

import torch_gemm_act as tga

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(HERE, "..", "..", "bench", "shapes.json")


def load(path):
    lib = ctypes.CDLL(path)
    lib.sm80_reference_name.restype = ctypes.c_char_p
    lib.sm80_reference_gemm.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 3 + \
        [ctypes.c_int] * 3 + [ctypes.c_void_p]
    names = [lib.sm80_reference_name(i).decode() for i in range(lib.sm80_reference_count())]
    return lib, names


def contenders(lib, names, a, w, act):
    """name -> fn() computing act(a @ w.T) (None where it cannot run)."""
    m, k = a.shape
    n = w.shape[0]
    d = torch.empty(m, n, device="cuda", dtype=a.dtype)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    out = {"torch_mm": lambda: torch.mm(a, w.t())}

    def ours():
        with tga.testing.override(cuda_backend="sm80"):
            return tga.gemm_act(a, w.t(), None, activation=act)
    out["gemm_act:sm80"] = ours
    for i, name in enumerate(names):
        def run(i=i):
            status = lib.sm80_reference_gemm(i, int(act == "gelu"), a.data_ptr(), w.data_ptr(), d.data_ptr(),
                                             m, n, k, stream)
            if status:
                raise RuntimeError(f"{names[i]}: status {status}")
            return d
        out[name] = run
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=True, help="the built sm80_reference.so")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=None, help="a JSON file for the medians")
    args = p.parse_args()
    lib, names = load(args.lib)
    rows = []
    for shape in json.load(open(SHAPES))["sm80"]:
        m, k, n, act = shape["M"], shape["K"], shape["N"], shape["activation"]
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        fns = contenders(lib, names, a, w, act)
        expected = torch.nn.functional.gelu(torch.mm(a, w.t()).float()) if act == "gelu" else \
            torch.mm(a, w.t()).float()
        errors = {}
        for name, fn in fns.items():
            if name == "torch_mm":
                continue
            got = fn().float()
            errors[name] = ((got - expected).abs().max() / expected.abs().max()).item()
        times = {name: [] for name in fns}
        order = list(fns)
        for r in range(args.rounds):
            for name in (order if r % 2 == 0 else order[::-1]):
                times[name].append(triton.testing.do_bench(fns[name], warmup=25, rep=100, return_mode="median"))
        ms = {name: statistics.median(t) for name, t in times.items()}
        rows.append({"M": m, "K": k, "N": n, "activation": act, "ms": ms, "max_rel_err": errors})
        tflops = {name: 2 * m * n * k / t / 1e9 for name, t in ms.items()}
        print(f"{m}x{k}x{n} {act:5s} " + "  ".join(f"{name} {ms[name]:.3f} ms {tflops[name]:.0f} TF/s"
                                                   for name in fns))
        bad = {name: e for name, e in errors.items() if e > 2e-2}
        if bad:
            print(f"  WRONG (max |diff| / max |ref| above 2e-2): {bad}")
    print("\nGELU time / its own none time:")
    for none, gelu in zip(rows[0::2], rows[1::2]):
        assert none["activation"] == "none" and gelu["activation"] == "gelu"
        ratios = {name: gelu["ms"][name] / none["ms"][name] for name in gelu["ms"] if name != "torch_mm"}
        print(f"  {none['M']}x{none['K']}x{none['N']}: " + "  ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

"""Runs each contender back to back for a few seconds while nvidia-smi samples
the SM clock and the board power, to tell a kernel that does more work per
cycle from one that runs at a lower clock (an H100 at its power limit lowers
its clock as the work per cycle grows).

    python bench/diag/clock_probe.py [--seconds 3] [--shape 4096,4096,4096] [--family sm80]

Prints, per contender: ms per call, median SM clock (MHz), median power (W),
the cycles (ms x MHz) and the energy (ms x W) per call, and the clock-event
reasons nvidia-smi reported most often. --preact also runs each activation
with Z written (return_preact=True), as a training forward does.
"""

import argparse
import statistics
import subprocess
import time

FIELDS = "clocks.sm,power.draw,clocks_event_reasons.active"


def sample_while(fn, seconds):
    """Calls fn until `seconds` have passed; returns (ms per call, samples)."""
    import torch

    smi = subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    t0 = time.monotonic()
    start.record()
    while time.monotonic() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    out, _ = smi.communicate()
    samples = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            samples.append((float(parts[0]), float(parts[1]), parts[2] if len(parts) > 2 else ""))
        except (ValueError, IndexError):
            pass
    return start.elapsed_time(end) / calls, samples


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--shape", action="append", help="M,K,N (bf16); repeatable")
    p.add_argument("--acts", default=None, help="comma-separated activations (default: all)")
    p.add_argument("--family", default="sm90", choices=["sm90", "sm80"],
                   help="the tensor-core family whose configurations --configs names (forced)")
    p.add_argument("--configs", default="auto",
                   help="kernel configurations by name (torch_gemm_act.testing.kernels(family)), or auto")
    p.add_argument("--preact", action="store_true", help="also time each activation writing Z")
    args = p.parse_args()

    import torch
    import torch_gemm_act

    if not torch.cuda.is_available():
        print("no CUDA device; nothing to probe")
        return
    print(torch.cuda.get_device_name(), subprocess.run(
        ["nvidia-smi", "--query-gpu=power.limit,clocks.max.sm", "--format=csv"],
        capture_output=True, text=True).stdout.strip().replace("\n", " | "))
    print(f"{'shape':18} {'contender':26} {'ms':>8} {'MHz':>6} {'W':>6} {'kcycles':>8} {'mJ':>6}"
          "  reasons (most frequent)")
    for shape in args.shape or ["4096,4096,4096", "32768,768,3072"]:
        m, k, n = (int(v) for v in shape.split(","))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        contenders = [("torch.mm", lambda: torch.mm(a, w.t()))]
        for cfg in args.configs.split(","):
            for act in args.acts.split(",") if args.acts else torch_gemm_act.ACTIVATIONS:
                for preact in (False, True) if args.preact else (False,):
                    def run(act=act, cfg=cfg, preact=preact):
                        kernel = None if cfg == "auto" else cfg
                        # sm80 runs only forced; sm90's auto is the rule.
                        backend = {"cuda_backend": "sm80"} if args.family == "sm80" else {}
                        with torch_gemm_act.testing.override(**backend, **{f"{args.family}_kernel": kernel}):
                            return torch_gemm_act.gemm_act(a, w.t(), bias, activation=act,
                                                           return_preact=preact)
                    contenders.append((f"{act}{' + Z' if preact else ''} cfg={cfg}", run))
        contenders.append(("torch.mm (again)", contenders[0][1]))
        with torch.no_grad():
            for name, fn in contenders:
                fn()
                ms, samples = sample_while(fn, args.seconds)
                busy = samples[len(samples) // 4:] or samples  # past the ramp
                mhz = statistics.median(s[0] for s in busy) if busy else float("nan")
                watts = statistics.median(s[1] for s in busy) if busy else float("nan")
                reasons = statistics.mode(s[2] for s in busy) if busy else "-"
                print(f"{shape:18} {name:26} {ms:8.4f} {mhz:6.0f} {watts:6.0f} {ms * mhz:8.0f}"
                      f" {ms * watts:6.1f}  {reasons}")


if __name__ == "__main__":
    main()

"""The allocations one training step of a Linear -> activation makes in its
backward, by size, fused against eager (F.linear then the activation): what
a fused layer holds beyond eager's tensors at the backward's peak.

    python bench/diag/backward_allocations.py [--shape 12608,1024,4096] [--activation gelu]
"""

import argparse

import torch
import torch.nn.functional as F

import torch_gemm_act as tga


def allocations(step, *args):
    """(peak bytes above the start, the bytes of each allocation) while step(*args) runs."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    step(*args)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    sizes = [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"]
    return torch.cuda.max_memory_allocated() - start, sizes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="12608,1024,4096", help="M,K,N")
    p.add_argument("--activation", default="gelu")
    args = p.parse_args()
    m, k, n = map(int, args.shape.split(","))
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5).requires_grad_()
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    act = getattr(F, args.activation)
    roads = {"eager": lambda: act(F.linear(x, w, b)),
             "fused": lambda: tga.linear_act(x, w, b, activation=args.activation)}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: [{m}, {k}] x [{n}, {k}]^T, "
          f"{args.activation}, bf16; the backward alone")
    for name, fwd in roads.items():
        for _ in range(2):  # the second time, with the stream's own buffers in place
            y = fwd()
            x.grad = w.grad = b.grad = None
            peak, allocs = allocations(y.backward, g)
            del y
        print(f"--- {name}: backward peak {peak} bytes above its start; {len(allocs)} allocations, "
              f"{sum(allocs)} bytes: " + ", ".join(map(str, allocs)))


if __name__ == "__main__":
    main()

"""The allocations one training step of a Linear -> activation makes in its
forward and in its backward, by size, fused against eager (F.linear then
the activation), and of the fused chain Linear -> activation -> Linear
(linear_act_linear, the second layer N -> K): what a fused layer holds
beyond eager's tensors at its peak. Allocations under 1 MiB are named by
the C++ frames of this extension that asked for them.

    python bench/diag/backward_allocations.py [--shape 12608,1024,4096] [--activation gelu]
"""

import argparse

import torch
import torch.nn.functional as F

import torch_gemm_act as tga


def allocations(step, *args):
    """(peak bytes above the start, [(bytes, where)] of each allocation) while step(*args) runs."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="all")
    out = step(*args)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    made = [(e["size"], where(e)) for e in snap["device_traces"][torch.cuda.current_device()]
            if e["action"] == "alloc"]
    return torch.cuda.max_memory_allocated() - start, made, out


def where(event):
    """An allocation under 1 MiB: the innermost frames of this extension that made it."""
    if event["size"] >= 1 << 20:
        return ""
    own = [f["name"] for f in event["frames"] if "gemm_act" in f["name"]][:3]
    return " <- ".join(name.split("(")[0][-70:] for name in own)


def show(what, peak, made):
    print(f"    {what}: peak {peak} bytes above its start; {len(made)} allocations, {sum(s for s, _ in made)} "
          f"bytes: " + ", ".join(f"{size}" + (f" [{place}]" if place else "") for size, place in made))


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
    w2 = (torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / n ** 0.5).requires_grad_()
    b2 = torch.randn(k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g2 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    roads = {"eager": (lambda: act(F.linear(x, w, b)), g),
             "fused": (lambda: tga.linear_act(x, w, b, activation=args.activation), g),
             "chain": (lambda: tga.linear_act_linear(x, w, b, w2, b2, activation=args.activation), g2)}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: [{m}, {k}] x [{n}, {k}]^T, "
          f"{args.activation}, bf16 (chain: then x [{k}, {n}]^T)")
    for name, (fwd, grad) in roads.items():
        print(f"--- {name}")
        for _ in range(2):  # the second time, with the stream's own buffers in place
            x.grad = w.grad = b.grad = w2.grad = b2.grad = None
            forward = list(allocations(fwd))
            backward = allocations(forward[2].backward, grad)
            del forward[2]
        show("forward", *forward[:2])
        show("backward", *backward[:2])


if __name__ == "__main__":
    main()

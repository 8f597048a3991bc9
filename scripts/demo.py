"""Trains a small MLP twice, with nn.Linear + GELU and with LinearAct, from the
same initial weights and data, and prints that losses and weights agree."""

import argparse

import torch
from torch import nn

import torch_gemm_act as tga


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)

    reference = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                              nn.Linear(128, 1)).to(device)
    fused = tga.fuse_linear_act(
        nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 1))
    ).to(device)
    fused.load_state_dict(reference.state_dict())
    print(fused)

    x = torch.randn(512, 32, device=device)
    target = torch.sin(x.sum(-1, keepdim=True))
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in (reference, fused)]
    for step in range(args.steps):
        losses = []
        for model, optimizer in zip((reference, fused), optimizers):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  nn.Linear+GELU loss {losses[0]:.6f}   LinearAct loss {losses[1]:.6f}")

    max_diff = max((p - q).abs().max().item() for p, q in zip(reference.parameters(), fused.parameters()))
    agree = max_diff < 1e-4
    print(f"max |weight difference| after {args.steps} steps: {max_diff:.2e} -> {'AGREE' if agree else 'DISAGREE'}")
    raise SystemExit(0 if agree else 1)


if __name__ == "__main__":
    main()

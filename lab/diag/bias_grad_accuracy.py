"""Where the fp32 bias gradient's error comes from, on CUDA: the case of the
model-speed issue (M = K = 1024, N = 1, sigmoid, alpha = -2, 20 seeds),
against a float64 reference, for PyTorch (addmm + sigmoid, autograd) and
for gemm_act, with operands drawn as randn and with B scaled by K^-1/2, and
gemm_act's error split into its parts:

  y        the forward's Y (what sigmoid's backward reads)
  sum      our dbias against our own dZ summed in float64 (the reduction alone)
  sigmoid only:
  dZ       activation_backward's dZ against gY * y (1 - y) from our own Y in float64
  from Y   gY * y (1 - y) on our Y, summed in float64, against the reference

    python lab/diag/bias_grad_accuracy.py [--seeds 20] [--m 1024 --k 1024 --n 1]
        [--activation sigmoid] [--alpha -2]
"""

import argparse

import torch

import torch_gemm_act as tga


def rel(x, ref):
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--m", type=int, default=1024)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--activation", default="sigmoid")
    p.add_argument("--alpha", type=float, default=-2.0)
    args = p.parse_args()
    act = args.activation
    twin = tga.activations.torch_module(act)
    for scale_name, scale in (("randn", 1.0), ("randn / sqrt(K)", args.k ** -0.5)):
        worst = {}
        for seed in range(args.seeds):
            g = torch.Generator(device="cuda").manual_seed(seed)
            a = torch.randn(args.m, args.k, device="cuda", generator=g)
            b = torch.randn(args.k, args.n, device="cuda", generator=g) * scale
            bias = torch.randn(args.n, device="cuda", generator=g)
            gy = torch.randn(args.m, args.n, device="cuda", generator=g)

            a64, b64, bias64, gy64 = (t.double().requires_grad_() for t in (a, b, bias, gy))
            y64 = twin(torch.addmm(bias64, a64, b64, alpha=args.alpha))
            (ref,) = torch.autograd.grad(y64, bias64, gy64)

            bt = bias.clone().requires_grad_()
            y_pt = twin(torch.addmm(bt, a, b, alpha=args.alpha))
            (db_pt,) = torch.autograd.grad(y_pt, bt, gy)

            bo = bias.clone().requires_grad_()
            y_ours = tga.gemm_act(a, b, bo, activation=act, alpha=args.alpha)
            (db_ours,) = torch.autograd.grad(y_ours, bo, gy)

            # The parts: our backward pass on our own Y, and a float64 one.
            saved = y_ours.detach()
            dz, db_pass = torch.ops.gemm_act.activation_backward(gy, saved, bias, act, 0.01)
            dz_ref = gy.double() * saved.double() * (1 - saved.double()) if act == "sigmoid" else None
            parts = {
                "dbias pytorch": rel(db_pt, ref),
                "dbias gemm_act": rel(db_ours, ref),
                "y pytorch": rel(y_pt.detach(), y64.detach()),
                "y gemm_act": rel(saved, y64.detach()),
                "sum (our dZ in float64 vs our dbias)": rel(db_pass, dz.double().sum(0)),
            }
            if dz_ref is not None:
                parts["dbias from our Y in float64"] = rel(dz_ref.sum(0), ref)
                parts["dZ (ours vs float64 on our Y)"] = rel(dz, dz_ref)
            for k, v in parts.items():
                worst[k] = max(worst.get(k, 0.0), v)
        print(f"\n{scale_name}: M={args.m} K={args.k} N={args.n} {act} alpha={args.alpha}, "
              f"worst over {args.seeds} seeds (max abs error / max abs reference)")
        print("  explain:", tga.explain(a, b, bias.requires_grad_(), activation=act, alpha=args.alpha))
        for k, v in worst.items():
            print(f"  {k:40s} {v:.3e}")


if __name__ == "__main__":
    main()

"""Derives the coefficients of act_math.h's log2_normal_tail<kHalf>: a
polynomial p(a) ~ log2 Phi(-a) for a = |z| in [0, 6], evaluated in float by
Horner's rule, whose 2^p is GELU's normal tail for fp16/bf16 results.

The error that matters is q = 2^p's relative error (ln 2 times p's absolute
error), and only where it can move a rounded result:
  - fp16 results are normal for |z| <= ~4.2 (z Phi(z) >= 6.1e-5), where 1% of
    their unit in the last place is 4.9e-6 relative at worst;
  - beyond, z < 0 gives fp16 subnormals (absolute spacing 6e-8, far coarser
    than the error) and bf16 results, whose 1% of an ulp is 3.9e-5.
So the fit weighs |z| <= KNEE fully and the rest by FAR_WEIGHT: a weighted
minimax by Lawson's iteration, then the float coefficients are checked in
float Horner arithmetic (float64 products, rounded to float after each
step, as an FMA does).

    python lab/fit_normal_tail.py            # prints the C++ array and the errors
"""

import argparse

import numpy as np
import torch

LN2 = np.log(2.0)


def log2_tail(a):
    return torch.special.log_ndtr(torch.as_tensor(-a, dtype=torch.float64)).numpy() / LN2


def horner_float(coefficients, x):
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    r = np.full(x.shape, np.float32(coefficients[0]), dtype=np.float64)
    for c in coefficients[1:]:
        r = (r * x + np.float64(np.float32(c))).astype(np.float32).astype(np.float64)
    return r


def fit(degree, knee, far_weight, upper=6.0, iterations=400):
    nodes = np.cos(np.linspace(0, np.pi, 6000)) * upper / 2 + upper / 2
    values = log2_tail(nodes)
    vander = np.vander(nodes, degree + 1)
    importance = np.where(nodes <= knee, 1.0, far_weight)
    w = np.ones_like(nodes)
    for _ in range(iterations):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(vander * sw[:, None], values * sw, rcond=None)
        w = w * np.abs(vander @ c - values) * importance
        w /= w.sum()
    return np.float32(c)


def relative_error(coefficients, a):
    return np.abs(np.exp2(horner_float(coefficients, a) - log2_tail(a)) - 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--degree", type=int, default=7)
    parser.add_argument("--knee", type=float, default=4.5)
    parser.add_argument("--far-weight", type=float, default=0.2)
    args = parser.parse_args()

    c = fit(args.degree, args.knee, args.far_weight)
    a = np.linspace(0, 6, 300001, dtype=np.float32)
    err = relative_error(c, a)
    near = err[a <= args.knee].max()
    far = err[a > args.knee].max()
    print("const float c[] = {" + ", ".join(f"{x:.9e}f" for x in c) + "};")
    print(f"relative error of 2^p in float: {near:.2e} for a <= {args.knee}, {far:.2e} up to 6")
    for t in (6.5, 7.0, 8.0, 10.0):
        print(f"  tail a = {t}: {relative_error(c, np.array([t]))[0]:.2e}")


if __name__ == "__main__":
    main()

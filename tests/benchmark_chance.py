"""What a judge's probability saves (#71, item 5): the labels a judged figure needs for the same
interval when the prediction PPI++ corrects is the judge's probability of pass (``_verdict_chance``)
in place of its 0/1 verdict, and what choosing the cases to label by the judge's uncertainty
(active inference, Zrnic and Candès 2024) would save on top.

    python tests/benchmark_chance.py [--cases 200000]

The judge reads each answer as a score s = a(2y - 1) + noise (a: how well it tells right from
wrong; its verdict is pass when s > 0, so its sensitivity and specificity are both Phi(a)). Its
probability of pass is either calibrated (Bayes on s, the judge's true odds) or overconfident
(the sigmoid of 2as, the shape token log-probabilities often take: sure where it should not
be). For each, the labels PPI++ needs for one interval width are proportional to
Var(y - lam f) at the best lam, that is Var(y)(1 - rho^2): printed as the share of the labels
the 0/1 verdict needs. Active: each case labelled with probability pi proportional to the
judge's uncertainty sqrt(f(1 - f)) (a tenth of the budget spread evenly, pi at most 1), each
label weighted by 1/pi (Horvitz-Thompson); its variance for an expected budget n is
sum r^2 (1/pi - 1) / N^2, r = y - lam f, and the labels it needs for the uniform design's
variance are found by bisection. The expectations are exact over the simulated population;
nothing here is a sample of runs.
"""

from __future__ import annotations

import argparse

import numpy as np


def needed(r: np.ndarray, weight: np.ndarray, target: float) -> float:
    """The expected labels at which sampling with pi proportional to ``weight`` (a tenth even) has
    the variance ``target``: Horvitz-Thompson's sum r^2 (1/pi - 1) / N^2, by bisection."""
    big = len(r)
    shape = 0.9 * weight / weight.mean() + 0.1  # pi's shape: its mean is 1
    low, high = 1.0, float(big)
    for _ in range(60):
        n = (low + high) / 2
        pi = np.minimum(1.0, shape * n / big)
        var = float(np.sum(r * r * (1 / pi - 1))) / big**2
        low, high = (n, high) if var > target else (low, n)
    return high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200_000)
    args = parser.parse_args()
    rng = np.random.default_rng(71)
    big, n = args.cases, 0.1 * args.cases  # the uniform design labels a tenth
    print("   p  sens=spec  probability    labels vs verdict  active vs uniform (same prediction)")
    for p in (0.5, 0.85, 0.95):
        for a in (0.85, 1.3, 1.65):
            y = (rng.random(big) < p).astype(float)
            s = a * (2 * y - 1) + rng.normal(0.0, 1.0, big)
            verdict = (s > 0).astype(float)
            right, wrong = np.exp(-((s - a) ** 2) / 2) * p, np.exp(-((s + a) ** 2) / 2) * (1 - p)
            shapes = {"calibrated": right / (right + wrong), "overconfident": 1 / (1 + np.exp(-2 * a * s))}
            base = np.var(y) * (1 - np.corrcoef(verdict, y)[0, 1] ** 2)
            for name, f in shapes.items():
                lam = float(np.clip(np.cov(f, y)[0, 1] / np.var(f), 0, 1))
                r = y - lam * f
                ratio = float(np.var(r)) / base
                uniform = float(np.sum(r * r) * (big / n - 1)) / big**2  # the same estimator, pi = n / N
                active = needed(r, np.sqrt(f * (1 - f)) + 1e-9, uniform) / n
                print(f"{p:4.2f}  {verdict[y == 1].mean():9.2f}  {name:13s}  {ratio:17.0%}  {active:17.0%}")


if __name__ == "__main__":
    main()

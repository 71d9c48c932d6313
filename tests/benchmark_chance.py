"""What a judge's probability saves (#71, item 5): the labels a judged figure needs for the same
interval when the prediction PPI++ corrects is the judge's probability of pass (``_verdict_chance``)
in place of its 0/1 verdict, and what choosing the cases to label by the judge's uncertainty
(active inference, Zrnic and Candès 2024) would save on top: as the item reads, and after a pilot.

    python tests/benchmark_chance.py [--cases 200000] [--budget 200] [--pilot 50] [--even 0.5]

The judge reads each answer as a score s = a(2y - 1) + noise (a: how well it tells right from
wrong; its verdict is pass when s > 0, so its sensitivity and specificity are both Phi(a)). Its
probability of pass is calibrated (Bayes on s: the log-odds L = 2as + logit p), overconfident
(the sigmoid of 2as, blind to how often answers are right: the shape token log-probabilities
often take) or sharp (the sigmoid of 3L: sure where it should not be). For each, the labels
PPI++ needs for one interval width are proportional to Var(y - lam f) at the best lam: printed
as the share of the labels the 0/1 verdict needs.

Active: each case labelled with probability pi proportional to an uncertainty (a share ``even``
of the budget spread evenly, pi at most 1), each label weighted by 1/pi (Horvitz-Thompson); its
variance for an expected budget n is sum r^2 (1/pi - 1) / N^2, r = y - lam f, and the labels it
needs for the uniform design's variance (``budget`` labels) are found by bisection. "as read":
the uncertainty sqrt(f(1 - f)) of the judge's own probability, a tenth even. "after a pilot":
``pilot`` uniform labels first (they count, and their estimate is combined with the rest's by
inverse variance), a Platt fit g of the label on the judge's log-odds over them, then pi
proportional to the residual's spread under g, sqrt(g (1 - lam f)^2 + (1 - g)(lam f)^2); the mean
and the worst over 40 pilots drawn at random. The expectations are exact over the simulated
population; only the pilots are samples.
"""

from __future__ import annotations

import argparse

import numpy as np


def needed(r: np.ndarray, weight: np.ndarray, target: float, even: float) -> float:
    """The expected labels at which sampling with pi proportional to ``weight`` (a share ``even``
    even) has the variance ``target``: Horvitz-Thompson's sum r^2 (1/pi - 1) / N^2, by bisection."""
    big = len(r)
    shape = (1 - even) * weight / weight.mean() + even  # pi's shape: its mean is 1
    low, high = 1.0, float(big)
    for _ in range(60):
        n = (low + high) / 2
        pi = np.minimum(1.0, shape * n / big)
        var = float(np.sum(r * r * (1 / pi - 1))) / big**2
        low, high = (n, high) if var > target else (low, n)
    return high


def platt(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logistic regression of ``y`` on ``x`` (slope, intercept), by Newton with a small ridge: a
    pilot whose labels all agree still gives a fit."""
    w, design = np.zeros(2), np.column_stack([x, np.ones_like(x)])
    for _ in range(30):
        p = 1 / (1 + np.exp(-design @ w))
        grad, hess = design.T @ (y - p) - 0.1 * w, -(design.T * (p * (1 - p))) @ design - 0.1 * np.eye(2)
        w -= np.linalg.solve(hess, grad)
    return w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--budget", type=int, default=200, help="the uniform design's labels")
    parser.add_argument("--pilot", type=int, default=50)
    parser.add_argument("--even", type=float, default=0.5, help="the share of the budget spread evenly after a pilot")
    args = parser.parse_args()
    rng = np.random.default_rng(71)
    big, n = args.cases, args.budget
    print(f"labels as a share of the uniform design's {n} (after a pilot of {args.pilot}: mean, worst of 40)")
    print("   p  sens  judge          vs verdict  active as read  after a pilot")
    for p in (0.5, 0.85, 0.95):
        for a in (0.85, 1.3, 1.65):
            y = (rng.random(big) < p).astype(float)
            s = a * (2 * y - 1) + rng.normal(0.0, 1.0, big)
            verdict, odds = (s > 0).astype(float), 2 * a * s + np.log(p / (1 - p))
            base = np.var(y) * (1 - np.corrcoef(verdict, y)[0, 1] ** 2)
            for name, logit in {"calibrated": odds, "overconfident": 2 * a * s, "sharp": 3 * odds}.items():
                logit = np.clip(logit, -30, 30)
                f = 1 / (1 + np.exp(-logit))
                lam = float(np.clip(np.cov(f, y)[0, 1] / np.var(f), 0, 1))
                r = y - lam * f
                uniform = float(np.sum(r * r) * (big / n - 1)) / big**2  # the same estimator, pi = n / N
                read = needed(r, np.sqrt(f * (1 - f)) + 1e-9, uniform, 0.1) / n
                pilot = float(np.sum(r * r) * (big / args.pilot - 1)) / big**2
                rest = 1 / (1 / uniform - 1 / pilot)  # what the labels after the pilot must reach
                totals = []
                for _ in range(40):
                    drawn = rng.choice(big, args.pilot, replace=False)
                    slope, cut = platt(logit[drawn], y[drawn])
                    g = 1 / (1 + np.exp(-(slope * logit + cut)))
                    spread = np.sqrt(g * (1 - lam * f) ** 2 + (1 - g) * (lam * f) ** 2) + 1e-9
                    totals.append(args.pilot + needed(r, spread, rest, args.even))
                after = f"{np.mean(totals) / n:5.0%}, {np.max(totals) / n:5.0%}"
                ratio = float(np.var(r)) / base
                print(f"{p:4.2f}  {verdict[y == 1].mean():4.2f}  {name:13s}  {ratio:10.0%}  {read:14.0%}  {after}")


if __name__ == "__main__":
    main()

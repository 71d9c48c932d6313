"""The grid behind ``_ppi``'s small-sample guard (#62, #71): coverage, half-width and bias of a
judged figure corrected by people's labels, against the labels alone (Wilson's interval).

    python tests/benchmark_grid.py [--runs 2000]

Each cell: 500 judged answers right with chance p (0.5, 0.85, 0.95), a judge of the given
sensitivity and specificity, n labels (20, 50, 100, 200) drawn at random (the one order's
first n); with ``--chance``, the judge's prediction is its probability of pass (calibrated or
overconfident), not its 0/1 verdict. Printed per cell: the share of intervals covering the true rate p, the mean
half-width in points, the mean error of the point, the share the labels alone cover, their
mean half-width, and how often the corrected interval was wider than theirs. The goal (#71):
coverage at least 93% everywhere and at most 97% (or the labels' own coverage + 1 point, where
higher) from 20 labels on, never wider than the labels alone, |bias| under a point from 50.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent)]

import agent_evals as ae  # noqa: E402

JUDGES = [(0.95, 0.95), (0.9, 0.8), (0.8, 0.9), (0.7, 0.7), (0.7, 0.95), (0.95, 0.7)]


def judge(rng: np.random.Generator, y: np.ndarray, p: float, sens: float, spec: float, chance: str) -> np.ndarray:
    """The judge's prediction of each answer: its 0/1 verdict, or (``chance``) its probability of
    pass, read off a score s ~ N(+m1, 1) for a right answer and N(-m0, 1) for a wrong one whose
    sign is the verdict (so its sensitivity and specificity are the cell's): calibrated (Bayes
    on s at the rate p) or overconfident (the sigmoid of 3s, sure where it should not be)."""
    if not chance:
        return np.where(y == 1, rng.random(len(y)) < sens, rng.random(len(y)) >= spec).astype(float)
    m1, m0 = NormalDist().inv_cdf(sens), NormalDist().inv_cdf(spec)
    s = np.where(y == 1, m1, -m0) + rng.normal(0.0, 1.0, len(y))
    if chance == "overconfident":
        return 1 / (1 + np.exp(-3 * s))
    right, wrong = p * np.exp(-((s - m1) ** 2) / 2), (1 - p) * np.exp(-((s + m0) ** 2) / 2)
    return right / (right + wrong)


def cell(
    rng: np.random.Generator, p: float, sens: float, spec: float, n: int, runs: int, chance: str = ""
) -> dict[str, float]:
    covered = alone = wider = 0
    halves, errors, alone_halves = [], [], []
    for _ in range(runs):
        y = (rng.random(500) < p).astype(float)
        f = judge(rng, y, p, sens, spec, chance)
        chosen = rng.permutation(500)[:n]
        fig = ae._ppi([], f.tolist(), list(zip(f[chosen].tolist(), y[chosen].tolist(), strict=True)))
        mean, low, high = fig.mean, fig.low, fig.high
        center, half = ae._wilson(float(y[chosen].mean()), n)
        covered += max(0.0, low) <= p <= min(1.0, high)
        alone += center - half <= p <= center + half
        wider += high - low > 2 * half + 1e-12
        halves.append((high - low) / 2)
        alone_halves.append(half)
        errors.append(mean - p)
    return {
        "coverage": covered / runs,
        "half": 100 * float(np.mean(halves)),
        "bias": 100 * float(np.mean(errors)),
        "alone": alone / runs,
        "alone_half": 100 * float(np.mean(alone_halves)),
        "wider": wider / runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--chance", choices=["calibrated", "overconfident"], help="the judge gives a probability")
    args = parser.parse_args()
    rng = np.random.default_rng(62)
    print("   p  judge      n  covers   ±pts   bias  alone covers  ±pts  wider")
    low, high, bias, wide, over = 1.0, 0.0, 0.0, 0.0, []
    for p in (0.5, 0.85, 0.95):
        for sens, spec in JUDGES:
            for n in (20, 50, 100, 200):
                c = cell(rng, p, sens, spec, n, args.runs, args.chance or "")
                print(
                    f"{p:4.2f}  {sens:.2f}/{spec:.2f}  {n:3d}  {c['coverage']:6.1%}  {c['half']:5.1f}"
                    f"  {c['bias']:+5.2f}"
                    f"  {c['alone']:12.1%}  {c['alone_half']:4.1f}  {c['wider']:5.1%}"
                )
                low, high = min(low, c["coverage"]), max(high, c["coverage"])
                wide = max(wide, c["wider"])
                bias = max(bias, abs(c["bias"])) if n >= 50 else bias
                if c["coverage"] > max(0.97, c["alone"] + 0.01):
                    over.append(f"{p}/{sens}/{spec}/{n}: {c['coverage']:.1%}")
    print(
        f"coverage {low:.1%}-{high:.1%}; |bias| at most {bias:.2f} points from 50 labels; "
        f"wider than the labels alone in {wide:.1%}"
    )
    print(f"over 97% (and the labels' own + 1): {len(over)} cells {'; '.join(over)}")


if __name__ == "__main__":
    main()

"""What choosing the cases to label by the judge's uncertainty would save (#71, item 5) in the
setting ``label`` asks its questions in: two contenders' difference, labelled in the one order
until an anytime-valid interval decides, the cases whose answers agree unasked.

    python tests/benchmark_choice.py [--runs 300] [--cases 2000]

The population is ``benchmark_labels``' (shared difficulty, shared answers), with a judge that
gives a probability of pass: it reads each answer as s = a(2y - 1) + noise and says the sigmoid
of a calibrated, an overconfident or a sharp log-odds (``benchmark_chance``'s three). "uniform":
``label`` as built (every case whose answers differ, both labelled, the prediction the judge's
difference of probabilities). "chosen": the same walk, each such case labelled with chance pi
proportional to the spread of its difference under the *true* calibrated probabilities (an
oracle: no pilot is spent to learn them, so this is the most choosing could save), at least
0.1, at most 1, and weighted by 1/pi (Horvitz-Thompson; lambda fitted on the weighted labels
before each). Both stop at the first case, from ``ae.EARLIEST`` on, where the sequence excludes
0 (``label`` also waits for the gate's figure to agree: left out here, as both walks would wait
alike). Printed, at a true difference of 10 points: how often each decides and the labels it
took on average.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent)]

import agent_evals as ae  # noqa: E402


def stop(z: np.ndarray, cost: np.ndarray) -> tuple[bool, float, float]:
    """The first decision of the confidence sequence over terms ``z``: decided, its sign, labels."""
    t = np.arange(1, len(z) + 1, dtype=float)
    mean = np.cumsum(z) / t
    var = (np.maximum(np.cumsum(z * z) - t * mean * mean, 0) + 2 * ae.PSEUDO) / (t + 2 * ae.PSEUDO - 1)
    rho2 = (-2 * math.log(ae.ALPHA) + math.log(1 - 2 * math.log(ae.ALPHA))) / ae.AIM
    half = np.sqrt(var * 2 * (t * rho2 + 1) / (t * t * rho2) * np.log(np.sqrt(t * rho2 + 1) / ae.ALPHA))
    hit = np.nonzero((t >= ae.EARLIEST) & (np.abs(mean) > half))[0]
    spent = np.cumsum(cost)
    return (True, float(np.sign(mean[hit[0]])), spent[hit[0]]) if len(hit) else (False, 0.0, spent[-1])


def terms(d: np.ndarray, g: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """PPI++ terms lam * mean(g) + (d - lam g) * weight, each lam fitted on the labels before it."""
    big, whole, spread = len(g), g.mean(), g.var(ddof=1)
    k = np.concatenate([[0.0], np.cumsum(weight)[:-1]])
    sg, sd, sgd = (np.concatenate([[0.0], np.cumsum(v * weight)[:-1]]) for v in (g, d, g * d))
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(
            (k >= ae.LABELS_LEAST) & (spread > 0), (sgd - sg * sd / k) / (k - 1) / ((1 + k / big) * spread), 0
        )
    lam = np.clip(np.nan_to_num(lam), 0.0, 1.0)
    return lam * whole + (d - lam * g) * weight


def judge(rng: np.random.Generator, y: np.ndarray, p: float, a: float, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The judge's probability of pass of each answer, and the calibrated one (the oracle's)."""
    s = a * (2 * y - 1) + rng.normal(0.0, 1.0, len(y))
    odds = 2 * a * s + math.log(p / (1 - p))
    said = {"calibrated": odds, "overconfident": 2 * a * s, "sharp": 3 * odds}[kind]
    return 1 / (1 + np.exp(-np.clip(said, -30, 30))), 1 / (1 + np.exp(-odds))


def run(
    rng: np.random.Generator, n: int, a: float, kind: str, gap: float = 0.10
) -> dict[str, tuple[bool, float, float]]:
    u = rng.random(n)
    y_a, y_b = (u < 0.7 + gap).astype(float), (np.where(rng.random(n) < 0.8, u, rng.random(n)) < 0.7).astype(float)
    same = np.where((y_a == 1) & (y_b == 1), rng.random(n) < 0.8, (y_a == 0) & (y_b == 0) & (rng.random(n) < 0.3))
    (f_a, c_a), (f_b, c_b) = judge(rng, y_a, 0.7 + gap, a, kind), judge(rng, y_b, 0.7, a, kind)
    keep = ~same  # a shared answer's difference is 0, known: the walk passes it at no cost
    d, g = (y_a - y_b)[keep], (f_a - f_b)[keep]
    share = keep.mean()
    out = {"uniform": stop(share * terms(d, g, np.ones(len(d))), np.full(len(d), 2.0))}
    spread = np.sqrt(c_a * (1 - c_a) + c_b * (1 - c_b))[keep]
    pi = np.clip(spread / np.quantile(spread, 0.9), 0.1, 1.0)
    chosen = (rng.random(len(d)) < pi).astype(float)
    out["chosen"] = stop(share * terms(d, g, chosen / pi), 2 * chosen)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, default in (("--runs", 300), ("--cases", 2000)):  # cases enough that neither walk runs out
        parser.add_argument(flag, type=int, default=default)
    args, rng = parser.parse_args(), np.random.default_rng(71)
    print(f"{args.cases} cases, {args.runs} runs a setting; labels to decide a 10-point difference")
    print("judge          a     uniform: decided labels   chosen: decided labels   saved")
    for kind in ("calibrated", "overconfident", "sharp"):
        for a in (0.85, 1.3, 1.65):
            found = {name: [0, 0.0] for name in ("uniform", "chosen")}
            for _ in range(args.runs):
                for name, (done, sign, cost) in run(rng, args.cases, a, kind).items():
                    found[name][0] += done and sign > 0
                    found[name][1] += cost / args.runs
            line = f"{kind:13s}  {a:4.2f}"
            for decided, labels in found.values():
                line += f"  {decided / args.runs:16.1%} {labels:6.0f}"
            print(f"{line}  {1 - found['chosen'][1] / found['uniform'][1]:6.1%}")


if __name__ == "__main__":
    main()

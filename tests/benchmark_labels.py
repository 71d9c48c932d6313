"""The simulation behind ``label``'s stopping rule (#71): how many labels a question takes when
they are paired across contenders and asked until an anytime-valid interval decides, against a
fixed sample of uniform, unpaired labels corrected by PPI++ and sized for the same power.

    python tests/benchmark_labels.py [--runs 2000] [--cases 300] [--gap 0.10]

Two contenders answer the same cases, whose difficulty they share as real ones do: each case
has a latent difficulty u; A is right when u < p_A, B when its own draw is (u itself 80% of the
time, a fresh one otherwise). Both right, they give the same answer 80% of the time; both wrong,
30% (a shared answer has one truth, one verdict and takes one label). The judge passes a right
answer with chance ``sens`` and fails a wrong one with chance ``spec``; B games it: its own
wrong answers fail only with chance spec - 0.4. People's labels are the truth.

``label``'s rule, per trajectory: the cases in one random order; each case's answers labelled
(none for a case whose two answers are the same: its difference is 0, known; two otherwise;
"shared asked" counts the labels when a shared answer took one, as before); after each, ``ae._sequence`` over the
(judge's difference, people's difference) pairs so far; decided at the first case, from
``ae.EARLIEST`` on, where the sequence excludes 0 and the gate's own fixed-sample figure
(``ae._ppi`` over the differences, shared answers exact) excludes 0 on the same side; never past
every case. The sequence is recomputed here with numpy, cumulative sums in place of
``ae._sequence``'s loop, and checked against it on the first trajectories.

Printed per judge and true difference: how often it decides (and the wrong way round), the
mean labels it asked, and what a fixed design of the same power needs: uniform unpaired labels
(each contender's own sample, each corrected by PPI++ at the best lambda), and a fixed paired
sample (the same cases of both, a shared answer unasked, the difference corrected); sized by the normal approximation
from the population's own spreads (an oracle: the fixed designs are given their best case).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path[:0] = [str(Path(__file__).parent.parent)]

import agent_evals as ae  # noqa: E402

JUDGES = [(0.95, 0.95), (0.9, 0.8), (0.8, 0.9), (0.7, 0.7), (0.7, 0.95), (0.95, 0.7)]


def population(rng: np.random.Generator, n: int, p_a: float, p_b: float, sens: float, spec: float) -> dict:
    u = rng.random(n)
    own = np.where(rng.random(n) < 0.8, u, rng.random(n))
    y_a, y_b = (u < p_a).astype(float), (own < p_b).astype(float)
    same = np.where((y_a == 1) & (y_b == 1), rng.random(n) < 0.8, (y_a == 0) & (y_b == 0) & (rng.random(n) < 0.3))
    f_a = np.where(y_a == 1, rng.random(n) < sens, rng.random(n) >= spec).astype(float)
    f_b = np.where(y_b == 1, rng.random(n) < sens, rng.random(n) >= max(0.1, spec - 0.4)).astype(float)
    f_b = np.where(same, f_a, f_b)
    return {"y_a": y_a, "y_b": y_b, "f_a": f_a, "f_b": f_b, "same": same}


def sequence(d: np.ndarray, g: np.ndarray, alpha: float = ae.ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Every prefix's point and half-width of ``ae._sequence`` at once."""
    big, whole, spread = len(g), g.mean(), g.var(ddof=1)
    k = np.arange(len(d), dtype=float)  # labels before each
    sg, sd, sgd = (np.concatenate([[0.0], np.cumsum(v)[:-1]]) for v in (g, d, g * d))
    with np.errstate(divide="ignore", invalid="ignore"):
        cov = (sgd - sg * sd / k) / (k - 1)
        lam = np.where((k >= ae.LABELS_LEAST) & (spread > 0), cov / ((1 + k / big) * spread), 0.0)
    lam = np.clip(np.nan_to_num(lam), 0.0, 1.0)
    z = lam * whole + d - lam * g
    t = k + 1
    mean = np.cumsum(z) / t
    squares = np.cumsum(z * z) - t * mean * mean
    var = (np.maximum(squares, 0.0) + 2 * ae.PSEUDO) / (t + 2 * ae.PSEUDO - 1)
    rho2 = (-2 * math.log(alpha) + math.log(1 - 2 * math.log(alpha))) / ae.AIM
    half = np.sqrt(var * 2 * (t * rho2 + 1) / (t * t * rho2) * np.log(np.sqrt(t * rho2 + 1) / alpha))
    return mean, half


def gate_agrees(d: np.ndarray, g: np.ndarray, same: np.ndarray, t: int, sign: float) -> bool:
    """The gate's fixed-sample figure over the first ``t`` cases labelled: ``ae._ppi`` with the
    shared answers exact (their difference is 0), as ``_alike`` gives it."""
    judged = ~same
    labelled = judged.copy()
    labelled[t:] = False
    exact = [0.0] * int(same.sum())
    pairs = list(zip(g[labelled].tolist(), d[labelled].tolist(), strict=True))
    if len(pairs) < ae.LABELS_LEAST:
        return False
    figure = ae._ppi(exact, g[judged].tolist(), pairs)
    return figure.low > 0 if sign > 0 else figure.high < 0


def trajectory(pop: dict, rng: np.random.Generator, check: bool) -> tuple[bool, float, int, int]:
    order = rng.permutation(len(pop["y_a"]))
    d = (pop["y_a"] - pop["y_b"])[order]
    g = (pop["f_a"] - pop["f_b"])[order]
    same = pop["same"][order]
    mean, half = sequence(d, g)
    if check:  # the module's own loop, at a few prefixes
        for t in (ae.EARLIEST, len(d) // 2, len(d)):
            theirs = ae._sequence(list(zip(g[:t].tolist(), d[:t].tolist(), strict=True)), g.tolist())
            assert abs(theirs[0] - mean[t - 1]) < 1e-9 and abs(theirs[2] - theirs[0] - half[t - 1]) < 1e-9
    costs, before = np.cumsum(np.where(same, 0, 2)), np.cumsum(np.where(same, 1, 2))
    for t in np.nonzero((np.arange(1, len(d) + 1) >= ae.EARLIEST) & (np.abs(mean) > half))[0] + 1:
        sign = math.copysign(1.0, mean[t - 1])
        if gate_agrees(d, g, same, int(t), sign):
            return True, sign, int(costs[t - 1]), int(before[t - 1])
    return False, 0.0, int(costs[-1]), int(before[-1])


def fixed_labels(pop: dict, power: float) -> tuple[float, float]:
    """Labels a fixed sample needs for ``power`` at the population's true difference:
    (uniform unpaired, each side corrected apart; paired, the difference corrected)."""
    k = (NormalDist().inv_cdf(1 - ae.ALPHA / 2) + NormalDist().inv_cdf(min(max(power, 0.5), 0.999))) ** 2
    big = len(pop["y_a"])
    delta = abs(pop["y_a"].mean() - pop["y_b"].mean())

    def residual(y: np.ndarray, f: np.ndarray) -> float:
        lam = min(1.0, max(0.0, float(np.cov(f, y)[0, 1] / f.var(ddof=1)))) if f.var() > 0 else 0.0
        return float((y - lam * f).var(ddof=1))

    unpaired = residual(pop["y_a"], pop["f_a"]) + residual(pop["y_b"], pop["f_b"])
    d, g = pop["y_a"] - pop["y_b"], pop["f_a"] - pop["f_b"]
    room_unpaired = room_paired = delta**2 / k - d.var() / big  # the cases' own sampling: the same for both
    per_case = float(np.where(pop["same"], 0, 2).mean())  # a shared answer: its difference known, no label
    each = unpaired / room_unpaired if room_unpaired > 0 else math.inf
    paired = residual(d, g) / room_paired * per_case if room_paired > 0 else math.inf
    return 2 * min(each, big), min(paired, big * per_case)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.10, help="the true difference besides 0 (0.10: ten points)")
    args = parser.parse_args()
    rng = np.random.default_rng(71)
    print(f"{args.cases} cases, {args.runs} trajectories a setting; AIM {ae.AIM}, EARLIEST {ae.EARLIEST}")
    print("judge      diff  decided  wrong  labels  shared asked  fixed-unpaired  fixed-paired  saved")
    worst, savings = 0.0, []
    for gap in (0.0, args.gap):
        for sens, spec in JUDGES:
            decided = wrong = 0
            labels, asked, fixed = [], [], []
            for run in range(args.runs):
                pop = population(rng, args.cases, 0.7 + gap, 0.7, sens, spec)
                done, sign, cost, before = trajectory(pop, rng, check=run < 3)
                decided += done
                truth = pop["y_a"].mean() - pop["y_b"].mean()
                wrong += done and (gap == 0 or sign * truth <= 0)
                labels.append(cost)
                asked.append(before)
                if gap:
                    fixed.append(pop)
            mean_labels = float(np.mean(labels))
            line = f"{sens:.2f}/{spec:.2f}  {gap:+.2f}  {decided / args.runs:7.1%}  {wrong / args.runs:5.1%}"
            line += f"  {mean_labels:6.1f}  {np.mean(asked):12.1f}"
            if gap:
                power = decided / args.runs
                sizes = [fixed_labels(pop, power) for pop in fixed[:200]]
                unpaired, paired = (float(np.mean([s[i] for s in sizes])) for i in (0, 1))
                saved = 1 - mean_labels / unpaired
                savings.append(saved)
                line += f"  {unpaired:14.1f}  {paired:12.1f}  {saved:5.1%}"
            else:
                worst = max(worst, decided / args.runs)
            print(line)
    print(
        f"no difference: decided at most {worst:.1%}; "
        f"a {args.gap * 100:g}-point difference: {min(savings):.1%} to {max(savings):.1%} fewer labels"
    )


if __name__ == "__main__":
    main()

"""The simulation behind --until-decided's design (#51): four ways of looking ten times at two
contenders' paired 0/1 scores, each against one fixed-size paired test of the same power.

    python tests/benchmark_decide.py [--runs 2000]

Designs: ``bonferroni`` (alpha / 10 at each look, the old rule), ``obf`` and ``pocock`` (Lan
and DeMets' alpha-spending, O'Brien-Fleming and Pocock type, boundaries from
``ae._boundaries``), and ``msprt`` (Johari et al.'s mixture sequential probability ratio test, an
anytime-valid test, mixing over N(0, 0.1^2) differences with the variance plugged in). Every
look is a paired t test (the z boundary's level taken at n - 1 degrees of freedom), none
before 10 cases, the last one at the last case. For each size and gap it prints how often a
design decides, how often it decides the wrong way round, the mean cases it asked, and the
cases a single test at the end needs for the same power (the normal approximation with the
true spread: ((z_0.975 + z_power) * sd / gap)^2).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from statistics import NormalDist

sys.path[:0] = [str(Path(__file__).parent.parent)]

import agent_evals as ae  # noqa: E402

LOOKS = 10
Rule = Callable[[int, float, float], bool]  # (n, mean difference, its variance) -> decided


def z_rule(bounds: list[float], sizes: list[int]) -> Rule:
    """Decide where the t statistic, less half a case (as ``ae._decide``), passes the look's z
    boundary taken at n - 1 degrees of freedom."""
    limit = {n: ae._t_quantile(NormalDist().cdf(b), n - 1) for n, b in zip(sizes, bounds, strict=True)}
    return lambda n, mean, var: var > 0 and (abs(mean) - 0.5 / n) / math.sqrt(var / n) > limit[n]


def msprt(alpha: float, tau: float = 0.1) -> Rule:
    """Johari et al. (2017): decide once the mixture likelihood ratio passes 1 / alpha."""

    def rule(n: int, mean: float, var: float) -> bool:
        if var <= 0:
            return False
        ratio = var + n * tau * tau
        log_lr = 0.5 * math.log(var / ratio) + n * n * tau * tau * mean * mean / (2 * var * ratio)
        return log_lr > math.log(1 / alpha)

    return rule


def designs(cases: int) -> dict[str, Rule]:
    step = math.ceil(cases / LOOKS)
    sizes = [n for n in range(step, cases + step, step) if n >= 10]
    sizes[-1] = min(sizes[-1], cases)
    fractions = [n / cases for n in sizes]
    pocock = lambda t: ae.ALPHA * math.log(1 + (math.e - 1) * t)  # noqa: E731
    return {
        "bonferroni": z_rule([NormalDist().inv_cdf(1 - ae.ALPHA / (2 * LOOKS))] * len(sizes), sizes),
        "obf": z_rule(ae._boundaries(fractions, ae.ALPHA), sizes),
        "pocock": z_rule(ae._boundaries(fractions, ae.ALPHA, pocock), sizes),
        "msprt": msprt(ae.ALPHA),
    }


def once(rng: random.Random, rule: Rule, cases: int, p_top: float, p_other: float) -> tuple[int, int]:
    """One run: (cases asked, +1 decided the right way, -1 the wrong way, 0 not decided)."""
    step = math.ceil(cases / LOOKS)
    total = squares = 0.0
    for n in range(1, cases + 1):
        d = (rng.random() < p_top) - (rng.random() < p_other)
        total, squares = total + d, squares + d * d
        if n >= 10 and (n % step == 0 or n == cases):
            mean = total / n
            if rule(n, mean, (squares - n * mean * mean) / (n - 1)):
                return n, 1 if mean > 0 else -1
    return cases, 0


def fixed(power: float, p_top: float, p_other: float) -> float:
    """The cases one paired test at the end needs for ``power`` (independent answers)."""
    power = min(power, 0.9999)
    if power <= ae.ALPHA / 2:
        return 0.0
    unit = NormalDist()
    sd = math.sqrt(p_top * (1 - p_top) + p_other * (1 - p_other))
    return ((unit.inv_cdf(1 - ae.ALPHA / 2) + unit.inv_cdf(power)) * sd / (p_top - p_other)) ** 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    runs = parser.parse_args().runs
    print(f"{'cases':>5} {'gap':>4} {'design':<10} {'decided':>8} {'wrong':>6} {'asked':>6} {'fixed':>6} {'ratio':>6}")
    for cases in (100, 500, 1000):
        rules = designs(cases)
        for gap in (0.0, 0.06, 0.10, 0.15, 0.30):
            p_top = 0.8 if gap < 0.3 else 0.9
            for name, rule in rules.items():
                rng = random.Random(f"{cases}/{gap}/{name}")
                outcomes = [once(rng, rule, cases, p_top, p_top - gap) for _ in range(runs)]
                right = sum(o == 1 for _, o in outcomes) / runs
                wrong = sum(o == -1 for _, o in outcomes) / runs
                asked = sum(n for n, _ in outcomes) / runs
                need = fixed(right, p_top, p_top - gap) if gap else 0.0
                ratio = f"{asked / need:6.2f}" if need else "     -"
                figures = f"{right + wrong:>8.1%} {wrong:>6.1%} {asked:>6.0f} {need:>6.0f} {ratio}"
                print(f"{cases:>5} {gap * 100:>4.0f} {name:<10} {figures}")


if __name__ == "__main__":
    main()

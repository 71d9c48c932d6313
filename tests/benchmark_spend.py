"""The large runs behind #28's claims (the tests run smaller, seeded versions):

    python tests/benchmark_spend.py [--runs 2000]

prints --until-decided's false-decision rate with no true difference (and what naive peeking
gives), its average stopping point with a 10-point gap over 1,000 cases, and --budget's worst
overshoot over many simulated runs.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from statistics import NormalDist

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

from test_decide import obf, sequential  # noqa: E402
from test_spend import simulate  # noqa: E402

import agent_evals as ae  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    runs = parser.parse_args().runs
    rng = random.Random(2026)
    naive_z = NormalDist().inv_cdf(1 - ae.ALPHA / 2)
    null = [sequential(rng, 0.7, 0.7, 1000, obf(1000)) for _ in range(runs)]
    naive = [sequential(rng, 0.7, 0.7, 1000, [naive_z] * 10) for _ in range(runs)]
    gap = [sequential(rng, 0.8, 0.7, 1000, obf(1000)) or 1000 for _ in range(runs)]
    print(f"no difference, {runs} runs of 1,000 cases, 10 looks:")
    print(f"  --until-decided declares a winner in {sum(x is not None for x in null) / runs:.1%}")
    print(f"  a 5% test at every look (naive peeking) would in {sum(x is not None for x in naive) / runs:.1%}")
    print(f"10-point gap (80% vs 70%), {runs} runs: stops after {sum(gap) / runs:.0f} cases on average")
    print(f"  (median {sorted(gap)[runs // 2]}; all 1,000 asked in {sum(x == 1000 for x in gap) / runs:.1%})")
    budget = [simulate(seed) for seed in range(runs)]
    worst = max(charged / limit for limit, charged, _ in budget)
    print(f"--budget, {runs} simulated runs: the most charged was {worst:.1%} of the limit")


if __name__ == "__main__":
    main()

"""--until-decided: stop asking once the comparison is settled, with a false-decision rate that
stays at its level however many rounds are looked at (seeded simulations; the large ones in
tests/benchmark_decide.py)."""

from __future__ import annotations

import random
from statistics import NormalDist

import pytest

import agent_evals as ae
from conftest import EXACT_HELPER, many, read_logs


def sequential(rng: random.Random, p_top: float, p_other: float, cases: int, z: float) -> int | None:
    """One simulated run of two contenders over ``cases`` cases, looked at after each tenth:
    the cases asked when a winner was declared, or None."""
    top = {str(i): float(rng.random() < p_top) for i in range(cases)}
    other = {str(i): float(rng.random() < p_other) for i in range(cases)}
    step = cases // ae._Decider.LOOKS
    for asked in range(step, cases + 1, step):
        keys = [str(i) for i in range(asked)]
        values = {"a": {k: top[k] for k in keys}, "b": {k: other[k] for k in keys}}
        _, settled = ae._decide(values, z)
        if settled:
            return asked
    return None


Z = NormalDist().inv_cdf(1 - ae.ALPHA / (2 * ae._Decider.LOOKS))  # two contenders: one comparison


def test_with_no_difference_a_winner_is_declared_at_most_5_percent_of_the_time() -> None:
    rng = random.Random(7)
    runs = 600
    declared = sum(sequential(rng, 0.7, 0.7, 400, Z) is not None for _ in range(runs))
    naive = sum(sequential(rng, 0.7, 0.7, 400, NormalDist().inv_cdf(0.975)) is not None for _ in range(runs))
    assert declared / runs <= 0.05
    assert naive / runs > 0.10  # a 5% test at each of ten looks: what peeking without spending gives


def test_a_ten_point_gap_over_1000_cases_stops_before_half_on_average() -> None:
    rng = random.Random(11)
    stops = [sequential(rng, 0.8, 0.7, 1000, Z) or 1000 for _ in range(120)]
    assert sum(stops) / len(stops) < 500


SLOPPY = (
    EXACT_HELPER
    + """
import zlib

def sloppy(system, user):
    # wrong on about a third of the cases, the same ones every run
    return user if zlib.crc32(user.encode()) % 3 else "{}"

ae.configure(providers=[ae.FakeProvider({"sloppy": sloppy})])
"""
)


def test_until_decided_stops_asking_a_contender_shown_below_the_top(make_suite, cli) -> None:
    lineup = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: sloppy\n"
    project = make_suite(helper=SLOPPY, config=lineup, cases=many(300))
    code, out, err = cli("compare", "--local", "--until-decided", "-p", "8", cwd=project)
    assert code == 0, err
    assert "decided [ds] fake/sloppy effort=default: below fake/echo effort=default by " in err
    assert "decided [ds] fake/echo effort=default: the top: every other contender is below it" in err
    logs = {log["contender"]["model"]: log for log in read_logs(project)}
    asked = len(logs["fake/sloppy"]["rows"])
    assert asked < 300 and len(logs["fake/echo"]["rows"]) == asked  # paired: the same cases, in one order
    assert {row["case"] for row in logs["fake/sloppy"]["rows"]} == {row["case"] for row in logs["fake/echo"]["rows"]}
    assert f"until decided: {2 * (300 - asked)} case runs not asked" in err
    assert "│ ds      │ fake/echo   │" in out


def test_with_no_difference_every_case_is_asked(make_suite, cli) -> None:
    lineup = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n      effort: [low, high]\n"
    project = make_suite(helper=SLOPPY, config=lineup, cases=many(60))
    code, _, err = cli("compare", "--local", "--until-decided", cwd=project)
    assert code == 0, err
    assert "decided [" not in err and "until decided: 0 case runs not asked" in err
    assert all(len(log["rows"]) == 60 for log in read_logs(project))


def test_until_decided_and_resume_do_not_mix(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", cwd=project)
    code, _, err = cli("compare", "--local", "--until-decided", "--resume")
    assert code == 2 and "--until-decided and --resume cannot be combined" in err


def test_three_contenders_spend_alpha_over_both_comparisons() -> None:
    decider = ae._Decider("ds", None, 3, "exact", [])  # type: ignore[arg-type]
    assert decider.z == pytest.approx(NormalDist().inv_cdf(1 - 0.05 / (2 * 10 * 2)))

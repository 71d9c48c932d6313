"""Numbers you can act on: intervals, paired tests, repeats, baselines, gates and JUnit."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import agent_evals as ae
from conftest import HELPER, ROOT, case_files, many, read_logs


def test_wilson_interval_covers_p_at_the_stated_rate() -> None:
    rng = random.Random(20261202)
    for p in (0.1, 0.5, 0.9):
        covered = 0
        for _ in range(1000):
            values = [1.0 if rng.random() < p else 0.0 for _ in range(50)]
            e = ae._estimate(values)
            covered += e.low <= p <= e.high
        assert 0.90 <= covered / 1000 <= 0.99, (p, covered)


def test_t_interval_over_case_means_covers_the_mean() -> None:
    rng = random.Random(7)
    covered = 0
    for _ in range(1000):
        values = [min(1.0, max(0.0, rng.gauss(0.6, 0.15))) for _ in range(30)]
        e = ae._estimate(values)
        covered += e.method == "t" and e.low <= 0.6 <= e.high
    assert 0.90 <= covered / 1000 <= 0.99


def test_estimates_at_the_edges() -> None:
    assert ae._estimate([]) is None
    perfect = ae._estimate([1.0] * 4)
    assert (
        perfect.mean == 1.0 and perfect.se == 0 and perfect.high == 1.0 and perfect.low < 0.6
    )  # four cases prove little
    assert ae._estimate([0.4]).method == "one case"
    assert ae._estimate([0.25, 0.75]).method == "t"


def test_paired_tests_sanity() -> None:
    keys = [str(i) for i in range(100)]
    answers = {k: float(i % 3 == 0) for i, k in enumerate(keys)}
    same = ae._paired(ae._Values(answers), ae._Values(dict(answers)))
    assert same.p == 1.0 and not same.significant and same.method == "McNemar mid-p"
    right = dict.fromkeys(keys, 1.0)
    wrong30 = {k: 0.0 if i < 30 else 1.0 for i, k in enumerate(keys)}
    worse = ae._paired(ae._Values(wrong30), ae._Values(right))
    assert worse.significant and worse.delta == pytest.approx(-0.3) and worse.p < 1e-6
    few = ae._paired(ae._Values({k: 0.0 if i < 2 else 1.0 for i, k in enumerate(keys)}), ae._Values(right))
    assert not few.significant  # two discordant cases prove nothing
    graded = {k: 0.5 + 0.1 * (i % 5) / 5 for i, k in enumerate(keys)}
    shifted = {k: v - 0.05 for k, v in graded.items()}
    t_test = ae._paired(
        ae._Values(shifted), ae._Values(graded)
    )  # every case moved by exactly the same amount: the exact sign-flip test
    assert t_test.method == "sign-flip" and t_test.p == 2.0 ** (1 - len(keys)) and t_test.significant
    assert t_test.delta == pytest.approx(-0.05)
    noisy = {k: v + (0.01 if i % 2 else -0.01) for i, (k, v) in enumerate(graded.items())}
    assert not ae._paired(ae._Values(noisy), ae._Values(graded)).significant
    assert ae._paired(ae._Values({"a": 1.0}), ae._Values({"b": 1.0})) is None


def test_t_distribution_against_known_values() -> None:
    assert ae._t_cdf(0.0, 5) == pytest.approx(0.5)
    assert ae._t_cdf(2.015, 5) == pytest.approx(0.95, abs=1e-3)
    assert ae._t_cdf(-1.96, 10_000) == pytest.approx(0.025, abs=1e-3)
    assert ae._betainc(2, 3, 0.0) == 0.0 and ae._betainc(2, 3, 1.0) == 1.0


NOISY = """
import itertools
import agent_evals as ae

class Cheap(ae.FakeProvider):
    name = "cheap"
    prefix = "cheap/"
    COST_USD = 0.0001

    def __init__(self):
        # wrong on every 60th call: which case it hits depends on thread timing, how often does not
        calls = itertools.count(1)
        super().__init__({"noisy": lambda s, u: "{}" if next(calls) % 60 == 0 else u})

    def catalog(self):
        return ["cheap/noisy"]

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True), ae.Metric("graded", "half credit")]

    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right, "graded": 0.5 + right / 2})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider(), Cheap()])
"""
LINEUP = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n  cheap:\n    - model: noisy\n"


def test_repeat_prints_intervals_and_the_best_value_states_significance(make_suite, cli) -> None:
    project = make_suite(helper=NOISY, config=LINEUP, cases=many(40))
    code, out, err = cli("compare", "--local", "--repeat", "5", "-v", cwd=project)  # -v: the whole glossary
    assert code == 0, err
    noisy_row = next(line for line in out.splitlines() if line.startswith("│ ds      │ cheap/noisy"))
    cell = noisy_row.split("│")[5]
    low, high = (float(x) for x in cell.split("[")[1].rstrip("] ").split("–"))
    assert low < float(cell.split("%")[0]) < high  # the interval as it is
    best = next(line for line in out.splitlines() if line.startswith("best value [ds]"))
    # cheaper and 1.5 points down, but 40 cases cannot show it is at most 2 points worse: said plainly
    assert best.startswith("best value [ds] (fake/echo effort=default): ")
    assert "cheap/noisy effort=default is cheaper and within 2 points on these cases, but 40 cases cannot show" in best
    assert "[low–high] after exact: its 95% interval, in percent" in out
    logs = {log["contender"]["model"]: log for log in read_logs(project)}
    noisy = logs["cheap/noisy"]
    assert len(noisy["rows"]) == 200 and sorted({row["repeat"] for row in noisy["rows"]}) == [0, 1, 2, 3, 4]
    assert noisy["repeat"] == 5 and noisy["summary"]["intervals"]["exact"]["n"] == 40
    assert noisy["summary"]["intervals"]["exact"]["method"] in ("t", "wilson")
    assert noisy["metrics"][0] == {"name": "exact", "description": "1 when right.", "primary": True, "judged": False}


def test_repeat_from_the_config_and_in_the_matrix(make_suite, cli) -> None:
    project = make_suite(
        config="request_types: [prompt]\ndefaults:\n  repeat: 3\nvendors:\n  fake:\n    - model: echo\n"
    )
    code, out, _ = cli("compare", "-n", cwd=project)
    assert (
        code == 0
        and "│ repeat │" in out
        and out.rstrip().endswith("1 experiment, 12 case runs; nothing was called (dry run)")
    )
    code, out, err = cli("run", "--local", "-c", "a/001")
    assert code == 0, err
    assert [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ a/001")] == [
        "a/001#0",
        "a/001#1",
        "a/001#2",
    ]


def test_error_line_counts_the_errors_and_their_spend(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: broken\n"
    project = make_suite(config=config)
    code, out, _ = cli("compare", "--local", cwd=project)
    assert code == 1  # a contender no case of which was answered
    assert (
        "errors [ds] fake/broken effort=default: 4 of 4 runs (100.0%) raised and are left out of the means; "
        "$0.0000 was spent on them" in out
    )
    (log,) = read_logs(project)
    assert log["summary"]["error_rate"] == 1.0 and log["summary"]["lost_to_errors"]["cost_usd"] == 0.0


PLANTED = """
import os
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        broken = os.environ.get("PLANT_REGRESSION") and int(case.id.split("/")[1]) <= 30
        right = 0.0 if broken else float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""


def cli_run(project, *argv, env=None):
    full = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
    full.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "agent_evals.py"), *argv],
        cwd=project,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_baseline_and_fail_on_regression_through_the_real_cli(make_suite) -> None:
    project = make_suite(
        helper=PLANTED, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n", cases=many(60)
    )
    first = cli_run(project, "compare", "--local")
    assert first.returncode == 0, first.stderr
    (old_log,) = (project / "log" / "agent-evals").glob("*.json")
    same = cli_run(project, "compare", "--local", "--baseline", str(old_log), "--fail-on-regression")
    assert same.returncode == 0, same.stderr
    assert "0 regressions: old and new are means over the n cases both runs answered" in same.stdout
    planted = cli_run(
        project, "compare", "--local", "--baseline", str(old_log), "--fail-on-regression", env={"PLANT_REGRESSION": "1"}
    )
    assert planted.returncode == 1
    assert (
        "│ ds      │ fake/echo │ default │    - │ exact  │ 60 │ 100.0% │ 50.0% │ -50.0 [-63.0, -37.0] │"
        in planted.stdout
    )
    assert "regressed" in planted.stdout
    assert (
        "gate failed: --fail-on-regression: [ds] fake/echo effort=default exact fell 100.0% -> 50.0% "
        "(McNemar mid-p, p=" in planted.stderr
    )
    logs = sorted((project / "log" / "agent-evals").glob("*.json"))
    diff = cli_run(project, "diff", str(logs[0]), str(logs[-1]), "--fail-on-regression")
    assert diff.returncode == 1 and "regressed" in diff.stdout and "1 regression:" in diff.stdout
    back = cli_run(project, "diff", str(logs[-1]), str(logs[0]))
    assert back.returncode == 0 and "improved" in back.stdout


def test_the_pull_requests_summary_in_markdown(make_suite, tmp_path) -> None:
    """GITHUB_STEP_SUMMARY gets the summary added (the tables still print); --format markdown
    prints it instead: how the run ended and what failed it, the ranked table, the best value
    and what regressed against the baseline."""
    project = make_suite(
        helper=PLANTED, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n", cases=many(60)
    )
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    first = cli_run(project, "compare", "--local", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert first.returncode == 0 and "│ ds      │ fake/echo │" in first.stdout  # the tables as ever
    text = summary.read_text()
    assert text.startswith("earlier step\n## agent-evals: ") and "**✅ 60 case runs, no gate failed**" in text
    assert "| 1 | fake/echo effort=default | 100.0% | 0 | $0.0600 |" in text  # the table at a glance
    assert (
        "<details><summary>Every table</summary>\n\n### ds\n\n| # | model |" in text
        and "| 1 | fake/echo | default | - | 100.0% | 0 |" in text
    )
    # a line of its own (a list item: lines side by side in Markdown run into one paragraph), [ds] as text
    assert "\n- best value \\[ds\\] (fake/echo effort=default): 100.0% at $0.0600\n" in text
    (old_log,) = (project / "log" / "agent-evals").glob("*.json")
    argv = ("compare", "--local", "--baseline", str(old_log), "--fail-on-regression", "--format", "markdown")
    planted = cli_run(project, *argv, env={"PLANT_REGRESSION": "1"})
    assert planted.returncode == 1 and planted.stdout.startswith("## agent-evals: ")
    out = planted.stdout
    assert (
        "**❌ 1 problem**\n- gate failed: --fail-on-regression: \\[ds\\] fake/echo effort=default "
        "exact fell 100.0% -> 50.0%" in out
    )
    glance = out.split("### Leaderboard: ds\n\n")[1].split("\n\n")[0].splitlines()
    # five columns; a figure never breaks inside (no-break space and hyphen); each cell short
    assert glance[2] == "| 1 | fake/echo effort=default | 50.0%\u00a0\\[37.7\u201162.3\\] | 0 | $0.0600 |"
    cells = [row.strip("|").split(" | ") for row in glance if "--" not in row]
    assert all(len(row) == 5 for row in cells) and max(len(c) for row in cells for c in row) <= 40
    assert "| 1 | fake/echo | default | - | 50.0% \\[37.7-62.3\\] | 0 |" in out and "│" not in out
    # the regression a failed gate names is not said again, only the cases that flipped under it (a handful); the
    # baseline's table is folded with the rest
    flipped = "- flipped \\[ds\\] fake/echo exact: 30 cases, 30 down and 0 up (the first 3; --format json and the"
    assert f"### Against the baseline\n\n{flipped}" in out
    assert "  - a/001  1 → 1  right → wrong\n  - a/002" in out and "  - a/004" not in out  # {"v": 1}: its one value
    assert "\n\n0 of 1 line compared: no significant change (paired tests over the cases" in out
    assert out.count("exact fell 100.0% -> 50.0%") == 1
    assert "| ds | fake/echo | default | - | exact | 60 | 100.0% | 50.0% | -50.0 \\[-63.0, -37.0\\] |" in out
    assert out.index("<details>") < out.index("### Against the baseline, every line") < out.index("</details>")
    quiet_gate = cli_run(project, *argv[:-3], "--format", "markdown", env={"PLANT_REGRESSION": "1"})
    assert (
        "- regressed: \\[ds\\] fake/echo effort=default exact fell 100.0% -> 50.0%" in quiet_gate.stdout
    )  # no gate: said here
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42"}
    linked = cli_run(project, "compare", "--local", "--format", "markdown", env=env)
    assert "[This run's page](https://github.com/o/r/actions/runs/42): its logs" in linked.stdout
    bent = cli_run(
        project, "compare", "--local", "--format", "markdown", env={**env, "GITHUB_REPOSITORY": "o/r/../../x"}
    )
    assert "run's page" not in bent.stdout
    assert "gate failed" in planted.stderr  # the failures still on STDERR
    unwritable = cli_run(project, "compare", "--local", env={"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "dir.md")})
    assert unwritable.returncode == 1 and "dir.md (No such file or directory; GITHUB_STEP_SUMMARY)" in unwritable.stderr
    fifo = tmp_path / "fifo.md"  # nobody reads it: opened without blocking, it never holds the exit
    os.mkfifo(fifo)
    blocked = cli_run(project, "compare", "--local", env={"GITHUB_STEP_SUMMARY": str(fifo)})
    assert blocked.returncode == 1 and "fifo.md (No such device or address; GITHUB_STEP_SUMMARY)" in blocked.stderr
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # one that is read is still no file to add to
    try:
        read = cli_run(project, "compare", "--local", env={"GITHUB_STEP_SUMMARY": str(fifo)})
    finally:
        os.close(reader)
    assert read.returncode == 1 and "fifo.md (not a regular file: write the summary to one; GITHUB" in read.stderr
    logs = sorted((project / "log" / "agent-evals").glob("*.json"))
    merged = cli_run(project, "report", str(logs[0]), "--format", "markdown")
    assert merged.returncode == 0 and merged.stdout.startswith("## agent-evals: ")
    assert "| 1 | fake/echo effort=default |" in merged.stdout


def test_markdown_escapes_what_would_break_a_table() -> None:
    assert ae._md("a|b <script> *x*") == "a\\|b &lt;script> \\*x\\*"
    # an image or a link a server or a model wrote stays text, and so does a code span
    assert ae._md("![i](http://e/x.png) [t](https://e) `x`") == "\\!\\[i\\](http://e/x.png) \\[t\\](https://e) \\`x\\`"
    assert "\n" not in ae._md("a gate's\nsecond line")  # a line never breaks the table it is in
    assert ae._md_table(["n", "m"], [["1", "x|y"]], [True, False]) == "| n | m |\n|--:|---|\n| 1 | x\\|y |"


def test_baseline_marks_experiments_only_on_one_side(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    code, out, err = cli("compare", "--local", "-e", "low", "--baseline")
    assert code == 0, err
    assert "only in new" in out and "only in old" in out and "baseline: the newest run" in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--fail-under", "70"], 0, ""),
        (
            ["--fail-under", "exact=99"],
            1,
            "gate failed: --fail-under exact=99%: [ds] fake/echo effort=default scored 75.0%",
        ),
        (["--fail-under", "maybe=40%"], 0, ""),
        (["--max-errors", "0"], 0, ""),
        (["--max-errors", "0%"], 0, ""),
    ],
)
def test_gates_pass_and_fail_with_the_figures(make_suite, cli, argv, code, message) -> None:
    cases = {**case_files("ds", "a/001", {"v": 1}, expected={"v": 0})}
    for n in (2, 3, 4):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    project = make_suite(cases=cases)
    got, out, err = cli("compare", "--local", *argv, cwd=project)
    assert got == code, err
    assert message in err
    assert "│ ds      │ fake/echo │" in out  # everything is printed and written whatever the gates say


def test_max_errors_gate_fails(make_suite, cli) -> None:
    project = make_suite(config="request_types: [prompt]\nvendors:\n  fake:\n    - model: broken\n    - model: echo\n")
    code, _, err = cli("compare", "--local", "--max-errors", "10%", cwd=project)
    assert code == 1
    assert "gate failed: --max-errors 10%: [ds] fake/broken effort=default had 4 of 4 runs end in an error" in err
    assert "fake/echo effort=default had" not in err
    code, _, err = cli("compare", "--local", "--max-errors", "3")
    assert code == 1 and "gate failed: --max-errors 3: [ds] fake/broken" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--fail-under", "exct=80"],
            "--fail-under exct=80: the scorer declares no metric 'exct' (did you mean \"exact\"?)",
        ),
        (["--fail-under", "120"], "--fail-under 120: expected a percentage from 0 to 100"),
        (["--max-errors", "many"], "--max-errors many: expected a count (3) or a rate (5%)"),
        (["--max-errors", "²"], "--max-errors ²: expected a count (3) or a rate (5%)"),
        (["--max-errors", "150%"], "--max-errors 150%: expected a percentage from 0 to 100"),
        (["--fail-on-regression"], "--fail-on-regression needs --baseline LOG"),
        (["--baseline", "nowhere.json"], "--baseline nowhere.json: no such file or folder"),
    ],
)
def test_gate_flags_are_checked_before_any_call(make_suite, cli, argv, message) -> None:
    project = make_suite()
    code, out, err = cli("compare", "--local", *argv, cwd=project)
    assert code == 2 and out == "" and message in err, err
    assert not list((project / "log" / "agent-evals").glob("*.json")) if (project / "log").exists() else True


def test_junit_has_a_testcase_per_run_with_errors_and_failures(make_suite, cli, tmp_path) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: broken\n    - model: mute\n"
    cases = {**case_files("ds", "a/001", {"v": 1}), **case_files("ds", "a/002", {"v": 2}, expected={"v": 9})}
    project = make_suite(config=config, cases=cases)
    target = tmp_path / "reports" / "junit.xml"
    target.parent.mkdir()
    code, _, err = cli("compare", "--local", "--junit", str(target), cwd=project)
    assert code == 1, err  # a contender no case of which was answered
    root = ET.parse(target).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "3", "2")
    suites = {s.get("name"): s for s in root}
    echo = suites["ds · fake/echo effort=default"]
    failure = echo.find("testcase[@name='a/002']/failure")
    assert failure.get("message") == "score 0.0%" and json.loads(failure.text) == {"got": {"v": 2}}
    broken = suites["ds · fake/broken effort=default"].find("testcase[@name='a/001']/error")
    assert broken.get("type") == "ProviderError" and "connection refused" in broken.get("message")
    mute = suites["ds · fake/mute effort=default"].find("testcase[@name='a/001']/failure")
    assert mute.get("message") == "model failed: no JSON object in the reply"


def test_diff_reads_a_killed_runs_journal_and_names_bad_input(make_suite, cli) -> None:
    project = make_suite()
    code, _, _ = cli("compare", "--local", cwd=project)
    (journal,) = (project / "log" / "agent-evals").glob("*.jsonl")
    code, out, _ = cli("diff", str(journal), str(journal))
    assert code == 0 and "0 regressions" in out and "│ exact  │ 4 │ 100.0% │ 100.0% │        +0.0 │ 1 (Holm 1) │" in out
    code, _, err = cli("diff", "nowhere", str(journal))
    assert code == 2 and "diff OLD nowhere: no such file or folder" in err
    bad = project / "log" / "agent-evals" / "x.20260101-000000-000.jsonl"
    bad.write_text("[]\n")
    code, _, err = cli("diff", str(bad), str(journal))
    assert (
        code == 2
        and "diff OLD: log/agent-evals/x.20260101-000000-000.jsonl: not an agent-evals log of this version" in err
    )


def test_a_baseline_with_no_earlier_run_says_so_in_its_own_words(make_suite, cli) -> None:
    project = make_suite()
    code, out, err = cli("compare", "--local", "--baseline", cwd=project)
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: --baseline: no logs or journals in log/agent-evals; no earlier run to compare with; "
        "run once without --baseline first, or name a log"
    )
    code, _, err = cli("compare", "--local", "--baseline", "nowhere.json")
    assert code == 2 and err.strip() == "error: --baseline nowhere.json: no such file or folder"
    code, _, err = cli("compare", "--local", "--resume")
    assert code == 2 and "nothing to resume" in err


def test_junit_escapes_what_xml_cannot_hold_as_backslash_x() -> None:
    import agent_evals as ae

    case = ae.Case("a/001", "ds", "a", "in")
    experiment = ae.Experiment(ae.Contender("fake/echo"), ae.FakeProvider(), "ds", [case], 1)
    experiment.results = [ae.RunResult(experiment, case, error="ProviderError: bad\x01byte\x1f")]
    text = ae._junit_xml([experiment])
    assert "bad\\x01byte\\x1f" in text and "\x01" not in text and "\\experiment" not in text
    assert ET.fromstring(text.split("\n", 1)[1]).find(".//error").get("message").startswith("ProviderError: bad")


def test_under_60_cases_of_graded_scores_the_interval_is_said_to_be_rough(make_suite, cli) -> None:
    import random

    # why: 80% of scores at 1.0, the rest anywhere below; Student's t at 10 cases covers ~90%, not 95%
    rng, covered = random.Random(3), 0
    for _ in range(2000):
        sample = [1.0 if rng.random() < 0.8 else rng.random() for _ in range(10)]
        estimate = ae._estimate(sample)
        covered += estimate.low <= 0.9 <= estimate.high
    assert covered / 2000 < 0.93
    graded = HELPER.replace("right = float(reply.output == case.expected)", "right = 0.25 * (int(case.id[-1]) % 4)")
    line = "intervals [ds]: under 60 cases of graded exact scores, Student's t can run narrow"
    for n, said in ((12, True), (59, True), (60, False)):
        project = make_suite(helper=graded, cases=many(n))
        code, out, err = cli("compare", "--local", cwd=project)
        assert code == 0 and "exact" in out, err
        assert (line in out) is said, out
        project.rename(project.with_name(f"done{n}"))


def test_cases_edited_since_the_baseline_are_named_and_left_out_of_every_comparison(make_suite, cli) -> None:
    project = make_suite(cases=many(20))
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    baseline = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    # a third of the expected answers rewritten (the model now "fails" them), and one input reworded
    folder = project / "evals" / "datasets" / "ds" / "cases" / "a"
    for n in range(1, 8):
        (folder / f"{n:03d}" / "expected.json").write_text('{"v": "rewritten"}')
    (folder / "020" / "input.txt").write_text('Question for a/020, reworded.\nAnswer: {"v": 20}\n')
    code, out, err = cli("compare", "--local", "--baseline", str(baseline), "--fail-on-regression")
    assert code == 0, err  # not the same questions: never a regression
    edited = "a/001, a/002, a/003, a/004, a/005 and 3 more"
    assert f"edited [ds]: 8 cases changed since the earlier run (input, expected or metadata: {edited})" in out
    exact = next(line for line in out.splitlines() if "│ exact " in line and "fake/echo" in line)
    assert "│ 12 │ 100.0% │ 100.0% │" in exact  # n: the 12 cases that are the same question
    newest = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    code, out, err = cli("diff", str(baseline), str(newest), "--fail-on-regression")
    assert code == 0 and "edited [ds]: 8 cases changed since the earlier run" in out, err
    code, out, err = cli("compare", "--local", "--baseline", str(baseline), "--format", "json")
    assert code == 0, err
    assert {tuple(line["edited"]) for line in json.loads(out)["baseline"]} == {
        tuple(sorted([f"a/{n:03d}" for n in range(1, 8)] + ["a/020"]))
    }
    # --resume asks an edited case again instead of keeping the answer to the old question
    code, _, err = cli("compare", "--local", "--resume", str(baseline))
    assert code == 0 and "resume: 8 cases edited since that run are asked again (ds/a/001, ds/a/002" in err, err
    assert "resume: 12 finished cases" in err


# Wrong on exactly one of its three asks for each case ending in 1, 2 or 3, when FLIP is set: flaky, not broken.
FLIP = """{'coin': (lambda seen: lambda s, u: '{}' if (seen.__setitem__(u, seen.get(u, 0) + 1), seen[u])[1] % 3 == 2
                 and __import__('os').environ.get('FLIP') and u.split()[2][-2] in '123' else u)({})}"""


def test_repeats_report_flaky_cases_and_pass_k_and_the_gates_say_how_they_count(make_suite, cli, monkeypatch) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: coin\n"
    project = make_suite(fakes=FLIP, config=config, cases=many(30))
    code, _, err = cli("compare", "--local", "--repeat", "3", "-p", "1", cwd=project)
    assert code == 0, err
    baseline = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    monkeypatch.setenv("FLIP", "1")
    code, out, err = cli("compare", "--local", "--repeat", "3", "-p", "1", "--fail-under", "80")
    assert code == 0, err  # the mean, 90%, passes: a flaky case counts as the share of its repeats right
    flaky = "9 flaky (a/001, a/002, a/003, a/011, a/012 and 4 more)"
    # 21 cases right 3 of 3, 9 right 2 of 3: pass^k = (21 + 9 * C(2, k) / C(3, k)) / 30, unbiased at every k
    passes = "pass^1 90.0% [84.2–95.8], pass^2 80.0% [68.4–91.6], pass^3 70.0% [52.1–83.3]"
    assert f"repeats [ds] fake/coin effort=default: {passes}, {flaky}" in out
    code, _, err = cli("compare", "--local", "--repeat", "3", "-p", "1", "--fail-under", "80", "--flaky", "wrong")
    assert code == 1 and "gate failed: --fail-under exact=80%: [ds] fake/coin effort=default scored 70.0%" in err
    code, out, err = cli("compare", "--local", "--repeat", "3", "-p", "1", "--format", "json")
    (row,) = json.loads(out)["datasets"][0]["leaderboard"]
    assert row["repeat"] == 3 and row["pass_k"] == pytest.approx(0.7) and len(row["flaky"]) == 9
    assert [(p["k"], p["cases"]) for p in row["pass_ks"]] == [(1, 30), (2, 30), (3, 30)]
    assert [p["mean"] for p in row["pass_ks"]] == pytest.approx([0.9, 0.8, 0.7])
    assert all(p["low"] < p["mean"] < p["high"] for p in row["pass_ks"])
    # against a run where every repeat agreed: 9 cases turned flaky is a regression, unless left out
    argv = ["compare", "--local", "--repeat", "3", "-p", "1", "--baseline", str(baseline), "--fail-on-regression"]
    code, _, err = cli(*argv)
    assert code == 1 and "gate failed: --fail-on-regression: [ds] fake/coin" in err
    code, out, err = cli(*argv, "--flaky", "exclude")
    assert code == 0, err
    assert "flaky [ds] fake/coin effort=default: 9 cases whose repeats disagree are left out (--flaky exclude)" in out
    newest = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    code, out, err = cli("diff", str(baseline), str(newest), "--fail-on-regression", "--flaky", "exclude")
    assert code == 0, err


def test_latency_is_quoted_as_p50_and_p95(make_suite, cli) -> None:
    assert ae._latency([]) is None
    assert ae._latency([float(n) for n in range(1, 101)]) == (50.0, 95.0)
    assert ae._latency([3.0]) == (3.0, 3.0)
    project = make_suite(cases=many(10))
    code, out, err = cli("compare", "--local", "-v", "--format", "json", cwd=project)
    assert code == 0, err
    (row,) = json.loads(out)["datasets"][0]["leaderboard"]
    assert 0 <= row["latency_p50_s"] <= row["latency_p95_s"] < 5
    assert "latency [ds] fake/echo effort=default: p50 " in err and " a case run" in err
    code, _, err = cli("compare", "--local", "--html", "report.html")
    assert code == 0, err
    assert "(p50 " in (project / "report.html").read_text()


GRADED = """
import os
import agent_evals as ae

seen = {}

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("quality", "graded 0-1", primary=True)]

    def call(self, case, reply, context):
        n = seen[case.id] = seen.get(case.id, -1) + 1
        if os.environ.get("BREAK") and case.id.endswith("7") and n % 3 == 1:
            raise RuntimeError("the scorer broke on one repeat")
        spread = float(os.environ.get("SPREAD", "0.05"))
        # each case its own level, each repeat a little apart from the others
        value = float(os.environ.get("BASE", "0.8")) * (1 - spread * (int(case.id[-1]) % 4)) + spread * (n % 3 - 1)
        return ae.Score(value=value, metrics={"quality": value})

ae.configure(suite="graded", adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""


def test_flaky_exclude_on_graded_scores_never_switches_the_regression_gate_off(make_suite, cli, monkeypatch) -> None:
    """Graded scores' repeats nearly always differ: --flaky exclude would leave every case out and
    pass a 0.80 -> 0.20 fall without a line (#51). The gate fails instead, saying why."""
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"
    project = make_suite(helper=GRADED, config=config, cases=many(20))
    code, _, err = cli("compare", "--local", "--repeat", "3", "-p", "1", cwd=project)
    assert code == 0, err
    baseline = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    monkeypatch.setenv("BASE", "0.2")
    argv = ["compare", "--local", "--repeat", "3", "-p", "1", "--baseline", str(baseline), "--fail-on-regression"]
    code, _, err = cli(*argv, "--flaky", "exclude")  # refused by name before any call: the baseline is graded
    assert (
        code == 2 and "error: --flaky exclude: quality is graded in the run --baseline reads (a case scored 0." in err
    )
    assert re.search(r"scored 0\.\d{1,3}\)", err), err  # a figure, never 0.7967929708050071
    assert len(sorted((project / "log" / "agent-evals").glob("*.json"))) == 1  # nothing ran
    code, _, err = cli("diff", str(baseline), str(baseline), "--flaky", "exclude")  # diff refuses it alike
    assert code == 2 and "--flaky exclude: quality is graded in the run diff reads" in err, err
    code, _, err = cli(*argv, "--flaky", "wrong")  # each case at its worst repeat: the fall is judged
    assert code == 1 and "quality fell" in err and "-> " in err, err


def test_an_error_is_a_wrong_repeat_when_the_gates_judge_repeats(make_suite, cli, monkeypatch) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"
    project = make_suite(helper=GRADED, config=config, cases=many(20))
    monkeypatch.setenv("BASE", "1.0")
    monkeypatch.setenv("SPREAD", "0")
    monkeypatch.setenv("BREAK", "1")  # cases ending in 7 raise on one repeat of three
    argv = ["compare", "--local", "--repeat", "3", "-p", "1", "--fail-under", "100"]
    code, _, err = cli(*argv, cwd=project)
    assert code == 0, err  # the mean over the repeats answered: 100%, the errors named in a warning
    code, _, err = cli(*argv, "--flaky", "wrong")
    assert code == 1 and "gate failed: --fail-under quality=100%: [ds] fake/echo effort=default scored 90.0%" in err


def test_a_flaky_rule_that_leaves_a_gate_nothing_to_judge_fails_it_saying_why() -> None:
    """0/1 scores whose every case now disagrees with itself: --flaky exclude leaves nothing, and
    the gate fails (it passed before: a run it could not judge)."""
    contender = {"model": "m", "effort": None, "temperature": None, "max_tokens": None, "provider": "p"}

    def record(repeats: list[list[float]]) -> dict:
        rows = [
            {"case": f"c{i}", "repeat": r, "metrics": {"acc": v}}
            for i, values in enumerate(repeats)
            for r, v in enumerate(values)
        ]
        return {"dataset": "ds", "contender": contender, "rows": rows}

    key = ("m", "ds")
    old, new = {key: record([[1.0] * 3] * 10)}, {key: record([[1.0, 0.0, 1.0]] * 10)}
    gates = ae._Gates(on_regression=True, primary="acc", flaky="exclude")
    (failed,) = gates.check([], ae._compare_runs(old, new, ["acc"], "exclude"))
    assert "acc: --flaky exclude left no case to judge (10 cases whose repeats disagree" in failed


SUMMARIZED = """
import os
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        n = int(case.id.split("/")[1])
        broken = os.environ.get("PLANT") and (case.dataset == "fell" and n <= 30 or case.dataset == "dipped" and n <= 2)
        right = 0.0 if broken else float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""


def test_the_summary_counts_what_it_compared_and_shows_every_primary_delta(make_suite, cli, monkeypatch) -> None:
    """A regression, a fall too small to show, and a dataset only the new run has: the Markdown
    summary's counts, deltas and p-values are the JSON's (#51: it counted lines in one run only
    as unchanged, hid the deltas of falls not shown significant, and left a p unlabelled)."""
    cases = {}
    for dataset in ("fell", "dipped"):
        for i in range(1, 61):
            cases |= case_files(dataset, f"a/{i:03d}", {"v": i})
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"
    project = make_suite(helper=SUMMARIZED, config=config, cases=cases)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    old_log = project / "baseline"  # the run, all of its experiments (the runs below log beside it)
    shutil.copytree(project / "log" / "agent-evals", old_log, ignore=shutil.ignore_patterns("*.jsonl"))
    for i in range(1, 11):  # a dataset the baseline never had
        for rel, text in case_files("new", f"a/{i:03d}", {"v": i}).items():
            (project / rel).parent.mkdir(parents=True, exist_ok=True)
            (project / rel).write_text(text)
    monkeypatch.setenv("PLANT", "1")
    argv = ("compare", "--local", "--baseline", str(old_log))
    code, out, err = cli(*argv, "--format", "markdown")
    assert code == 0, err
    code, doc, err = cli(*argv, "--format", "json")
    lines = {(c["dataset"], c["metric"]): c for c in json.loads(doc)["baseline"]}
    fell, dipped = lines[("fell", "exact")], lines[("dipped", "exact")]
    assert fell["verdict"] == "regressed" and dipped["verdict"] == "no significant change"
    assert lines[("new", "exact")]["verdict"] == "only in new"
    summary = out[out.index("### Against the baseline") :]
    assert "| fell | fake/echo | default | - | exact | 60 | 100.0% | 50.0% | -50.0" in summary
    assert "| dipped | fake/echo | default | - | exact | 60 | 100.0% | 96.7% | -3.3" in summary  # shown, not moved
    # said as found: no significant change, with the largest move and its p (never "unchanged")
    assert "1 of 2 lines compared: no significant change" in summary and "; 1 only in the new run" in summary
    assert "; the largest move: \\[dipped\\] fake/echo effort=default exact fell 100.0% -> 96.7% (McNemar" in summary
    assert f"{dipped['p']:.2g} (Holm {dipped['p_holm']:.2g})" in summary, summary  # each p says which it is


FLAT = """
import os
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("graded", "as GRADE says", primary=True)]

    def call(self, case, reply, context):
        return ae.Score(value=float(os.environ["GRADE"]), metrics={"graded": float(os.environ["GRADE"])})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""


@pytest.mark.parametrize(("cases", "fails"), [(40, True), (6, True), (2, False)])
def test_a_fall_on_every_case_fails_the_gate_by_the_exact_sign_flip_test(make_suite, cli, monkeypatch, cases, fails):
    """A graded metric at 0.80, then 0.20, on every case: the paired t has no variance, the
    exact sign-flip test gives p = 2^(1-n): the gate fails from 6 cases (it said "not enough
    data" and passed a 60-point drop), and 2 cases give no verdict."""
    from conftest import many

    project = make_suite(helper=FLAT, cases=many(cases))
    monkeypatch.setenv("GRADE", "0.8")
    assert cli("compare", "--local", cwd=project)[0] == 0
    monkeypatch.setenv("GRADE", "0.2")
    code, out, err = cli("compare", "--local", "--baseline", "--fail-on-regression", "--format", "json")
    (line,) = [c for c in json.loads(out)["baseline"] if c["metric"] == "graded"]
    assert line["p"] == pytest.approx(2.0 ** (1 - cases))
    assert (code, line["verdict"]) == ((1, "regressed") if fails else (0, "no significant change")), err


FLIPPING = """
import json, os
import agent_evals as ae

def model(system, user):  # BROKEN: the first eight cases answer the wrong city
    n = int(user.split("Question for a/")[1][:3])
    return json.dumps({"capital": f"Wrong {n}" if os.environ.get("BROKEN") and n <= 8 else f"Right {n}"})

class A(ae.Adapter):
    def call(self, case, model_):
        completion = model_.complete("", case.input)
        return ae.Reply(output=json.loads(completion.text), raw=completion.text, usage=completion.usage)

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("right", "the capital named", primary=True)]

    def call(self, case, reply, context):
        value = float(reply.output["capital"].startswith("Right"))
        return ae.Score(value=value, metrics={"right": value})

ae.configure(adapter=A(), scorer=S(), providers=[ae.FakeProvider({"model": model})])
"""


def test_the_cases_that_flipped_are_under_the_line_that_moved_everywhere_it_is_shown(make_suite, tmp_path) -> None:
    """A run whose first eight cases now answer the wrong city: the terminal names the
    regression and, under it, the first three cases that flipped (old answer -> new, right ->
    wrong) and where the rest are; --format json and the HTML report (with the comparison in
    it) list all eight; the pull request's summary shows the handful under the regression."""
    project = make_suite(
        helper=FLIPPING, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: model\n", cases=many(20)
    )
    assert cli_run(project, "compare", "--local", "-q").returncode == 0
    (old,) = (project / "log" / "agent-evals").glob("*.json")
    report = tmp_path / "report.html"
    argv = ["compare", "--local", "--baseline", str(old)]
    shown = cli_run(project, *argv, "--html", str(report), env={"BROKEN": "1"})
    document = json.loads(cli_run(project, *argv, "--format", "json", env={"BROKEN": "1"}).stdout)
    summary = cli_run(project, *argv, "--format", "markdown", env={"BROKEN": "1"}).stdout
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index(
        "flipped [ds] fake/model right: 8 cases, 8 down and 0 up (the first 3; --format json and the report list all)"
    )
    assert lines[at + 1 : at + 4] == [f"  a/00{n}  Right {n} → Wrong {n}  right → wrong" for n in (1, 2, 3)]
    assert "regressed" in lines[at - 2]  # the table's line, just above
    (line,) = document["baseline"]
    assert line["verdict"] == "regressed" and len(line["flipped"]) == 8
    assert line["flipped"][7] == {
        "case": "a/008",
        "old": 1.0,
        "new": 0.0,
        "old_output": {"capital": "Right 8"},
        "new_output": {"capital": "Wrong 8"},
    }
    page = report.read_text()
    assert "<h2>Against the baseline</h2>" in page and "<strong>regressed: [ds] fake/model" in page
    assert all(f"<code>a/00{n}  Right {n} → Wrong {n}  right → wrong</code>" in page for n in range(1, 9))
    assert "<details open><summary>flipped [ds] fake/model right: 8 cases, 8 down and 0 up</summary>" in page
    assert "- regressed: \\[ds\\] fake/model effort=default right fell 100.0% -> 60.0%" in summary
    assert "  - a/001  Right 1 → Wrong 1  right → wrong" in summary and "a/004  Right 4" not in summary
    new = max((project / "log" / "agent-evals").glob("*.json"))
    diff = cli_run(project, "diff", str(old), str(new)).stdout
    assert "8 down and 0 up (the first 3; compare --baseline OLD lists all with --format json or --html)" in diff
    assert "  a/003  Right 3 → Wrong 3  right → wrong\n" in diff

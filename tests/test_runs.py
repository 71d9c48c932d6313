"""agent-evals runs, and a run named by its stamp wherever a run is named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import many


def test_an_unwritable_log_folder_fails_before_any_call(make_suite, cli) -> None:
    if os.geteuid() == 0:
        project = make_suite()
        (project / "log").write_text("a file where the folder should be")
    else:  # pragma: no cover - CI runs as root
        project = make_suite()
        (project / "log").mkdir()
        (project / "log").chmod(0o500)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 2 and out == ""
    assert err.startswith("error: log/agent-evals: cannot write the logs there")


RAISES = "(_ for _ in ()).throw(RuntimeError('boom'))"


@pytest.mark.parametrize(
    ("raising", "top"),
    [
        # "other" raises on a fifth of the cases and is right on the rest: 100% of what it answered, 80%
        # ranked; "top" is wrong on a tenth: 90%, first in the tables
        ("in '05'", "90.0%"),
        # both 90% with errors counted as wrong, "other" by raising on a tenth: the tables rank fewer
        # errors first (#51: runs named the one that raised, the first log it found)
        ("== '1'", "90.0%"),
    ],
    ids=["errors counted as wrong", "an exact tie"],
)
def test_runs_ranks_as_the_tables_do(make_suite, cli, raising: str, top: str) -> None:
    fakes = f"""{{'other': lambda s, u: {RAISES} if u.split()[2][-2] {raising} else u,
                'top': lambda s, u: '{{}}' if u.split()[2][-2] == '1' else u}}"""
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: other\n    - model: top\n"
    project = make_suite(fakes=fakes, config=config, cases=many(20))
    code, out, _ = cli("compare", "--local", cwd=project)
    assert code == 0 and "then cost: 1 fake/top effort=default, 2 fake/other" in out, out
    code, out, _ = cli("runs")
    assert code == 0 and f"exact {top} fake/top [ds] │ complete" in out, out


def test_runs_lists_every_run_newest_first_with_what_it_holds(make_suite, cli, tmp_path) -> None:
    project = make_suite(cases=many(3))
    assert cli("compare", "--local", cwd=project)[0] == 0
    assert cli("compare", "--local", "--repeat", "2")[0] == 0
    folder = project / "log" / "agent-evals"
    # a run killed before its logs: only its journal; and a log that is not one
    (folder / "ds--fake-echo--default.20990101-000000-000.jsonl").write_text('{"journal": 1}\n{"case": "a/001"}\n')
    (folder / "broken.20000101-000000-000.json").write_text("{not json")
    code, out, err = cli("runs", cwd=project / "evals" / "datasets")
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.startswith("│ 2")]
    assert len(lines) == 4 and out.startswith("4 runs in ")
    assert lines[0].startswith("│ 20990101-000000-000 │ -") and "stopped before its logs: --resume it" in lines[0]
    assert "│ compare │ toy " not in out  # the suite's own name, not the example's
    assert "│           1 │     6 │      0 │" in lines[1] and "exact 100.0% fake/echo [ds] │ complete" in lines[1]
    assert "│           1 │     3 │      0 │" in lines[2]
    assert "unreadable: broken.20000101-000000-000.json" in lines[3]
    code, _, err = cli("runs", str(tmp_path / "nowhere"))
    assert code == 2 and "runs: no such folder" in err
    code, _, err = cli("runs", "--helper", str(tmp_path / "nowhere"))
    assert code == 2 and err.startswith("error: --helper ") and "no such file" in err


def test_runs_names_a_folder_it_cannot_read(make_suite, cli, tmp_path, monkeypatch) -> None:
    # a folder it may not list (as root every folder lists: the refusal is stood in for)
    folder = tmp_path / "locked"
    folder.mkdir()

    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", refuse)
    code, _, err = cli("runs", str(folder), cwd=tmp_path)
    assert code == 2 and err.strip() == "error: runs: locked cannot be read (Permission denied)"


def test_runs_outside_a_suite_reads_log_here_and_says_when_there_is_none(cli, tmp_path) -> None:
    folder = tmp_path / "log" / "agent-evals"
    folder.mkdir(parents=True)
    code, out, err = cli("runs", cwd=tmp_path)
    assert code == 0 and out == "" and err.strip() == "no runs in log/agent-evals"
    # a log of another shape, and a run with a readable log beside an unreadable one
    (folder / "x.20250101-000000-000.json").write_text("[1, 2]")
    header = {
        "suite": "s",
        "command": "compare",
        "dataset": "ds",
        "contender": {"model": "fake/echo"},
        "summary": {"cases": 2, "errors": 1},
        "not_run": ["a/002"],
    }
    (folder / "ok.20260101-000000-000.json").write_text(json.dumps(header))
    (folder / "bad.20260101-000000-000.json").write_text("{")
    code, out, err = cli("runs")
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.startswith("│ 2")]
    assert "partial: 1 not run; unreadable: bad.20260101-000000-000.json" in lines[0]
    assert "unreadable: x.20250101-000000-000.json (not an agent-evals log)" in lines[1]
    # a header whose fields have other shapes is unreadable too, never a traceback
    for summary in ({"cases": "2"}, {"cases": 2, "means": [1]}, {"cases": 2, "usage": {"cost_usd": "x"}}):
        (folder / "odd.20270101-000000-000.json").write_text(json.dumps({**header, "summary": summary}))
        code, out, err = cli("runs")
        assert code == 0 and "unreadable: odd.20270101-000000-000.json" in out, err
    # so is a row whose judge's spend is not a number (runs sums it in its judge column)
    row = {"case": "a/001", "judge_usage": {"cost_usd": "x"}}
    (folder / "odd.20270101-000000-000.json").write_text(json.dumps({**header, "rows": [row]}))
    code, out, err = cli("runs")
    assert code == 0 and "unreadable: odd.20270101-000000-000.json" in out and "judge_usage" in out, err


def test_a_stamp_names_a_run_wherever_a_run_is_named(make_suite, cli) -> None:
    """What ``agent-evals runs`` lists is what report, diff, rescore, --resume and
    --baseline take: a whole stamp, an unambiguous prefix of one, or ``latest``."""
    project = make_suite(cases=many(3))
    assert cli("compare", "--local", cwd=project)[0] == 0
    assert cli("compare", "--local")[0] == 0
    first, second = sorted({p.name.split(".")[1] for p in (project / "log" / "agent-evals").glob("*.json")})
    code, out, err = cli("diff", first, second)
    assert code == 0 and "regression" in out, err
    code, out, err = cli("report", "latest")
    assert code == 0 and "leaderboard: ranked by exact (errors counted as wrong) then cost: 1 fake/echo" in out, err
    unique = next(first[:n] for n in range(9, len(first) + 1) if not second.startswith(first[:n]))
    code, _, err = cli("rescore", unique)  # a prefix that only one run has
    assert code == 0, err
    code, out, err = cli("compare", "--local", "--baseline", "latest")
    assert code == 0 and "baseline: latest" in out, err
    assert cli("compare", "--local", "--resume", second)[0] == 0
    code, out, err = cli("diff", first[:8], "latest")  # every run today shares the day
    assert code == 2 and "runs (" in err and "with that stamp in log/agent-evals; agent-evals runs lists them" in err
    code, _, err = cli("report", "20991231")
    assert code == 2 and "report 20991231: no run with that stamp in log/agent-evals" in err


def test_report_with_no_log_reads_the_newest_run_as_baseline_and_label_do(make_suite, cli, tmp_path) -> None:
    project = make_suite()
    code, out, err = cli("report", cwd=project)
    assert code == 2 and "report: no run in log/agent-evals yet; run agent-evals compare, or name a LOG" in err
    assert cli("compare", "--local", "-q", cwd=project)[0] == 0
    assert cli("compare", "--local", "-q", "-m", "fake/echo", "--repeat", "2", cwd=project)[0] == 0
    code, out, err = cli("report", "--format", "json", cwd=project)
    assert code == 0, err
    (first,) = json.loads(cli("report", "--format", "json", "latest", cwd=project)[1])["datasets"][0]["leaderboard"]
    (row,) = json.loads(out)["datasets"][0]["leaderboard"]
    oldest = min((project / "log" / "agent-evals").glob("*.json"))
    (once,) = json.loads(cli("report", "--format", "json", str(oldest), cwd=project)[1])["datasets"][0]["leaderboard"]
    assert row == first and row["runs"] == 2 * once["runs"]  # the newest run's two repeats, not the first run


def test_runs_on_a_narrow_terminal_fits_the_window_or_says_so(make_suite, cli) -> None:
    """runs at 40 and 19 columns: what every run shares goes above the table, columns go until it
    fits, and each stamp still reads apart (it was a 166-character table, unsaid)."""
    from test_cli import at_terminal

    project = make_suite()
    for _ in range(2):
        assert cli("compare", "--local", "-q", cwd=project)[0] == 0
    for width in (40, 19):
        screen = at_terminal(width, "runs", cwd=project)
        table = [line for line in screen.splitlines() if line.startswith(("┌", "│", "├", "└"))]
        assert table and all(len(line) <= width for line in table), screen
        assert len({line for line in table[3:-1]}) == 2, screen  # the two runs read apart

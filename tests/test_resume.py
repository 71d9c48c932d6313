"""Runs that never lose work: the journal, Ctrl-C, SIGINT and kill -9, and --resume asking the rest once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, ROOT, many, read_logs

HELPER = EXACT_HELPER


CONFIG = """
request_types: [prompt]
defaults:
  retry_backoff: 0.01
vendors:
  openai:
    - model: gpt-4.1-mini
"""


def case_of(request) -> str:
    return request.body["messages"][-1]["content"].split()[2].rstrip(".")


def start(project: Path, server: OpenAICompatible, *argv: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "OPENROUTER_BASE_URL": server.url + "/api/v1",
        "OPENROUTER_API_KEY": "sk-test-long-run",
        "PYTHONIOENCODING": "utf-8",
    }
    env.pop("PYTHONPATH", None)
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local", *argv]
    return subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.survival
def test_sigint_keeps_what_finished_and_resume_asks_each_case_once(make_suite) -> None:
    with OpenAICompatible(
        lambda r: Answer(**{**chat_answer(r.body["messages"][-1]["content"]).__dict__, "delay": 0.3})
    ) as server:
        project = make_suite(helper=HELPER, config=CONFIG, cases=many(20))
        child = start(project, server, "-p", "2")
        wait_for(lambda: len(server.chats()) >= 6)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        assert child.returncode == 130, err
        assert "interrupted: the cases in flight may finish" in err
        (log,) = read_logs(project)
        finished = [row["case"] for row in log["rows"]]
        assert 6 <= len(finished) < 20 and not any(row["error"] for row in log["rows"])
        assert sorted(finished + log["not_run"]) == [f"a/{i:03d}" for i in range(1, 21)]
        assert out.startswith(
            f"partial: interrupted after {len(finished)} of 20 cases; finish with: "
            "agent-evals compare --local -p 2 --resume"
        )
        assert f"│ ds ({len(finished)} of 20) │ openai/gpt-4.1-mini │ default │    - │ 100.0% │" in out  # partial, said
        asked_before = len(server.chats())
        assert asked_before == len(finished)  # the cases in flight finished in the grace period
        resumed = start(project, server, "-p", "4", "--resume")
        out, err = resumed.communicate(timeout=30)
        assert resumed.returncode == 0, err
        assert f"resume: {len(finished)} finished cases" in err
    assert Counter(case_of(r) for r in server.chats()) == Counter({f"a/{i:03d}": 1 for i in range(1, 21)})
    newest = read_logs(project)[-1]
    assert len(newest["rows"]) == 20 and newest["not_run"] == [] and newest["resumed_from"] == log["stamp"]
    assert "│ 100.0% │      0 │" in out


@pytest.mark.survival
def test_sigkill_loses_nothing_the_server_answered(make_suite, capsys) -> None:
    answered: list[str] = []

    def respond(request):
        answered.append(case_of(request))
        return Answer(**{**chat_answer(request.body["messages"][-1]["content"]).__dict__})

    def slow(request):
        time.sleep(0.3)
        return respond(request)

    with OpenAICompatible(slow) as server:
        project = make_suite(helper=HELPER, config=CONFIG, cases=many(12))
        child = start(project, server, "-p", "2")
        # each answer reaches the journal on disk as it is read, while the run goes on
        wait_for(lambda: len(answered) >= 4 and set(answered[:4]) <= journaled(project))
        assert child.poll() is None  # still running: 12 cases at 0.3 s, two at a time
        child.kill()
        child.wait(10)
        done = list(answered)
    (journal,) = (project / "log" / "agent-evals").glob("*.jsonl")
    text = journal.read_text()
    assert text.endswith("}\n")  # whole rows only, however the process ended
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["contender"]["model"] == "openai/gpt-4.1-mini"
    rows = {row["case"] for row in lines[1:]}
    assert set(done[:4]) <= rows
    assert not list((project / "log" / "agent-evals").glob("*.json"))  # the final log never came
    _, record = ae._read_record(journal, "the journal")  # as report and --resume read it: no line cut short
    assert {row["case"] for row in record["rows"]} == rows and capsys.readouterr().err == ""


@pytest.mark.survival
def test_after_a_sigkill_resume_asks_again_only_the_cases_that_were_in_flight(make_suite) -> None:
    """-p 8, killed mid-run, then --resume: a case is asked twice only if it was in flight
    at the kill (its answer never reached the journal), so at most 8 are asked again."""

    def slow(request):
        time.sleep(0.2)
        return chat_answer(request.body["messages"][-1]["content"])

    with OpenAICompatible(slow) as server:
        project = make_suite(helper=HELPER, config=CONFIG, cases=many(60))
        child = start(project, server, "-p", "8")
        wait_for(lambda: len(journaled(project)) >= 20)
        child.kill()
        child.wait(10)
        kept = journaled(project)
        resumed = start(project, server, "-p", "8", "--resume")
        _, err = resumed.communicate(timeout=60)
        assert resumed.returncode == 0, err
        asked = Counter(case_of(r) for r in server.chats())
    twice = [case for case, n in asked.items() if n > 1]
    assert set(asked) == {f"a/{i:03d}" for i in range(1, 61)} and max(asked.values()) <= 2
    assert len(twice) <= 8 and not set(twice) & kept, (twice, len(kept))
    assert len(read_logs(project)[-1]["rows"]) == 60


@pytest.mark.survival
def test_resume_from_a_killed_runs_journal_and_retry_errors(make_suite, cli, monkeypatch) -> None:
    failing = {"a/002"}

    def respond(request):
        if case_of(request) in failing:
            return Answer(400, {"error": {"message": "bad request"}})
        return chat_answer(request.body["messages"][-1]["content"])

    with OpenAICompatible(respond) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test-long-run")
        project = make_suite(helper=HELPER, config=CONFIG, cases=many(4))
        code, _, err = cli("compare", "--local", "-p", "1", cwd=project)
        assert code == 0, err
        log_dir = project / "log" / "agent-evals"
        (journal,) = log_dir.glob("*.jsonl")
        # pretend the first run was killed: only its journal, cut mid-line, survives
        for path in log_dir.glob("*.json"):
            path.unlink()
        journal.write_text(journal.read_text()[:-20])
        server.requests.clear()
        code, _, err = cli("compare", "--local", "--resume", str(journal))
        assert code == 0, err
        assert [case_of(r) for r in server.chats()] == ["a/004"]  # a/002's error is kept, the cut line re-asked
        server.requests.clear()
        failing.clear()
        code, out, err = cli("compare", "--local", "--resume", "--retry-errors")
        assert code == 0, err
        assert [case_of(r) for r in server.chats()] == ["a/002"]
        assert "│ 100.0% │      0 │" in out


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("nowhere.json", "--resume nowhere.json: no such file or folder"),
        ("evals/eval_helper.py", "--resume evals/eval_helper.py: not an agent-evals log or journal"),
        ("evals", "--resume evals: no logs or journals in evals; nothing to resume"),
    ],
)
def test_resume_errors(make_suite, cli, arg, message) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", "--resume", arg, cwd=project)
    assert code == 2 and message in err


def test_resume_of_an_unreadable_log(make_suite, cli) -> None:
    project = make_suite()
    log_dir = project / "log" / "agent-evals"
    log_dir.mkdir(parents=True)
    (log_dir / "x.20260101-000000-000.json").write_text('{"rows": []}')
    code, _, err = cli("compare", "--local", "--resume", cwd=project)
    assert code == 2 and "x.20260101-000000-000.json: not an agent-evals log of this version (contender is None)" in err


# Fake models that hold their cases: each interrupt below is a real SIGINT sent to a
# child process, never a timer that could interrupt the test runner itself.
HOLDING = """{
    "hold": lambda s, u: (__import__("time").sleep(60 if "a/001" in u else 0.0), u)[1],
    "slow": lambda s, u: (__import__("time").sleep(1.0 if "a/001" in u else 0.2), u)[1],
}"""


def start_offline(project: Path, *argv: str) -> tuple[subprocess.Popen[str], list[str], list[str]]:
    """``agent-evals compare --local ARGV`` as a child: it, and its STDOUT and STDERR lines,
    collected as they come (a test can wait for a line before it signals)."""
    import threading

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, "-m", "agent_evals", "compare", "--local", *argv]
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    err: list[str] = []
    for stream, lines in ((child.stdout, out), (child.stderr, err)):
        threading.Thread(target=lambda s=stream, into=lines: into.extend(iter(s.readline, "")), daemon=True).start()
    return child, out, err


def journaled(project: Path) -> set[str]:
    return {
        json.loads(line).get("case")
        for path in (project / "log" / "agent-evals").glob("*.jsonl")
        for line in path.read_text().splitlines()[1:]
    }


@pytest.mark.survival
def test_first_ctrl_c_lets_cases_in_flight_finish(make_suite) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: slow\n    - model: echo\n"
    project = make_suite(fakes=HOLDING, config=config, cases=many(8))
    child, out, err = start_offline(project, "-p", "2", "-j", "1")
    wait_for(lambda: "a/002" in journaled(project))  # a/001 is in flight for a second, a/003 for 0.2 s
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=30) == 130, err
    wait_for(lambda: out and out[-1].endswith("\n") and "leaderboard" in "".join(out))
    assert any("interrupted: the cases in flight may finish for up to 10s" in line for line in err)
    (log,) = read_logs(project)  # the second contender never started
    finished = [row["case"] for row in log["rows"]]
    # the case in flight finished in the grace period, with its answer: not an error
    assert finished[0] == "a/001" and log["rows"][0]["score"] == 1.0
    assert log["not_run"] and len(finished) + len(log["not_run"]) == 8
    assert "".join(out).startswith(f"partial: interrupted after {len(finished)} of 16 cases")


@pytest.mark.survival
def test_second_ctrl_c_abandons_the_cases_in_flight(make_suite) -> None:
    project = make_suite(
        fakes=HOLDING, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: hold\n", cases=many(3)
    )
    child, _, err = start_offline(project, "-p", "2")
    wait_for(lambda: {"a/002", "a/003"} <= journaled(project))  # a/001 holds for a minute
    child.send_signal(signal.SIGINT)
    wait_for(lambda: any(line.startswith("interrupted: ") for line in err))
    child.send_signal(signal.SIGINT)
    # well before the 10 s grace, let alone the minute a/001 holds
    assert child.wait(timeout=8) == 130, err
    assert any("abandoning the cases still in flight" in line for line in err)
    (log,) = read_logs(project)
    # the case abandoned in flight is a row of its own (an error --resume asks again), never lost
    assert log["not_run"] == [] and [row["case"] for row in log["rows"]] == ["a/001", "a/002", "a/003"]
    assert log["rows"][0]["error"].startswith("Abandoned: still in flight after")


def test_resume_when_everything_finished_asks_nothing(make_suite, cli) -> None:
    project = make_suite(cases=many(2))
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    code, out, err = cli("compare", "--local", "--resume", "log/agent-evals")
    assert code == 0 and "resume: 2 finished cases" in err and "│ 100.0% │" in out
    assert len(read_logs(project)) == 2


def test_a_stopped_run_leaves_later_experiments_not_run(make_suite, cli) -> None:
    fakes = (
        "{'refused': lambda s, u: (_ for _ in ()).throw("
        "__import__('agent_evals').ProviderError('key refused', stops_run=True))}"
    )
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: refused\n    - model: echo\n"
    project = make_suite(fakes=fakes, config=config, cases=many(3))
    code, out, err = cli("compare", "--local", "-p", "1", "-j", "1", cwd=project)
    assert code == 1 and "│ ds (1 of 3) │ fake/refused │" in out and "fake/echo" not in out
    assert err.strip().endswith(
        "error: the run stopped after 1 of 6 cases: key refused\n"
        "finish with: agent-evals compare --local -p 1 -j 1 --resume"
    )
    (log,) = read_logs(project)
    assert log["not_run"] == ["a/002", "a/003"]
    # runs counts what was not asked, the experiment that never started included
    code, out, err = cli("runs")
    assert code == 0 and "partial: 5 not run" in out, out


@pytest.mark.survival
def test_a_journal_holds_whole_rows_in_order_and_nothing_after_its_close(tmp_path) -> None:
    rows = [f'{{"case": "a/{i:05d}", "pad": "{"x" * 700}"}}\n'.encode() for i in range(3000)]  # 2.2 MB
    path = tmp_path / "x.jsonl"
    journal = ae._Journal(path)
    for n, row in enumerate(rows, 1):
        journal.write(row)
        if n % 1000 == 0:  # on disk as written: whole rows, no padding
            assert path.read_bytes() == b"".join(rows[:n])
    journal.close()
    journal.close()
    journal.write(b"late\n")  # a row after the close is dropped, never written into a closed file
    assert path.read_bytes() == b"".join(rows)
    with pytest.raises(FileExistsError):  # created exclusively: two runs never share one
        ae._Journal(path)

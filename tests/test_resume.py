"""Runs that never lose work: the journal, Ctrl-C, SIGINT and kill -9, and --resume asking the rest once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from servers import Answer, BatchAPI, OpenAICompatible, chat_answer
from test_batch import (
    JUDGED_SCORER,
    POLL,
    HeldJudge,
    _interrupted_batch_run,
    _journal,
    _resume_hint,
    _stopped_when,
    judged_answer,
    toy_answer,
    toy_project,
)
from test_decide import CLOSE
from test_rate_limits import FOUR, Timed
from test_spend_once import LINEUP, SYNC, cases
from test_survival import hostile_helper, run, suite_maker

import agent_evals as ae
from conftest import EXACT_HELPER, ROOT, many, read_logs, run_agent_evals, walks


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """The toy suite the batch's resume tests run (test_batch's)."""
    return toy_project(tmp_path)


@pytest.fixture
def suite(tmp_path: Path):
    """A suite maker, as the survival tests have it."""
    return suite_maker(tmp_path)


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


def wait_for(predicate, seconds: float = 300.0) -> None:  # a hang failsafe
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
        out, err = child.communicate(timeout=300)
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
        out, err = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, err
        assert f"resume: {len(finished)} finished cases" in err
        # what is left is forecast, not the whole run again
        assert f"over {20 - len(finished)} case runs left ({len(finished)} done)" in err.replace("\n  ", " "), err
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
        _, err = resumed.communicate(timeout=300)
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
    assert child.wait(timeout=300) == 130, err
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
    assert child.wait(timeout=300) == 130, err  # a hang failsafe: a/001 holds for a minute
    assert any("abandoning the cases still in flight" in line for line in err)
    (log,) = read_logs(project)
    # the case abandoned in flight is a row of its own (an error --resume asks again), never lost
    assert log["not_run"] == [] and [row["case"] for row in log["rows"]] == ["a/001", "a/002", "a/003"]
    assert log["rows"][0]["error"].startswith("Abandoned: still in flight after")  # at the second Ctrl-C (said above)


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


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_or_ctrl_c_during_the_wait_then_resume_collects_the_batch_and_sends_nothing_twice(
    toy: Path, sent: signal.Signals, code: int
) -> None:
    api = BatchAPI(toy_answer, polls=10**9)  # never done while the first run waits
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        returncode, _, err = _interrupted_batch_run(toy, api, server, sent)
        assert returncode == code, err
        assert "(batch_1, 4 requests): it goes on at the provider; --resume --batch collects it" in err
        assert len(api.submitted) == 1 and api.sync == 0
        api.polls = 1  # the batch ends at OpenRouter meanwhile
        done = run_agent_evals(
            "run", "--batch", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals", "--resume", cwd=toy, env=env
        )
        assert done.returncode == 0, done.stderr
        assert len(api.submitted) == 1 and api.sync == 0  # collected, never sent again
    assert "(batch_1, 4 requests): completed, 4 of 4 done" in done.stderr
    newest = read_logs(toy)[-1]
    assert [row["error"] for row in newest["rows"]] == [None] * 4
    assert newest["summary"]["usage"]["cost_usd"] == pytest.approx(0.0008)


def test_the_printed_resume_command_as_printed_collects_the_batch_and_pays_nothing_twice(toy: Path) -> None:
    import shlex

    api = BatchAPI(toy_answer, polls=10**9)
    with OpenAICompatible(api) as server:
        hint = _resume_hint(toy, api, server)
        assert hint == "agent-evals run --batch --local -m openai/gpt-4o-mini -d animals --resume"
        api.polls = 1  # the batch ends at the provider meanwhile
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals(*shlex.split(hint)[1:], cwd=toy, env=env)
        assert done.returncode == 0, done.stderr
        assert len(api.submitted) == 1 and api.sync == 0  # 0 synchronous calls, 0 resubmissions
    assert [row["error"] for row in read_logs(toy)[-1]["rows"]] == [None] * 4


def test_a_resume_without_batch_still_collects_the_batches_that_run_sent(toy: Path) -> None:
    api = BatchAPI(toy_answer, polls=10**9)
    with OpenAICompatible(api) as server:
        _resume_hint(toy, api, server)
        api.polls = 1
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals(
            "run", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals", "--resume", cwd=toy, env=env
        )
        assert done.returncode == 0, done.stderr
        assert len(api.submitted) == 1 and api.sync == 0  # the batch's answers, never asked again
    assert "resume: 1 batch that run sent are collected first" in done.stderr
    newest = read_logs(toy)[-1]
    assert [row["error"] for row in newest["rows"]] == [None] * 4
    assert newest["summary"]["usage"]["cost_usd"] == pytest.approx(0.0008)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda b: {**b, "id": 12345}, "an id that is no batch's: 12345"),
        (lambda b: {**b, "id": "../../key"}, "an id that is no batch's: '../../key'"),
        (lambda b: {**b, "id": "batch_1\nerror: forged"}, "an id that is no batch's: 'batch_1\\nerror: forged'"),
        (lambda b: {**b, "requests": {k: v.replace("#0", "#²") for k, v in b["requests"].items()}}, "case#repeat"),
        (lambda b: {**b, "requests": []}, "no requests"),
    ],
    ids=["numeric id", "a path for an id", "newlines in the id", "a repeat in superscript", "no requests"],
)
def test_a_batch_record_that_cannot_be_read_stops_the_resume_naming_it(toy: Path, damage, said) -> None:
    api = BatchAPI(toy_answer, polls=10**9)
    with OpenAICompatible(api) as server:
        hint = _resume_hint(toy, api, server)
        journal = _journal(toy)
        lines = journal.read_text().splitlines()
        lines = [json.dumps({"batch": damage(json.loads(x)["batch"])}) if '"id"' in x else x for x in lines]
        journal.write_text("\n".join(lines) + "\n")
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals(*hint.split()[1:], cwd=toy, env=env)
        assert len(api.submitted) == 1 and api.sync == 0, done.stderr  # nothing sent again
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert done.returncode == 2 and journal.name in line and "batch record" in line and said in line, done.stderr
    assert "may be running at the provider" in line


def test_a_batch_record_cut_short_or_sent_without_its_id_stops_the_resume_naming_it(toy: Path) -> None:
    api = BatchAPI(toy_answer, polls=10**9)
    with OpenAICompatible(api) as server:
        hint = _resume_hint(toy, api, server)
        journal = _journal(toy)
        whole = journal.read_text().splitlines()
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        # killed while writing the id's record: the line ends half way
        cut = [x[: len(x) // 2] if '"id"' in x else x for x in whole]
        journal.write_text("\n".join(cut))
        first = run_agent_evals(*hint.split()[1:], cwd=toy, env=env)
        # killed between sending the batch and writing its id: the round's record alone
        journal.write_text("\n".join(x for x in whole if '"id"' not in x) + "\n")
        second = run_agent_evals(*hint.split()[1:], cwd=toy, env=env)
        assert len(api.submitted) == 1 and api.sync == 0  # nothing sent again
    assert first.returncode == 2 and "a --batch record, was cut short" in first.stderr, first.stderr
    assert second.returncode == 2 and "was being sent when the run ended, and its id was never written" in second.stderr


def test_a_run_stopped_while_the_judges_batch_waits_resumes_collecting_it_and_pays_nothing_twice(
    make_suite, tmp_path
) -> None:
    helper = JUDGED_SCORER + "\nae.configure(adapter=ae.EchoAdapter(), scorer=S())\n"
    lineup = "request_types: [prompt]\ndefaults:\n  max_tokens: 64\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    project = make_suite(helper=helper, config=lineup + "judge: openai/gpt-4.1-mini\n", cases=many(4))
    api = HeldJudge(judged_answer)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}

        def waiting() -> bool:  # the judge's batch sent, and looked at while it waits
            return len(api.submitted) >= 2 and api.looks >= 6

        code, _, err = _stopped_when(project, server, ["run", "--batch", "--local"], waiting, signal.SIGTERM)
        assert code == 143 and len(api.submitted) == 2, err
        assert "it goes on at the provider; --resume --batch collects it" in err
        api.held = False  # the judge's batch ends at OpenRouter meanwhile
        done = run_agent_evals("run", "--batch", "--local", "--resume", "--format", "json", cwd=project, env=env)
        assert done.returncode == 0, done.stderr
    assert len(api.submitted) == 2 and api.sync == 0  # the judge's batch collected, never sent again
    document = json.loads(done.stdout)
    assert document["judge"]["usage"]["cost_usd"] == pytest.approx(4 * 0.001)  # paid once
    (row,) = document["datasets"][0]["leaderboard"]
    assert row["errors"] == 0 and row["metrics"]["correct"]["mean"] == 0.75
    assert row["cost_usd"] == pytest.approx(4 * 0.0002)


def test_a_decided_run_stopped_by_the_budget_resumes_its_rounds_as_if_never_stopped(
    make_suite, cli, tmp_path, monkeypatch
) -> None:
    lineup = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: sloppy\n"
    project = make_suite(helper=CLOSE, config=lineup, cases=many(400))
    code, _, whole = cli("compare", "--local", "--until-decided", "-p", "3", cwd=project)
    assert code == 0 and "decided [ds] fake/sloppy" in whole, whole
    uninterrupted = {log["contender"]["model"]: {row["case"] for row in log["rows"]} for log in read_logs(project)}
    assert 40 < len(uninterrupted["fake/echo"]) < 400
    project.rename(tmp_path / "whole")
    project = make_suite(helper=CLOSE, config=lineup, cases=many(400))
    seen = walks(monkeypatch)
    code, _, err = cli("compare", "--local", "--until-decided", "--budget", "0.1", "-p", "3", cwd=project)
    assert code == 1 and "error: budget reached: $0.1000 of $0.1000; " in err, err
    assert "decided [" not in err
    # a case run the budget stopped before it spent goes back to waiting; the run's end finds it stopped
    ends = [walk[-1] for walk in seen.values()]
    assert len(seen) == 800 and ends.count("done") == 100 and ends.count("stopped") == 700, ends
    code, _, err = cli("compare", "--local", "--until-decided", "--resume", "-p", "3", cwd=project)
    assert code == 0, err
    assert "resume: 100 finished cases" in err
    # the same decision after the same cases as the run that never stopped, and no case asked twice
    assert [line for line in err.splitlines() if line.startswith("decided [")] == [
        line for line in whole.splitlines() if line.startswith("decided [")
    ]
    last = max(log["stamp"] for log in read_logs(project))
    newest = {log["contender"]["model"]: log for log in read_logs(project) if log["stamp"] == last}
    assert {model: {row["case"] for row in log["rows"]} for model, log in newest.items()} == uninterrupted
    first = {log["contender"]["model"]: log["rows"] for log in read_logs(project) if log["stamp"] != last}
    for model, rows in first.items():  # what the first run asked is carried over as it was, not asked again
        assert all(row in newest[model]["rows"] for row in rows) and sum(map(len, first.values())) == 100


@pytest.mark.parametrize("sent", ["SIGINT", "SIGTERM"])
def test_a_paced_run_stopped_sends_nothing_it_held_back_and_resume_asks_it(make_suite, sent) -> None:
    """A key limited to 2 requests a second, four contenders at -p 4: the run is paced, then
    stopped (Ctrl-C, or a scheduler's SIGTERM). The requests the pace held back are never sent
    (at most those in flight arrive after the signal: they went before it), the held cases are
    not run (never error rows), and --resume asks them."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import ROOT, run_agent_evals

    bucket = Timed(2.0, 2.0)
    project = make_suite(helper=EXACT_HELPER, config=FOUR, cases=many(10))
    with OpenAICompatible(bucket) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-shared", "NO_COLOR": "1"}
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "AGENT_EVALS"))}
        child = subprocess.Popen(
            [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local", "-p", "4"],
            cwd=project,
            env={**environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        while not (bucket.refused >= 10 and bucket.served >= 6) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)  # paced: requests wait their turn
        at = time.monotonic()
        child.send_signal(getattr(signal, sent))
        _, err = child.communicate(timeout=300)
        late = [t for t in bucket.arrived if t > at]
        served = bucket.served
        bucket.rate = bucket.burst = 100.0  # what the resume asks needs no second wait at 2 a second
        resumed = run_agent_evals("compare", "--local", "--resume", "--format", "json", cwd=project, env=env, limit=120)
    assert child.returncode == 128 + getattr(signal, sent), err
    assert len(late) <= 16, (len(late), err)  # four contenders' -p 4 in flight at most: never the held-back queue
    logs = read_logs(project)
    rows = [row for log in logs for row in log["rows"]]
    assert served < 40 and not [r for r in rows if r["error"] and "not sent" in r["error"]], err
    assert resumed.returncode == 0, resumed.stderr
    document = __import__("json").loads(resumed.stdout)
    assert sum(r["runs"] for r in document["datasets"][0]["leaderboard"]) == 40
    errors = [row["error"] for log in read_logs(project) for row in log["rows"] if row["error"]]
    assert all(r["errors"] == 0 for r in document["datasets"][0]["leaderboard"]), errors


def test_a_shard_resumes_only_a_run_of_its_own(make_suite, cli, monkeypatch) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    monkeypatch.setenv("AGENT_EVALS_RUN_ID", "r1")
    code, _, err = cli("compare", "--local", "--shard", "2/2", cwd=project)
    assert code == 0, err
    code, _, err = cli("compare", "--local", "--shard", "1/2", "--resume")
    assert code == 2 and "--resume: no logs or journals in log/agent-evals; nothing to resume for shard 1/2" in err
    sibling = next((project / "log" / "agent-evals").glob("*.json"))
    code, _, err = cli("compare", "--local", "--shard", "1/2", "--resume", str(sibling))
    assert code == 2 and "that is not a run of shard 1/2; give one of its own, or the folder" in err
    code, _, err = cli("compare", "--local", "--shard", "2/2", "--resume", "latest")
    assert code == 0 and "-shard2of2 are not asked again" in err, err


def test_at_the_budget_the_run_stops_with_one_line_and_resume_continues(tmp_path: Path) -> None:
    agent = tmp_path / "agent_suite"
    shutil.copytree(ROOT / "examples" / "agent_suite", agent, ignore=shutil.ignore_patterns("log", "__pycache__"))
    # the forecast counts one call a case (input size); the agent makes two: the budget stops it mid-run. One
    # case at a time (-p 1): which case meets the limit never depends on a busy machine's timing
    done = run_agent_evals("compare", "--local", "-m", "fake/tooluser", "--budget", "0.005", "-p", "1", cwd=agent)
    assert done.returncode == 1, done.stderr
    assert "forecast: $0.0040 to $0.0160 (from the inputs alone" in done.stderr
    line = "error: budget reached: $0.0050 of $0.0050; 3 of 4 cases asked; --resume with a higher --budget continues"
    assert line in done.stderr
    (log,) = read_logs(agent)
    assert log["summary"]["usage"]["cost_usd"] == pytest.approx(0.005)  # never past it
    assert sum("budget reached" in str(row["error"]) for row in log["rows"]) == 1
    done = run_agent_evals("compare", "--local", "-m", "fake/tooluser", "--budget", "0.02", "--resume", cwd=agent)
    assert done.returncode == 0, done.stderr
    newest = read_logs(agent)[-1]
    assert [row["error"] for row in newest["rows"]] == [None] * 4 and newest["summary"]["scored"] == 4
    assert "forecast: $0.0040 expected" in done.stderr  # the two cases left, at two calls each (history)


def test_a_journal_cut_short_by_a_kill_is_resumed_with_one_warning(suite) -> None:
    project = suite(hostile_helper("pass"))
    code, _, err = run(project, "compare", "--local")
    assert code == 0, err
    (journal,) = (project / "log" / "agent-evals").glob("*.jsonl")
    for log in (project / "log" / "agent-evals").glob("*.json"):
        log.unlink()  # as if killed before the log was written
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])  # the last row cut mid-write
    code, out, err = run(project, "compare", "--local", "--resume")
    assert code == 0, err
    assert "1 line cut short (a killed run?) left out" in err
    assert "resume: 2 finished cases" in err and "│ 100.0% │" in out

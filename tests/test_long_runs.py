"""Long runs that never lose work: journal, Ctrl-C, resume, progress, captured output."""

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
            f"partial: interrupted after {len(finished)} of 20 cases; finish with: agent-evals compare --resume"
        )
        assert "│ ds      │ openai/gpt-4.1-mini │ default │    - │ 100.0% │" in out
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


def test_progress_draws_on_a_terminal_and_is_erased(make_suite) -> None:
    import pty

    project = make_suite(
        fakes="{'slow': lambda s, u: (__import__('time').sleep(0.15), u)[1]}",
        config="request_types: [prompt]\nvendors:\n  fake:\n    - model: slow\n",
    )
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "120"}
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local", "-p", "1"]
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    out, _ = child.communicate(timeout=30)
    screen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    os.close(primary)
    text = screen.decode()
    assert child.returncode == 0
    assert "] 2/4 cases · 0 errors · 0:00 · ETA 0:00 · $0.0020\x1b[K" in text
    frames = [f.removesuffix("\x1b[K") for f in text.split("\r") if f.endswith("\x1b[K") and "cases" in f]
    assert frames and all(len(f) == 119 and f.startswith("[") for f in frames)  # a bar that fits 120 columns
    assert text.count("\r\x1b[K") >= 1  # erased before the closing lines
    assert b"cases \xc2\xb7" not in out  # the bar never touches STDOUT


def _window(fd: int, columns: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))


def test_the_bar_fits_the_terminal_it_is_drawn_on_and_follows_a_resize(make_suite) -> None:
    """No COLUMNS, STDOUT a pipe (as during every run): the bar is measured on the terminal
    it is drawn on, 80 columns, then 40 once the window is narrowed; no redraw wraps."""
    import pty
    import select

    project = make_suite(
        fakes="{'slow': lambda s, u: (__import__('time').sleep(0.4), u)[1]}",
        config="request_types: [prompt]\nvendors:\n  fake:\n    - model: slow\n",
    )
    primary, secondary = pty.openpty()
    _window(secondary, 80)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local", "-p", "1"]
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    screen, resized_at = b"", None
    while True:
        if select.select([primary], [], [], 30)[0] == []:
            break
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        screen += chunk
        if resized_at is None and b"1/4 cases" in screen:
            _window(primary, 40)
            resized_at = len(screen)
    child.communicate(timeout=30)
    os.close(primary)
    assert child.returncode == 0 and resized_at is not None

    def frames(text: bytes) -> list[str]:
        return [f.removesuffix("\x1b[K") for f in text.decode().split("\r") if f.endswith("\x1b[K") and "cases" in f]

    wide, narrow = frames(screen[:resized_at]), frames(screen[resized_at:])
    assert wide and all(len(f) == 79 and f.startswith("[") for f in wide)  # the bar takes the 80 columns
    assert narrow and all(len(f) <= 39 for f in narrow)  # then fits 40: no line left behind
    assert all(not f.startswith("[") and " · ETA " in f for f in narrow)  # the bar gave way, the ETA stayed


def test_the_progress_line_is_not_drawn_off_a_terminal(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0 and "cases ·" not in err


def test_stray_output_goes_to_the_warnings_file(make_suite) -> None:
    helper = """
import logging, warnings
import agent_evals as ae
logging.basicConfig(level=logging.INFO)
class A(ae.EchoAdapter):
    def call(self, case, model):
        print("debug print from the adapter", case.id)
        warnings.warn("a library warning")
        logging.getLogger("lib").info("a log line")
        return super().call(case, model)
ae.configure(adapter=A(), scorer=ae.Scorer(), providers=[ae.FakeProvider()])
"""
    project = make_suite(helper=helper)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local"]
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (
        "debug print" not in result.stdout + result.stderr and "a library warning" not in result.stdout + result.stderr
    )
    (path,) = (project / "log").glob("compare.warnings.*.log")
    lines = path.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("debug print")) == [
        f"debug print from the adapter {v}/{n:03d}" for v in "ab" for n in (1, 2)
    ]
    assert any(line.endswith("UserWarning: a library warning") for line in lines)
    assert lines.count("INFO:lib:a log line") == 4
    assert f"warnings: what the suite printed or logged during the run is in log/{path.name}" in result.stderr
    assert result.stdout.startswith("┌")


def test_capture_restores_the_streams_and_logging_handlers(tmp_path) -> None:
    import logging

    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        before = sys.stdout, sys.stderr
        with ae._Capture(tmp_path / "w.log") as capture:
            print("partial", end="")
            print(" line")
            logging.getLogger("x").warning("captured")
            assert handler.stream is capture
        assert (sys.stdout, sys.stderr) == before and handler.stream is before[1]
    finally:
        root.removeHandler(handler)
    assert (tmp_path / "w.log").read_text().splitlines() == ["partial line", "captured"]


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


def test_progress_line_and_clock() -> None:
    line = ae._progress_line(0, 10, 0, 1.0, 0.0, width=60)
    assert line == "[----------] 0/10 cases · 0 errors · 0:01 · ETA - · $0.0000" and len(line) == 59
    assert ae._progress_line(1, 3, 1, 3700, 1.5, width=80).endswith(
        "] 1/3 cases · 1 error · 1:01:40 · ETA 2:03:20 · $1.5000"
    )
    for width in (20, 30, 40, 60, 80, 120, 200):  # the line always fits; the count, ETA and spend stay
        line = ae._progress_line(123, 4567, 8, 3600, 12.5, 700, width)
        assert len(line) < width and "123/4567" in line and (width < 40 or ("ETA 11:40" in line and "$12.5000" in line))


def test_the_eta_waits_for_the_slowest_experiment() -> None:
    """Two experiments of 10 cases: a fast one done in 1 s, a slow one at 1 case a second.
    The whole run's pace says about a second is left; the slow one's own says nine."""
    progress = ae._Progress(None, 20)
    now = time.monotonic()
    fast, slow = (
        ae.Experiment(ae.Contender(m), ae.FakeProvider(), "ds", [ae.Case(str(i)) for i in range(10)], 1) for m in "fs"
    )
    fast.began = slow.began = now - 1.0
    for _ in range(10):
        progress.add(ae.RunResult(fast, ae.Case("x")))
    progress.add(ae.RunResult(slow, ae.Case("y")))
    progress.started = now - 1.0
    assert progress.eta(now) == pytest.approx(9.0, rel=0.01)


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
    assert code == 1 and "│ ds      │ fake/refused │" in out and "fake/echo" not in out
    assert err.strip().endswith("error: the run stopped after 1 of 6 cases: key refused")
    (log,) = read_logs(project)
    assert log["not_run"] == ["a/002", "a/003"]
    # runs counts what was not asked, the experiment that never started included
    code, out, err = cli("runs")
    assert code == 0 and "partial: 5 not run" in out, out


def test_runs_ranks_as_the_tables_do_errors_counted_as_wrong(make_suite, cli) -> None:
    # "flaky" raises on a fifth of the cases and is right on the rest: 100% of what it answered, 80% ranked
    # and "good" is wrong on a tenth: 90%, first in the tables
    fakes = """{'flaky': lambda s, u: (_ for _ in ()).throw(RuntimeError('boom')) if u.split()[2][-2] in '05' else u,
                'good': lambda s, u: '{}' if u.split()[2][-2] == '1' else u}"""
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: flaky\n    - model: good\n"
    project = make_suite(fakes=fakes, config=config, cases=many(20))
    code, out, _ = cli("compare", "--local", cwd=project)
    assert code == 0 and "│ 1 │ fake/good  │" in out, out
    code, out, _ = cli("runs")
    assert code == 0 and "exact 90.0% fake/good │ complete" in out, out


def test_progress_draws_throttled_and_clears() -> None:
    import io

    stream = io.StringIO()
    progress = ae._Progress(stream, 4)
    progress.add(ae.RunResult(None, ae.Case("a"), error="x", usage=ae.Usage(1, 1, 0.5)))
    progress.draw()
    progress.draw()  # within 0.1s: not drawn again
    progress.clear()
    assert stream.getvalue().count("1/4 cases · 1 error") == 1 and stream.getvalue().endswith("\r\x1b[K")
    silent = ae._Progress(None, 4)
    silent.draw()
    silent.clear()
    assert not silent.shown


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
    assert "│           1 │     6 │      0 │" in lines[1] and "exact 100.0% fake/echo │ complete" in lines[1]
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
    assert code == 0 and "leaderboard: all datasets" in out, err
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

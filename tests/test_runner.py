"""Running experiments: the failure rules, order, prepare/before_run, env files, logs, trackers."""

from __future__ import annotations

import json

import pytest

from conftest import case_files, many, read_logs

SLOW_FIRST = """{
    "slow": __import__("agent_evals")._FAKE_MODELS["echo"],
}"""


def table_rows(out: str) -> list[list[str]]:
    rows = []
    for line in out.splitlines():
        if line.startswith("│ ") and not line.startswith("│ dataset") and not line.startswith("│ #"):
            rows.append([c.strip() for c in line.split("│")[1:-1]])
    return rows


def test_failure_rules_wrong_zero_error_uncounted_none_skipped(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: mute\n    - model: broken\n"
    cases = {
        **case_files("ds", "a/001", {"v": 1}),
        **case_files("ds", "a/002", {"v": 2}, expected={"v": 0}),
        **case_files("ds", "b/001", {"v": 3}),
    }
    project = make_suite(config=config, cases=cases)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 1, err  # a contender no case of which was answered
    rows = table_rows(out)
    # echo: one wrong answer scores 0 -> 2/3 exact; "maybe" skips variant b (None) -> 1/2
    # (the Wilson interval as it is: the three cases disagree)
    assert rows[0][:8] == ["ds", "fake/echo", "default", "-", "66.7% [20.8–93.9]", "50.0%", "0", rows[0][7]]
    # mute: the model failed (Reply.error): scored 0 on every metric, not an error
    assert rows[1][:7] == ["ds", "fake/mute", "default", "-", "0.0%", "0.0%", "0"]
    # broken: transport errors are errors, never a 0; no mean at all
    assert rows[2][:7] == ["ds", "fake/broken", "default", "-", "-", "-", "3"]
    assert (
        "best value [ds] (fake/echo effort=default): 66.7% [20.8–93.9] at $0.0030; errors count as wrong for the "
        "pick (fake/broken effort=default: 3 of 3 raised)\n" in out
    )
    logs = {log["contender"]["model"]: log for log in read_logs(project)}
    broken = logs["fake/broken"]
    assert broken["summary"]["errors"] == 3 and broken["summary"]["scored"] == 0
    row = broken["rows"][0]
    assert row["error"] == "ProviderError: fake/broken: connection refused (a fake transport failure)"
    assert row["score"] is None and "Traceback" in row["traceback"]
    mute = logs["fake/mute"]["rows"][0]
    assert mute["reply_error"] == "no JSON object in the reply" and mute["score"] == 0.0 and mute["error"] is None
    echo = logs["fake/echo"]
    assert [r["metrics"] for r in echo["rows"]] == [
        {"exact": 1.0, "maybe": 1.0},
        {"exact": 0.0, "maybe": 0.0},
        {"exact": 1.0, "maybe": None},
    ]
    assert echo["rows"][1]["diagnostics"] == {"got": {"v": 2}}
    assert echo["summary"]["usage"]["cost_usd"] == 0.003


def test_results_stay_in_case_order_whatever_finishes_first(make_suite, cli) -> None:
    # case n sleeps less the later it comes, so completion order is reversed
    fakes = "{'slow': lambda system, user: (__import__('time').sleep(0.02 * (9 - int(user.split()[2][2:5]))), user)[1]}"
    cases = {}
    for n in range(1, 9):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    project = make_suite(
        config="request_types: [prompt]\nvendors:\n  fake:\n    - model: slow\n", cases=cases, fakes=fakes
    )
    code, out, err = cli("run", "--local", "-p", "8", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert [r["case"] for r in log["rows"]] == [f"a/{n:03d}" for n in range(1, 9)]
    assert log["settings"]["parallelism"] == 8
    breakdown = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ a/")]
    assert breakdown == [f"a/{n:03d}" for n in range(1, 9)]


def test_prepare_once_per_dataset_outside_threads_and_before_run_after_env(make_suite, cli, monkeypatch) -> None:
    helper = """
import os, threading
from pathlib import Path
import agent_evals as ae
EVENTS = []
class A(ae.EchoAdapter):
    def prepare(self, dataset):
        EVENTS.append(("prepare", dataset, threading.current_thread() is threading.main_thread()))
    def call(self, case, model):
        EVENTS.append(("call", case.dataset))
        return super().call(case, model)
def before():
    EVENTS.append(("before_run", os.environ.get("SUITE_TOKEN"), os.environ.get("KEEP")))
ae.configure(root=Path(__file__).parent, env_files=["../.env", "missing.env"], adapter=A(), scorer=ae.Scorer(),
             before_run=before, providers=[ae.FakeProvider()])
import builtins; builtins._agent_evals_test_events = EVENTS
"""
    env = "# comment\nexport SUITE_TOKEN='from file'\nKEEP=file # trailing\n\n"
    cases = {**case_files("one", "a/001", {"v": 1}), **case_files("two", "a/001", {"v": 1})}
    project = make_suite(helper=helper, cases=cases, extra={".env": env})
    monkeypatch.setenv("KEEP", "exported")
    monkeypatch.delenv("SUITE_TOKEN", raising=False)
    code, _, err = cli("compare", "--local", "-j", "0", "-v", cwd=project)
    assert code == 0, err
    import builtins

    events = builtins._agent_evals_test_events
    assert events[0] == ("before_run", "from file", "exported")
    assert events[1:] == [("prepare", "one", True), ("call", "one"), ("prepare", "two", True), ("call", "two")]
    assert "note: env: .env set 1 variable" in err and "1 variables" not in err
    del builtins._agent_evals_test_events


def test_bad_env_file_line(make_suite, cli) -> None:
    helper = (
        "import agent_evals as ae\nae.configure(env_files=['.env'], adapter=ae.EchoAdapter(), "
        "scorer=ae.Scorer(), providers=[ae.FakeProvider()])\n"
    )
    project = make_suite(helper=helper, extra={"evals/.env": "OK=1\nthis is not a pair\n"})
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and err.strip() == "error: evals/.env:2: expected KEY=value"


def test_suite_code_faults_are_errors_for_the_case(make_suite, cli) -> None:
    helper = """
import agent_evals as ae
class A(ae.EchoAdapter):
    def call(self, case, model):
        if case.id == "a/001":
            raise KeyError("parser bug")
        if case.id == "a/002":
            return {"not": "a reply"}
        return super().call(case, model)
class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("m", primary=True)]
    def call(self, case, reply, context):
        return {"b/001": ae.Score(value=1.5, metrics={"m": 1.0}),
                "b/002": ae.Score(value=1.0, metrics={"other": 1.0})}.get(case.id, "nope")
ae.configure(adapter=A(), scorer=S(), providers=[ae.FakeProvider()])
"""
    cases = {}
    for case_id in ("a/001", "a/002", "b/001", "b/002", "c/001", "c/002"):
        cases |= case_files("ds", case_id, {"v": 1})
    extra_scorer = """
class T(S):
    def call(self, case, reply, context):
        return ae.Score(value=0.5, metrics={"m": 2})
"""
    project = make_suite(helper=helper, cases=cases)
    code, out, err = cli("run", "--local", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    errors = [r["error"] for r in log["rows"]]
    assert errors == [
        "KeyError: 'parser bug'",
        "SuiteError: adapter A.call returned dict, not a Reply",
        "SuiteError: scorer S gave ds/b/001 the value 1.5, outside 0..1",
        "SuiteError: scorer S reported undeclared metric other for ds/b/002",
        "SuiteError: scorer S returned str for ds/c/001, not a Score",
        "SuiteError: scorer S returned str for ds/c/002, not a Score",
    ]
    assert "error: KeyError: 'parser bug'" in out
    (project / "evals" / "eval_helper.py").write_text(
        helper.replace(
            "ae.configure(adapter=A(), scorer=S()", extra_scorer + "ae.configure(adapter=ae.EchoAdapter(), scorer=T()"
        )
    )
    code, _, err = cli("compare", "--local", "-c", "a/001")
    assert code == 0, err
    errors = {log["rows"][0]["error"] for log in read_logs(project)}
    assert "SuiteError: scorer T gave ds/a/001 m=2, outside 0..1" in errors


def test_prepare_failing_skips_that_dataset_with_one_line(make_suite, cli) -> None:
    helper = """
import agent_evals as ae
class A(ae.EchoAdapter):
    def prepare(self, dataset):
        if dataset == "bad":
            raise OSError("no schema")
ae.configure(adapter=A(), scorer=ae.Scorer(), providers=[ae.FakeProvider()])
"""
    cases = {**case_files("bad", "a/001", {"v": 1}), **case_files("good", "a/001", {"v": 1})}
    project = make_suite(helper=helper, cases=cases)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 1
    assert "warning: adapter A.prepare('bad') raised OSError: no schema: 1 experiment not run" in err
    assert "│ good    │ fake/echo │" in out and "│ bad " not in out
    logs = read_logs(project)
    assert [log["dataset"] for log in logs] == ["good"]


def test_before_run_or_metadata_failing_is_one_line(make_suite, cli) -> None:
    helper = (
        "import agent_evals as ae\nclass A(ae.EchoAdapter):\n    def metadata(self):\n        raise "
        "OSError('x')\nae.configure(adapter=A(), scorer=ae.Scorer(), providers=[ae.FakeProvider()])\n"
    )
    project = make_suite(helper=helper)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and err.strip() == "error: adapter A.metadata() raised OSError: x", err
    helper = (
        "import agent_evals as ae\ndef b():\n    raise ValueError('reset "
        "failed')\nae.configure(adapter=ae.EchoAdapter(), scorer=ae.Scorer(), before_run=b, "
        "providers=[ae.FakeProvider()])\n"
    )
    project = make_suite(helper=helper)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and "before_run raised ValueError: reset failed" in err


def test_local_log_is_complete_and_safely_named(make_suite, cli) -> None:
    config = (
        "project: proj\nrequest_types: [prompt]\ndefaults:\n  temperature: 0.5\nvendors:\n  fake:\n    - "
        "model: echo\n      effort: high\n"
    )
    project = make_suite(config=config)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (path,) = (project / "log" / "agent-evals").glob("*.json")
    assert path.name.startswith("ds--fake-echo--high--t0.5.") and "/" not in path.name
    log = json.loads(path.read_text())
    assert log["suite"] == "t" and log["project"] == "proj" and log["command"] == "compare"
    assert log["contender"] == {
        "model": "fake/echo",
        "effort": "high",
        "temperature": 0.5,
        "max_tokens": None,
        "provider": None,
    }
    assert log["provider"] == "fake"
    assert log["summary"]["means"] == {"exact": 1.0, "maybe": 1.0}
    assert log["summary"]["cases"] == 4 and log["summary"]["errors"] == 0
    row = log["rows"][0]
    assert row["case"] == "a/001" and row["output"] == {"v": "a1"} and row["usage"]["cost_usd"] == 0.001
    assert set(row) >= {"score", "metrics", "outcomes", "diagnostics", "error", "usage", "duration", "raw"}
    assert "logs: log/agent-evals" in err


def test_output_flag_writes_breakdowns(make_suite, cli, tmp_path) -> None:
    project = make_suite()
    target = tmp_path / "out" / "breakdown.txt"
    target.parent.mkdir()
    code, out, err = cli("run", "--local", "-o", str(target), cwd=project)
    assert code == 0, err
    text = target.read_text()
    assert text.startswith("ds · fake/echo effort=default\n┌")
    assert "│ a/001 │" in text and "│ a/001 │" not in out
    code, _, err = cli("compare", "--local", "-o")
    (written,) = (project / "log").glob("compare.*.txt")
    assert "│ b/002 │" in written.read_text() and f"breakdowns: log/{written.name}" in err


TRACKER_HELPER = """
import builtins
import agent_evals as ae
from pathlib import Path
SEEN = builtins._agent_evals_seen = []

class Mine(ae.Tracker):
    name = "mine"
    env_key = "MINE_KEY"

    def start(self, experiment):
        SEEN.append(("start", experiment.contender.model, dict(self.context["options"])))

    def record(self, result):
        SEEN.append(("record", result.case.key, result.score.value))

    def finish(self, experiment, summary):
        SEEN.append(("finish", summary.means["score"], summary.cases))
        return {"url": None}

class S(ae.Scorer):
    def call(self, case, reply, context):
        return ae.Score(value=1.0, metrics={"score": 1.0})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), trackers=[Mine], providers=[ae.FakeProvider()])
"""


def test_a_registered_tracker_is_chosen_in_order_and_sees_every_case(make_suite, cli, monkeypatch) -> None:
    import builtins

    config = "request_types: [prompt]\nmine:\n  team: evals\nvendors:\n  fake:\n    - model: echo\n"
    project = make_suite(helper=TRACKER_HELPER, config=config)
    code, _, err = cli("compare", "--local", "-v", cwd=project)
    assert code == 0 and "tracker: none beside the local log (--local or --tracker none)" in err
    assert builtins._agent_evals_seen == []
    code, _, err = cli("compare", "-v")
    assert code == 0 and "tracker: none beside the local log (no tracker key is set)" in err
    assert builtins._agent_evals_seen == []
    # chosen by name but its key is missing: fails before any call
    code, _, err = cli("compare", "--tracker", "mine")
    assert code == 2 and err.strip() == "error: tracker mine: MINE_KEY is not set"
    assert builtins._agent_evals_seen == []
    code, _, err = cli("compare", "--tracker", "min")
    assert code == 2 and 'unknown tracker (did you mean "mine"?); known: none, braintrust, logfire, mine' in err
    monkeypatch.setenv("MINE_KEY", "secret-value")
    code, _, err = cli("compare", "-v")
    assert code == 0 and "tracker: mine (its key MINE_KEY is the only one set)" in err
    assert "secret-value" not in err
    seen = builtins._agent_evals_seen
    assert seen == [
        ("start", "fake/echo", {"team": "evals"}),
        ("record", "ds/a/001", 1.0),
        ("record", "ds/a/002", 1.0),
        ("record", "ds/b/001", 1.0),
        ("record", "ds/b/002", 1.0),
        ("finish", 1.0, 4),
    ]
    code, _, err = cli("compare", "--tracker", "none", "-v")
    assert code == 0 and "--local or --tracker none" in err
    (project / "evals" / ".agent-eval.config.yml").write_text(config.replace("mine:", "tracker: none\nmine:"))
    code, _, err = cli("compare", "-v")
    assert code == 0 and "tracker: none (evals/.agent-eval.config.yml: tracker: none)" in err
    (project / "evals" / ".agent-eval.config.yml").write_text(config.replace("mine:", "tracker: mine\nmine:"))
    code, _, err = cli("compare", "-v")
    assert code == 0 and "tracker: mine (chosen by evals/.agent-eval.config.yml: tracker:)" in err
    del builtins._agent_evals_seen


def test_two_tracker_keys_and_a_missing_package(make_suite, cli, monkeypatch) -> None:
    two = TRACKER_HELPER.replace("trackers=[Mine]", "trackers=[Mine, Other]").replace(
        "class S(ae.Scorer):",
        'class Other(ae.Tracker):\n    name = "other"\n    env_key = "OTHER_KEY"\n    packages = '
        '("surely_not_installed_pkg",)\n\nclass S(ae.Scorer):',
    )
    project = make_suite(helper=two)
    monkeypatch.setenv("MINE_KEY", "1")
    monkeypatch.setenv("OTHER_KEY", "2")
    code, _, err = cli("compare", cwd=project)
    assert code == 2
    assert err.strip() == (
        "error: MINE_KEY and OTHER_KEY are both set: choose a tracker with --tracker NAME or tracker: in "
        "evals/.agent-eval.config.yml"
    )
    monkeypatch.delenv("OTHER_KEY")
    code, _, err = cli("compare", "--tracker", "other")
    assert code == 2
    assert err.strip() == (
        "error: tracker other: package surely_not_installed_pkg is not installed (pip install "
        "surely_not_installed_pkg); OTHER_KEY is not set"
    )


def test_breakdown_notes_say_why_a_case_lost(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: mute\n"
    cases = {**case_files("ds", "a/001", {"v": 1}, expected={"v": 2})}
    project = make_suite(config=config, cases=cases)
    code, out, err = cli("run", "--local", cwd=project)
    assert code == 0, err
    assert "│ a/001 │  0.0% │  0.0% │  0.0% │" in out and '{"got": {"v": 1}}' in out
    assert "model failed: no JSON object in the reply" in out


def test_ctrl_c_exits_130(make_suite, cli) -> None:
    # the user's Ctrl-C (a real SIGINT, through the command's handler) while prepare runs
    helper = (
        "import os, signal, time\nimport agent_evals as ae\nclass A(ae.EchoAdapter):\n    def prepare(self, "
        "dataset):\n        os.kill(os.getpid(), signal.SIGINT)\n        time.sleep(5)\nae.configure(adapter=A(), "
        "scorer=ae.Scorer(), providers=[ae.FakeProvider()])\n"
    )
    project = make_suite(helper=helper)
    code, out, _ = cli("compare", "--local", cwd=project)
    assert code == 130
    # the hint repeats the run's own words, so that what it asks and how stay the same
    assert out.strip() == "partial: interrupted after 0 of 4 cases; finish with: agent-evals compare --local --resume"


@pytest.mark.parametrize("slow_disk", [False, True])
def test_cases_are_read_before_the_threads_start_and_a_slow_disk_holds_no_case(
    make_suite, cli, monkeypatch, slow_disk
) -> None:
    # read among -p threads, each file's system calls hand the GIL round (at 2,000 cases and -p 64,
    # 0.54 ms of CPU a case against 0.46 read first); past READ_FIRST, the rest is read beside the cases
    import threading
    import time

    import agent_evals as ae

    read, readers = ae._read_case, []

    def reading(*args: object) -> object:
        readers.append(threading.current_thread().name)
        if slow_disk:
            time.sleep(0.05)
        return read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ae, "_read_case", reading)
    monkeypatch.setattr(ae, "READ_FIRST", 0.08 if slow_disk else 30.0)
    project = make_suite(cases=many(12))
    code, _, err = cli("compare", "--local", "-m", "fake/echo", "-p", "2", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert log["summary"]["scored"] == 12 and log["summary"]["errors"] == 0
    if not slow_disk:
        assert readers == ["MainThread"] * 12  # all of them, before any case runs
    else:  # the first ones first; the rest on a thread of their own, or by the case that needs one first
        assert readers[0] == "MainThread" and 1 <= readers.count("MainThread") < 12
        assert set(readers[readers.count("MainThread") :]) <= {"cases", "case"}


def test_a_keyboard_interrupt_raised_by_suite_code_is_not_a_ctrl_c(make_suite, cli) -> None:
    helper = (
        "import agent_evals as ae\nclass A(ae.EchoAdapter):\n    def prepare(self, dataset):\n        raise "
        "KeyboardInterrupt\nae.configure(adapter=A(), scorer=ae.Scorer(), providers=[ae.FakeProvider()])\n"
    )
    project = make_suite(helper=helper)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 1 and out == ""
    assert "warning: adapter A.prepare('ds') raised KeyboardInterrupt" in err


def test_missing_pyyaml_is_named_with_how_to_install(make_suite, monkeypatch, cli) -> None:
    import sys

    project = make_suite()
    monkeypatch.setitem(sys.modules, "yaml", None)  # an import of yaml now fails
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert err.strip() == (
        "error: reading evals/.agent-eval.config.yml needs the PyYAML package: pip install PyYAML, or write the "
        "same keys as JSON in evals/.agent-eval.config.json (read with the standard library alone)"
    )


def test_a_tracker_that_raises_never_loses_the_run(make_suite, cli, monkeypatch) -> None:
    helper = TRACKER_HELPER.replace(
        "    def record(self, result):\n",
        "    def record(self, result):\n        if result.case.id == 'a/002':\n            raise "
        "ConnectionError('service unreachable')\n",
    )
    project = make_suite(helper=helper)
    monkeypatch.setenv("MINE_KEY", "k")
    code, out, err = cli("compare", "--tracker", "mine", cwd=project)
    assert code == 0, err
    assert "warning: tracker mine: record raised ConnectionError: service unreachable; it was switched off" in err
    assert "│ ds      │ fake/echo │" in out
    (log,) = read_logs(project)
    assert len(log["rows"]) == 4
    import builtins

    assert [s[0] for s in builtins._agent_evals_seen] == ["start", "record"]  # no finish after the failure
    del builtins._agent_evals_seen


BEFORE_RUN = """
from pathlib import Path
import agent_evals as ae

def before():
    print("resetting the test database")
    Path("before_run.ran").write_text("yes")

ae.configure(adapter=ae.EchoAdapter(), scorer=ae.Scorer(), before_run=before, providers=[ae.FakeProvider()])
"""


def test_before_run_comes_after_every_check_and_its_output_is_captured(make_suite, cli) -> None:
    project = make_suite(helper=BEFORE_RUN)
    code, _, err = cli("compare", "--local", "--junit", "no/such/folder/j.xml", cwd=project)
    assert code == 2 and "--junit" in err
    assert not (project / "before_run.ran").exists()  # a check failed: nothing of the suite's ran
    code, out, err = cli("compare", "--local")
    assert code == 0, err
    assert (project / "before_run.ran").exists()
    assert "resetting the test database" not in out + err
    (warnings,) = (project / "log").glob("compare.warnings.*.log")
    assert "resetting the test database" in warnings.read_text()

"""The pieces the hostile runs rest on, in process: conversions, masking, bounds, the last resort."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import agent_evals as ae
from conftest import read_logs, write

CONFIG = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"


@dataclasses.dataclass
class Point:
    x: int
    where: Path


class NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


def test_jsonable_converts_what_json_cannot_hold() -> None:
    value = {
        "point": Point(1, Path("/a/b")),
        "mixed": {3, "a"},  # not sortable: kept in set order
        "big": 10**5000,
        "flag": True,
        "odd": NoRepr(),
        "neg": -math.inf,
    }
    out = ae._jsonable(value)
    assert out["point"] == {"x": 1, "where": "/a/b"}
    assert sorted(map(str, out["mixed"])) == ["3", "a"]
    assert out["big"] == hex(10**5000) and out["flag"] is True
    assert out["odd"] == "<NoRepr>" and out["neg"] == "-Infinity"
    json.dumps(out, allow_nan=False)  # plain JSON now
    assert json.loads(ae._json_dumps({"n": math.nan, "t": (1, 2)})) == {"n": "NaN", "t": [1, 2]}


def test_an_exception_whose_message_cannot_be_read_still_describes_itself() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    text, _ = ae._describe(Odd())
    assert text == "Odd: (its message could not be read)"


def test_a_secret_that_looks_like_a_number_is_masked_only_inside_strings(monkeypatch) -> None:
    monkeypatch.setenv("SHORT_API_KEY", "1")
    ae._Secrets.refresh()
    row = {"retries": 1, "raw": "key 1 in text", "nested": ["1", 11]}
    line = ae._redact_json(json.dumps(row), row)
    assert json.loads(line) == {"retries": 1, "raw": "key [redacted] in text", "nested": ["[redacted]", 11]}
    assert ae._redact("https://me:pa55@host/v1 and 1") == "https://[redacted]@host/v1 and [redacted]"
    monkeypatch.delenv("SHORT_API_KEY")
    ae._Secrets.refresh()


def test_an_unexpected_failure_is_one_line_and_debug_shows_the_traceback(make_suite, cli, monkeypatch) -> None:
    project = make_suite()

    def broken(args):
        raise RuntimeError("something of ours broke")

    monkeypatch.setitem(ae._COMMANDS, "cases", broken)
    code, out, err = cli("cases", cwd=project)
    assert (code, out) == (1, "")
    assert err == "error: agent-evals stopped: RuntimeError: something of ours broke (--debug shows the traceback)\n"
    code, _, err = cli("cases", "--debug", cwd=project)
    assert code == 1 and "Traceback (most recent call last)" in err and err.endswith("traceback)\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("request_types: " + "[" * 5000 + "]" * 5000 + "\n", "invalid YAML"),
        (
            "request_types: [prompt]\nx: &x 1\ny: [" + ", ".join(["*x"] * 101) + "]\n",
            "line 3: more than 100 aliases (*name); write the values out",
        ),
    ],
    ids=["nested 5,000 deep", "101 aliases"],
)
def test_yaml_that_would_hurt_is_refused_by_line(make_suite, cli, text, message) -> None:
    project = make_suite(config=text)
    code, out, err = cli("cases", cwd=project)
    assert (code, out) == (2, "")
    assert err.startswith("error: evals/.agent-eval.config.yml: ") and message in err and err.count("\n") == 1


def test_an_env_value_with_text_after_its_closing_quote_names_the_line(make_suite, cli) -> None:
    helper_extra = "\nae.configure(env_files=['.env'])\n"
    project = make_suite(extra={"evals/.env": 'A="x" # fine\nB="y" z\n'})
    helper = project / "evals" / "eval_helper.py"
    helper.write_text(helper.read_text() + helper_extra)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2
    assert err == "error: evals/.env:2: B: text after the closing quote; quote the whole value\n"


def test_a_cache_entry_that_no_longer_reads_is_asked_again(tmp_path) -> None:
    cache = ae._Cache(tmp_path / "c.sqlite3")
    with cache._db() as db:
        db.execute("INSERT INTO completions VALUES ('k', '', 'text', 'not json', '{}', 0)")
    assert cache.get("k") is None and cache.get("missing") is None


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("x.20260101-000000-000.jsonl", b"", "not an agent-evals log of this version (an empty journal)"),
        ("x.20260101-000000-000.json", b"\xff\xfe{}", "not UTF-8 text (invalid start byte at byte 0)"),
    ],
)
def test_a_log_that_cannot_be_read_is_one_line(make_suite, cli, name, content, message) -> None:
    project = make_suite()
    write(project, {f"log/agent-evals/{name}": content})
    code, out, err = cli("report", f"log/agent-evals/{name}", cwd=project)
    assert (code, out) == (2, "")
    assert err == f"error: report: log/agent-evals/{name}: {message}\n"


@pytest.mark.parametrize(("key", "value"), [("not_run", 5), ("plan", "abc"), ("decided", {"x": 1})])
def test_a_log_whose_cut_short_fields_are_of_the_wrong_shape_is_named_never_a_traceback(
    make_suite, cli, key, value
) -> None:
    project = make_suite()
    assert cli("compare", "--local", cwd=project)[0] == 0
    (log,) = (project / "log" / "agent-evals").glob("*.json")
    log.write_text(json.dumps({**json.loads(log.read_text()), key: value}))
    code, out, err = cli("report", str(log), cwd=project)  # named and left out: its journal stands in
    assert code == 0 and "fake/echo" in out and "Traceback" not in err and "stopped" not in err, err
    assert f"{log.name}: not an agent-evals log of this version ({key} is " in err
    code, out, _ = cli("runs", "--format", "json", cwd=project)
    assert code == 0 and "unreadable: " in json.loads(out)["runs"][0]["state"]


def test_a_report_that_cannot_be_written_is_one_line(make_suite, cli) -> None:
    project = make_suite()
    assert cli("compare", "--local", cwd=project)[0] == 0
    code, _, err = cli("report", "log/agent-evals", "-o", "/proc/nowhere/report.html", cwd=project)
    assert code == 2
    assert err.startswith("error: could not write /proc/nowhere/report.html (")


def test_a_usage_whose_cost_is_no_price_counts_as_unknown(make_suite, cli) -> None:
    provider = """
class Odd(ae.Provider):
    name = "odd"
    prefix = "odd/"

    def complete(self, model, *, system=None, user, json=True):
        return ae.Completion(user, ae.Usage(1, 1, float("nan")))

ae.configure(providers=[Odd()])
"""
    project = make_suite(config="request_types: [prompt]\nvendors:\n  odd:\n    - model: m\n")
    helper = project / "evals" / "eval_helper.py"
    helper.write_text(helper.read_text() + provider)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert "$nan" not in out and "│ $0.0000 │" in out
    assert (
        "warning: [ds] odd/m effort=default: 4 answers reported a cost that is not a price (NaN, infinite or below 0); "
        "taken as unknown (the catalog's price, else $0)" in err
    )
    assert read_logs(project)[0]["rows"][0]["usage"]["no_price"] == 1  # the log says which answers
    assert ae.Usage(1, 1, -2.0).cost_usd == 0.0 and ae.Usage(1, 1, 0.5).cost_usd == 0.5


def test_a_journal_that_cannot_be_created_stops_the_run_and_is_named(make_suite, cli, monkeypatch) -> None:
    project = make_suite()
    real_open = ae.os.open

    def refuse(path, flags, *args):
        if str(path).endswith(".jsonl"):
            raise OSError(28, "No space left on device", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(ae.os, "open", refuse)  # the disk itself cannot be filled from a test
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 1 and out == ""  # nothing ran: no case could be journaled
    assert "could not write log/agent-evals/ds--fake-echo--default." in err and "No space left on device" in err
    assert not list((project / "log" / "agent-evals").glob("*.tmp"))


def test_an_output_that_is_not_a_regular_file_is_written_in_place_never_replaced(make_suite, cli, tmp_path) -> None:
    import os
    import stat
    import threading

    project = make_suite()
    fifo = tmp_path / "breakdowns.pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = cli("run", "--local", "-o", str(fifo), cwd=project)
    reader.join(10)
    assert code == 0, err
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still the pipe it was, not a file put in its place
    assert b"ds \xc2\xb7 fake/echo effort=default" in received[0]


def test_a_shard_with_nothing_in_it_says_so(make_suite, cli) -> None:
    project = make_suite()
    code, out, err = cli("compare", "--local", "--shard", "5/7", cwd=project)
    assert code == 0 and out == ""
    assert "warning: --shard 5/7: this slice holds none of the 1 experiment; nothing to run" in err


GRADED = """
import os
import agent_evals as ae

class Adapter(ae.EchoAdapter):
    def call(self, case, model):
        if os.environ.get("BREAK") and int(case.id[-1]) % 2:
            raise ConnectionError("the model's server went away")
        if os.environ.get("MISS") == case.id:  # a wrong answer to this case
            return ae.Reply(output={"v": -1})
        return super().call(case, model)

class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True), ae.Metric("graded", "Shifted by SHIFT.")]

    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        shift = float(os.environ.get("SHIFT", "0"))
        return ae.Score(value=right, metrics={"exact": right, "graded": 0.5 + shift})

ae.configure(suite="t", adapter=Adapter(), scorer=Scorer(), providers=[ae.FakeProvider()])
"""


def test_diff_shows_new_errors_a_shift_on_every_case_and_the_cases_a_difference_needs(
    make_suite, cli, monkeypatch
) -> None:
    from conftest import case_files

    cases = {}
    for n in range(1, 17):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    project = make_suite(helper=GRADED, cases=cases)
    monkeypatch.setenv("MISS", "a/008")
    assert cli("compare", "--local", cwd=project)[0] == 0
    old = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    monkeypatch.setenv("BREAK", "1")
    monkeypatch.setenv("SHIFT", "0.1")
    assert cli("compare", "--local")[0] == 0
    new = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    code, out, err = cli("diff", str(old), str(new), "--fail-on-regression")
    assert code == 1
    lines = out.splitlines()
    graded = next(line for line in lines if "│ graded │" in line)
    # every case of 8 moved by exactly 10 points: the exact sign-flip test, p = 2^(1-8)
    assert "│ 0.0078 (Holm 0.0078) │ improved" in graded, graded
    errors = next(line for line in lines if "│ errors │" in line)
    assert "8 now raise, 0 no longer" in errors and errors.rstrip(" │").endswith("regressed")
    assert "gate failed: --fail-on-regression: [ds] fake/echo effort=default: 8 cases raise now that answered" in err
    monkeypatch.delenv("BREAK")
    monkeypatch.delenv("MISS")
    monkeypatch.setenv("SHIFT", "0")
    assert cli("compare", "--local")[0] == 0
    newest = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    code, out, _ = cli("diff", str(old), str(newest))
    # 15 of 16 right before, 16 of 16 now: not shown; the line says what 16 cases can show, never
    # what the 6.2 points just observed would take (observed power)
    assert code == 0 and "power [ds] fake/echo exact: with 16 cases, a change under 17.5 points is likely" in out
    code, out, _ = cli("diff", str(old), str(newest), "--effect", "5")
    assert code == 0 and "power [ds] fake/echo exact: to tell 5 points apart at 80% power you need ~" in out
    assert cli("diff", str(old), str(newest), "--effect", "0")[0] == 2


def test_case_files_past_64_kib_and_json_nested_too_deep_are_read_or_named(make_suite, cli) -> None:
    from conftest import case_files

    cases = case_files("ds", "a/001", {"v": 1})
    cases["evals/datasets/ds/cases/a/001/input.txt"] = "x" * 200_000 + '\nAnswer: {"v": 1}\n'
    cases |= case_files("ds", "a/002", {"v": 2})
    cases["evals/datasets/ds/cases/a/002/expected.json"] = "[" * 100_000 + "]" * 100_000
    project = make_suite(cases=cases)
    code, out, _ = cli("verify", cwd=project)
    assert code == 1 and "evals/datasets/ds/cases/a/002/expected.json: invalid JSON: nested too deep" in out
    code, _, err = cli("compare", "--local")
    assert code == 0, err
    from conftest import read_logs

    rows = {row["case"]: row for row in read_logs(project)[0]["rows"]}
    assert rows["a/001"]["score"] == 1.0  # the 200 kB input was read whole and answered
    assert "expected.json: invalid JSON: nested too deep" in err


def test_a_number_too_long_to_print_is_named_short(make_suite, cli) -> None:
    project = make_suite(config="request_types: [prompt]\ndefaults:\n  repeat: " + "9" * 5000 + "\n")
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert err.startswith("error: evals/.agent-eval.config.yml: invalid YAML: Exceeds the limit (4300 digits)")
    assert ae._shown(10**5000) == "<a number of 5,000 digits>" and ae._shown("x" * 100).endswith("...")


def test_a_dataclass_output_is_logged_as_its_fields(make_suite, cli) -> None:
    helper = """
import dataclasses
import agent_evals as ae

@dataclasses.dataclass
class Answer:
    v: int

class Adapter(ae.EchoAdapter):
    def call(self, case, model):
        reply = super().call(case, model)
        return ae.Reply(output=Answer(reply.output["v"]), raw=reply.raw)

class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        right = float(reply.output.v == case.expected["v"])
        return ae.Score(value=right, metrics={"exact": right})

ae.configure(suite="t", adapter=Adapter(), scorer=Scorer(), providers=[ae.FakeProvider()])
"""
    project = make_suite(helper=helper)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0 and "│ 100.0% │" in out, err
    from conftest import read_logs

    assert read_logs(project)[0]["rows"][0]["output"] == {"v": "a1"}


def test_a_passing_fail_under_gate_says_what_errors_hide(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"
    helper_extra = (
        "\nclass Flaky(Adapter):\n    def call(self, case, model):\n"
        "        if case.variant == 'b':\n            raise ConnectionError('dropped')\n"
        "        return super().call(case, model)\n\nae.configure(adapter=Flaky())\n"
    )
    project = make_suite(config=config)
    helper = project / "evals" / "eval_helper.py"
    helper.write_text(helper.read_text() + helper_extra)
    code, _, err = cli("compare", "--local", "--fail-under", "90", cwd=project)
    assert code == 0  # the gate is on the cases answered, as documented
    assert (
        "warning: --fail-under exact=90% passed for [ds] fake/echo effort=default on the cases it answered; "
        "with its 2 errors counted as wrong it scores 50.0% (--max-errors gates errors)" in err
    )


def test_diff_says_its_verdicts_and_the_effect_hint_once(make_suite, cli, monkeypatch) -> None:
    """diff: a line with no significant change says so (never an empty verdict, never an
    'every row: ... verdict' with nothing after it), and the --effect hint under the power
    lines is said once, not at the end of each."""
    from conftest import case_files

    cases = {}
    for n in range(1, 17):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    project = make_suite(helper=GRADED, cases=cases)
    assert cli("compare", "--local", cwd=project)[0] == 0
    assert cli("compare", "--local")[0] == 0
    old, new = sorted((project / "log" / "agent-evals").glob("*.json"))[:2]
    code, out, _ = cli("diff", str(old), str(new))
    assert code == 0 and "not significant" in out and "· verdict \n" not in out + "\n"
    assert out.count("--effect PTS says the cases a change of PTS points needs") <= 1

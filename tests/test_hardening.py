"""The pieces the hostile runs rest on, in process: conversions, masking, bounds, the last resort."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import agent_evals as ae
from conftest import write

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
        "warning: 4 usages reported a cost that is not a price (NaN, infinite or below 0); taken as unknown ($0)" in err
    )
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
    assert "could not write log/agent-evals/ds--fake-echo--default--t." in err and "No space left on device" in err
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
    assert "warning: --shard 5/7: this slice holds none of the 1 experiments; nothing to run" in err

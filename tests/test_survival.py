"""Hostile suites, disks, servers and data, through the real CLI as a subprocess.

Every case that starts ends as a row, the exit code is the README's, the tables print,
nothing hangs, and no secret reaches any byte the run writes. Each test runs the command
with a time limit of its own: a hang fails the test instead of stalling the suite.

What the README's table promises, in full (moved here from the README, beside the tests
that hold it):

**Long runs never lose work.**

- *Cases*: a run finds every case folder first (names only), starts asking models at
  once, and reads each case's files as the run reaches it, so a suite of thousands
  starts in a blink. A case file that cannot be read or parsed is still run (its input
  empty or its expected answer None, as the scorer sees it) and is named on STDERR
  after the run, one line each; `agent-evals verify` and `compare -n` name them
  before anything is spent.
- *Progress*: on a terminal, one self-overwriting STDERR line — cases done of the
  total, errors so far, elapsed, ETA, spend so far — erased at the end. Off a terminal
  (CI, a pipe) nothing is drawn.
- *Stray output*: whatever the suite prints, warns or logs during a run (`print`,
  `warnings`, `logging`) — and whatever reaches file descriptors 1 and 2 directly (a C
  extension, a child process), which are redirected at the OS level while suite code
  runs — goes to `log/<command>.warnings.<stamp>.log`, never into the tables or the JSON
  document; text printed without a final newline is kept too. STDERR says where when
  there was any; the progress line and the tool's own messages go to the real terminal.
- *Every case that starts ends as a row*: scored, wrong, or an error with its type and
  message. Nothing a suite, a disk or a server does can hang a run, lose a finished
  case, or choose the exit code.
- *Journal*: every finished case is appended, at once, to
  `log/agent-evals/<experiment>.<stamp>.jsonl` beside the JSON log, so even `kill -9`
  loses nothing that finished. The JSON log is written atomically (temp file, rename;
  no `.tmp` is left behind, whatever fails). Journals are created exclusively, and two
  runs started in the same millisecond get two stamps (`...-123` and `...-123-1`).
- *Case timeout*: a case that takes longer than `--case-timeout` (`defaults.case_timeout`,
  default 3600 s) in all — the adapter, every model call it makes, the scorer; sync and
  async adapters alike — becomes that case's error, `CaseTimeout: timed out after S s`,
  with what it spent so far, and the run goes on: the worker thread it held is
  replaced. One rule for sync and async adapters: an `async def call` that blocks its
  loop (`time.sleep` inside it) holds only its own case.
- *A full disk*: a journal, log or report that cannot be written (no space, an I/O
  error) stops the run from starting new cases; the tables of what finished still
  print, one `error: could not write FILE (why)` line names exactly what is missing, and
  the exit code is 1. `--resume` finishes the run once there is room.
- *Before any call*: `log/`, `--junit`, `--html` and `-o` are checked: a folder where a
  file should be, a parent folder that does not exist, a place that cannot be written is
  one line and exit 2, and nothing is spent. Every file is written before the tables
  are printed, so a reader that stops reading (`| head`) loses none; a target that is
  not a regular file (`-o /dev/stdout`, a pipe) is written in place, never replaced.
  File names stay short enough for any file system (a long one keeps its start and a
  hash), and two ids that would share a file name get a suffix.
- *Ctrl-C*: the first one starts no new case and lets those in flight finish for up to
  10 seconds (a second Ctrl-C abandons them: each is a row,
  `Abandoned: still in flight ...`, which `--resume` asks again), writes the logs, prints
  the tables of what finished under a `partial: interrupted after N of M cases` line, and
  exits 130. Only the user's Ctrl-C counts as one: a `KeyboardInterrupt` that suite code
  raises itself is that code's failure.
- *Resume*: `--resume` (or `--resume LOG`, any log or journal of the run to continue)
  reads that run's logs and journals, skips every case already answered for the same
  contender, settings and dataset, runs only the rest, and prints the combined tables.
  Cases that ended in an error are kept as they were unless `--retry-errors`, and a case
  edited since that run is asked again (a warning names it). No finished case is asked
  twice.
- *Suite faults*: anything `adapter.call`, `adapter.context` or `scorer.call` raises —
  an exception, `SystemExit` (`sys.exit(0)` included), `KeyboardInterrupt`,
  `GeneratorExit` or any other `BaseException` — is that case's error (type, message
  and a short traceback in the log), sync and async adapters alike.
  `adapter.prepare` failing skips that dataset's experiments with one warning line
  (exit 1); `before_run`, `adapter.metadata()`, the helper itself or a `require:`
  module failing is one line naming the hook (exit 2, before any call); a tracker hook
  failing switches that tracker off with one warning, the local log complete. Suite
  code never chooses the exit code: `sys.exit(0)` in a helper cannot turn a failed gate
  into a pass. A scorer value outside 0..1, an undeclared metric, or something that is
  not a `Score` is an error naming the scorer and the case; so are `Reply(error=...)`
  that is not text, a `Score` whose metrics are not a dict, and `adapter.context()`
  that is not a dict.
- *Suite objects are checked, never trusted*: every `configure()` setting is checked
  for its kind (`configure(cases=5)`: `expected a glob under root (str)`), `root` must
  be a folder, `adapter` and `scorer` instances with the hooks, each `Metric` field of
  its type, and at most one metric `primary=True` — each one line, exit 2, nothing
  written. `adapter.verify()` must return a list of text; `adapter.metadata()` a dict
  (a value in it that contains itself is logged as `"<contains itself>"`).
- *Case files that lie*: an `input.txt` that cannot be read (a link loop, a missing
  target) is that case's error naming the file — never sent as an empty prompt; an
  `expected.json` with a number past Python's 4,300-digit limit and a `metadata.json`
  of `null` are problems `verify` names; a `datasets/` folder that cannot be listed is
  a usage error (exit 2). A NUL or control byte in the config is named by line and
  column. A base URL with a query (`.../api/v1?tenant=a`) keeps it after the path.
- *Values JSON cannot hold*: outputs, diagnostics, outcomes and `metadata()` are written
  as plain JSON, converted so: keys that are not strings become their `str`; sets
  become sorted lists (in their own order when they do not sort) and tuples lists;
  bytes become text (bytes that are not UTF-8 as `\\xNN`); NaN and infinities the
  strings `"NaN"`, `"Infinity"`, `"-Infinity"`; an integer past Python's 4,300-digit
  `str` limit a hex string (`"0x..."`); any other object its `repr`. A value that
  contains itself, or nests more than 100 levels deep, cannot be written faithfully:
  that case becomes an error naming the field (`output['a'][0] contains itself`), its
  score left out. Every log and journal stays valid JSON with every row.
- *Bad input* — malformed YAML (line and column), a key given twice (both lines), an
  alias bomb (more than 100 aliases, or more than 100,000 values once expanded), NaN,
  infinite or negative numbers where they make no sense (timeouts, retries, prices),
  a key of the wrong type, a non-UTF-8 `input.txt`, a glob that matches nothing, a
  helper that raises or exits, a flag out of range (`--repeat` up to 1,000, `-p` and
  `-j` up to 4,096, `--retries` up to 100, `--max-tokens` up to 10,000,000), a folder
  where a file should be, an env file with a NUL byte, bytes that are not UTF-8 or an
  unterminated quote (the file and the line), a log given to `--resume`, `--baseline`,
  `report`, `diff` or `rescore` that is valid JSON of the wrong shape (the file and the
  field), a damaged response cache (`agent-evals cache clear` repairs it), a `log/`
  that cannot be written — ends in one line naming the file, key or flag (exit 2,
  before any call), never a traceback; `--debug` shows one. A journal's last line cut
  short by a kill is left out with one warning (that case is asked again). `verify`
  also names an `expected.json` with no input beside it, and a case file that is a folder.
- *What reaches the terminal*: control characters and escape sequences from case data,
  model text and server messages (`\\x1b[2J`, bidirectional overrides) are shown as
  escapes in tables, warnings and errors; they never reach the terminal raw. Logs keep
  the data as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from servers import Answer, OpenAICompatible, chat_answer

from conftest import ROOT, case_files, run_agent_evals, write

pytestmark = pytest.mark.survival

CONFIG = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"

# A suite whose adapter and scorer answer, except in the hook named ``where`` for the cases
# of variant ``bad``: there it runs ``action`` (raise SystemExit, sleep forever ...), written
# into the hook's body as a suite author would write it.
HOSTILE = """
import asyncio, sys, time
import agent_evals as ae

class Adapter(ae.EchoAdapter):
    {async_}def call(self, case, model):
        if case.variant == "bad":
            {call}
        {await_}
        return self._reply(completion)

    def context(self, case):
        if case.variant == "bad":
            {context}
        return {{}}

class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        if case.variant == "bad":
            {score}
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={{"exact": right}})

ae.configure(suite="hostile", adapter=Adapter(), scorer=Scorer(), providers=[ae.FakeProvider()])
"""


def hostile_helper(action: str, where: str = "call", *, asynchronous: bool = False) -> str:
    hooks = {hook: action if hook == where else "pass" for hook in ("call", "context", "score")}
    return HOSTILE.format(
        async_="async " if asynchronous else "",
        await_=(
            "completion = await model.acomplete(user=case.input)"
            if asynchronous
            else "completion = model.complete(user=case.input)"
        ),
        **hooks,
    )


def cases(ok: int = 3, bad: int = 2) -> dict[str, str]:
    files: dict[str, str] = {}
    for variant, count in (("ok", ok), ("bad", bad)):
        for n in range(1, count + 1):
            files |= case_files("ds", f"{variant}/{n:03d}", {"v": n})
    return files


@pytest.fixture
def suite(tmp_path: Path) -> Callable[..., Path]:
    return suite_maker(tmp_path)


def suite_maker(tmp_path: Path) -> Callable[..., Path]:
    """A suite of a helper and a config, its cases written under ``tmp_path``."""

    def make(helper: str, config: str = CONFIG, files: dict[str, str | bytes] | None = None) -> Path:
        project = tmp_path / "project"
        write(
            project,
            {
                "evals/eval_helper.py": helper,
                "evals/.agent-eval.config.yml": config,
                **(cases() if files is None else files),
            },
        )
        return project

    return make


def run(project: Path, *argv: str, env: dict[str, str] | None = None, limit: float = 300, **kw) -> tuple[int, str, str]:
    """``agent-evals ARGV`` as a subprocess in ``project``: (exit code, stdout, stderr)."""
    done = run_agent_evals(*argv, cwd=project, env=env, limit=limit, **kw)
    return done.returncode, done.stdout, done.stderr


def logs(project: Path) -> list[dict]:
    """Every JSON log of the run, parsed strictly (NaN or Infinity would fail here)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    folder = project / "log" / "agent-evals"
    return [json.loads(p.read_text(), parse_constant=refuse) for p in sorted(folder.glob("*.json"))]


def journal_rows(project: Path) -> list[dict]:
    rows = []
    for path in sorted((project / "log" / "agent-evals").glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return rows


def every_byte(project: Path, *streams: str) -> str:
    """Everything the run wrote: its streams and every file under the project but the suite."""
    found = list(streams)
    for path in project.rglob("*"):
        if path.is_file() and "evals" not in path.relative_to(project).parts[:1]:
            found.append(path.name)
            found.append(path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(found)


# ── suite code that misbehaves ─────────────────────────────────────────────────────────

FAULTS = [
    ("raise SystemExit(0)", "SystemExit: sys.exit(0) was called"),
    ("sys.exit(3)", "SystemExit: sys.exit(3) was called"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("raise GeneratorExit", "GeneratorExit"),
    ("raise ValueError('bad parse')", "ValueError: bad parse"),
    ("raise type('Boom', (BaseException,), {})('x')", "Boom: x"),
]


@pytest.mark.parametrize("where", ["call", "context", "score"])
@pytest.mark.parametrize(("action", "error"), FAULTS)
def test_a_raising_hook_is_that_cases_error_and_the_run_goes_on(suite, where, action, error) -> None:
    project = suite(hostile_helper(action, where))
    code, out, err = run(project, "compare", "--local", "-p", "2")
    assert code == 0, err
    assert "│ ds      │ fake/echo │ default │    - │ 100.0% │      2 │" in out
    (log,) = logs(project)
    rows = {row["case"]: row for row in log["rows"]}
    assert sorted(rows) == ["bad/001", "bad/002", "ok/001", "ok/002", "ok/003"] and log["not_run"] == []
    assert all(rows[f"bad/00{n}"]["error"].startswith(error) for n in (1, 2))
    assert all(rows[f"ok/00{n}"]["score"] == 1.0 for n in (1, 2, 3))
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("action", "error"), [("raise asyncio.CancelledError()", "CancelledError"), ("sys.exit(3)", "SystemExit")]
)
def test_an_async_call_that_raises_is_that_cases_error_on_its_workers_loop(suite, action, error) -> None:
    project = suite(hostile_helper(action, asynchronous=True))
    code, _out, err = run(project, "compare", "--local", "-p", "2")
    assert code == 0 and "Traceback" not in err, err
    rows = {row["case"]: row for row in logs(project)[0]["rows"]}
    assert all(rows[f"bad/00{n}"]["error"].startswith(error) for n in (1, 2)), rows
    assert all(rows[f"ok/00{n}"]["score"] == 1.0 for n in (1, 2, 3))


def test_sys_exit_in_suite_code_cannot_turn_a_failed_gate_into_success(suite) -> None:
    project = suite(hostile_helper("sys.exit(0)"), files=cases(ok=0, bad=2))
    code, _, err = run(project, "compare", "--local", "--fail-under", "99")
    assert code == 1
    assert "gate failed: --fail-under exact=99%: [ds] fake/echo effort=default scored -" in err


@pytest.mark.parametrize(
    ("helper", "code", "line"),
    [
        (
            "import sys\nsys.exit(0)\n",
            2,
            "error: evals/eval_helper.py:2 raised SystemExit: sys.exit(0) was called",
        ),
        (
            hostile_helper("pass") + "ae.configure(before_run=lambda: sys.exit(0))\n",
            2,
            "error: before_run raised SystemExit: sys.exit(0) was called",
        ),
        (
            hostile_helper("pass") + "Adapter.metadata = lambda self: sys.exit(0)\n",
            2,
            "error: adapter Adapter.metadata() raised SystemExit: sys.exit(0) was called",
        ),
        (
            hostile_helper("pass") + "Adapter.metadata = lambda self: ['not', 'a', 'dict']\n",
            2,
            "error: adapter Adapter.metadata() returned ['not', 'a', 'dict'], not a dict",
        ),
    ],
    ids=["helper exits", "before_run exits", "metadata exits", "metadata is no dict"],
)
def test_a_hook_outside_the_cases_is_one_line_never_its_own_exit_code(suite, helper, code, line) -> None:
    project = suite(helper)
    got, out, err = run(project, "compare", "--local")
    assert (got, out) == (code, "")
    assert err.strip().splitlines()[-1].startswith(line), err
    assert "Traceback" not in err


def test_prepare_that_exits_skips_its_dataset_with_one_line(suite) -> None:
    helper = hostile_helper("pass") + "Adapter.prepare = lambda self, dataset: sys.exit(0)\n"
    project = suite(helper)
    code, out, err = run(project, "compare", "--local")
    assert code == 1 and out == ""
    assert "warning: adapter Adapter.prepare('ds') raised SystemExit" in err


def test_a_tracker_that_exits_is_switched_off_and_the_local_log_is_complete(suite) -> None:
    helper = hostile_helper("pass") + (
        "class T(ae.Tracker):\n    name = 'mine'\n    def record(self, result):\n        raise SystemExit(0)\n"
        "ae.configure(trackers=[T])\n"
    )
    project = suite(helper, config=CONFIG + "tracker: mine\n")
    code, out, err = run(project, "compare")
    assert code == 0 and "│ 100.0% │" in out
    assert (
        "warning: tracker mine: record raised SystemExit: sys.exit(0) was called; it was switched off, "
        "the local log is complete" in err
    )
    assert len(logs(project)[0]["rows"]) == 5


OUTPUTS = {
    # what the scorer puts in diagnostics -> what the log holds (or the case's error)
    "{(1, 2): 'tuple key', 3: 'int key'}": {"(1, 2)": "tuple key", "3": "int key"},
    "{'s': {3, 1, 2}}": {"s": [1, 2, 3]},
    "{'b': b'caf\\xc3\\xa9 \\xff'}": {"b": "café \\xff"},
    "{'n': float('nan'), 'i': float('inf'), 'm': -float('inf')}": {"n": "NaN", "i": "Infinity", "m": "-Infinity"},
    "{'big': 7 ** 6000}": None,  # a hex string, checked below
}


@pytest.mark.parametrize("value", list(OUTPUTS))
def test_values_json_cannot_hold_are_converted_as_the_readme_says(suite, value) -> None:
    helper = hostile_helper("pass").replace(
        'return ae.Score(value=right, metrics={"exact": right})',
        f'return ae.Score(value=right, metrics={{"exact": right}}, diagnostics={value})',
    )
    project = suite(helper, files=cases(ok=2, bad=0))
    code, _out, err = run(project, "compare", "--local")
    assert code == 0, err
    (log,) = logs(project)
    assert [row["score"] for row in log["rows"]] == [1.0, 1.0]
    diagnostics = log["rows"][0]["diagnostics"]
    if OUTPUTS[value] is None:
        assert diagnostics["big"] == hex(7**6000)
    else:
        assert diagnostics == OUTPUTS[value]
    assert journal_rows(project)[0]["diagnostics"] == diagnostics


@pytest.mark.parametrize(
    ("make", "field"),
    [
        ("x = {}; x['me'] = x", "output['me'] contains itself"),
        ("x = []\n            for _ in range(100000): x = [x]", "nests more than 100 levels deep"),
    ],
    ids=["cycle", "100,000 deep"],
)
def test_an_output_no_log_can_hold_is_that_cases_error_naming_the_field(suite, make, field) -> None:
    helper = hostile_helper("pass").replace(
        "return self._reply(completion)",
        f"if case.variant == 'bad':\n            {make}\n            return ae.Reply(output=x)\n"
        "        return self._reply(completion)",
    )
    project = suite(helper)
    code, _out, err = run(project, "compare", "--local")
    assert code == 0, err
    (log,) = logs(project)
    bad = [row for row in log["rows"] if row["case"].startswith("bad")]
    assert len(log["rows"]) == 5 and len(bad) == 2
    assert all(row["error"].startswith("SuiteError: the case's ") and field in row["error"] for row in bad), bad
    assert log["summary"]["errors"] == 2 and log["summary"]["means"]["exact"] == 1.0


HANGS = [
    ("time.sleep(3600)", "call", False),
    ("time.sleep(3600)", "score", False),
    ("time.sleep(3600)", "call", True),  # blocks its worker's own event loop, and only that
    ("while True: pass", "call", False),
]


@pytest.mark.parametrize(("action", "where", "asynchronous"), HANGS)
def test_a_case_past_the_case_timeout_is_its_error_and_the_run_goes_on(suite, action, where, asynchronous) -> None:
    helper = hostile_helper(action, where, asynchronous=asynchronous)
    project = suite(helper)
    # a busy loop under coverage's tracer would slow the whole child tenfold: that one runs unmeasured
    busy = action.startswith("while")
    code, out, err = run(project, "compare", "--local", "-p", "2", "--case-timeout", "1", limit=300, measured=not busy)
    assert code == 0, err
    assert "│ 100.0% │" in out
    (log,) = logs(project)
    rows = {row["case"]: row for row in log["rows"]}
    assert len(rows) == 5 and log["not_run"] == []
    errors = [row["error"] for row in rows.values() if row["error"]]
    assert all(rows[f"bad/00{n}"]["error"].startswith("CaseTimeout: timed out after 1 s") for n in (1, 2)), errors
    # one rule: the case is given up on and its worker replaced; nothing else is held up
    assert len(errors) == 2 and all(rows[f"ok/00{n}"]["score"] == 1.0 for n in (1, 2, 3)), errors


def test_the_case_timeout_comes_from_the_config_too(suite) -> None:
    project = suite(hostile_helper("time.sleep(3600)"), config=CONFIG + "defaults:\n  case_timeout: 0.5\n")
    code, _, err = run(project, "compare", "--local", limit=300)
    assert code == 0, err
    assert sum("timed out after 0.5 s" in (row["error"] or "") for row in logs(project)[0]["rows"]) == 2


# ── the disk and the files the tool writes ─────────────────────────────────────────────


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--junit", "."], "error: --junit .: is a folder; name a file"),
        (["--junit", "nowhere/junit.xml"], "error: --junit nowhere/junit.xml: the folder nowhere does not exist"),
        (["--html", "/proc/report.html"], "error: --html /proc/report.html: cannot be written"),
        (["-o", "evals"], "error: -o evals: is a folder; name a file"),
    ],
)
def test_an_output_that_cannot_be_written_stops_before_any_call(suite, argv, message) -> None:
    project = suite(hostile_helper("pass"))
    code, out, err = run(project, "compare", "--local", *argv)
    assert (code, out) == (2, "")
    assert err.strip().startswith(message), err
    assert not (project / "log" / "agent-evals").exists() or not list((project / "log" / "agent-evals").iterdir())


def test_a_log_folder_that_is_a_file_stops_before_any_call(suite) -> None:
    project = suite(hostile_helper("pass"))
    (project / "log").write_text("not a folder")
    code, out, err = run(project, "compare", "--local")
    assert (code, out) == (2, "")
    assert err.strip().startswith("error: log/agent-evals: cannot write the logs there")


def _limit_file_size(size: int) -> Callable[[], None]:
    def limit() -> None:  # in the child: a write past ``size`` bytes fails with EFBIG, as on a full disk
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def test_a_disk_that_fills_during_the_run_stops_it_names_the_file_and_keeps_the_tables(suite) -> None:
    project = suite(hostile_helper("pass"), files=cases(ok=40, bad=0))
    # (coverage could not write its own data in the child: it is not measured there)
    code, out, err = run(project, "compare", "--local", "-p", "1", measured=False, preexec_fn=_limit_file_size(3000))
    assert code == 1, err
    assert re.search(r"│ ds \(\d+ of 40\) │ fake/echo │", out)  # the tables of what finished, partial
    last = err.strip().splitlines()[-1]
    assert (
        last.startswith("error: could not write log/agent-evals/ds--fake-echo--default.") and "File too large" in last
    )
    assert "the local log is complete" not in err and "Traceback" not in err
    assert not list(project.rglob("*.tmp"))
    (journal,) = (project / "log" / "agent-evals").glob("*.jsonl")
    lines = journal.read_text().splitlines()
    assert 3 < len(lines) < 40 and json.loads(lines[-2])["score"] == 1.0  # what fit; the last line may be cut


def test_two_runs_in_the_same_millisecond_never_share_a_stamp(tmp_path, monkeypatch) -> None:
    import agent_evals as ae

    monkeypatch.setattr(ae, "_stamp", lambda: "20261203-120000-000")
    first, second = ae._reserve_stamp(tmp_path), ae._reserve_stamp(tmp_path)
    assert (first, second) == ("20261203-120000-000", "20261203-120000-000-1")
    ae._release_stamp(tmp_path, first)
    (tmp_path / "x.20261203-120000-000.json").write_text("{}")  # that stamp's files exist: never reused
    assert ae._reserve_stamp(tmp_path) == "20261203-120000-000-2"
    assert ae._STAMP.search("x.20261203-120000-000-2.jsonl")[1] == "20261203-120000-000-2"


# ── secrets ────────────────────────────────────────────────────────────────────────────

ROUTED = """
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        print("the scorer prints", __import__("os").environ["OPENROUTER_API_KEY"])
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right}, diagnostics={"seen": reply.raw})

ae.configure(suite="routed", adapter=ae.EchoAdapter(), scorer=S())
"""
ROUTED_CONFIG = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"


@pytest.mark.parametrize("key", ["k", "k3y", "sk-or-v1-" + "9" * 40], ids=["1 char", "3 chars", "long"])
def test_no_key_or_password_reaches_any_byte_the_run_writes(suite, key) -> None:
    def respond(request):
        auth = request.headers["authorization"]
        user = request.body["messages"][-1]["content"]
        if "bad/" in user:  # an error that quotes the header, on the failure path
            return Answer(400, {"error": {"message": f"bad header {auth}"}})
        return chat_answer(user.replace("Answer: ", f"({auth}) Answer: "), echoed=auth)

    with OpenAICompatible(respond) as server:
        project = suite(ROUTED, config=ROUTED_CONFIG)
        base = server.url.replace("http://", "http://user:hunter2@") + "/api/v1"
        env = {"OPENROUTER_API_KEY": key, "OPENROUTER_BASE_URL": base, "MY_SERVICE_TOKEN": "tok"}
        code, out, err = run(
            project, "run", "--local", "--cache", "--junit", "junit.xml", "--html", "report.html", "--debug", env=env
        )
        assert server.chats() and server.chats()[0].headers["authorization"] == f"Bearer {key}"
    assert code == 0, err
    written = every_byte(project, out, err)
    assert "Bearer [redacted]" in written
    for secret in ("hunter2", "user:hunter2"):
        assert secret not in written
    if len(key) > 1:  # a one-letter key is masked where it stands alone, not inside every word
        assert key not in written
    else:
        assert "Bearer k" not in written and '"k"' not in written
    (log,) = logs(project)  # still valid JSON after masking
    ok = [row for row in log["rows"] if row["case"].startswith("ok/")]
    assert ok and all("(Bearer [redacted]) Answer:" in row["diagnostics"]["seen"] for row in ok)


# ── config and files the tool reads ─────────────────────────────────────────────────────

BOMB = "request_types: [prompt]\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("files", "argv", "line"),
    [
        ({"evals/.agent-eval.config.yml": BOMB}, ["cases"], "values once its aliases are expanded"),
        (
            {"evals/.agent-eval.config.yml": CONFIG + "request_types: [prompt]\n"},
            ["cases"],
            "line 5: key request_types is given twice (first on line 1); keep one",
        ),
        ({"evals/.agent-eval.config.yml": CONFIG + "defaults:\n  timeout: .nan\n"}, ["cases"], "defaults.timeout:"),
        ({"evals/.agent-eval.config.yml": CONFIG + "defaults:\n  retry_wait: .inf\n"}, ["cases"], "retry_wait:"),
        ({"evals/.agent-eval.config.yml": CONFIG + "defaults:\n  retries: -1\n"}, ["cases"], "defaults.retries:"),
        ({"evals/.agent-eval.config.yml": CONFIG + "defaults:\n  parallelism: 1e9\n"}, ["cases"], "parallelism:"),
        (
            {"evals/.agent-eval.config.yml": CONFIG + "defaults:\n  repeat: 100000000000\n"},
            ["cases"],
            "defaults.repeat:",
        ),
        ({"evals/.agent-eval.config.yml": CONFIG + "defaults:\n  case_timeout: -3\n"}, ["cases"], "case_timeout:"),
        ({"evals/.env": b"A=1\nB=caf\xe9\n"}, ["compare", "--local"], "evals/.env:2: not UTF-8 text"),
        ({"evals/.env": b"A=1\n\nB=x\x00y\n"}, ["compare", "--local"], "evals/.env:3: a NUL byte"),
        ({"evals/.env": 'A="never closed\n'}, ["compare", "--local"], "evals/.env:1: A: the value's quote \" is never"),
        ({"evals/.env/x": "A=1\n"}, ["compare", "--local"], "evals/.env: env file is not a file (a folder?)"),
        ({"evals/.agent-eval.config.yml/x": "x"}, ["cases"], "evals/.agent-eval.config.yml: is a folder"),
    ],
    ids=lambda v: None if isinstance(v, dict | list) else v[:30],
)
def test_bad_input_is_one_line_naming_the_file_and_the_place(suite, files, argv, line) -> None:
    helper = hostile_helper("pass") + "ae.configure(env_files=['.env'])\n"
    project = suite(helper)
    if "evals/.agent-eval.config.yml/x" in files:
        (project / "evals/.agent-eval.config.yml").unlink()
    write(project, files)
    code, out, err = run(project, *argv, limit=300)
    assert (code, out) == (2, ""), err
    assert len(err.strip().splitlines()) == 1 and line in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--repeat", "100000000000"], "argument --repeat: expected a whole number from 1 to 1,000"),
        (["--repeat", "1e11"], "argument --repeat: expected a whole number from 1 to 1,000, got '1e11'"),
        (["-p", "99999"], "argument -p/--parallelism: expected a whole number from 1 to 4,096"),
        (["-j", "99999"], "argument -j/--concurrency: expected a whole number from 0 to 4,096"),
        (["--shard", "1/0"], "--shard 1/0: expected K/N with 1 <= K <= N"),
        (["--shard", "0/3"], "--shard 0/3: expected K/N with 1 <= K <= N"),
        (["--case-timeout", "nan"], "argument --case-timeout: expected seconds"),
        (["--case-timeout", "-1"], "argument --case-timeout: expected seconds"),
        (["--timeout", "inf"], "argument --timeout: expected seconds"),
    ],
)
def test_flags_out_of_range_are_one_line(suite, argv, line) -> None:
    project = suite(hostile_helper("pass"))
    code, out, err = run(project, "compare", "--local", *argv, limit=300)
    assert (code, out) == (2, "")
    assert err.strip().startswith("error: ") and line in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["report", "diff", "rescore", "resume", "baseline"])
@pytest.mark.parametrize(
    "document",
    [
        "[]",
        '{"contender": {"model": 3}, "dataset": "ds", "rows": []}',
        '{"contender": {"model": "m", "colour": "red"}, "dataset": "ds", "rows": []}',
        '{"contender": {"model": "m"}, "dataset": "ds", "rows": [{"case": "a", "metrics": {"exact": "high"}}]}',
        '{"contender": {"model": "m"}, "dataset": "ds", "rows": [7]}',
        '{"contender": {"model": "m"}, "dataset": "ds", "rows": [], "summary": []}',
    ],
)
def test_a_log_of_the_wrong_shape_is_one_line_naming_it(suite, command, document) -> None:
    project = suite(hostile_helper("pass"))
    folder = project / "log" / "agent-evals"
    folder.mkdir(parents=True)
    (folder / "x.20260101-000000-000.json").write_text(document)
    log = "log/agent-evals/x.20260101-000000-000.json"
    argv = {
        "report": ["report", log],
        "diff": ["diff", log, log],
        "rescore": ["rescore", log],
        "resume": ["compare", "--local", "--resume", log],
        "baseline": ["compare", "--local", "--baseline", log],
    }[command]
    code, out, err = run(project, *argv, limit=300)
    assert (code, out) == (2, ""), err
    assert "x.20260101-000000-000.json: not an agent-evals log of this version (" in err
    assert len(err.strip().splitlines()) == 1


def test_verify_names_an_expected_answer_with_no_input_and_an_input_that_is_a_folder(suite) -> None:
    files = {
        **cases(ok=1, bad=0),
        "evals/datasets/ds/cases/ok/009/expected.json": "{}",
        "evals/datasets/ds/cases/ok/010/input.txt/note": "a folder named input.txt",
        "evals/datasets/ds/cases/ok/001/metadata.json/note": "a folder named metadata.json",
    }
    project = suite(hostile_helper("pass"), files=files)
    code, out, _ = run(project, "verify")
    assert code == 1
    assert out.splitlines()[:3] == [
        "evals/datasets/ds/cases/ok/001/metadata.json: a folder where the case's metadata.json should be; make it "
        "a file",
        "evals/datasets/ds/cases/ok/009/expected.json: an expected answer with no input file; add the input or "
        "remove it",
        "evals/datasets/ds/cases/ok/010/input.txt: a folder where the case's input file should be; make it a file",
    ]


def test_a_damaged_cache_is_one_line_and_cache_clear_repairs_it(suite) -> None:
    project = suite(hostile_helper("pass"))
    cache = project / "log" / "agent-evals" / "cache" / "completions.sqlite3"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"not a database " * 100)
    code, out, err = run(project, "compare", "--local", "--cache")
    assert (code, out) == (2, "")
    assert err.strip() == (
        "error: log/agent-evals/cache/completions.sqlite3: the response cache is damaged (file is not a database); "
        "agent-evals cache clear repairs it"
    )
    code, out, _ = run(project, "cache", "clear")
    assert code == 0 and "the cache was damaged; removed it and started an empty one" in out
    code, out, err = run(project, "compare", "--local", "--cache")
    assert code == 0 and "│ 100.0% │" in out, err


# ── what servers and data send back ─────────────────────────────────────────────────────


def test_control_characters_never_reach_the_terminal_raw(suite) -> None:
    def respond(request):
        user = request.body["messages"][-1]["content"]
        if "bad/" in user:
            return Answer(400, {"error": {"message": "\x1b[2J\x1b]0;pwned\x07 cleared"}})
        return chat_answer(user.replace("Answer:", "\x1b[31mred\u202e Answer:"))

    files = {**cases(ok=1, bad=1), "evals/datasets/ds/cases/ok/001/metadata.json": '{"difficulty": "\\u001b[5mblink"}'}
    with OpenAICompatible(respond) as server:
        helper = ROUTED.replace('print("the scorer prints", __import__("os").environ["OPENROUTER_API_KEY"])', "")
        project = suite(helper, config=ROUTED_CONFIG, files=files)
        env = {"OPENROUTER_API_KEY": "sk-test", "OPENROUTER_BASE_URL": server.url + "/api/v1"}
        code, out, err = run(project, "run", "--local", env=env)
        code2, out2, err2 = run(project, "cases", env=env)
    assert code == 0 == code2, err
    streams = out + err + out2 + err2
    assert "\x1b" not in streams and "\x07" not in streams and "\u202e" not in streams
    assert "\\u001b[31mred\\u202e Answer:" in out  # the model's text, shown escaped (JSON's own, then ours)
    assert "HTTP 400: \\x1b[2J" in out  # the server's error message (the note is cut at 70 characters)
    assert "\\x1b[5mblink" in out2  # the case's own data


@pytest.mark.parametrize("cost", ["NaN", "Infinity", "-1.5", '"lots"'])
def test_a_cost_that_is_no_price_is_unknown_with_a_warning(suite, cost) -> None:
    def respond(request):
        body = chat_answer(request.body["messages"][-1]["content"]).body
        text = json.dumps(body).replace('"cost": 0.0002', f'"cost": {cost}')
        return Answer(200, text)

    with OpenAICompatible(respond) as server:
        helper = ROUTED.replace('print("the scorer prints", __import__("os").environ["OPENROUTER_API_KEY"])', "")
        project = suite(helper, config=ROUTED_CONFIG)
        env = {"OPENROUTER_API_KEY": "sk-test", "OPENROUTER_BASE_URL": server.url + "/api/v1"}
        code, out, err = run(project, "compare", "--local", env=env)
    assert code == 0, err
    assert "nan" not in out.lower() and "inf" not in out.lower()
    # unknown: the catalog's price stands in (tokens x price), never NaN
    assert "openai/gpt-4.1-mini effort=default: 5 answers reported a cost that is not a price" in err
    assert logs(project)[0]["summary"]["usage"]["cost_usd"] == pytest.approx(5 * (10 * 0.0000004 + 5 * 0.0000016))


def test_a_response_past_the_body_cap_is_that_cases_error(suite) -> None:
    def respond(request):
        user = request.body["messages"][-1]["content"]
        if "bad/" in user:
            return chat_answer(user + " " * (2 * 2**20))
        return chat_answer(user)

    with OpenAICompatible(respond) as server:
        helper = ROUTED.replace('print("the scorer prints", __import__("os").environ["OPENROUTER_API_KEY"])', "")
        project = suite(helper, config=ROUTED_CONFIG + "defaults:\n  max_response_mb: 1\n")
        env = {"OPENROUTER_API_KEY": "sk-test", "OPENROUTER_BASE_URL": server.url + "/api/v1"}
        code, _out, err = run(project, "compare", "--local", env=env)
    assert code == 0, err
    rows = {row["case"]: row for row in logs(project)[0]["rows"]}
    assert rows["bad/001"]["error"] == (
        "ProviderError: openrouter: openai/gpt-4.1-mini: the response is larger than 1 MiB; "
        "raise defaults.max_response_mb if it should be read"
    )
    assert rows["ok/001"]["score"] == 1.0 and rows["bad/001"]["retries"] == 0


def test_a_server_trickling_its_answer_is_bounded_by_the_timeout(suite) -> None:

    from servers import Trickle

    with Trickle(total=1000, interval=0.1) as server:  # the whole answer would take 100 s
        helper = ROUTED.replace('print("the scorer prints", __import__("os").environ["OPENROUTER_API_KEY"])', "")
        project = suite(helper, config=ROUTED_CONFIG, files=cases(ok=1, bad=0))
        env = {"OPENROUTER_API_KEY": "sk-test", "OPENROUTER_BASE_URL": server.url + "/api/v1"}
        # the child's bound (1.5 s quiet) is below the 100 s the server takes
        code, _, err = run(project, "compare", "--local", "--timeout", "1", "--retries", "0", env=env, limit=300)
    # never reached whole, even for its small model list: one line (the case-level bound on a trickled
    # answer is test_http's test_a_whole_response_must_arrive_within_the_timeout)
    assert code == 2, err
    assert err.strip() == (
        f"error: openrouter: no whole answer from {server.url}/api/v1 within 1 s (GET /models); check that the "
        "server is up and not stuck, then run again"
    )


def test_lone_surrogates_and_control_bytes_in_outputs_never_hang_and_every_file_stays_valid(suite) -> None:
    helper = hostile_helper("pass").replace(
        "return self._reply(completion)",
        'return ae.Reply(output={"x": "bad \\ud800 half", "c": "\\x00\\x07\\x1b"}, raw="raw \\udfff")',
    )
    project = suite(helper, files=cases(ok=2, bad=0))
    code, out, err = run(project, "run", "--local", "--junit", "junit.xml", "--html", "report.html", "-o", "o.txt")
    assert code == 0, err
    import xml.etree.ElementTree as ET

    assert ET.parse(project / "junit.xml").getroot().get("tests") == "2"
    (log,) = logs(project)
    assert log["rows"][0]["output"] == {"x": "bad \ud800 half", "c": "\x00\x07\x1b"}  # the data, as it was
    assert "\x1b" not in out + err and "\ud800" not in out + err


def test_a_reader_that_stops_reading_loses_no_file(suite) -> None:
    project = suite(hostile_helper("pass"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "AGENT_EVALS"))}
    child = subprocess.Popen(
        [sys.executable, "-m", "agent_evals", "run", "--local", "--junit", "junit.xml", "--html", "report.html"],
        cwd=project,
        env={**environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    child.stdout.close()  # as `| head -0` would: the tables have nowhere to go
    _, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert (project / "junit.xml").is_file() and (project / "report.html").is_file()
    assert len(logs(project)[0]["rows"]) == 5


def test_names_too_long_for_a_file_system_are_shortened_never_refused(suite) -> None:
    dataset = "d" * 200
    files = {}
    for n in (1, 2):
        for name, text in case_files("x", f"a/{n:03d}", {"v": n}).items():
            files[name.replace("datasets/x/", f"datasets/{dataset}/")] = text
    project = suite(hostile_helper("pass"), files=files)
    code, out, err = run(project, "compare", "--local")
    assert code == 0 and "│ 100.0% │" in out, err
    (journal,) = (project / "log" / "agent-evals").glob("*.jsonl")
    assert len(journal.name) < 255 and len(logs(project)[0]["rows"]) == 2

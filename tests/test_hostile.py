"""Hostile input: every malformed file, key or flag ends in one line naming it, never a traceback."""

from __future__ import annotations

import json

import pytest

from conftest import CONFIG, case_files, read_logs, run_agent_evals

pytestmark = pytest.mark.hostile

CFG = "evals/.agent-eval.config.yml"
HELPER = "evals/eval_helper.py"
BASE = "request_types: [prompt]\n"
FAKE = "vendors:\n  fake:\n    - model: echo\n"

# (files written over the standard suite, argv, exit code, a piece of the one line)
MALFORMED = [
    # the YAML itself
    ({CFG: "request_types: [prompt\n"}, ["cases"], 2, "line 2, column 1: invalid YAML"),
    ({CFG: "a: b: c\n"}, ["cases"], 2, "line 1, column 5: invalid YAML: mapping values are not allowed here"),
    ({CFG: "request_types: [prompt]\n\tvendors: {}\n"}, ["cases"], 2, "invalid YAML"),
    ({CFG: "- a\n- b\n"}, ["cases"], 2, "expected a mapping of keys (request_types:, vendors:, ...), got list"),
    ({CFG: "just text\n"}, ["cases"], 2, "expected a mapping of keys (request_types:, vendors:, ...), got str"),
    ({CFG: b"\xff\xfe request_types"}, ["cases"], 2, "not UTF-8 text"),
    ({CFG: "!!python/object:os.system {}\n"}, ["cases"], 2, "invalid YAML"),
    (
        {CFG: "request_types: [prompt]\nproject: a\x00b\n"},
        ["cases"],
        2,
        "line 2, column 11: invalid YAML: the character U+0000 is not allowed",
    ),
    # top-level keys and their types
    ({CFG: BASE + "vendor: {}\n"}, ["cases"], 2, 'unknown key vendor (did you mean "vendors"?)'),
    ({CFG: FAKE}, ["cases"], 2, "request_types is required"),
    ({CFG: "request_types: prompt\n" + FAKE}, ["compare", "-n"], 0, ""),
    ({CFG: "request_types: [chat]\n"}, ["cases"], 2, "request_types: unknown type 'chat'"),
    ({CFG: "request_types: [3]\n"}, ["cases"], 2, "request_types: expected str or a list of them, got 3"),
    ({CFG: "request_types: {a: 1}\n"}, ["cases"], 2, "request_types: expected str or a list of them"),
    ({CFG: BASE + "project: 3\n"}, ["cases"], 2, "project: expected a string, got 3"),
    ({CFG: BASE + "tracker: [a]\n"}, ["cases"], 2, "tracker: expected a string, got ['a']"),
    ({CFG: BASE + "cases: 5\n"}, ["cases"], 2, "cases: expected a string, got 5"),
    ({CFG: BASE + "require: [1]\n"}, ["cases"], 2, "require: expected str or a list of them, got 1"),
    ({CFG: BASE + "adapter: 5\n"}, ["cases"], 0, ""),  # the helper set one: the key is not read
    # defaults
    ({CFG: BASE + "defaults: 3\n"}, ["cases"], 2, "defaults: expected a mapping"),
    ({CFG: BASE + "defaults:\n  efort: low\n"}, ["cases"], 2, 'unknown key defaults.efort (did you mean "effort"?)'),
    ({CFG: BASE + "defaults:\n  effort: turbo\n"}, ["cases"], 2, "defaults.effort: unknown effort 'turbo'"),
    (
        {CFG: BASE + "defaults:\n  temperature: [0.1, hot]\n"},
        ["cases"],
        2,
        "temperature must be a number from 0 to 2, got 'hot'",
    ),
    ({CFG: BASE + "defaults:\n  temperature: -1\n"}, ["cases"], 2, "temperature must be a number from 0 to 2, got -1"),
    (
        {CFG: BASE + "defaults:\n  max_tokens: 0\n"},
        ["cases"],
        2,
        "defaults.max_tokens: expected a whole number from 1 to 10,000,000, got 0",
    ),
    (
        {CFG: BASE + "defaults:\n  max_tokens: 1.5\n"},
        ["cases"],
        2,
        "defaults.max_tokens: expected a whole number from 1 to 10,000,000, got 1.5",
    ),
    (
        {CFG: BASE + "defaults:\n  parallelism: many\n"},
        ["cases"],
        2,
        "defaults.parallelism: expected a whole number from 1 to 4,096, got 'many'",
    ),
    (
        {CFG: BASE + "defaults:\n  timeout: -5\n"},
        ["cases"],
        2,
        "defaults.timeout: expected seconds (a number from 0 up, finite), got -5",
    ),
    (
        {CFG: BASE + "defaults:\n  retries: yes\n"},
        ["cases"],
        2,
        "defaults.retries: expected a whole number from 0 to 100, got True",
    ),
    # vendors and direct
    (
        {CFG: BASE + "vendors:\n  - fake\n"},
        ["cases"],
        2,
        "vendors: expected a mapping of name to a list of models, got list",
    ),
    ({CFG: BASE + "vendors:\n  fake: {model: echo}\n"}, ["cases"], 2, "vendors.fake: expected a list of entries"),
    (
        {CFG: BASE + "vendors:\n  fake:\n    - [echo]\n"},
        ["cases"],
        2,
        "vendors.fake[0]: expected a mapping with model:",
    ),
    (
        {CFG: BASE + "vendors:\n  fake:\n    - model: ''\n"},
        ["cases"],
        2,
        "vendors.fake[0].model: expected a model name",
    ),
    (
        {CFG: BASE + "vendors:\n  fake:\n    - model: echo\n      temp: 0.1\n"},
        ["cases"],
        2,
        "unknown key vendors.fake[0].temp",
    ),
    (
        {CFG: BASE + "vendors:\n  fake:\n    - model: echo\n      effort: [low, {x: 1}]\n"},
        ["cases"],
        2,
        "vendors.fake[0].effort: expected str",
    ),
    (
        {CFG: BASE + "vendors:\n  fake:\n    - model: echo\n      max_tokens: many\n"},
        ["cases"],
        2,
        "vendors.fake[0].max_tokens: expected a whole number",
    ),
    (
        {CFG: BASE + "direct: [typesafe]\n"},
        ["cases"],
        2,
        "direct: expected a mapping of name to a list of models, got list",
    ),
    (
        {CFG: BASE + "direct:\n  openai:\n    - model: x\n"},
        ["cases"],
        2,
        "direct: unknown provider 'openai'; known: typesafe",
    ),
    (
        {CFG: BASE + "vendors:\n  fake:\n    - model: nope\n"},
        ["compare", "--local"],
        2,
        "fake/nope: provider fake has no such model",
    ),
    # cases on disk
    (
        {"evals/datasets/ds/cases/a/001/expected.json": ""},
        ["verify"],
        1,
        "a/001/expected.json: line 1, column 1: invalid JSON",
    ),
    (
        {"evals/datasets/ds/cases/a/001/input.txt": b"\x00\x01\xff binary"},
        ["verify"],
        1,
        "a/001/input.txt: not UTF-8 text",
    ),
    (
        {"evals/datasets/ds/cases/a/001/expected.json": "{'single': 'quotes'}"},
        ["verify"],
        1,
        "invalid JSON: Expecting property name",
    ),
    (
        {"evals/datasets/ds/cases/a/001/metadata.json": "7"},
        ["verify"],
        1,
        "a/001/metadata.json: expected an object, got int",
    ),
    (
        {CFG: BASE + FAKE + "cases: 'nothing/*/input.txt'\n"},
        ["cases"],
        2,
        "no cases match nothing/*/input.txt under evals",
    ),
    # the helper
    (
        {HELPER: "import agent_evals\nraise ImportError('no module named my_gem')\n"},
        ["cases"],
        2,
        "evals/eval_helper.py:2 raised ImportError: no module named my_gem",
    ),
    ({HELPER: "def broken(:\n"}, ["cases"], 2, "evals/eval_helper.py raised SyntaxError"),
    (
        {HELPER: "import agent_evals\nagent_evals.configure(adaptr=1)\n"},
        ["cases"],
        2,
        "configure(): unknown setting 'adaptr'",
    ),
    # flags
    ({}, ["compare", "-p", "-1"], 2, "argument -p/--parallelism: expected a whole number from 1 to 4,096, got '-1'"),
    ({}, ["compare", "-j", "x"], 2, "argument -j/--concurrency: expected a whole number from 0 to 4,096, got 'x'"),
    ({}, ["compare", "-t", "3"], 2, "argument -t/--temperature: temperature must be a number from 0 to 2, got '3'"),
    (
        {},
        ["compare", "--max-tokens", "0"],
        2,
        "argument --max-tokens: expected a whole number from 1 to 10,000,000, got '0'",
    ),
    ({}, ["compare", "--retries", "-2"], 2, "argument --retries: expected a whole number from 0 to 100"),
    ({}, ["compare", "--retry-wait", "nan"], 2, "argument --retry-wait: expected seconds"),
    ({}, ["compare", "-e", "ultra"], 2, "argument -e/--effort: unknown effort 'ultra'"),
    ({}, ["compare", "-m", "fake/nope"], 2, "-m fake/nope: not in the lineup"),
    ({}, ["compare", "-d", "nope"], 2, "-d nope: no such dataset"),
    ({}, ["compare", "-c", "z/999"], 2, "-c z/999: no case or variant matches"),
    ({}, ["compare", "--tracker", "wandb"], 2, "--tracker wandb: unknown tracker; known: none"),
    ({}, ["compare", "--helper", "missing.py"], 2, "--helper missing.py: no such file"),
    ({}, ["compare", "-C", "missing.yml"], 2, "missing.yml: not found"),
    ({}, ["compare", "-L"], 2, "-l and -L are reserved for logging and not yet implemented"),
]


@pytest.mark.parametrize(("files", "argv", "code", "message"), MALFORMED)
def test_malformed_input_is_one_line(make_suite, cli, files, argv, code, message) -> None:
    project = make_suite(extra=files)
    got, out, err = cli(*argv, cwd=project)
    assert got == code, err
    assert "Traceback" not in out + err
    if code == 2:
        assert out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: ") and message in err, err
    elif code == 1:
        assert message in out, out


def test_the_table_is_long_enough() -> None:
    assert len(MALFORMED) >= 40


def test_debug_shows_the_traceback(make_suite, cli) -> None:
    project = make_suite(extra={CFG: BASE + "vendor: {}\n"})
    code, _, err = cli("cases", "--debug", cwd=project)
    assert (
        code == 2
        and "Traceback (most recent call last)" in err
        and err.strip().endswith('(did you mean "vendors"?); known: ' + err.strip().split("known: ")[-1])
    )


def test_an_array_expected_json_is_a_counted_error_during_a_run(make_suite, cli) -> None:
    helper = """
import agent_evals as ae
class S(ae.Scorer):
    def call(self, case, reply, context):
        value = float(all(reply.output.get(k) == v for k, v in case.expected.items()))
        return ae.Score(value=value, metrics={"score": value})
ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""
    cases = {
        **case_files("ds", "a/001", {"v": 1}),
        "evals/datasets/ds/cases/a/002/input.txt": 'x {"v": 2}',
        "evals/datasets/ds/cases/a/002/expected.json": "[2]",
    }
    project = make_suite(helper=helper, config=CONFIG, cases=cases)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert "│ 100.0% │      1 │" in out
    assert "warning: " not in err  # an array is valid JSON: only the scorer can object
    (log,) = read_logs(project)
    assert log["rows"][1]["error"] == "AttributeError: 'list' object has no attribute 'items'"


# Issue #26: suite objects and case files are checked, never trusted.
SUITE = """
from pathlib import Path
import agent_evals as ae

class Adapter(ae.EchoAdapter):
    pass

class Scorer(ae.Scorer):
    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"score": right})

__BODY__
"""
CONFIGURE = "ae.configure(adapter=Adapter(), scorer=Scorer(), providers=[ae.FakeProvider()])"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (CONFIGURE + "\nae.configure(cases=5)", "configure(cases=5): expected a glob under root (str)"),
        (CONFIGURE + "\nae.configure(suite=['x'])", "configure(suite=['x']): expected a name (str)"),
        (CONFIGURE + "\nae.configure(root='nowhere/at/all')", "configure(root='nowhere/at/all'): no such folder"),
        (CONFIGURE + "\nae.configure(env_files=[3])", "configure(env_files=[3]): expected a file name (str)"),
        (CONFIGURE + "\nae.configure(providers=['fake'])", "configure(providers=['fake']): expected a Provider"),
        (CONFIGURE + "\nae.configure(trackers=[int])", "configure(trackers=[<class 'int'>]): expected a Tracker"),
        (CONFIGURE + "\nae.configure(before_run=5)", "configure(before_run=5): expected a function to call"),
        ("ae.configure(adapter=Adapter, scorer=Scorer())", "configure(adapter=<class "),
        (
            "ae.configure(adapter=Adapter(), scorer='Scorer')",
            "configure(scorer='Scorer'): expected an instance of a Scorer",
        ),
        (
            "class S(Scorer):\n    def metrics(self):\n        return [ae.Metric(name=5)]\n"
            + CONFIGURE.replace("Scorer()", "S()"),
            "Metric(name=5): expected a non-empty str",
        ),
        (
            "class S(Scorer):\n    def metrics(self):\n"
            + "        return [ae.Metric('a', primary=True), ae.Metric('b', primary=True)]\n"
            + CONFIGURE.replace("Scorer()", "S()"),
            "marks a and b primary=True: mark exactly one",
        ),
    ],
)
def test_configure_and_metric_arguments_are_checked(make_suite, cli, body, message) -> None:
    project = make_suite(helper=SUITE.replace("__BODY__", body))
    code, out, err = cli("compare", "--local", cwd=project)
    assert (code, out) == (2, ""), err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert not (project / "log").exists()  # nothing written


def test_hooks_that_return_the_wrong_type(make_suite, cli) -> None:
    verify = SUITE.replace("__BODY__", "Adapter.verify = lambda self, dataset: 'bad'\n" + CONFIGURE)
    project = make_suite(helper=verify)
    code, out, _ = cli("verify", cwd=project)
    assert code == 1 and "verify('ds') returned 'bad', not a list of problems (str)" in out
    assert "ds: b" not in out
    cyclic = SUITE.replace(
        "__BODY__", "meta = {'v': 1}\nmeta['self'] = meta\nAdapter.metadata = lambda self: meta\n" + CONFIGURE
    )
    project = make_suite(helper=cyclic)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert log["adapter"]["v"] == 1 and log["adapter"]["self"] == "<contains itself>"
    assert len(log["rows"]) == 4


def test_case_files_that_lie(make_suite, cli, tmp_path) -> None:
    import os

    cases = {**case_files("ds", "a/001", {"v": 1}), **case_files("ds", "a/002", {"v": 2})}
    cases["evals/datasets/ds/cases/a/003/expected.json"] = "1" * 5000
    cases["evals/datasets/ds/cases/a/003/input.txt"] = 'x {"v": 3}'
    cases["evals/datasets/ds/cases/a/004/expected.json"] = '{"v": 4}'
    cases["evals/datasets/ds/cases/a/004/metadata.json"] = "null"
    cases["evals/datasets/ds/cases/a/004/input.txt"] = 'x {"v": 4}'
    project = make_suite(cases=cases)
    loop = project / "evals/datasets/ds/cases/a/002/input.txt"
    loop.unlink()
    os.symlink(loop.name, loop)  # a link to itself: too many levels of symbolic links
    code, out, err = cli("verify", cwd=project)
    assert code == 1, err
    assert "a/002/input.txt: cannot be read (Too many levels of symbolic links)" in out
    assert "a/003/expected.json: invalid JSON: Exceeds the limit (4300 digits) for integer string conversion" in out
    assert "a/004/metadata.json: expected an object, got NoneType" in out
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0 and "Traceback" not in err, err
    (log,) = read_logs(project)
    assert len(log["rows"]) == 4  # every case is a row; the broken ones are errors or problems, named
    assert "a/002/input.txt" in err and "a/003/expected.json" in err


def test_an_unreadable_datasets_folder_is_a_usage_error(make_suite, cli, monkeypatch) -> None:
    import os

    import agent_evals as ae

    project = make_suite()
    folder = project / "evals/datasets/ds"
    if os.geteuid() == 0:  # root reads any folder: the refusal it would meet, from the OS call itself
        scandir = os.scandir

        def refusing(path):
            if str(path) == str(folder):
                raise PermissionError(13, "Permission denied", str(path))
            return scandir(path)

        monkeypatch.setattr(ae.os, "scandir", refusing)
    else:
        folder.chmod(0)
    try:
        code, out, err = cli("cases", cwd=project)
    finally:
        folder.chmod(0o755)
    assert (code, out) == (2, "")
    assert err.strip() == "error: evals/datasets/ds: cannot be listed (Permission denied); let this user read it"


def test_output_that_bypasses_sys_stdout_stays_out_of_stdout(make_suite) -> None:
    """A C extension or a subprocess writes to descriptors 1 and 2 directly; a suite prints
    without a final newline. STDOUT keeps the JSON document alone; the rest is captured."""
    body = (
        "import os, subprocess, sys\n"
        "class Loud(Adapter):\n"
        "    def call(self, case, model):\n"
        "        os.write(1, b'fd-one ' + case.id.encode() + b'\\n')\n"
        "        os.write(2, b'fd-two\\n')\n"
        "        subprocess.run([sys.executable, '-c', 'print(\"from a child\")'])\n"
        "        return super().call(case, model)\n"
        "def shy():\n"
        "    print('no newline at the end', end='')\n"
        + CONFIGURE.replace("Adapter()", "Loud()").replace("providers=", "before_run=shy, providers=")
    )
    project = make_suite(helper=SUITE.replace("__BODY__", body))
    done = run_agent_evals("compare", "--local", "--format", "json", cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "agent-evals/results"  # nothing else on STDOUT
    assert "fd-" not in done.stderr and "from a child" not in done.stderr
    assert "warnings: what the suite printed or logged during the run is in log/compare.warnings." in done.stderr
    (captured,) = (project / "log").glob("compare.warnings.*.log")
    text = captured.read_text()
    assert "fd-one a/001" in text and "fd-two" in text and "from a child" in text
    assert "no newline at the end" in text


def test_a_base_url_with_a_query_keeps_it_after_the_path(make_suite, cli, monkeypatch) -> None:
    from servers import OpenAICompatible

    from conftest import EXACT_HELPER

    config = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=case_files("ds", "a/001", {"v": 1}))
    with OpenAICompatible() as server:
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1/?tenant=abc")
        code, _, err = cli("compare", "--local", cwd=project)
        assert code == 0, err
        paths = sorted({r.path for r in server.requests})
    assert paths == ["/api/v1/chat/completions?tenant=abc", "/api/v1/key?tenant=abc", "/api/v1/models?tenant=abc"]


def test_a_ctrl_c_while_the_module_loads_exits_130_quietly(tmp_path) -> None:
    """The console script imports the module before main() runs: a Ctrl-C in that window
    (here sent as the module imports importlib, its fourth import) exits 130, no traceback."""
    import subprocess
    import sys

    from conftest import ROOT

    child = (
        "import builtins, os, signal, sys\n"
        "sys.argv = ['agent-evals', '--version']\n"
        "real = builtins.__import__\n"
        "def hook(name, *args, **kwargs):\n"
        "    if name == 'importlib' and 'agent_evals' in sys.modules:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = hook\n"
        "from agent_evals import main\n"
        "print('loaded')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            "Adapter.call = lambda self, case, model: ae.Reply(error=5)",
            "TypeError: Reply(error=5): expected the model's failure as text (str), or None",
        ),
        (
            "Scorer.call = lambda self, case, reply, context: ae.Score(1.0, metrics=[1])",
            "TypeError: Score(metrics=[1]): expected a dict of names to values",
        ),
        (
            "Adapter.context = lambda self, case: ['not', 'a', 'dict']",
            "SuiteError: adapter Adapter.context() returned ['not', 'a', 'dict'], not a dict",
        ),
    ],
)
def test_a_reply_score_or_context_of_the_wrong_shape_is_that_cases_error(make_suite, cli, body, error) -> None:
    project = make_suite(helper=SUITE.replace("__BODY__", body + "\n" + CONFIGURE))
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert {row["error"] for row in log["rows"]} == {error}


@pytest.mark.parametrize("flag", ["-m", "--judge"])
def test_a_model_id_of_100000_characters_is_named_by_its_start_in_one_short_line(make_suite, cli, flag) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", flag, "fake/" + "x" * 100_000, cwd=project)
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2 and len(line) < 2100 and line.endswith("characters more)") and "fake/xxx" in line, line[:300]

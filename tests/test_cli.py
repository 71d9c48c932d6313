"""The real CLI as a subprocess: the examples, the vendored single file, --help, exit codes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import agent_evals as ae
from conftest import ROOT, read_logs, run_agent_evals

TOY = ROOT / "examples" / "toy_suite"
CONFIG_ONLY = ROOT / "examples" / "config_only_suite"
REFUSAL = "typesafe/jev-latest refused: needs typesafe; this suite produces prompt"

EXPECTED_ROWS = [
    "│ animals │ fake/echo   │ default │  0.1 │         100.0% │      100.0% │    100.0% │      0 │",
    "│ animals │ fake/echo   │ low     │  0.1 │         100.0% │      100.0% │    100.0% │      0 │",
    "│ animals │ fake/parrot │ default │  0.1 │         100.0% │      100.0% │    100.0% │      0 │",
    "│ colors  │ fake/echo   │ default │  0.1 │         100.0% │      100.0% │    100.0% │      0 │",
    "│ colors  │ fake/echo   │ low     │  0.1 │         100.0% │      100.0% │    100.0% │      0 │",
    "│ colors  │ fake/parrot │ default │  0.1 │         100.0% │      100.0% │    100.0% │      0 │",
]


def agent_evals(
    *argv: str, cwd: Path, env: dict[str, str] | None = None, script: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: ``python agent_evals.py ...`` (or the given copy)."""
    return run_agent_evals(*argv, cwd=cwd, env=env, script=script)


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """A copy of both example suites, so their logs land in tmp_path."""
    shutil.copytree(TOY, tmp_path / "toy_suite", ignore=shutil.ignore_patterns("log", "__pycache__"))
    shutil.copytree(CONFIG_ONLY, tmp_path / "config_only_suite", ignore=shutil.ignore_patterns("log", "__pycache__"))
    return tmp_path / "toy_suite"


def check_toy_table(out: str) -> None:
    rows = [line[: len(EXPECTED_ROWS[0])] for line in out.splitlines() if line.startswith(("│ animals", "│ colors"))]
    assert rows == EXPECTED_ROWS
    costs = [line.rsplit("│", 2)[1].strip() for line in out.splitlines() if line.startswith(("│ animals", "│ colors"))]
    assert costs == ["$0.0040"] * 6
    assert "best value [animals] (fake/echo effort=default): 100.0% at $0.0040" in out
    assert "best value [colors] (fake/echo effort=default): 100.0% at $0.0040" in out
    assert "glossary:" in out and "leaderboard: all datasets" in out


def test_toy_suite_compare_prints_the_table_and_the_refusal_on_stderr(toy: Path) -> None:
    result = agent_evals("compare", "--local", cwd=toy)
    assert result.returncode == 0, result.stderr
    check_toy_table(result.stdout)
    assert REFUSAL not in result.stdout
    assert f"warning: {REFUSAL}" in result.stderr
    assert len(list((toy / "log" / "agent-evals").glob("*.json"))) == 6


def test_toy_suite_cases_verify_dry_run_and_run(toy: Path) -> None:
    cases = agent_evals("cases", cwd=toy)
    assert cases.returncode == 0 and cases.stdout.count("answered") == 8 and REFUSAL in cases.stderr
    verify = agent_evals("verify", cwd=toy)
    assert verify.returncode == 0 and verify.stdout.strip() == "ok: 8 cases, 2 datasets, 3 contenders"
    dry = agent_evals("compare", "-n", cwd=toy)
    assert dry.returncode == 0 and "6 experiments, 24 case runs; nothing was called (dry run)" in dry.stdout
    assert REFUSAL in dry.stderr and not (toy / "log").exists()
    run = agent_evals("run", "-m", "fake/echo", "-d", "animals", "--local", cwd=toy)
    assert run.returncode == 0, run.stderr
    assert "animals · fake/echo effort=default temp=0.1" in run.stdout
    assert "│ vague/002 │ 100.0% │" in run.stdout
    assert "colors" not in run.stdout.split("best value")[0]


def test_run_of_one_case_shows_its_answer_beside_its_score(toy: Path) -> None:
    one = agent_evals("run", "-m", "fake/echo", "-c", "clear/001", "-d", "animals", "--local", cwd=toy)
    assert one.returncode == 0, one.stderr
    block = one.stdout.split("animals · fake/echo effort=default temp=0.1\n")[1].split("\n\nanimals · ")[0]
    answer = '{"name": "cat", "legs": 4, "habitat": "land", "sound": "meow"}'
    assert block.endswith(
        f"clear/001\n  answer: {answer}\n  model's text: A cat has four legs, lives on land and says meow.\n"
        f"\n    Answer: {answer}\n  expected: {answer}"
    )
    parrot = agent_evals("run", "-m", "fake/parrot", "-c", "clear/001", "-d", "animals", "--local", cwd=toy)
    # the model's text is the answer, JSON as the parser read it: said once, not twice
    assert f"  answer: {answer}\n  expected: {answer}\n" in parrot.stdout and "model's text" not in parrot.stdout
    whole = json.loads(
        agent_evals(
            "run", "-m", "fake/echo", "-c", "clear/001", "-d", "animals", "--local", "--format", "json", cwd=toy
        ).stdout
    )
    first = whole["answers"][0]
    assert (first["dataset"], first["case"], first["contender"]["model"]) == ("animals", "clear/001", "fake/echo")
    assert first["output"] == first["expected"] == json.loads(answer) and first["raw"].startswith("A cat has four legs")
    many = agent_evals("run", "-m", "fake/echo", "-d", "animals", "--local", cwd=toy)
    assert "  answer: " not in many.stdout  # a table of many cases stays a table; -v shows each answer
    verbose = agent_evals("run", "-m", "fake/echo", "-d", "animals", "--local", "-v", cwd=toy)
    assert verbose.stdout.count("  answer: ") == 8


def test_an_answer_is_folded_to_the_terminal() -> None:
    assert ae._cut("  answer: " + "x" * 50, 40) == ["  answer: " + "x" * 29, "    " + "x" * 21]
    assert ae._cut("  answer: a cat says meow", 20) == ["  answer: a cat", "    says meow"]
    long = ae._cut("\n".join(f"line {n}" for n in range(20)), 80)
    assert (
        long[:12] == [f"line {n}" for n in range(12)]
        and long[12] == "    … 8 more lines (--format json shows it whole)"
    )
    assert ae._cut("a\nb", 0) == ["a", "b"]  # a file or a pipe gets it whole


def at_terminal(columns: int, *argv: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """The CLI on a pseudo-terminal ``columns`` wide (no COLUMNS: the window's own size), as a
    person sees it: STDOUT and STDERR on one screen, each progress redraw resolved."""
    import fcntl
    import pty
    import re
    import select
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLUMNS", "OPENROUTER", "AGENT_EVALS", "CI"))} | (
        env or {}
    )
    command = [sys.executable, str(ROOT / "agent_evals.py"), *argv]
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=child, stderr=child)
    os.close(child)
    screen, deadline = b"", time.monotonic() + 300  # a hang failsafe
    while time.monotonic() < deadline:
        if select.select([main], [], [], 1)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child side closed: all is read
                break
            if not chunk:
                break
            screen += chunk
    proc.wait(timeout=300)
    os.close(main)
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", screen.decode()).replace("\r\n", "\n")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def words(text: str) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z_]{2,}", text))


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_every_line_fits_the_window_and_no_two_rows_read_the_same(toy: Path, columns: int) -> None:
    """compare, run -c, report and diff at 40, 80 and 200 columns: no line wider than the window;
    rows of a table never alike (a column that tells them apart stays); prose folded at spaces,
    so each word of it is whole on the screen. Piped, the same commands print every column."""
    logs = toy / "log" / "agent-evals"
    for argv in (["compare"], ["run", "-c", "clear/001", "-d", "animals"], ["report"], ["diff"], ["compare"]):
        if argv[0] == "report":
            argv = ["report", str(logs)]
        if argv[0] == "diff":
            argv = ["diff", *map(str, sorted(logs.glob("*.json"))[:2])]
        screen = at_terminal(columns, *argv, "--local" if argv[0] in ("compare", "run") else "-q", cwd=toy)
        lines = screen.splitlines()
        wide = [line for line in lines if len(line) > columns]
        # a table whose rows would read alike cut any further is printed whole, and says so once
        assert not wide or (
            all(line[0] in "┌├│└" for line in wide) and screen.count(f"(wider than {columns} columns") >= 1
        ), (argv, wide)
        tables = "\n".join(lines).split("┌")[1:]
        for table in tables:
            rows = [line for line in table.split("├", 1)[-1].splitlines() if line.startswith("│")]
            assert len(rows) == len(set(rows)), (argv, rows)
        piped = agent_evals(*argv, "--local" if argv[0] in ("compare", "run") else "-q", cwd=toy)
        if argv[0] != "run":  # an answer is folded where it must be, inside a long word too
            prose = [line for line in piped.stdout.splitlines() if not line.startswith(("│", "┌", "├", "└"))]
            assert words("\n".join(prose)) <= words(screen), (argv, words("\n".join(prose)) - words(screen))
        assert "hidden to fit" not in piped.stdout and "every row:" not in piped.stdout


def test_config_only_suite_needs_its_pythonpath(toy: Path) -> None:
    suite = toy.parent / "config_only_suite"
    bare = agent_evals("compare", "--local", cwd=suite)
    assert bare.returncode == 2 and bare.stdout == ""
    assert "require: toy_suite.evals could not be imported" in bare.stderr
    assert len(bare.stderr.strip().splitlines()) == 1
    result = agent_evals("compare", "--local", cwd=suite, env={"PYTHONPATH": "../toy_suite"})
    assert result.returncode == 0, result.stderr
    check_toy_table(result.stdout)
    assert f"warning: {REFUSAL}" in result.stderr


def test_helper_flag_from_the_repository_root(toy: Path) -> None:
    result = agent_evals("compare", "--local", "--helper", str(toy / "evals" / "eval_helper.py"), cwd=toy.parent)
    assert result.returncode == 0, result.stderr
    check_toy_table(result.stdout)


def test_vendored_single_file_next_to_a_suite(toy: Path) -> None:
    vendored = toy / "agent_evals.py"
    shutil.copy(ROOT / "agent_evals.py", vendored)
    env = {"PYTHONPATH": ""}
    result = agent_evals("cases", cwd=toy, env=env, script=vendored)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("answered") == 8
    compared = agent_evals("compare", "--local", cwd=toy, env=env, script=vendored)
    assert compared.returncode == 0, compared.stderr
    check_toy_table(compared.stdout)


@pytest.mark.parametrize("package", ["vendored", "third_party.evals"])
@pytest.mark.parametrize("how", ["script", "module"])
def test_vendored_in_a_package_every_way_of_starting_it_sees_one_module(toy: Path, package: str, how: str) -> None:
    # the suite's helper imports the copy by its package name, as a repo that vendors the file does
    folder = toy.joinpath(*package.split("."))
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "agent_evals.py", folder / "agent_evals.py")
    (toy / package.split(".")[0] / "__init__.py").write_text("")  # evals/ below it stays a namespace package
    helper = toy / "evals" / "eval_helper.py"
    helper.write_text(helper.read_text().replace("from agent_evals import", f"from {package}.agent_evals import"))
    start = [str(folder / "agent_evals.py")] if how == "script" else ["-m", f"{package}.agent_evals"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_EVALS", "PYTHONPATH", "OPENROUTER"))}
    result = subprocess.run(
        [sys.executable, *start, "compare", "--local"],
        cwd=toy,
        env=environ | {"PYTHONIOENCODING": "utf-8", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    check_toy_table(result.stdout)


def test_the_finder_answers_only_for_this_very_file(tmp_path: Path) -> None:
    import importlib.util

    finder = ae._This(ae)
    spec = finder.find_spec("agent_evals")
    assert spec is not None and importlib.util.module_from_spec(spec) is ae  # type: ignore[arg-type]
    assert finder.find_spec("json") is None and finder.find_spec("other.agent_evals", [str(tmp_path)]) is None
    shutil.copy(ROOT / "agent_evals.py", tmp_path / "agent_evals.py")  # another copy is another module
    assert finder.find_spec("agent_evals", [str(tmp_path)]) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["compre"],
            "error: no command 'compre' (did you mean \"compare\"?); choose from cases, verify, run, compare,",
        ),
        (
            ["compare", "--locl"],
            'error: unknown to agent-evals compare: --locl (did you mean "--local"?) (see agent-evals compare --help)',
        ),
        (["compare", "--json"], "error: unknown to agent-evals compare: --json (did you mean --format json?)"),
        (["run", "--modles=x"], 'error: unknown to agent-evals run: --modles=x (did you mean "--models"?)'),
        (
            ["compare", "--format", "jsn"],
            "error: no --format value 'jsn' (did you mean \"json\"?); choose from table, json, markdown (see "
            "agent-evals compare --help)",
        ),
        (["compare", "--budget"], "error: argument --budget: expected one argument (see agent-evals compare --help)"),
        (["compare", "--quite"], 'error: unknown to agent-evals compare: --quite (did you mean "--quiet"?) (see'),
        (["compare", "--loud"], "error: unknown to agent-evals compare: --loud (see agent-evals compare --help)"),
        (["hlep"], "error: no command 'hlep' (did you mean \"help\"?); choose from cases, verify, run, compare,"),
        (["x" * 100_000], f"error: no command '{'x' * 56}...; choose from"),  # a long word is cut, never echoed whole
        (["compare", "--" + "y" * 100_000], f"error: unknown to agent-evals compare: --{'y' * 55}... (see"),
    ],
)
def test_a_typo_gets_the_nearest_command_or_flag(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ae.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1


def test_help_as_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert ae.main(["help"]) == 0
    assert capsys.readouterr().out.startswith("usage: agent-evals [-h] [--version] COMMAND ...")
    assert ae.main(["help", "compare"]) == 0
    assert capsys.readouterr().out.startswith("usage: agent-evals compare [-h]")
    assert ae.main(["help", "help"]) == 0  # help is in its own list
    assert capsys.readouterr().out.startswith("usage: agent-evals [-h] [--version] COMMAND ...")


def test_python_dash_m_and_help(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agent_evals", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "request types" in result.stdout and "prompt" in result.stdout and "typesafe" in result.stdout
    assert "exit codes:" in result.stdout and "130" in result.stdout
    # every cause of exit 1 the README lists (#27.6), in --help's own words
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    causes = (
        "verify found problems",
        "a gate failed",
        "prepare failed",
        "the provider stopped the run",
        "could not be written",
        "agent-evals itself failed",
    )
    help_text = " ".join(result.stdout.split())
    assert all(cause in help_text and cause in " ".join(readme.replace("`", "").split()) for cause in causes)
    for command in ("cases", "verify", "run", "compare"):
        assert command in result.stdout
    sub = agent_evals("compare", "--help", cwd=tmp_path)
    for flag in (
        "--models",
        "--dataset",
        "--case",
        "--effort",
        "--temperature",
        "--max-tokens",
        "--parallelism",
        "--concurrency",
        "--config",
        "--project",
        "--tracker",
        "--local",
        "--no-open",
        "--dry-run",
        "--output",
    ):
        assert flag in sub.stdout
    version = agent_evals("--version", cwd=tmp_path)
    assert version.stdout.startswith("agent-evals ")
    bare = agent_evals(cwd=tmp_path)
    assert bare.returncode == 2 and "usage: agent-evals" in bare.stderr


def test_help_imports_no_network_or_thread_pool_modules() -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['agent-evals', '--help']\n"
        "try:\n    runpy.run_path('agent_evals.py', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in ('ssl', 'http.client', 'concurrent.futures', 'yaml') if m in sys.modules]\n"
        "print('LOADED', bad, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "LOADED []" in result.stderr
    # nor, as the installed command runs it, what only errors, hints or runs need
    code = (
        "import sys, agent_evals\n"
        "try:\n    agent_evals.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = ('typing', 'difflib', 'traceback', 'sqlite3', 'asyncio', 'random', 'hashlib', 'importlib.util')\n"
        "print('LOADED', [m for m in heavy if m in sys.modules], file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "LOADED []" in result.stderr, result.stderr


def test_stdout_carries_only_tables(toy: Path) -> None:
    result = agent_evals("compare", "--local", cwd=toy)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line]
    # every line is a table's, the best-value, power or glossary lines, never a message
    assert lines[0].startswith("┌") and "leaderboard: all datasets" in result.stdout
    assert all(not line.startswith(("warning", "note", "error", "logs:")) for line in lines)
    assert "logs: log/agent-evals (" in result.stderr and "warning: typesafe/jev-latest refused" in result.stderr


def test_quiet_prints_the_tables_and_only_what_asks_for_something(toy: Path) -> None:
    """--quiet: the tables, the best values and the exit code; on STDERR only warnings, errors and
    failed gates (no forecast, no logs line, no glossary, no notes on power)."""
    loud = agent_evals("compare", "--local", cwd=toy)
    result = agent_evals("compare", "--local", "-q", "--fail-under", "field_accuracy=99", cwd=toy)
    assert result.returncode == 0 and result.stderr == f"warning: {REFUSAL}\n"
    assert "forecast:" in loud.stderr and "logs:" in loud.stderr and "glossary:" in loud.stdout
    out = result.stdout
    assert "glossary" not in out and "power [" not in out and "best value [colors]" in out
    assert [line[:88] for line in out.splitlines() if line.startswith("│")] == [
        line[:88] for line in loud.stdout.splitlines() if line.startswith("│")
    ]
    failing = agent_evals("run", "--local", "--quiet", "-d", "colors", "--fail-under", "field_accuracy=101", cwd=toy)
    assert failing.returncode == 2 and failing.stderr.splitlines()[-1].startswith("error: --fail-under")
    gate = agent_evals("run", "--local", "--quiet", "-d", "colors", "--max-errors", "0", "-m", "fake/echo", cwd=toy)
    assert gate.returncode == 0 and gate.stderr == "" and "│ colors" in gate.stdout
    report = agent_evals("report", "-q", "log/agent-evals", cwd=toy)
    assert report.returncode == 0 and report.stderr == "" and "glossary" not in report.stdout


def test_closed_pipe_ends_quietly(
    toy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import agent_evals as ae

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (| head) has gone
    with open(write_end, "w", encoding="utf-8") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        monkeypatch.chdir(toy)
        code = ae.main(["cases"])
    assert code == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_single_file_needs_no_package_at_all_with_a_json_config(tmp_path: Path) -> None:
    # a venv of the bare interpreter: no PyYAML, nothing but the standard library
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    assert subprocess.run([python, "-c", "import yaml"], capture_output=True).returncode != 0
    project = tmp_path / "repo"
    shutil.copytree(TOY, project, ignore=shutil.ignore_patterns("log", "__pycache__"))
    shutil.copy(ROOT / "agent_evals.py", project / "agent_evals.py")
    yml = project / "evals" / ".agent-eval.config.yml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "OPENROUTER", "COVERAGE_"))}
    command = [str(python), "agent_evals.py", "compare", "--local"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip() == (
        "error: reading evals/.agent-eval.config.yml needs the PyYAML package: pip install PyYAML, or write the "
        "same keys as JSON in evals/.agent-eval.config.json (read with the standard library alone)"
    )
    lineup = {"project": "toy-evals", "request_types": ["prompt"], "vendors": {"fake": [{"model": "echo"}]}}
    (yml.parent / ".agent-eval.config.json").write_text(json.dumps(lineup))
    yml.unlink()
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "│ animals │ fake/echo │" in done.stdout and "yaml" not in done.stderr.lower()


@pytest.mark.skipif(importlib.util.find_spec("hatchling") is None, reason="hatchling (the dev extra) builds the wheel")
def test_the_wheel_installed_as_pipx_run_installs_it(tmp_path: Path) -> None:
    """The third use: the wheel built from this tree, installed alone in a fresh venv (what
    ``pipx run --spec WHEEL agent-evals`` does, here without the network), runs a suite in a
    fresh folder as ``agent-evals``; the wheel holds the one module and asks for PyYAML."""
    dist = tmp_path / "dist"
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(dist),
        str(ROOT),
    ]
    subprocess.run(build, check=True, timeout=300, capture_output=True)
    (wheel,) = dist.glob("agent_evals-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)]
    subprocess.run(pip, check=True, timeout=300, capture_output=True)
    project = tmp_path / "fresh"
    shutil.copytree(TOY, project, ignore=shutil.ignore_patterns("log", "__pycache__"))
    lineup = {"project": "toy-evals", "request_types": ["prompt"], "vendors": {"fake": [{"model": "echo"}]}}
    (project / "evals" / ".agent-eval.config.json").write_text(json.dumps(lineup))
    (project / "evals" / ".agent-eval.config.yml").unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "OPENROUTER", "COVERAGE_"))}
    command = [str(venv / "bin" / "agent-evals"), "compare", "--local"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "│ animals │ fake/echo │" in done.stdout, done.stderr
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True, timeout=300)
    assert version.stdout.strip() == f"agent-evals {ae.__version__}"
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        assert [n for n in archive.namelist() if ".dist-info/" not in n] == ["agent_evals.py"]
        metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("METADATA"))
    assert "requires-dist: pyyaml>=6.0" in metadata.lower()


def test_format_json_is_one_document_on_stdout_and_report_agrees(toy: Path) -> None:
    result = agent_evals("compare", "--local", "--format", "json", cwd=toy)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in the document"))
    assert document["schema"] == "agent-evals/results" and document["version"] == 1
    assert document["complete"] is True and document["cases_finished"] == document["cases_total"] == 24
    assert document["refused"] == ["typesafe/jev-latest refused: needs typesafe; this suite produces prompt"]
    animals = next(d for d in document["datasets"] if d["dataset"] == "animals")
    assert [row["model"] for row in animals["leaderboard"]] == ["fake/echo", "fake/echo", "fake/parrot"]
    top = animals["leaderboard"][0]["metrics"]["field_accuracy"]
    assert top["mean"] == 1.0 and top["cases"] == 4 and top["interval"] == "wilson" and 0.5 < top["low"] < 0.52
    assert animals["best_value"]["model"] in ("fake/parrot", "fake/echo")
    assert animals["best_value"]["cost_per_scored_run_usd"] == pytest.approx(0.001)
    assert len(document["overall"]) == 3 and "leaderboard" not in result.stderr
    logs = sorted(str(p) for p in (toy / "log" / "agent-evals").glob("*.json"))
    page = toy / "report.html"
    report = agent_evals("report", "--format", "json", "-o", str(page), *logs, cwd=toy)
    assert page.is_file()  # -o writes the page, and the document is printed all the same
    assert report.returncode == 0, report.stderr
    again = json.loads(report.stdout)
    assert again["datasets"] == document["datasets"] and again["overall"] == document["overall"]
    assert again["command"] == "report" and again["stamps"] == [document["stamp"]]
    # with a baseline, each change is in the document too
    result = agent_evals("compare", "--local", "--format", "json", "--baseline", cwd=toy)
    changes = json.loads(result.stdout)["baseline"]
    assert changes and {c["verdict"] for c in changes} <= {"no significant change", "not enough data"}


def test_a_contender_the_suite_refuses_is_never_checked_further(cli, tmp_path) -> None:
    """The toy suite refuses typesafe/jev-latest (it sends prompts); an effort TypeSafe does
    not take must not stop the run of everything else (issue #27.2)."""
    toy = shutil.copytree(ROOT / "examples" / "toy_suite", tmp_path / "toy_suite")
    code, out, err = cli("compare", "--local", "-e", "xhigh", cwd=toy)
    assert code == 0, err
    assert "typesafe/jev-latest refused: needs typesafe" in err and "not accepted" not in err
    assert "│ fake/echo   │ xhigh  │" in out


def test_a_dry_run_in_json_prints_the_matrix_as_data(make_suite, cli) -> None:
    project = make_suite()
    code, out, err = cli("compare", "-n", "--format", "json", cwd=project)
    assert code == 0, err
    document = json.loads(out)  # never the table: the flag is not ignored (#27.4)
    assert document["schema"] == "agent-evals/matrix"
    forecast = {
        "basis": "input size",
        "expected_usd": None,
        "least_usd": pytest.approx(0.004),
        "worst_usd": pytest.approx(0.004),
    }
    assert document["experiments"] == [
        {
            "dataset": "ds",
            "contender": ae.Contender("fake/echo", "default").to_json(),
            "cases": 4,
            "repeat": 1,
            "forecast": forecast,  # four fake completions at $0.001 each
        }
    ]


def test_every_listing_prints_json_for_scripts(make_suite, cli) -> None:
    project = make_suite()
    code, out, err = cli("cases", "--format", "json", cwd=project)
    assert code == 0, err
    cases = json.loads(out)
    assert cases["schema"] == "agent-evals/cases" and len(cases["cases"]) == 4
    assert cases["cases"][0] | {"dataset": "ds", "id": "a/001"} == cases["cases"][0]
    assert isinstance(cases["cases"][0]["words"], int)
    code, out, err = cli("models", "jev", "--format", "json")
    assert code == 0, err
    (latest, _) = json.loads(out)["models"]
    assert latest == {
        "model": "typesafe/jev-latest",
        "provider": "typesafe",
        "usd_per_input_token": pytest.approx(0.40e-6),
        "usd_per_output_token": pytest.approx(1.60e-6),
        "context": None,
    }
    code, _, err = cli("compare", "--local")
    code, out, err = cli("runs", "--format", "json")
    (run,) = json.loads(out)["runs"]
    assert run["command"] == "compare" and run["experiments"] >= 1 and isinstance(run["cost_usd"], float)
    assert run["state"] == "complete" and run["stamp"] == read_logs(project)[0]["stamp"]
    code, out, err = cli("verify", "--format", "json")  # a command with no table to turn into JSON refuses it
    assert code == 2 and "unknown to agent-evals verify: --format json" in err


ACME = """
import agent_evals as ae

class Acme(ae.FakeProvider):
    name, prefix = "acme", "acme/"

    def __init__(self):
        pad = lambda n: '{"ok": 0, "pad": "' + "x" * n + '"}'
        super().__init__({
            "thrifty": lambda s, u: '{"ok": 1}',
            "sloppy": lambda s, u: pad(20),
            "flaky": lambda s, u: '{"ok": 1}' if "1" in u or "2" in u else pad(40),
        })

    def catalog(self):
        return ["acme/thrifty", "acme/sloppy", "acme/flaky"]

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right", primary=True)]

    def call(self, case, reply, context):
        v = float((reply.output or {}).get("ok", 0))
        return ae.Score(value=v, metrics={"exact": v})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[Acme()])
"""


def test_at_40_columns_names_that_share_a_prefix_read_apart(make_suite) -> None:
    """Three acme/... contenders (and settings) at 40 columns: what the rows share (acme/) goes
    first, so each row's model reads in full (…thrifty, …sloppy, …flaky), never ac…y; a table
    that cannot fit then is printed whole, saying so once. compare, report and diff alike."""
    config = (
        "request_types: [prompt]\nvendors:\n  acme:\n    - model: thrifty\n      effort: [default, low]\n"
        "    - model: sloppy\n    - model: flaky\n      temperature: [0.0, 0.7]\n"
    )
    cases = {f"evals/datasets/ds/cases/a/00{i}/input.txt": f"v {i}" for i in range(1, 7)}
    cases |= {f"evals/datasets/ds/cases/a/00{i}/expected.json": "{}" for i in range(1, 7)}
    project = make_suite(helper=ACME, config=config, cases=cases)
    assert agent_evals("compare", "--local", cwd=project).returncode == 0
    logs = sorted((project / "log" / "agent-evals").glob("*.json"))
    folder = str(project / "log" / "agent-evals")
    for argv in (["compare", "--local"], ["report", "-q", folder], ["diff", "-q", str(logs[0]), str(logs[0])]):
        screen = at_terminal(40, *argv, cwd=project)
        rows = [line for line in screen.splitlines() if line.startswith("│ ")]
        named = [name for name in ("thrifty", "sloppy", "flaky") if any(name in row for row in rows)]
        assert named == ["thrifty", "sloppy", "flaky"] or (argv[0] == "diff" and named), (argv, screen)
        tables = screen.count("┌")
        assert "ac…" not in screen and screen.count("(wider than 40 columns") <= tables, screen  # once a table


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        (["--service-tier", ""], "error: argument --service-tier: empty: give a value, or leave the flag out"),
        (["-t", ","], "error: argument -t/--temperature: empty: give a value, or leave the flag out"),
        (["--judge", " "], "error: --judge: empty: name the judge model (openai/gpt-4.1-mini), or leave the flag out"),
    ],
)
def test_a_flag_given_nothing_is_refused_never_read_as_left_out(toy: Path, flag: list[str], said: str) -> None:
    done = agent_evals("compare", "--local", *flag, cwd=toy)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith(said), done.stderr


def test_a_one_column_window_folds_as_twenty_and_help_names_the_json_config(toy: Path) -> None:
    screen = at_terminal(1, "compare", "--local", cwd=toy)
    assert "Traceback" not in screen and "animals" in screen
    assert "evals/.agent-eval.config.json (no package needed)" in agent_evals("--help", cwd=toy).stdout


def test_a_helper_that_configures_a_second_copy_of_the_module_is_told_which(tmp_path: Path) -> None:
    suite = tmp_path / "evals"
    shutil.copytree(ROOT / "examples" / "toy_suite" / "evals" / "datasets", suite / "datasets")
    (tmp_path / "other").mkdir()
    shutil.copy(ROOT / "agent_evals.py", tmp_path / "other" / "agent_evals.py")
    (suite / ".agent-eval.config.json").write_text(
        '{"request_types": ["prompt"], "vendors": {"fake": [{"model": "echo"}]}}'
    )
    (suite / "eval_helper.py").write_text(
        "import importlib.util, sys\nfrom pathlib import Path\n"
        "copy = Path(__file__).parent.parent / 'other' / 'agent_evals.py'\n"
        "spec = importlib.util.spec_from_file_location('second_copy', copy)\n"
        "ae = importlib.util.module_from_spec(spec)\nsys.modules['second_copy'] = ae\nspec.loader.exec_module(ae)\n"
        "class S(ae.Scorer):\n    def metrics(self):\n        return [ae.Metric('x', 'x', primary=True)]\n"
        "    def call(self, case, reply, context):\n        return ae.Score(value=1.0, metrics={'x': 1.0})\n"
        "ae.configure(adapter=ae.EchoAdapter(), scorer=S())\n"
    )
    done = agent_evals("compare", "--local", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "configured a second copy of it, other/agent_evals.py (imported as second_copy); import the same" in (
        done.stderr
    )


def test_a_command_freezes_what_the_imports_made_and_leaves_the_callers_collector_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command runs with what the imports made frozen, the collector's thresholds as the caller
    set them (a suite's cyclic garbage freed as promptly as without the tool), and nothing frozen
    after; a caller that froze objects of its own finds them frozen still, none thawed or added."""
    import gc

    seen: list[tuple[tuple[int, ...], int]] = []
    monkeypatch.setitem(
        ae._COMMANDS, "runs", lambda args: seen.append((gc.get_threshold(), gc.get_freeze_count())) or 0
    )
    before = gc.get_threshold()
    gc.set_threshold(900, 11, 12)
    try:
        assert ae.main(["runs"]) == 0
        assert seen[0][0] == (900, 11, 12) and seen[0][1] > 1000
        assert gc.get_threshold() == (900, 11, 12) and gc.get_freeze_count() == 0
        gc.freeze()
        frozen = gc.get_freeze_count()
        assert ae.main(["runs"]) == 0
        assert seen[1][1] == frozen and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_small_jobs_comparison_is_short_and_shows_the_cases_that_flipped(make_suite) -> None:
    """Two models, eight cases, compare and then compare --baseline at 80 columns: the glossary
    says the metrics (every column with -v), the comparison's note is two lines, and each
    regression shows the cases that flipped under it, and one dataset's leaderboard is one line of
    places under its table (it was the table again). At most 45 lines in all (#74)."""
    from test_stats import FLIPPING

    from conftest import many

    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: model\n    - model: other\n"
    helper = FLIPPING.replace('{"model": model}', '{"model": model, "other": model}')
    project = make_suite(helper=helper, config=config, cases=many(8))
    first = at_terminal(80, "compare", "--local", cwd=project)
    assert "glossary:\n  right  (primary) the capital named\n  -v explains the other columns" in first, first
    screen = at_terminal(80, "compare", "--local", "--baseline", cwd=project, env={"BROKEN": "1"})
    lines = screen.rstrip("\n").splitlines()
    assert len(lines) <= 45, screen
    ranked = "leaderboard: ranked by right (errors counted as wrong) then cost: 1= fake/model\n  effort=default, 1= "
    assert f"{ranked}fake/other effort=default\n" in first, first
    assert "flipped [ds] fake/model right: 8 cases, 8 down and 0 up (the first 3; --format\n" in screen
    assert "  a/001  Right 1 → Wrong 1  right → wrong" in lines
    note = next(i for i, line in enumerate(lines) if line.startswith("2 regressions: "))
    assert lines[note + 1].endswith("after Holm (-v says more)"), screen  # two lines: nothing folds on
    assert all(not line.startswith("  ") for line in lines[note + 2 : note + 3]), screen
    loud = at_terminal(80, "compare", "--local", "-v", cwd=project)
    assert "  rank: by right with errors counted as wrong" in loud and "  cost " in loud


def test_at_40_columns_a_cjk_dataset_and_an_emoji_keep_every_line_within_the_window_and_aligned(make_suite) -> None:
    """Three acme/...-2026 contenders, a dataset named 首都城市 and an answer with an emoji, at 40
    columns: widths are terminal cells (a CJK character takes two), so every line of a table
    is as wide as its border, and a table is 40 cells or fewer unless the screen says it
    cannot be; the leaderboard of three is exactly 40 (41 before: its last cut was never shown)."""
    from agent_evals import _cells

    config = (
        "request_types: [prompt]\nvendors:\n  acme:\n    - model: thrifty-2026\n    - model: sloppy-2026\n"
        "    - model: flaky-2026\n"
    )
    helper = ACME.replace('"thrifty":', '"thrifty-2026":').replace('"sloppy":', '"sloppy-2026":')
    helper = helper.replace('"flaky":', '"flaky-2026":').replace("'{\"ok\": 1}'", '\'{"ok": 1, "note": "👍"}\'')
    helper = helper.replace('"acme/thrifty", "acme/sloppy", "acme/flaky"', '"acme/thrifty-2026", "acme/sloppy-2026"')
    helper = helper.replace('"acme/sloppy-2026"]', '"acme/sloppy-2026", "acme/flaky-2026"]')
    cases = {f"evals/datasets/首都城市/cases/a/00{i}/input.txt": f"v {i}" for i in range(1, 7)}
    cases |= {f"evals/datasets/首都城市/cases/a/00{i}/expected.json": "{}" for i in range(1, 7)}
    cases |= {f"evals/datasets/ds/cases/a/00{i}/input.txt": f"v {i}" for i in range(1, 4)}
    cases |= {f"evals/datasets/ds/cases/a/00{i}/expected.json": "{}" for i in range(1, 4)}
    project = make_suite(helper=helper, config=config, cases=cases)
    for argv in (["compare", "--local"], ["run", "--local", "-m", "acme/thrifty-2026"]):
        screen = at_terminal(40, *argv, cwd=project)
        tables: list[list[str]] = []
        for line in screen.splitlines():
            if line.startswith("┌"):
                tables.append([])
            if line.startswith(("┌", "│", "├", "└")):
                tables[-1].append(line)
        assert tables and any("首都城市" in line for table in tables for line in table), screen
        for table in tables:
            assert len({_cells(line) for line in table}) == 1, table  # every line as wide as its border
            assert _cells(table[0]) <= 40 or "(wider than 40 columns" in screen, table
        if argv[0] == "compare":
            (leaderboard,) = [t for t in tables if t[1].startswith("│ # │")]
            assert _cells(leaderboard[0]) == 40 and "│ 1 │ …thrif…-2026 │" in leaderboard[3], leaderboard

"""Shared fixtures: real suite folders under tmp_path and the real CLI, in process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

import agent_evals

ROOT = Path(__file__).resolve().parent.parent

# A helper with an exact-match scorer; the fake provider answers from the input.
HELPER = """
from pathlib import Path
import agent_evals as ae

class Adapter(ae.EchoAdapter):
    pass

class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when the answer is right.", primary=True),
                ae.Metric("maybe", "Only for variant a.")]

    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right, "maybe": right if case.variant == "a" else None},
                        diagnostics={} if right else {"got": reply.output})

    def summary(self, case):
        return f"{len(case.expected or {})} fields"

ae.configure(suite="t", root=Path(__file__).parent, adapter=Adapter(), scorer=Scorer(),
             providers=[ae.FakeProvider(__FAKES__)])
"""

# An exact-match suite for the tests that talk to a real (local) OpenAI-compatible server.
EXACT_HELPER = """
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right})

ae.configure(suite="routed", adapter=ae.EchoAdapter(), scorer=S())
"""

CONFIG = """
request_types: [prompt]
vendors:
  fake:
    - model: echo
"""


def case_files(dataset: str, case_id: str, answer: Mapping, *, expected: Mapping | None = None) -> dict[str, str]:
    """input.txt carrying ``answer`` as JSON, and expected.json (``answer`` unless given)."""
    folder = f"evals/datasets/{dataset}/cases/{case_id}"
    return {
        f"{folder}/input.txt": f"Question for {case_id}.\nAnswer: {json.dumps(answer)}\n",
        f"{folder}/expected.json": json.dumps(answer if expected is None else expected),
    }


def many(n: int) -> dict[str, str]:
    """``n`` cases a/001..a/NNN of dataset ds, each answering ``{"v": i}``."""
    cases: dict[str, str] = {}
    for i in range(1, n + 1):
        cases |= case_files("ds", f"a/{i:03d}", {"v": i})
    return cases


def write(root: Path, files: Mapping[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def make_suite(tmp_path: Path) -> Callable[..., Path]:
    """A suite under tmp_path/project: helper, config, and two cases per variant a and b."""

    def make(
        *,
        helper: str | None = HELPER,
        config: str | None = CONFIG,
        fakes: str = "None",
        cases: Mapping[str, str | bytes] | None = None,
        extra: Mapping[str, str | bytes] | None = None,
    ) -> Path:
        root = tmp_path / "project"
        files: dict[str, str | bytes] = {}
        if helper is not None:
            files["evals/eval_helper.py"] = helper.replace("__FAKES__", fakes)
        if config is not None:
            files["evals/.agent-eval.config.yml"] = config
        if cases is None:
            cases = {}
            for variant in ("a", "b"):
                for n in (1, 2):
                    cases |= case_files("ds", f"{variant}/{n:03d}", {"v": f"{variant}{n}"})
        files |= cases
        files |= extra or {}
        return write(root, files)

    return make


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """Run ``agent-evals ARGS`` in process from ``cwd``; returns (code, stdout, stderr)."""

    def run(*argv: str, cwd: Path | None = None) -> tuple[int, str, str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = agent_evals.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no suite configured, no keys, and its own sys.path."""
    for key in (
        "AGENT_EVALS_HELPER",
        "OPENROUTER_API_KEY",
        "OPENROUTER_BASE_URL",
        "TYPESAFE_API_KEY",
        "NO_COLOR",
        "BRAINTRUST_API_KEY",
        "BRAINTRUST_PROJECT_ID",
        "LOGFIRE_TOKEN",
        "LOGFIRE_BASE_URL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GITHUB_STEP_SUMMARY",  # a test run in GitHub Actions adds no summary of its own to the job's page
    ):
        monkeypatch.delenv(key, raising=False)
    for key in list(os.environ):  # a proxy of the machine's own is no part of a test
        if key.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setattr(sys, "path", list(sys.path))
    agent_evals._reset_configuration()
    agent_evals._CTRL_C.clear()


@pytest.fixture(autouse=True)
def _legal_moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A case run's illegal move fails the test that made it, on whatever thread it raised."""
    move, illegal = agent_evals._ExperimentRun._move, []

    def strict(self, unit: int, to: str, *since: str) -> bool:
        try:
            return move(self, unit, to, *since)
        except AssertionError as e:
            illegal.append(str(e))
            raise

    strict.__wrapped__ = move  # type: ignore[attr-defined]  # what a test of the moves themselves calls
    monkeypatch.setattr(agent_evals._ExperimentRun, "_move", strict)
    yield
    assert not illegal


@pytest.fixture
def tls(tmp_path):
    """A certificate for 127.0.0.1 from a throwaway CA: the server's context, and the CA's file."""
    import ssl

    import trustme

    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return context, ca_file


def read_logs(project: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((project / "log" / "agent-evals").glob("*.json"))]


@pytest.fixture
def asks() -> Callable[..., list]:
    """``asks(model, [kwargs, ...])``: completions one after another, over the provider's
    one HTTP client. Exceptions propagate."""
    return lambda model, calls: [model.complete(**kwargs) for kwargs in calls]


@pytest.fixture
def ask() -> Callable[..., object]:
    """``ask(model, **kwargs)``: one completion."""
    return lambda model, **kwargs: model.complete(**kwargs)


def needs(module: str) -> pytest.MarkDecorator:
    """Skip one test, not its module, when an optional package is missing (the dev extra brings them all)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        found = False
    return pytest.mark.skipif(not found, reason=f"needs {module}: pip install -e '.[dev]'")


def run_agent_evals(
    *argv: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    limit: float = 300,
    measured: bool = True,
    script: Path | None = None,
    **kw,
) -> subprocess.CompletedProcess[str]:
    """The one subprocess CLI runner: ``python agent_evals.py ARGV`` (or the given copy) as a
    user runs it, with no key or helper from the test's environment unless ``env`` sets one,
    and a time limit of its own (a hang fails the test instead of stalling the suite).
    ``measured``: coverage (when the tests run under it) measures the child too."""
    dropped = ("OPENROUTER", "AGENT_EVALS", "PYTHONPATH") + (() if measured else ("COVERAGE_",))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    environ |= {"PYTHONIOENCODING": "utf-8", "NO_COLOR": "1", **(env or {})}
    command = [sys.executable, str(script or ROOT / "agent_evals.py"), *argv]
    return subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL, **kw
    )


def walks(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str, int], list[str]]:
    """Each case run's states as its experiment's table moves it on (``_move``, the one place), by (dataset,
    contender, unit)."""
    seen: dict[tuple[str, str, int], list[str]] = {}
    move = agent_evals._ExperimentRun._move

    def spy(self: agent_evals._ExperimentRun, unit: int, to: str, *since: str) -> bool:
        key, before = (self.experiment.dataset, self.experiment.contender.label, unit), self.state[unit]
        if moved := move(self, unit, to, *since):
            seen.setdefault(key, [before]).append(to)
        return moved

    monkeypatch.setattr(agent_evals._ExperimentRun, "_move", spy)
    return seen

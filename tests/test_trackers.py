"""Trackers beside the local log: Logfire over OTLP and Braintrust, through their real SDKs."""

from __future__ import annotations

import builtins
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from servers import Answer, OpenAICompatible, Silent

from conftest import EXACT_HELPER, ROOT, case_files, needs, read_logs

needs_otel = needs("opentelemetry.sdk")
needs_braintrust = needs("braintrust")

SUITE = """
import builtins
import agent_evals as ae
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True), ae.Metric("maybe", "variant a only")]

    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right, "maybe": right if case.variant == "a" else None},
                        outcomes={"right": int(right)}, diagnostics={"note": "x" * 5000})

class MemoryFire(ae.Logfire):
    name = "memfire"

    def exporter(self):
        builtins._agent_evals_spans = InMemorySpanExporter()
        return builtins._agent_evals_spans

ae.configure(suite="traced", adapter=ae.EchoAdapter(), scorer=S(), trackers=[MemoryFire], providers=[ae.FakeProvider()])
"""
LINEUP = "project: tracked\nrequest_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: broken\n"


def attributes(span) -> dict:
    return dict(span.attributes)


@needs_otel
def test_logfire_spans_one_per_experiment_with_a_child_per_case(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    project = make_suite(helper=SUITE, config=LINEUP)
    code, _, err = cli("compare", "--tracker", "memfire", "-j", "1", cwd=project)
    assert code == 1, err  # a contender no case of which was answered
    spans = builtins._agent_evals_spans.get_finished_spans()
    experiments = [s for s in spans if s.name.startswith("experiment ")]
    cases = [s for s in spans if s.name.startswith("case ")]
    assert len(experiments) == 2 and len(cases) == 8
    echo = next(s for s in experiments if attributes(s)["model"] == "fake/echo")
    wanted = {"suite": "traced", "project": "tracked", "provider": "fake", "cases": 4, "mean.exact": 1.0}
    assert attributes(echo).items() >= wanted.items()
    children = [s for s in cases if s.parent.span_id == echo.context.span_id]
    assert sorted(attributes(s)["case.id"] for s in children) == ["a/001", "a/002", "b/001", "b/002"]
    first = next(s for s in children if attributes(s)["case.id"] == "a/001")
    a = attributes(first)
    assert a["metric.exact"] == 1.0 and a["metric.maybe"] == 1.0 and a["outcome.right"] == 1 and a["cost_usd"] == 0.001
    assert len(a["diagnostics"]) == 4096 and "reply.raw" not in a
    assert "metric.maybe" not in attributes(next(s for s in children if attributes(s)["case.id"] == "b/001"))
    broken = next(s for s in cases if attributes(s)["case.dataset"] == "ds" and s.status.status_code.name == "ERROR")
    (event,) = broken.events
    assert event.name == "exception" and event.attributes["exception.type"] == "ProviderError"
    assert "connection refused" in event.attributes["exception.message"]
    del builtins._agent_evals_spans


@needs_otel
def test_include_replies_sends_the_raw_reply(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    project = make_suite(
        helper=SUITE, config=LINEUP.replace("project: tracked\n", "memfire:\n  include_replies: true\n")
    )
    code, _, err = cli("compare", "--tracker", "memfire", "-m", "fake/echo", cwd=project)
    assert code == 0, err
    case = next(s for s in builtins._agent_evals_spans.get_finished_spans() if s.name.startswith("case "))
    assert case.attributes["reply.raw"].startswith('"Question for ')
    del builtins._agent_evals_spans


def receiver(status: int = 200) -> OpenAICompatible:
    server = OpenAICompatible(lambda r: Answer(status, b""), catalog=None)
    return server


def decode(request) -> list[tuple[str, dict]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message = ExportTraceServiceRequest()
    message.ParseFromString(request.body)
    out = []
    for resource in message.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                values = {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}
                out.append((span.name, values))
    return out


PLAIN = EXACT_HELPER + "ae.configure(providers=[ae.FakeProvider()])\n"
ONE = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"


@needs_otel
def test_logfire_end_to_end_through_the_real_otlp_exporter(make_suite, cli, monkeypatch) -> None:
    with receiver() as server:
        monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_secrettoken")
        monkeypatch.setenv("LOGFIRE_BASE_URL", server.url)
        project = make_suite(helper=PLAIN, config=ONE, cases=case_files("ds", "a/001", {"v": 1}))
        # the token alone selects logfire; --local sends nothing
        code, _, err = cli("compare", "--local", cwd=project)
        assert code == 0 and server.requests == []
        code, _, err = cli("compare", "-v")
        assert code == 0, err
        assert "tracker: logfire (its key LOGFIRE_TOKEN is the only one set)" in err
    # the span that claims the trace for the suite's project at once, then the rest
    first, request = server.requests
    assert [s for s, _ in decode(first)] == ["agent-evals run started"]
    assert request.path == first.path == "/v1/traces" and request.headers["authorization"] == "pylf_v1_us_secrettoken"
    assert request.headers["content-type"] == "application/x-protobuf"
    spans = dict(decode(request))
    assert spans["case a/001"]["case.id"] == "a/001" and spans["case a/001"]["score"] == 1.0
    assert spans["experiment ds--fake-echo--default"]["model"] == "fake/echo"
    assert "pylf_v1_us_secrettoken" not in err


@needs_otel
def test_an_otel_endpoint_stands_in_for_the_token_and_goes_beside_logfire(make_suite, cli, monkeypatch) -> None:
    with receiver() as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url + "/otel")
        project = make_suite(helper=PLAIN, config=ONE, cases=case_files("ds", "a/001", {"v": 1}))
        code, _, err = cli("compare", "--tracker", "logfire", "-v", cwd=project)
        assert code == 0, err
        assert "logfire: spans go to OTEL_EXPORTER_OTLP_ENDPOINT\n" in err
        assert [r.path for r in server.requests] == ["/otel/v1/traces"] * 2  # the run's first span, then the rest
        assert "authorization" not in server.requests[0].headers
        # both set: as the logfire SDK does, the spans go to Logfire and to the endpoint
        server.requests.clear()
        monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_bothtoken")
        monkeypatch.setenv("LOGFIRE_BASE_URL", server.url + "/logfire")
        code, _, err = cli("compare", "--tracker", "logfire", "-v")
        assert code == 0, err
        assert "spans go to OTEL_EXPORTER_OTLP_ENDPOINT and to Logfire (LOGFIRE_TOKEN), as the logfire SDK" in err
    paths = sorted(r.path for r in server.requests)
    assert paths == ["/logfire/v1/traces"] * 2 + ["/otel/v1/traces"] * 2
    to_logfire = [r for r in server.requests if r.path.startswith("/logfire")]
    assert all(r.headers["authorization"] == "pylf_v1_us_bothtoken" for r in to_logfire)
    to_otel = [r for r in server.requests if r.path.startswith("/otel")]
    assert sorted(n for r in to_logfire for n, _ in decode(r)) == sorted(n for r in to_otel for n, _ in decode(r))


@needs_otel
def test_an_export_failure_is_one_line_and_the_run_is_complete(make_suite, cli, monkeypatch) -> None:
    with receiver(401) as server:
        monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_badtoken1")
        monkeypatch.setenv("LOGFIRE_BASE_URL", server.url)
        project = make_suite(helper=PLAIN, config=ONE)
        code, out, err = cli("compare", "--tracker", "logfire", cwd=project)
    assert code == 0
    assert "warning: tracker logfire: close raised RuntimeError: export failed: 11 spans were not accepted" in err
    assert "│ ds      │ fake/echo │" in out and len(read_logs(project)[0]["rows"]) == 4


@needs_otel
def test_logfire_without_its_token_or_package(make_suite, cli, monkeypatch) -> None:
    project = make_suite(helper=PLAIN, config=ONE)
    code, _, err = cli("compare", "--tracker", "logfire", cwd=project)
    assert code == 2 and err.strip() == "error: tracker logfire: LOGFIRE_TOKEN is not set"
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    code, _, err = cli("compare", "--tracker", "logfire")
    assert code == 2 and "package opentelemetry.sdk is not installed (pip install 'agent-evals[logfire]')" in err


class FakeBraintrust(OpenAICompatible):
    """Braintrust's API as the SDK uses it: login, project, experiments (made and looked up by
    name), logs3, summarize. ``delay`` holds every answer that long; ``hang`` never answers logs3."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(self.answer, catalog=None)
        self.delay = delay
        self.experiments: dict[str, str] = {}
        self.token = os.urandom(4).hex()  # its experiments' ids are its own, whatever port it has

    def answer(self, request):
        path, body = request.path, request.body
        if path.startswith("/api/apikey/login"):
            org = {"id": "org1", "name": "myorg", "api_url": self.url, "proxy_url": self.url, "git_metadata": None}
            return Answer(200, {"org_info": [org]}, delay=self.delay)
        if path.startswith("/v1/project"):
            return Answer(200, {"id": "proj1", "name": body["name"]})
        if path.startswith("/v1/experiment?"):  # a lookup by name: the base experiment
            name = path.split("experiment_name=")[1].split("&")[0]
            known = [{"id": self.experiments[name], "name": name}] if name in self.experiments else []
            return Answer(200, {"objects": known})
        if path.startswith("/v1/experiment") and "summarize" not in path:
            self.experiments[body["name"]] = f"exp-{self.token}-{len(self.requests)}"
            return Answer(200, {"id": self.experiments[body["name"]], "name": body["name"]})
        if "summarize" in path:
            return Answer(200, {"scores": {}, "metrics": {}}, delay=self.delay)
        return Answer(200, {}, delay=self.delay)

    def rows(self, kind: str = "eval", stamp: str = "") -> list[dict]:
        """The rows as Braintrust stores them: the events of one span (its start, its end) merged by id;
        with ``stamp``, only that run's experiments' (an earlier test's abandoned SDK thread may still
        retry, login and all, into a port the system has since given to this server)."""
        merged: dict[str, dict] = {}
        mine = {v for name, v in self.experiments.items() if stamp in name}
        for request in self.requests:
            for row in request.body["rows"] if request.path.startswith("/logs3") else ():
                if row.get("experiment_id") not in mine:
                    continue
                into = merged.setdefault(row["id"], {})
                metrics = {**into.get("metrics", {}), **(row.get("metrics") or {})}
                into.update(row, metrics=metrics)
        return [row for row in merged.values() if row.get("span_attributes", {}).get("type") == kind]


@needs_braintrust
def test_braintrust_gets_one_span_per_case_through_the_real_sdk(make_suite, cli, monkeypatch) -> None:
    with FakeBraintrust() as server:
        monkeypatch.setenv("BRAINTRUST_APP_URL", server.url)  # a self-hosted Braintrust: the login goes there
        monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
        project = make_suite(helper=SUITE, config=LINEUP)
        code, out, err = cli("compare", "--tracker", "braintrust", "-j", "1", cwd=project)
        assert code == 1, err  # a contender no case of which was answered
        first = {r.body["name"] for r in server.requests if r.path == "/v1/experiment"}
        code, _, err = cli("compare", "--tracker", "braintrust", "-j", "1")  # the next run compares with this one
        assert code == 1, err
    assert server.requests[0].path == "/api/apikey/login"
    rows = server.rows()[:8]
    assert len(rows) == 8 and len(server.rows("llm")) == 16  # one llm span per model call, under its case
    good = next(r for r in rows if r["input"].startswith("Question for a/001") and r["output"] == {"v": "a1"})
    assert good["expected"] == {"v": "a1"} and good["scores"] == {"exact": 1.0, "maybe": 1.0}
    assert good["metadata"]["case"] == "ds/a/001" and good["metadata"]["usage"]["cost_usd"] == 0.001
    assert good["metadata"]["outcomes"] == {"right": 1} and good["span_attributes"]["name"] == "case a/001"
    call = next(r for r in server.rows("llm") if r["span_parents"] == [good["span_id"]])
    assert call["input"] == [{"role": "user", "content": good["input"]}] and call["metrics"]["prompt_tokens"] > 0
    assert call["output"]["role"] == "assistant" and call["metadata"]["model"] == "fake/echo"
    failed = next(r for r in rows if r["output"] and "_error" in r["output"])
    assert "connection refused" in failed["error"] and failed["scores"] == {}
    # the SDK names the file that opened each span: never a local path
    assert {r["context"]["caller_filename"] for r in [*rows, *server.rows("llm")]} == {"agent_evals.py"}
    # each case from its real start to its end: the durations are the local log's
    logs = read_logs(project)
    stamps = sorted({log["stamp"] for log in logs})
    runs = [log for log in logs if log["stamp"] == stamps[0]]
    logged = {(log["contender"]["model"], row["case"]): row["duration"] for log in runs for row in log["rows"]}
    made = {r.body["name"]: r.body for r in server.requests if r.path == "/v1/experiment"}
    for row in rows:
        (model,) = [
            b["metadata"]["model"] for b in made.values() if server.experiments[b["name"]] == row["experiment_id"]
        ]
        case = row["metadata"]["case"].removeprefix("ds/")
        assert row["metrics"]["end"] - row["metrics"]["start"] == pytest.approx(logged[(model, case)], abs=1e-5)
    # experiments are named with the run; the second run's are compared with the first's, contender by contender
    assert first == {f"ds--fake-echo--default.{stamps[0]}", f"ds--fake-broken--default.{stamps[0]}"}
    second = [b for name, b in made.items() if name not in first]
    assert all(server.experiments[b["name"].replace(stamps[1], stamps[0])] == b["base_exp_id"] for b in second)
    assert all("provider" not in b["metadata"] for b in made.values())  # no provider: null
    assert runs[0]["tracker"] == "braintrust"
    assert f"braintrust: {server.url}/app/myorg/p/tracked/experiments/ds--fake-echo--default.{stamps[1]}" in err
    assert "bt-test-key-123456" not in out + err


def b_of(server, path):
    return next(r.body for r in server.requests if r.path.startswith(path))


@needs_braintrust
def test_braintrust_needs_a_project_and_its_package(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
    project = make_suite(helper=PLAIN, config=ONE)
    code, _, err = cli("compare", cwd=project)
    assert (
        code == 2
        and "tracker braintrust: no project; name it with --project, project: in the config, or BRAINTRUST_PROJECT_ID"
        in err
    )
    monkeypatch.setitem(sys.modules, "braintrust", None)
    code, _, err = cli("compare", "--project", "p")
    assert (
        code == 2
        and "tracker braintrust: package braintrust is not installed (pip install 'agent-evals[braintrust]')" in err
    )


def experiment_times(project) -> dict[str, float]:
    return {log["experiment"]: log["summary"]["duration"] for log in read_logs(project)}


@needs_braintrust
def test_a_hung_tracker_costs_at_most_its_deadline_and_no_experiment_time(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
    # the SDK's own thread, given up on, gives up soon too: not still failing (and printing
    # tracebacks) while later tests, or coverage's report, run
    monkeypatch.setenv("BRAINTRUST_HTTP_TIMEOUT", "0.5")
    project = make_suite(helper=PLAIN, config=ONE + "    - model: echo\n      effort: low\n")
    with Silent() as server:  # accepts the connection, never answers
        monkeypatch.setenv("BRAINTRUST_APP_URL", server.url)
        began = time.monotonic()
        code, out, err = cli(
            "compare", "--tracker", "braintrust", "--project", "p", "--tracker-timeout", "1.5", cwd=project
        )
        took = time.monotonic() - began
    assert code == 0 and "│ ds      │ fake/echo │" in out
    assert "sending to braintrust... (up to 1.5 s; Ctrl-C skips)" in err
    # which of its calls the deadline finds in flight depends on the machine's load: finish, as a rule
    switched_off = (
        r"warning: tracker braintrust: (\w+ took over|not done after) 1\.5 s \(tracker_timeout\); it was switched off"
    )
    assert re.search(switched_off, err), err
    assert all(len(log["rows"]) == 4 for log in read_logs(project))  # the local log is complete first
    # the tracker's wait (1.5 s at least) is no experiment's time: never a bound a loaded machine can miss
    assert max(experiment_times(project).values()) < took - 1.4


@needs_braintrust
def test_a_slow_tracker_is_off_the_experiments_clocks(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
    project = make_suite(helper=PLAIN, config=ONE + "    - model: echo\n      effort: low\n")
    code, _, err = cli("compare", "--local", cwd=project)
    off = experiment_times(project)
    with FakeBraintrust(delay=1.0) as server:  # every login, flush and summary takes 1 s
        monkeypatch.setenv("BRAINTRUST_APP_URL", server.url)
        code, _, err = cli("compare", "--tracker", "braintrust", "--project", "p")
    assert code == 0, err
    on = {name: t for name, t in experiment_times(project).items()}
    stamp = max(log["stamp"] for log in read_logs(project))
    sent = re.search(r"braintrust: sent in (\d+\.\d) s, off the experiments' clocks", err)
    assert sent and float(sent[1]) >= 2.0 and len(server.rows(stamp=stamp)) == 8
    # the tracker's seconds are on no experiment's clock: each is shorter than the sending alone (on a
    # quiet machine 0.1 s against 2 s; never a fixed bound a loaded machine can miss)
    assert max(on.values()) < float(sent[1]) and max(off.values()) < float(sent[1])


@needs_braintrust
def test_the_first_ctrl_c_skips_a_hung_tracker(make_suite, tmp_path) -> None:
    project = make_suite(helper=PLAIN, config=ONE)
    with Silent() as server:
        env = {"BRAINTRUST_APP_URL": server.url, "BRAINTRUST_API_KEY": "bt-test-key-123456"}
        env |= {k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")}
        command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--tracker", "braintrust", "--project", "p"]
        command += ["--tracker-timeout", "120"]  # what the Ctrl-C saves: a wait it could never finish in
        child = subprocess.Popen(
            command, cwd=project, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        err = ""
        assert child.stderr is not None
        while "Ctrl-C skips" not in err:  # the run is done and waits on the tracker
            err += child.stderr.readline()
            assert child.poll() is None, err
        child.send_signal(signal.SIGINT)
        out, rest = child.communicate(timeout=300)
    assert child.returncode == 0, rest  # within 30 s: never the 120 s it would have waited
    assert "warning: tracker braintrust: skipped by Ctrl-C before it had sent everything" in rest
    assert "│ ds      │ fake/echo │" in out and len(read_logs(project)[0]["rows"]) == 4


APP_SPANS = """
import builtins
import agent_evals as ae
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

builtins._app_spans = InMemorySpanExporter()
provider = TracerProvider()  # the app's own, as its production code sets it up
provider.add_span_processor(SimpleSpanProcessor(builtins._app_spans))
tracer = provider.get_tracer("app")

class Adapter(ae.EchoAdapter):
    def call(self, case, model):
        with tracer.start_as_current_span("app.parse"):
            return super().call(case, model)

class AsyncAdapter(ae.EchoAdapter):
    async def call(self, case, model):
        with tracer.start_as_current_span("app.parse"):
            return ae.EchoAdapter._reply(await model.acomplete(user=case.input))
"""


@needs_otel
@pytest.mark.parametrize("kind", ["Adapter", "AsyncAdapter"])
def test_an_app_span_inside_the_adapter_is_a_child_of_its_case(make_suite, cli, monkeypatch, kind) -> None:
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    helper = SUITE.replace("adapter=ae.EchoAdapter()", f"adapter={kind}()").replace("import builtins\n", APP_SPANS, 1)
    project = make_suite(helper=helper, config=LINEUP)
    code, _, err = cli("compare", "--tracker", "memfire", "-m", "fake/echo", cwd=project)
    assert code == 0, err
    ours = builtins._agent_evals_spans.get_finished_spans()
    app = builtins._app_spans.get_finished_spans()
    cases = {s.context.span_id: s for s in ours if s.name.startswith("case ")}
    assert len(app) == 4 and all(s.parent.span_id in cases for s in app)
    assert {cases[s.parent.span_id].attributes["case.id"] for s in app} == {"a/001", "a/002", "b/001", "b/002"}
    assert len({s.context.trace_id for s in [*ours, *app]}) == 1  # one trace for the run
    del builtins._agent_evals_spans, builtins._app_spans


@needs_otel
def test_spans_speak_genai_and_openinference(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    project = make_suite(helper=SUITE, config=LINEUP.replace("model: echo", "model: echo\n      temperature: 0.3"))
    code, _, err = cli("compare", "--tracker", "memfire", cwd=project)
    assert code == 1, err  # a contender no case of which was answered
    spans = builtins._agent_evals_spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (run,) = [s for s in spans if s.parent is None]
    assert run.name.startswith("agent-evals compare ") and attributes(run)["openinference.span.kind"] == "CHAIN"
    stamp = attributes(run)["agent_evals.stamp"]
    assert read_logs(project)[0]["stamp"] == stamp and attributes(run)["errors"] == 4
    assert run.status.status_code.name == "ERROR" and run.status.description == "4 cases raised"
    assert attributes(run)["agent_evals.log_dir"] == os.path.join("log", "agent-evals")  # no local path leaves
    assert attributes(run)["cost_usd"] == pytest.approx(0.004)
    experiments = [s for s in spans if s.name.startswith("experiment ")]
    assert all(s.parent.span_id == run.context.span_id for s in experiments)
    echo = next(s for s in experiments if attributes(s)["model"] == "fake/echo")
    assert attributes(echo)["cost_usd"] == pytest.approx(0.004) and attributes(echo)["tokens.input"] > 0
    broken = next(s for s in experiments if attributes(s)["model"] == "fake/broken")
    assert attributes(broken)["errors"] == 4 and broken.status.status_code.name == "ERROR"
    assert echo.status.status_code.name == "UNSET"
    # the figure the tables rank by: a contender whose every case raised scores 0, never its answered mean
    board = json.loads(attributes(run)["output.value"])
    assert {k: v for k, v in board[broken.name.removeprefix("experiment ")].items() if k != "cost_usd"} == {
        "score": 0.0,
        "score_of_answered": None,
        "errors": 4,
    }
    assert json.loads(attributes(echo)["output.value"])["score"] == 1.0
    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(calls) == 8  # one per model call, the failed ones too
    call = next(s for s in calls if by_id[s.parent.span_id].attributes["case.id"] == "a/001" and "echo" in s.name)
    a = attributes(call)
    assert a["openinference.span.kind"] == "LLM" and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "fake/echo" and a["gen_ai.system"] == "fake"
    # Phoenix prices the call from its table by the bare name, which an llm.provider would narrow to none
    assert a["llm.model_name"] == "echo" and a["llm.system"] == "fake" and "llm.provider" not in a
    assert a["gen_ai.usage.input_tokens"] == a["llm.token_count.prompt"] > 0 and a["gen_ai.request.temperature"] == 0.3
    assert a["llm.cost.total"] == a["operation.cost"] == 0.001
    assert a["input.value"].startswith('[{"role": "user", "content": "Question for a/001')
    assert a["output.value"].startswith("Question for a/001")
    case = by_id[call.parent.span_id]
    assert attributes(case)["input.value"].startswith("Question for a/001")
    assert attributes(case)["output.value"] == '{"v": "a1"}' and attributes(case)["gen_ai.request.model"] == "fake/echo"
    assert case.start_time <= call.start_time <= call.end_time <= case.end_time
    failed = next(s for s in calls if "broken" in s.name)
    assert failed.status.status_code.name == "ERROR" and failed.events[0].name == "exception"
    del builtins._agent_evals_spans


AGENT = (
    EXACT_HELPER.replace("import agent_evals as ae\n", "import agent_evals as ae\nimport json\n").replace(
        'ae.configure(suite="routed", adapter=ae.EchoAdapter(), scorer=S())', ""
    )
    + """
class Agent(ae.Adapter):
    uses_tools = True

    def call(self, case, model):
        run = ae.run_tools(model, [{"role": "user", "content": case.input}], {"step": lambda n: f"step {n} done"})
        return ae.Reply(output=json.loads(run.answer or "null"), transcript=run.transcript)

ae.configure(suite="agent", adapter=Agent(), scorer=S())
"""
)


@needs_braintrust
def test_a_failed_agent_case_keeps_its_turns_in_the_log_and_the_tracker(make_suite, cli, monkeypatch) -> None:
    def respond(request):
        if len(request.body["messages"]) > 1:  # turn 2: the server fails
            return Answer(500, {"error": {"message": "upstream down"}})
        call = {"id": "call_1", "type": "function", "function": {"name": "step", "arguments": '{"n": 1}'}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return Answer(body={"choices": [{"finish_reason": "tool_calls", "message": message}], "usage": {}})

    lineup = "request_types: [prompt]\ndefaults:\n  retries: 0\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    with OpenAICompatible(respond) as model_server, FakeBraintrust() as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", model_server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test-agent")
        monkeypatch.setenv("BRAINTRUST_APP_URL", server.url)
        monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
        project = make_suite(helper=AGENT, config=lineup, cases=case_files("ds", "a/001", {"v": 1}))
        code, _, err = cli("compare", "--tracker", "braintrust", "--project", "p", cwd=project)
    assert code == 1, err  # a contender no case of which was answered
    (row,) = read_logs(project)[0]["rows"]
    assert row["error"].startswith("ProviderError: openrouter: openai/gpt-4o-mini: HTTP 500: upstream down")
    assert row["turns"] == 2 and [m["role"] for m in row["transcript"]] == ["user", "assistant", "tool"]
    stamp = read_logs(project)[0]["stamp"]
    (sent,) = server.rows(stamp=stamp)
    assert sent["metadata"]["transcript"] == row["transcript"] and sent["metadata"]["turns"] == 2
    first, second = sorted(server.rows("llm", stamp), key=lambda r: r["metrics"]["start"])
    assert first["output"]["tool_calls"][0]["function"]["name"] == "step" and "error" not in first
    assert second["input"] == row["transcript"] and "HTTP 500" in second["error"]


@needs_otel
def test_a_case_put_off_for_its_batch_is_one_span_across_its_rounds(make_suite, cli, monkeypatch) -> None:
    """--batch runs a case again each round: one case span holds them all, and the app's spans
    of every round are its children (none orphaned under a span never sent)."""
    from servers import BatchAPI, chat_answer

    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    helper = SUITE.replace("adapter=ae.EchoAdapter()", "adapter=Adapter()").replace("import builtins\n", APP_SPANS, 1)
    helper = helper.replace(", providers=[ae.FakeProvider()]", "")
    api = BatchAPI(lambda r: chat_answer(r.body["messages"][-1]["content"], cost=0.0004), polls=1)
    with OpenAICompatible(api) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-traced")
        monkeypatch.setenv("AGENT_EVALS_BATCH_POLL", "0.02")
        project = make_suite(
            helper=helper, config="request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
        )
        code, _, err = cli("run", "--batch", "--tracker", "memfire", cwd=project)
    assert code == 0 and len(api.submitted) == 1 and api.sync == 0, err
    ours = builtins._agent_evals_spans.get_finished_spans()
    app = builtins._app_spans.get_finished_spans()
    cases = {s.context.span_id: s for s in ours if s.name.startswith("case ")}
    assert len(cases) == 4  # one a case, not one a round
    assert len(app) == 8 and all(s.parent.span_id in cases for s in app)  # two rounds, each under its case
    del builtins._agent_evals_spans, builtins._app_spans


JUDGED_SUITE = (
    SUITE.replace(
        """class S(ae.Scorer):""",
        """judge = ae.Judge("Pass when the answer is the expected one.")

class S(ae.Scorer):""",
    )
    .replace(
        """        right = float(reply.output == case.expected)""",
        """        right, _ = judge(case, reply, context)""",
    )
    .replace(
        "providers=[ae.FakeProvider()]",
        """providers=[ae.FakeProvider({"judge": lambda s, u: '{"verdict": "pass", "reasons": "fine"}'})]""",
    )
)
JUDGED_LINEUP = LINEUP.replace("    - model: broken\n", "") + "judge: fake/judge\n"


PANEL = """
class Panel(ae.FakeProvider):  # a second provider: the judge's, not the contenders'
    name, prefix = "panel", "panel/"

    def catalog(self):
        return ["panel/judge"]
"""


@needs_otel
@pytest.mark.parametrize("judge", ["fake/judge", "panel/judge"])
def test_a_judges_calls_are_evaluator_spans_under_their_case_apart_from_the_contenders(
    make_suite, cli, monkeypatch, judge
) -> None:
    """Each case's judge call is a span of its own, named for the judge model and its own
    provider, OpenInference's EVALUATOR (never an LLM span a viewer sums into the
    contender's cost), under the case."""
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    helper = JUDGED_SUITE.replace("ae.configure(", PANEL + "\nae.configure(").replace(
        "providers=[ae.FakeProvider(",
        "providers=[Panel({'judge': lambda s, u: '{\"verdict\": \"pass\"}'}), ae.FakeProvider(",
    )
    project = make_suite(helper=helper, config=JUDGED_LINEUP.replace("fake/judge", judge))
    code, _, err = cli("compare", "--tracker", "memfire", cwd=project)
    assert code == 0, err
    spans = builtins._agent_evals_spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    judged = [s for s in spans if s.name == f"judge {judge}"]
    chats = [s for s in spans if s.name == "chat fake/echo"]
    assert len(judged) == len(chats) == 4
    assert {attributes(s)["gen_ai.provider.name"] for s in chats} == {"fake"}
    for span in judged:
        a, case = attributes(span), by_id[span.parent.span_id]
        assert case.name.startswith("case ") and a["openinference.span.kind"] == "EVALUATOR"
        assert a["gen_ai.provider.name"] == judge.split("/")[0] and a["gen_ai.system"] == judge.split("/")[0]
        assert a["gen_ai.request.model"] == judge and a["gen_ai.request.temperature"] == 0.0
        assert a["llm.cost.total"] > 0 and "Pass when the answer is the expected one." in a["input.value"]
        assert attributes(case)["openinference.span.kind"] == "CHAIN"  # its contender's call is the LLM span
    del builtins._agent_evals_spans


@needs_braintrust
def test_braintrust_gets_a_judges_calls_as_score_spans(make_suite, cli, monkeypatch) -> None:
    with FakeBraintrust() as server:
        monkeypatch.setenv("BRAINTRUST_APP_URL", server.url)
        monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
        project = make_suite(helper=JUDGED_SUITE, config=JUDGED_LINEUP)
        code, _, err = cli("compare", "--tracker", "braintrust", "-j", "1", cwd=project)
        assert code == 0, err
    cases, calls, scores = server.rows(), server.rows("llm"), server.rows("score")
    assert len(cases) == len(calls) == len(scores) == 4
    assert {r["span_attributes"]["name"] for r in scores} == {"judge fake/judge"}
    assert all(r["metadata"]["model"] == "fake/judge" and r["metrics"]["prompt_tokens"] > 0 for r in scores)
    assert {r["span_parents"][0] for r in scores} == {r["span_id"] for r in cases}
    assert all(r["metrics"].get("prompt_tokens") is None for r in cases)  # the contender's call span holds them

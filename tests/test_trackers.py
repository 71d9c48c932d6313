"""Trackers beside the local log: Logfire over OTLP and Braintrust, through their real SDKs."""

from __future__ import annotations

import builtins
import sys

from servers import Answer, OpenAICompatible

from conftest import EXACT_HELPER, case_files, needs, read_logs

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
    assert code == 0, err
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
    (request,) = server.requests
    assert request.path == "/v1/traces" and request.headers["authorization"] == "pylf_v1_us_secrettoken"
    assert request.headers["content-type"] == "application/x-protobuf"
    spans = dict(decode(request))
    assert spans["case a/001"]["case.id"] == "a/001" and spans["case a/001"]["score"] == 1.0
    assert spans["experiment ds--fake-echo--default--t"]["model"] == "fake/echo"
    assert "pylf_v1_us_secrettoken" not in err


@needs_otel
def test_otel_variables_win_over_the_token(make_suite, cli, monkeypatch) -> None:
    with receiver() as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url + "/otel")
        project = make_suite(helper=PLAIN, config=ONE, cases=case_files("ds", "a/001", {"v": 1}))
        code, _, err = cli("compare", "--tracker", "logfire", "-v", cwd=project)
        assert code == 0, err
        assert "logfire: OTEL_EXPORTER_OTLP_ENDPOINT set: they win over LOGFIRE_TOKEN" in err
    assert [r.path for r in server.requests] == ["/otel/v1/traces"] and "authorization" not in server.requests[
        0
    ].headers


@needs_otel
def test_an_export_failure_is_one_line_and_the_run_is_complete(make_suite, cli, monkeypatch) -> None:
    with receiver(401) as server:
        monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_badtoken1")
        monkeypatch.setenv("LOGFIRE_BASE_URL", server.url)
        project = make_suite(helper=PLAIN, config=ONE)
        code, out, err = cli("compare", "--tracker", "logfire", cwd=project)
    assert code == 0
    assert "warning: tracker logfire: finish raised RuntimeError: export failed: 5 spans were not accepted" in err
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
    """Braintrust's API as the SDK uses it: login, project, experiment, logs3, summarize."""

    def __init__(self) -> None:
        super().__init__(self.answer, catalog=None)

    def answer(self, request):
        path = request.path
        if path.startswith("/api/apikey/login"):
            org = {"id": "org1", "name": "myorg", "api_url": self.url, "proxy_url": self.url, "git_metadata": None}
            return Answer(200, {"org_info": [org]})
        if path.startswith("/v1/project"):
            return Answer(200, {"id": "proj1", "name": request.body["name"]})
        if path.startswith("/v1/experiment") and "summarize" not in path:
            return Answer(200, {"id": f"exp{len(self.requests)}", "name": request.body["name"]})
        if "summarize" in path:
            return Answer(200, {"scores": {}, "metrics": {}})
        return Answer(200, {})

    def rows(self) -> list[dict]:
        return [row for r in self.requests if r.path.startswith("/logs3") for row in r.body["rows"] if "input" in row]


@needs_braintrust
def test_braintrust_gets_one_row_per_case_through_the_real_sdk(make_suite, cli, monkeypatch) -> None:
    with FakeBraintrust() as server:
        monkeypatch.setenv("BRAINTRUST_APP_URL", server.url)
        monkeypatch.setenv("BRAINTRUST_API_KEY", "bt-test-key-123456")
        project = make_suite(helper=SUITE, config=LINEUP)
        code, out, err = cli("compare", "--tracker", "braintrust", "-j", "1", cwd=project)
        assert code == 0, err
    rows = server.rows()
    assert len(rows) == 8
    good = next(r for r in rows if r["input"].startswith("Question for a/001") and r["output"] == {"v": "a1"})
    assert good["expected"] == {"v": "a1"} and good["scores"] == {"exact": 1.0, "maybe": 1.0}
    assert good["metadata"]["case"] == "ds/a/001" and good["metadata"]["usage"]["cost_usd"] == 0.001
    assert good["metadata"]["outcomes"] == {"right": 1} and good["metrics"]["prompt_tokens"] > 0
    failed = next(r for r in rows if r["output"] and "_error" in r["output"])
    assert "connection refused" in failed["error"] and failed["scores"] == {}
    assert b_of(server, "/v1/project")["name"] == "tracked"
    assert f"braintrust: {server.url}/app/myorg/p/tracked/experiments/ds--fake-echo--default--t" in err
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

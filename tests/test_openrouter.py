"""The OpenRouter provider over real HTTP, against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import socket

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import case_files, read_logs

KEY = "sk-or-test-SECRET-123"

ROUTED = """
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"exact": right})

ae.configure(suite="routed", adapter=ae.EchoAdapter(), scorer=S())
"""

LINEUP = """
project: routed
request_types: [prompt]
defaults:
  temperature: 0.2
  max_tokens: 64
vendors:
  openai:
    - model: gpt-4.1-mini
      effort: [default, high]
"""


@pytest.fixture
def server():
    with OpenAICompatible() as s:
        yield s


@pytest.fixture
def env(server, monkeypatch):
    monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    return server


def model(effort: str | None = None, temperature: float | None = None, max_tokens: int | None = None) -> ae.Model:
    return ae.Model(
        "openai/gpt-4.1-mini", ae.OpenRouter(), effort=effort, temperature=temperature, max_tokens=max_tokens
    )


def test_request_carries_the_settings_and_the_key(env) -> None:
    completion = model("high", 0.3, 100).complete(system="be terse", user='{"a": 1}')
    assert completion.text == '{"a": 1}'
    assert completion.usage == ae.Usage(10, 5, 0.0002)
    (request,) = env.requests
    assert (request.method, request.path) == ("POST", "/api/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-openrouter-title"] == "agent-evals" and "http-referer" in request.headers
    assert request.body == {
        "model": "openai/gpt-4.1-mini",
        "messages": [{"role": "system", "content": "be terse"}, {"role": "user", "content": '{"a": 1}'}],
        "temperature": 0.3,
        "max_tokens": 100,
        "reasoning": {"effort": "high"},
        "response_format": {"type": "json_object"},
    }


def test_default_effort_and_unset_settings_send_nothing(env) -> None:
    model("default").complete(user="hi", json=False)
    assert env.requests[0].body == {"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Answer(401, {"error": {"code": 401, "message": "User not found."}}), "HTTP 401: User not found."),
        (Answer(200, b"<html>oops</html>"), "HTTP 200, the body is not JSON"),
        (Answer(200, {"choices": []}), "HTTP 200: the response has no choices"),
        (
            Answer(
                200,
                {
                    "choices": [
                        {
                            "finish_reason": "error",
                            "error": {"code": 502, "message": "upstream died"},
                            "message": {"content": "par"},
                        }
                    ]
                },
            ),
            "HTTP 200: upstream died",
        ),
        (Answer(400, {"error": "plain text error"}), "HTTP 400: plain text error"),
    ],
)
def test_failures_are_provider_errors_naming_status_and_text(env, answer, message) -> None:
    env.respond = lambda r: answer
    with pytest.raises(ae.ProviderError) as caught:
        model().complete(user="x")
    assert message in str(caught.value)
    assert KEY not in str(caught.value)


def test_connection_refused_is_a_provider_error(monkeypatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENROUTER_BASE_URL", f"http://127.0.0.1:{port}/api/v1")
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    with pytest.raises(ae.ProviderError, match=r"openrouter: openai/gpt-4\.1-mini: .*refused"):
        model().complete(user="x")


def test_compare_through_the_cli_counts_errors_not_zeros(env, make_suite, cli) -> None:
    def respond(request):
        text = request.body["messages"][-1]["content"]
        if "b/002" in text:
            return Answer(500, {"error": {"code": 500, "message": "internal"}})
        return chat_answer(text, cost=0.25)

    env.respond = respond
    project = make_suite(helper=ROUTED, config=LINEUP)
    code, out, err = cli("compare", "--local", "-j", "1", cwd=project)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│ ds")]
    assert len(rows) == 2
    assert "│ 100.0% │      1 │" in rows[0]
    assert "$0.7500" in rows[0]
    efforts = sorted((r.body.get("reasoning") or {}).get("effort", "default") for r in env.requests)
    assert efforts == ["default"] * 4 + ["high"] * 4
    logs = read_logs(project)
    assert {log["summary"]["errors"] for log in logs} == {1}
    assert all(KEY not in json.dumps(log) for log in logs)
    assert KEY not in out + err


def test_missing_key_fails_before_any_call(server, make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("OPENROUTER_BASE_URL", server.url)
    project = make_suite(helper=ROUTED, config=LINEUP)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2
    assert (
        err.strip()
        == "error: OPENROUTER_API_KEY is not set (needed by openai/gpt-4.1-mini): export it or add it to an env file"
    )
    assert server.requests == []


def test_key_from_the_suites_env_file(server, make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("OPENROUTER_BASE_URL", server.url)
    helper = ROUTED.replace('suite="routed"', 'suite="routed", env_files=["../.env"]')
    project = make_suite(
        helper=helper,
        config=LINEUP,
        cases=case_files("ds", "a/001", {"v": 1}),
        extra={".env": f'OPENROUTER_API_KEY="{KEY}"\n'},
    )
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in out + err


def test_the_readme_provider_example_runs(make_suite, cli) -> None:
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    start = readme.index("```python\nimport json as jsonlib")
    code_block = readme[start + len("```python\n") : readme.index("```", start + 10)]

    def respond(request):
        assert request.path == "/api/generate"
        return Answer(200, {"response": request.body["prompt"], "prompt_eval_count": 7, "eval_count": 3})

    with OpenAICompatible(respond) as stand_in:
        helper = code_block.replace('host = "http://localhost:11434"', f'host = "{stand_in.url}"')
        helper += (
            "\nimport agent_evals as ae\n\nclass S(ae.Scorer):\n    def call(self, case, reply, context):\n"
            "        right = float(reply.output == case.expected)\n"
            "        return ae.Score(value=right, metrics={'score': right})\n\n"
            "ae.configure(adapter=ae.EchoAdapter(), scorer=S())\n"
        )
        config = "request_types: [prompt]\nvendors:\n  ollama:\n    - model: llama3\n"
        project = make_suite(helper=helper, config=config)
        code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert "│ ds      │ ollama/llama3 │ default │    - │ 100.0% │      0 │" in out
    assert stand_in.requests[0].body["model"] == "llama3" and stand_in.requests[0].body["format"] == "json"
    (log,) = read_logs(project)
    assert log["summary"]["usage"]["input_tokens"] == 28

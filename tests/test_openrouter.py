"""The OpenRouter provider over real HTTP, against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, ROOT, case_files, read_logs

KEY = "sk-or-test-SECRET-123"

ROUTED = EXACT_HELPER

LINEUP = """
project: routed
request_types: [prompt]
defaults:
  temperature: 0.2
  max_tokens: 64
  retry_backoff: 0.01
vendors:
  openai:
    - model: gpt-4.1-mini
      effort: [default, high]
"""

ONE_MODEL = LINEUP.replace("      effort: [default, high]\n", "")


@pytest.fixture
def server():
    with OpenAICompatible() as s:
        yield s


@pytest.fixture
def env(server, monkeypatch):
    monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    return server


def provider(**settings) -> ae.OpenRouter:
    p = ae.OpenRouter()
    p.retry_backoff = 0.01
    for key, value in settings.items():
        setattr(p, key, value)
    return p


def model(effort=None, temperature=None, max_tokens=None, **settings) -> ae.Model:
    return ae.Model(
        "openai/gpt-4.1-mini", provider(**settings), effort=effort, temperature=temperature, max_tokens=max_tokens
    )


def test_request_carries_the_settings_and_the_key(ask, env) -> None:
    completion = ask(model("high", 0.3, 100), system="be terse", user='{"a": 1}')
    assert completion.text == '{"a": 1}'
    assert completion.usage == ae.Usage(10, 5, 0.0002)
    assert completion.raw["id"] == "gen-1"
    (request,) = env.requests
    assert (request.method, request.path) == ("POST", "/api/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-openrouter-title"] == "agent-evals" == request.headers["x-title"]
    assert request.headers["http-referer"] == "https://pypi.org/project/agent-evals/"
    assert request.body == {
        "model": "openai/gpt-4.1-mini",
        "messages": [{"role": "system", "content": "be terse"}, {"role": "user", "content": '{"a": 1}'}],
        "temperature": 0.3,
        "max_completion_tokens": 100,  # max_tokens is deprecated in the spec
        "reasoning": {"effort": "high"},
        "response_format": {"type": "json_object"},
    }


def test_default_effort_and_unset_settings_send_nothing(ask, env) -> None:
    ask(model("default"), user="hi", json=False)
    assert env.requests[0].body == {"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Answer(400, {"error": {"code": 400, "message": "bad model"}}), "HTTP 400: bad model"),
        (Answer(403, {"error": {"code": 403, "message": "flagged"}}), "HTTP 403: flagged"),
        (Answer(200, b"<html>oops</html>"), "HTTP 200, the body is not JSON"),
        (Answer(200, {"choices": []}), "HTTP 200: the response has no choices"),
        (Answer(200, [1, 2]), "HTTP 200: expected a JSON object, got list"),
        (Answer(200, {"error": {"message": "upstream overloaded"}}), "HTTP 200: upstream overloaded"),
        (
            Answer(200, {"choices": [{"finish_reason": "error", "error": {"code": 502, "message": "upstream died"}}]}),
            "HTTP 200: upstream died",
        ),
        (Answer(404, {"error": "plain text error"}), "HTTP 404: plain text error"),
        (Answer(418, b""), "HTTP 418: empty body"),
    ],
)
def test_failures_are_provider_errors_naming_status_and_text(ask, env, answer, message) -> None:
    env.respond = lambda r: answer
    with pytest.raises(ae.ProviderError) as caught:
        ask(model(), user="x")
    assert message in str(caught.value)
    assert KEY not in str(caught.value)
    assert len(env.chats()) == 1  # none of these is worth a retry


def test_usage_keeps_reasoning_and_cached_tokens(ask, env) -> None:
    body = {
        "choices": [{"finish_reason": "stop", "message": {"content": "{}", "reasoning": "thinking"}}],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 50,
            "cost": 0.5,
            "completion_tokens_details": {"reasoning_tokens": 40},
            "prompt_tokens_details": {"cached_tokens": 2},
        },
    }
    env.respond = lambda r: Answer(200, body)
    completion = ask(model(), user="x")
    assert completion.usage == ae.Usage(3, 50, 0.5, cached_tokens=2, reasoning_tokens=40)
    assert completion.usage.to_json() == {
        "input_tokens": 3,
        "output_tokens": 50,
        "cost_usd": 0.5,
        "cached_tokens": 2,
        "reasoning_tokens": 40,
    }
    assert completion.raw["usage"]["completion_tokens_details"]["reasoning_tokens"] == 40


def test_cost_from_catalog_prices_when_the_response_has_none(ask, env, tmp_path) -> None:
    env.respond = lambda r: chat_answer("{}", prompt_tokens=1000, completion_tokens=500, cost=None)
    m = model(cache_dir=tmp_path)
    completion = ask(m, user="x")
    assert completion.usage.cost_usd == pytest.approx(1000 * 0.0000004 + 500 * 0.0000016)
    cached = json.loads(next(tmp_path.glob("openrouter-models.*.json")).read_text())
    assert cached["models"]["openai/gpt-4o-mini"] == [0.00000015, 0.0000006, 128000]
    # nonsense prices are unknown, and so is a context length the catalog does not give
    assert cached["models"]["meta-llama/llama-3.3-70b-instruct"] == [None, None, None]
    unpriced = ae.Model("meta-llama/llama-3.3-70b-instruct", m.provider)
    assert ask(unpriced, user="x").usage.cost_usd == 0.0
    assert m.provider.unpriced == {"meta-llama/llama-3.3-70b-instruct"}
    assert [r.path for r in env.requests if r.method == "GET"] == ["/api/v1/models"]  # fetched once


def test_retry_after_is_honoured_then_success(ask, env) -> None:
    answers = iter([Answer(429, {"error": {"message": "slow down"}}, {"Retry-After": "0.3"}), chat_answer("ok")])
    env.respond = lambda r: next(answers)
    waited: list[float] = []

    class Stop(ae._Stop):  # the run's stop flag, whose wait is every retry's: the seconds asked of it
        def wait(self, seconds: float) -> bool:
            waited.append(seconds)
            return super().wait(seconds)

    m = ae.Model("openai/gpt-4.1-mini", provider(), stop=Stop())
    assert ask(m, user="x").text == "ok"
    assert waited == [0.3]
    # a model of no run has no key's pace to share: its refusal is waited out as asked, as a retry
    assert m.ledger.retries == 1 and len(env.chats()) == 2


def test_5xx_then_success_and_a_dropped_connection(ask, env) -> None:
    answers = iter(
        [Answer(502, b"bad gateway"), Answer(503, {"error": {"message": "no provider"}}), chat_answer("fine")]
    )
    env.respond = lambda r: next(answers)
    m = model()
    assert ask(m, user="x").text == "fine"
    assert m.ledger.retries == 2


def test_permanent_5xx_gives_up_after_the_bound(ask, env) -> None:
    env.respond = lambda r: Answer(500, {"error": {"message": "internal"}})
    m = model(retries=3)
    with pytest.raises(ae.ProviderError, match=r"HTTP 500: internal \(gave up after 3 retries\)"):
        ask(m, user="x")
    assert len(env.chats()) == 4 and m.ledger.retries == 3


def test_with_retries_off_the_error_says_so(ask, env) -> None:
    env.respond = lambda r: Answer(500, {"error": {"message": "internal"}})
    with pytest.raises(ae.ProviderError, match=r"HTTP 500: internal \(--retries 0: no retry\)$"):
        ask(model(retries=0), user="x")


def test_total_wait_bounds_the_retries(ask, env) -> None:
    env.respond = lambda r: Answer(502, {"error": {"message": "later"}}, {"Retry-After": "5"})
    m = model(retries=10, retry_wait=2.0)
    with pytest.raises(ae.ProviderError, match=r"gave up after 0 retries"):
        ask(m, user="x")
    # it gave up at once rather than wait the 5 s the server asked for: no wait counted, one request
    assert m.ledger.retries == 0 and len(env.chats()) == 1


def test_a_hang_past_the_read_timeout_is_retried_then_an_error(ask, env) -> None:
    env.respond = lambda r: Answer(200, {"choices": []}, delay=1.0)
    m = model(timeout=0.2, retries=1)
    # each try timed out (the error says so) instead of waiting the second out; nothing was answered
    # meanwhile, so the server is stuck: the run stops
    with pytest.raises(ae.ProviderError, match=r"TimeoutError.*twice, and no request answered meanwhile") as e:
        ask(m, user="x")
    assert e.value.stops_run
    assert len(env.chats()) == 2


def test_connection_refused_stops_at_once_until_the_server_has_answered(ask, env, monkeypatch) -> None:
    # a port held bound but never listening refuses every connection, and no other
    # process can take it meanwhile (a closed port could be reused)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
        monkeypatch.setenv("OPENROUTER_BASE_URL", f"http://127.0.0.1:{port}/api/v1")
        m = model(retries=2)
        with pytest.raises(ae.ProviderError, match=r"cannot reach http://127.0.0.1:\d+/api/v1 \(Connection") as e:
            ask(m, user="x")  # nothing there in this run: a setup error, not a hiccup
        assert e.value.stops_run and "point OPENROUTER_BASE_URL at it" in str(e.value) and m.ledger.retries == 0
        # a server that answered once and then refuses is worth the retries
        monkeypatch.setenv("OPENROUTER_BASE_URL", env.url + "/api/v1")
        ask(m, user="x")
        monkeypatch.setenv("OPENROUTER_BASE_URL", f"http://127.0.0.1:{port}/api/v1")
        with pytest.raises(ae.ProviderError, match=r"ConnectionRefusedError.*gave up after 2 retries"):
            ask(m, user="x")
    assert m.ledger.retries == 2


def test_interrupt_during_a_backoff_wait_stops_promptly(ask, env) -> None:
    asked = threading.Event()
    env.respond = lambda r: (asked.set(), Answer(429, {"error": {"message": "later"}}, {"Retry-After": "30"}))[1]
    m = model(retry_wait=100.0)
    errors = []

    def call():
        try:
            ask(m, user="x")
        except ae.ProviderError as e:
            errors.append(str(e))

    worker = threading.Thread(target=call)
    worker.start()
    assert asked.wait(10)  # the server said "in 30 s": the model now waits on the run's stop flag
    m.stop.set("interrupted (Ctrl-C)")
    worker.join(10)  # far less than the 30 s the server asked for
    assert not worker.is_alive()
    assert errors == [
        "not sent: the run had stopped: interrupted (Ctrl-C); its last try: openrouter: openai/gpt-4.1-mini: HTTP 429: "
        "later"
    ]


def test_keep_alive_one_connection_per_worker_thread(env, make_suite, cli) -> None:
    cases = {}
    for n in range(1, 25):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    project = make_suite(helper=ROUTED, config=ONE_MODEL, cases=cases)
    code, _, err = cli("compare", "--local", "-p", "4", "-j", "1", cwd=project)
    assert code == 0, err
    assert len(env.chats()) == 24
    assert env.connections <= 4 + 1  # four workers, plus the catalog request on the main thread


ASYNC_ROUTED = ROUTED.replace(
    "ae.configure(",
    """class AsyncEcho(ae.EchoAdapter):
    async def call(self, case, model):
        completion = await model.acomplete(user=case.input)
        return ae.Reply(output=ae._first_json_object(completion.text), usage=completion.usage)

ae.configure(""",
).replace("adapter=ae.EchoAdapter()", "adapter=AsyncEcho()")


def test_an_async_adapter_asks_over_at_most_p_connections(env, make_suite, cli) -> None:
    def respond(request):
        if "a/007" in request.body["messages"][-1]["content"]:
            return Answer(500, {"error": {"message": "always down"}})
        return chat_answer(request.body["messages"][-1]["content"])

    env.respond = respond
    cases = {}
    for n in range(1, 25):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    config = ONE_MODEL.replace("  retry_backoff: 0.01\n", "  retry_backoff: 0.01\n  retries: 2\n")
    project = make_suite(helper=ASYNC_ROUTED, config=config, cases=cases)
    code, out, err = cli("compare", "--local", "-p", "4", "-j", "1", cwd=project)
    assert code == 0, err
    assert len(env.chats()) == 23 + 3  # the failing case: its first try and two retries
    assert env.connections <= 4 + 1  # four cases in flight, plus the catalog request
    (log,) = read_logs(project)
    rows = {row["case"]: row for row in log["rows"]}
    assert (
        rows["a/007"]["score"] is None and "HTTP 500: always down (gave up after 2 retries)" in rows["a/007"]["error"]
    )
    assert rows["a/007"]["retries"] == 2 and log["summary"]["retries"] == 2
    assert sum(row["score"] == 1.0 for row in rows.values()) == 23
    assert "│      1 │" in out  # one error in the table, no zero


def test_compare_through_the_cli_counts_errors_not_zeros(env, make_suite, cli) -> None:
    def respond(request):
        text = request.body["messages"][-1]["content"]
        if "b/002" in text:
            return Answer(500, {"error": {"code": 500, "message": "internal"}})
        if "a/002" in text and not any("a/002" in r.body["messages"][-1]["content"] for r in env.chats()[:-1]):
            return Answer(429, {"error": {"message": "slow"}}, {"Retry-After": "0"})
        return chat_answer(text, cost=0.25)

    env.respond = respond
    project = make_suite(helper=ROUTED, config=LINEUP)
    code, out, err = cli("compare", "--local", "-j", "1", "--retries", "2", cwd=project)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│ ds")]
    assert len(rows) == 2
    assert "│ 100.0% │      1 │" in rows[0] and "$0.7500" in rows[0]
    chats = env.chats()
    efforts = sorted((r.body.get("reasoning") or {}).get("effort", "default") for r in chats)
    # per contender: a/001, a/002 (+1 retry on the first contender), b/001, b/002 (+2 retries each)
    assert len(chats) == 2 * (4 + 2) + 1
    assert efforts.count("high") in (6, 7) and efforts.count("default") in (6, 7)
    logs = read_logs(project)
    assert {log["summary"]["errors"] for log in logs} == {1}
    # b/002's 500s are retries (2 each); a/002's 429 is the key's limiter's wait, never a retry
    assert sum(log["summary"]["retries"] for log in logs) == len(chats) - 8 - 1 == 4
    held = [(log["summary"]["rate_limited_s"], log["summary"]["rate_limited_calls_s"]) for log in logs]
    assert (
        sorted(held)[0] == (0, 0) and 0 < sorted(held)[1][0] <= sorted(held)[1][1]
    )  # one wait, a backoff (0 asks none)
    assert [r["retries"] for r in logs[0]["rows"]][3] == 2
    assert "retries [ds] openai/gpt-4.1-mini effort=default temp=0.2:" in err
    assert all(KEY not in json.dumps(log) for log in logs)
    assert KEY not in out + err


def test_401_stops_the_whole_run_with_one_message(env, make_suite, cli) -> None:
    env.respond = lambda r: Answer(401, {"error": {"code": 401, "message": "User not found."}})
    cases = {}
    for n in range(1, 13):
        cases |= case_files("ds", f"a/{n:03d}", {"v": n})
    project = make_suite(helper=ROUTED, config=ONE_MODEL, cases=cases)
    code, out, err = cli("compare", "--local", "-p", "1", cwd=project)
    assert code == 1 and "│ ds (1 of 12) │ openai/gpt-4.1-mini │" in out  # the tables of what finished still print
    assert err.splitlines()[-1] == "finish with: agent-evals compare --local -p 1 --resume"
    assert err.splitlines()[-2] == (
        "error: the run stopped after 1 of 12 cases: openrouter: HTTP 401: User not found. "
        "(the key was refused; check OPENROUTER_API_KEY and the account)"
    )
    assert len(env.chats()) == 1
    (log,) = read_logs(project)
    assert len(log["rows"]) == 1 and log["rows"][0]["error"].startswith("ProviderError: openrouter: HTTP 401")
    assert log["not_run"] == [f"a/{n:03d}" for n in range(2, 13)]


def test_a_refused_key_on_the_catalog_fails_before_any_completion(env, make_suite, cli) -> None:
    env.catalog = None  # GET /models is answered like any other request: here, 402
    env.respond = lambda r: Answer(402, {"error": {"code": 402, "message": "Insufficient credits"}})
    project = make_suite(helper=ROUTED, config=ONE_MODEL)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2
    assert err.startswith("error: openrouter: HTTP 402: Insufficient credits")  # its own line, not a wrapper's
    assert env.chats() == []


def test_an_empty_catalog_names_the_unknown_model(env, make_suite, cli) -> None:
    env.catalog = []
    project = make_suite(helper=ROUTED, config=ONE_MODEL)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and "openai/gpt-4.1-mini: provider openrouter has no such model" in err
    assert env.chats() == []


def test_catalog_cache_serves_verify_and_dry_runs_offline(env, make_suite, cli, monkeypatch) -> None:
    config = ONE_MODEL.replace("gpt-4.1-mini", "gpt-4.1-mni")
    project = make_suite(helper=ROUTED, config=config)
    # offline with no cache: nothing to check against, and nothing fetched
    code, out, err = cli("verify", "-v", cwd=project)
    assert code == 0, out + err
    assert env.requests == []
    # a real run fetches the catalog and refuses the unknown id by name, before any completion
    code, _, err = cli("compare", "--local")
    assert code == 2
    assert 'openai/gpt-4.1-mni: provider openrouter has no such model (did you mean "openai/gpt-4.1-mini"?)' in err
    assert [r.method for r in env.requests] == ["GET"]
    # now verify and -n check the lineup from the cache, with the server gone
    monkeypatch.setenv("OPENROUTER_BASE_URL", env.url + "/api/v1")
    env.httpd.shutdown()
    code, out, _ = cli("verify")
    assert (
        code == 1
        and 'openai/gpt-4.1-mni: provider openrouter has no such model (did you mean "openai/gpt-4.1-mini"?)' in out
    )
    code, _, err = cli("compare", "-n")
    assert code == 2 and "gpt-4.1-mni" in err
    (project / "evals" / ".agent-eval.config.yml").write_text(ONE_MODEL)
    code, out, err = cli("compare", "-n")
    assert code == 0 and "openai/gpt-4.1-mini │ openrouter" in out


def test_stale_catalog_is_refetched_and_kept_when_the_fetch_fails(env, tmp_path, monkeypatch, capsys) -> None:
    stale = json.dumps({"base_url": "x", "fetched_at": 0, "models": {"openai/old": [0.1, 0.2]}})
    fresh = provider(cache_dir=tmp_path)
    fresh._cache_path().write_text(stale)
    assert "openai/gpt-4.1-mini" in fresh.catalog()  # a day old: fetched again
    assert len([r for r in env.requests if r.method == "GET"]) == 1
    with OpenAICompatible() as gone:
        pass
    monkeypatch.setenv("OPENROUTER_BASE_URL", gone.url)
    unreachable = provider(cache_dir=tmp_path, retries=0)
    unreachable._cache_path().write_text(stale)
    assert unreachable.catalog() == ["openai/old"]  # the stale cache beats nothing
    said = capsys.readouterr().err  # said whether or not -v: what the run checks the lineup against
    assert "warning: OpenRouter catalog not read to its end (" in said and "checked against the cached one" in said
    broken = provider(cache_dir=tmp_path, offline=True)
    broken._cache_path().write_text("{broken")
    assert broken.catalog() is None and "no cached OpenRouter catalog yet" in broken.notes[0]


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


def test_key_from_the_suites_env_file_and_the_project_as_title(server, make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("OPENROUTER_BASE_URL", server.url)
    helper = ROUTED.replace('suite="routed"', 'suite="routed", env_files=["../.env"]')
    project = make_suite(
        helper=helper,
        config=ONE_MODEL,
        cases=case_files("ds", "a/001", {"v": 1}),
        extra={".env": f'OPENROUTER_API_KEY="{KEY}"\n'},
    )
    code, out, err = cli("compare", "--local", "-v", cwd=project)
    assert code == 0, err
    chat = server.chats()[0]
    assert chat.headers["authorization"] == f"Bearer {KEY}"
    assert chat.headers["x-openrouter-title"] == "agent-evals"  # the tool, unless app: names the app
    assert KEY not in out + err


def test_secrets_are_redacted_from_errors(env, make_suite, cli) -> None:
    env.respond = lambda r: Answer(400, {"error": {"message": f"bad key {KEY} in header"}})
    project = make_suite(helper=ROUTED, config=ONE_MODEL, cases=case_files("ds", "a/001", {"v": 1}))
    code, out, err = cli("run", "--local", cwd=project)
    assert (
        code == 1 and "got no answer at all: its 1 case failed (the first: ProviderError: " in err
    )  # nothing compared
    (log,) = read_logs(project)
    assert log["rows"][0]["error"].endswith("HTTP 400: bad key [redacted] in header")
    assert KEY not in out + err + json.dumps(read_logs(project))


def test_transport_settings_from_config_and_flags(make_suite, cli) -> None:
    config = ONE_MODEL.replace(
        "  retry_backoff: 0.01\n", "  retry_backoff: 0.01\n  timeout: 30\n  retries: 7\n  connect_timeout: 2\n"
    )
    project = make_suite(helper=ROUTED, config=config)
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 0, err
    suite = ae._load_suite(None, None)
    ae._setup_providers(
        suite, type("A", (), {"timeout": 5.0, "retries": None, "retry_wait": 9.0, "project": None})(), offline=True
    )
    router = next(p for p in suite.providers if p.name == "openrouter")
    assert (router.timeout, router.retries, router.retry_wait, router.connect_timeout) == (5.0, 7, 9.0, 2.0)
    # one app on OpenRouter's side, never renamed by each suite's project (issue #24.8)
    assert router.app_name == "agent-evals" and router.referer.endswith("/agent-evals/") and router.offline
    bad = ONE_MODEL.replace("  retry_backoff: 0.01\n", "  retries: 1.5\n")
    (project / "evals" / ".agent-eval.config.yml").write_text(bad)
    code, _, err = cli("compare", "-n")
    assert code == 2 and "defaults.retries: expected a whole number from 0 to 100, got 1.5" in err
    code, _, err = cli("compare", "-n", "--timeout", "soon")
    assert code == 2 and "argument --timeout: expected seconds" in err


def test_the_readme_provider_example_runs(make_suite, cli) -> None:

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


@pytest.mark.parametrize("helper", ["sync", "async"])
def test_ctrl_c_during_a_backoff_ends_the_real_cli_promptly(env, make_suite, helper) -> None:
    import os
    import signal
    import subprocess
    import sys

    env.respond = lambda r: Answer(429, {"error": {"message": "later"}}, {"Retry-After": "30"})
    project = make_suite(
        helper=ROUTED if helper == "sync" else ASYNC_ROUTED,
        config=ONE_MODEL.replace("  retry_backoff: 0.01\n", "  retry_wait: 300\n"),
    )
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local"]
    child = subprocess.Popen(
        command, cwd=project, env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while len(env.chats()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(env.chats()) == 4  # every case is waiting out its Retry-After
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 130, err  # within 20 s: never the 30 s each case was asked to wait
    assert "interrupted" in err and "Traceback" not in err
    (log,) = read_logs(project)
    assert log["rows"] == [] and len(log["not_run"]) == 4  # refused, then stopped: not run, and --resume asks them


def test_a_server_that_stops_reading_times_out_the_send(ask, monkeypatch) -> None:
    with socket.socket() as listener:  # accepts, then never reads: the request fills the socket buffers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        monkeypatch.setenv("OPENROUTER_BASE_URL", f"http://127.0.0.1:{listener.getsockname()[1]}/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
        m = model(timeout=0.2, retries=1)
        with pytest.raises(ae.ProviderError, match=r"TimeoutError: timed out twice, and no request answered meanwhile"):
            ask(m, user="x" * 16_000_000)
        assert m.ledger.retries == 1  # two tries, each ended by its 0.2-s timeout


def test_https_keeps_one_verified_connection(tls, asks, monkeypatch) -> None:
    context, ca_file = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # the default context trusts the test CA
    with OpenAICompatible(tls=context) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
        texts = [c.text for c in asks(model(), [{"user": "one"}, {"user": "two"}, {"user": "three"}])]
    assert server.url.startswith("https://")
    assert texts == ["one", "two", "three"] and server.connections == 1
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_an_untrusted_certificate_is_refused_at_once(tls, ask, monkeypatch) -> None:
    context, _ = tls
    with OpenAICompatible(tls=context) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
        m = model(retries=3)
        with pytest.raises(ae.ProviderError) as caught:
            ask(m, user="x")
    message = str(caught.value)
    assert message == (
        "openrouter: openai/gpt-4.1-mini: the server's TLS certificate is not trusted (unable to get local "
        "issuer certificate); if your own CA signs it, point SSL_CERT_FILE (or REQUESTS_CA_BUNDLE) at that CA's "
        f"certificate file (trusted now: {ae._trust()[1]})"
    )
    assert m.ledger.retries == 0 and server.requests == []  # not worth a retry: it fails the same way every time


def test_an_untrusted_certificate_stops_the_run_before_any_completion(tls, make_suite, cli, monkeypatch) -> None:
    context, _ = tls
    with OpenAICompatible(tls=context) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
        project = make_suite(helper=ROUTED, config=ONE_MODEL)
        code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and server.requests == []
    assert "the server's TLS certificate is not trusted" in err and "SSL_CERT_FILE" in err
    assert len(err.strip().splitlines()) == 1 and KEY not in err, err


def test_the_tls_context_is_made_once_per_trust_setting(tls, monkeypatch) -> None:
    _, ca_file = tls
    for name in ae._TRUST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    first, where = ae._trust()
    assert ae._trust()[0] is first and where == "the system's certificates"  # per connection it would cost seconds
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    trusting, where = ae._trust()
    assert trusting is not first and ae._trust()[0] is trusting and where == f"SSL_CERT_FILE={ca_file}"
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setenv("CURL_CA_BUNDLE", str(ca_file))  # read after REQUESTS_CA_BUNDLE, as requests reads them
    assert ae._trust()[1] == f"CURL_CA_BUNDLE={ca_file}"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_file.parent))  # a folder of certificates works too
    assert ae._trust()[1] == f"REQUESTS_CA_BUNDLE={ca_file.parent}"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_file.parent / "missing.pem"))
    with pytest.raises(ae.ProviderError, match=r"^REQUESTS_CA_BUNDLE=.*missing.pem: no CA certificates could be read"):
        ae._trust()


WHERE = ROUTED.replace(
    'return ae.Score(value=right, metrics={"exact": right})',
    'return ae.Score(value=right, metrics={"exact": right}, diagnostics={"thread": threading.current_thread().name})',
).replace("import agent_evals as ae", "import threading\n\nimport agent_evals as ae")

ASYNC_WHERE = WHERE.replace(
    "ae.configure(",
    """class Mine(ae.EchoAdapter):
    async def call(self, case, model):
        return self._reply(await model.acomplete(user=case.input))

ae.configure(""",
).replace("adapter=ae.EchoAdapter()", "adapter=Mine()")


@pytest.mark.parametrize("helper", [WHERE, ASYNC_WHERE], ids=["sync", "async"])
def test_sync_and_async_adapters_run_on_the_worker_threads(env, make_suite, cli, helper) -> None:
    # one runner: an async def call is awaited on its worker thread's own event loop
    project = make_suite(helper=helper, config=ONE_MODEL)
    code, _, err = cli("compare", "--local", "-p", "2", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert [row["score"] for row in log["rows"]] == [1.0] * 4
    assert all(row["diagnostics"]["thread"] == "case" for row in log["rows"])
    assert len({json.dumps(c.body, sort_keys=True) for c in env.chats()}) == 4 and env.connections <= 2 + 1


def paged_catalog(lineup: dict[str, str | None], per_page: int = 500, total: int = 1100):
    """OpenRouter's paginated GET /models: ``per_page`` models a page, ``links.next`` naming the
    next (null on the last), ``total_count``; the lineup's models (with their expiration_date)
    and openai/gpt-4o-mini:batch on the last page."""
    models = [
        {"id": f"filler/m{i:04d}", "pricing": {"prompt": "0.000001", "completion": "0.000002"}} for i in range(total)
    ]
    for model_id, ends in lineup.items():
        models.append(
            {"id": model_id, "pricing": {"prompt": "0.0000004", "completion": "0.0000016"}, "expiration_date": ends}
        )
    models.append({"id": "openai/gpt-4o-mini:batch", "pricing": {"prompt": "0.0000001", "completion": "0.0000004"}})
    pages: list[str] = []

    def respond(request):
        path, _, query = request.path.partition("?")
        if request.method == "GET" and path.endswith("/models"):
            pages.append(request.path)
            offset = int(dict(p.split("=") for p in query.split("&") if p).get("offset", 0))
            following = offset + per_page < len(models)
            link = f"/api/v1/models?offset={offset + per_page}&limit={per_page}" if following else None
            body = {"data": models[offset : offset + per_page], "links": {"next": link}, "total_count": len(models)}
            return Answer(200, body)
        return chat_answer(request.body["messages"][-1]["content"])

    return respond, pages


def test_a_paginated_catalog_is_read_page_by_page_and_an_expiring_model_is_said(env, make_suite, cli) -> None:
    """A catalog of three pages (1,100 models and more, the lineup's on the third): each page is
    read once, cached as one catalog (a second run asks none), the model priced and its :batch
    variant found; a lineup model expiring within 30 days is warned of before the run."""
    import datetime

    soon = (datetime.date.today() + datetime.timedelta(days=9)).isoformat()
    env.catalog = None
    env.respond, pages = paged_catalog({"openai/gpt-4.1-mini": soon, "openai/gpt-4o-mini": None})
    project = make_suite(helper=ROUTED, config=ONE_MODEL)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert pages == ["/api/v1/models", "/api/v1/models?offset=500&limit=500", "/api/v1/models?offset=1000&limit=500"]
    assert (
        f"warning: openai/gpt-4.1-mini: openrouter retires it on {soon}, in 9 days: this suite breaks that day" in err
    )
    code, _, err = cli("compare", "--local", "-n", cwd=project)
    assert code == 0 and len(pages) == 3, err  # the cached catalog: read as one
    catalog = ae.OpenRouter()
    assert catalog.price("openai/gpt-4.1-mini") == pytest.approx((0.0000004, 0.0000016, 0.0))
    assert "openai/gpt-4o-mini:batch" in (catalog.catalog() or [])


@pytest.mark.parametrize(
    "link", ["https://elsewhere.example/api/v1/models?offset=500", "/api/v1/models", "/api/v1/models?offset=0"]
)
def test_a_catalog_that_cannot_be_read_to_its_end_stops_the_run_before_any_chat(env, make_suite, cli, link) -> None:
    """A catalog whose next page is elsewhere or loops (back to the first page, or to itself
    under another name): each page read once, the first included, and the run refused in one
    line before anything is sent (a typo in the lineup would go unchecked): 0 chats. With a
    cached catalog, one line says the lineup is checked against it; defaults.check_models:
    false asks unchecked."""
    env.catalog = None
    env.respond = lambda r: (
        Answer(200, {"data": [{"id": "openai/gpt-4.1-mini"}], "links": {"next": link}})
        if r.method == "GET"
        else chat_answer(r.body["messages"][-1]["content"])
    )
    project = make_suite(helper=ROUTED, config=ONE_MODEL.replace("gpt-4.1-mini", "gpt-4.1-mimi"))
    code, _, err = cli("compare", "--local", cwd=project)
    asked = [r.path for r in env.requests if r.path.startswith("/api/v1/models")]
    assert code == 2 and env.chats() == [] and len(asked) == len(set(asked)) <= 2, (asked, err)
    why = "its next page is elsewhere" if link.startswith("https") else "its pages go round in circles"
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith(
        "error: openai/gpt-4.1-mimi: openrouter's catalog could not be read to its end "
        f"(openrouter: GET /models: {why} ("
    )
    assert line.endswith(
        "so model ids, prices and expiry go unchecked; try again, or set defaults.check_models: false to ask unchecked"
    )
    unchecked = ONE_MODEL.replace("defaults:\n", "defaults:\n  check_models: false\n")
    project = make_suite(helper=ROUTED, config=unchecked)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0 and len(env.chats()) == 4, err
    # a catalog read whole once, then stale: the run goes on against it, and says so
    broken, (env.respond, _) = env.respond, paged_catalog({"openai/gpt-4.1-mini": None}, total=10)
    project = make_suite(helper=ROUTED, config=ONE_MODEL)
    assert cli("compare", "--local", cwd=project)[0] == 0
    (cached,) = (project / "log" / "agent-evals" / "cache").glob("openrouter-models.*.json")
    cached.write_text(cached.read_text().replace('"fetched_at": ', '"fetched_at": 0, "was": '))
    env.respond = broken
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0 and "warning: OpenRouter catalog not read to its end (openrouter: GET /models: " in err, err
    assert "; the lineup is checked against the cached one" in err


def test_a_judge_is_held_to_the_lineups_catalog_checks(env, make_suite, cli) -> None:
    """The judge, as a contender: past its expiration_date it is refused by name before
    anything is sent; within 30 days, warned of; a catalog read in part refuses it too."""
    import datetime

    from test_judged import judge_suite

    soon = (datetime.date.today() + datetime.timedelta(days=5)).isoformat()
    env.catalog = None
    env.respond, _ = paged_catalog(
        {"openai/gpt-4.1-mini": None, "openai/old-judge": "2026-01-31", "openai/new-judge": soon}, total=10
    )
    project = make_suite(helper=judge_suite(), config=ONE_MODEL + "judge: openai/old-judge\n")
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and env.chats() == [], err
    assert err.strip().splitlines()[-1] == (
        "error: judge openai/old-judge: openrouter retired it on 2026-01-31 (its expiration_date); take it out of "
        "the lineup"
    )
    code, _, err = cli("compare", "--local", "--judge", "openai/new-judge", cwd=project)
    assert code == 0, err
    assert f"warning: openai/new-judge: openrouter retires it on {soon}, in 5 days: this suite breaks that day" in err


def test_a_lineup_model_past_its_expiration_date_is_refused_before_anything(env, make_suite, cli) -> None:
    env.catalog = None
    env.respond, _ = paged_catalog({"openai/gpt-4.1-mini": "2026-01-31"}, total=10)
    project = make_suite(helper=ROUTED, config=ONE_MODEL)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and env.chats() == []
    assert err.strip().splitlines()[-1] == (
        "error: openai/gpt-4.1-mini: openrouter retired it on 2026-01-31 (its expiration_date); take it out of "
        "the lineup"
    )


@pytest.mark.hostile
def test_a_server_that_sends_headers_then_stalls_ends_the_run_with_one_line(make_suite) -> None:
    """Headers, then nothing: each request times out twice at most (--timeout 0.5), then the
    run stops with one line (no request answered meanwhile: the server is stuck), its cases
    not run (never error rows, so --resume asks them), and a way on."""
    from servers import CATALOG, HeadersThenStall

    from conftest import run_agent_evals

    project = make_suite(helper=ROUTED, config=ONE_MODEL)
    with HeadersThenStall(CATALOG) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": KEY}
        done = run_agent_evals("compare", "--local", "--timeout", "0.5", "-p", "2", cwd=project, env=env, limit=300)
        asked = server.asked
    assert done.returncode == 1, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "the server answers nothing: openrouter: openai/gpt-4.1-mini: TimeoutError" in line, line
    assert "twice, and no request answered meanwhile" in line
    assert "finish with: agent-evals compare --local --timeout 0.5 -p 2 --resume" in done.stderr
    assert asked <= 2 * 2 + 2, asked  # two in flight, each asked twice at most
    assert all(not row["error"] for log in read_logs(project) for row in log["rows"])

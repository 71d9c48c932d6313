"""Issue #24: answers and edges shaped exactly as OpenRouter's OpenAPI spec gives them
(ChatResult, ChatUsage, ChatFinishReasonEnum), and OpenAI-compatible servers as they are
(a LiteLLM proxy reports cost in a header). Every server here is a real local HTTP server."""

from __future__ import annotations

import json
import threading

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, many, read_logs

LINEUP = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"
LOCAL = "request_types: [prompt]\ndirect:\n  local:\n    - model: llama3\n      effort: [default, low]\n"


@pytest.fixture
def openrouter(monkeypatch):
    def serve(respond, catalog=None):
        server = OpenAICompatible(respond, catalog=catalog)
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
        return server

    return serve


def test_array_content_is_its_text_parts_joined(openrouter, make_suite, cli) -> None:
    def respond(request):
        text = request.body["messages"][-1]["content"]
        answer = chat_answer("")
        answer.body["choices"][0]["message"]["content"] = [
            {"type": "text", "text": text[:5]},
            {"type": "image_url", "image_url": {"url": "data:,"}},
            {"type": "text", "text": text[5:]},
        ]
        return answer

    project = make_suite(helper=EXACT_HELPER, config=LINEUP, cases=many(2))
    with openrouter(respond):
        code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert [row["score"] for row in log["rows"]] == [1.0, 1.0]


def test_an_error_in_a_200_keeps_its_cost_and_a_5xx_code_in_it_is_retried(openrouter, make_suite, cli) -> None:
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(request):
        text = request.body["messages"][-1]["content"]
        with lock:
            asked[text] = asked.get(text, 0) + 1
            n = asked[text]
        paid = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "cost": 0.25}
        if '"v": 1' in text:  # always a refusal in-band, paid for
            return Answer(200, {"error": {"code": 400, "message": "moderation"}, "usage": paid})
        if '"v": 2' in text and n == 1:  # an upstream 503 in-band, once: worth another try
            return Answer(200, {"error": {"code": 503, "message": "upstream busy"}, "usage": paid})
        return chat_answer(text, cost=0.5)

    project = make_suite(helper=EXACT_HELPER, config=LINEUP + "defaults:\n  retry_backoff: 0.01\n", cases=many(2))
    with openrouter(respond):
        code, _, err = cli("compare", "--local", "-p", "1", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    first, second = log["rows"]
    assert first["error"].startswith("ProviderError: openrouter: openai/gpt-4.1-mini: HTTP 200: moderation")
    assert first["usage"]["cost_usd"] == 0.25  # paid though it failed: never logged as $0
    assert second["score"] == 1.0 and second["retries"] == 1 and second["usage"]["cost_usd"] == 0.75
    assert log["summary"]["usage"]["cost_usd"] == 1.0


def test_cut_off_answers_are_logged_counted_and_named(openrouter, make_suite, cli) -> None:
    def respond(request):
        answer = chat_answer(request.body["messages"][-1]["content"][:3])
        answer.body["choices"][0]["finish_reason"] = "length"
        answer.body["usage"] |= {
            "completion_tokens_details": {"reasoning_tokens": 4},
            "prompt_tokens_details": {"cached_tokens": 2},
        }
        return answer

    project = make_suite(helper=EXACT_HELPER, config=LINEUP, cases=many(3))
    with openrouter(respond) as server:
        code, out, err = cli("compare", "--local", "--max-tokens", "8", cwd=project)
        body = server.chats()[0].body
    assert code == 0, err
    assert body["max_completion_tokens"] == 8 and "max_tokens" not in body  # as the spec recommends
    (log,) = read_logs(project)
    assert {row["finish_reason"] for row in log["rows"]} == {"length"}
    assert (
        "warning: truncated [ds] openai/gpt-4.1-mini effort=default: 3 of 3 answers stopped at the output limit "
        "(finish_reason: length; max_tokens 8)" in err
    )
    assert log["summary"]["usage"]["reasoning_tokens"] == 12 and log["summary"]["usage"]["cached_tokens"] == 6
    assert "reasoning [ds] openai/gpt-4.1-mini effort=default: 12 of 15 output tokens; 6 input tokens cached" in out


def test_the_app_is_named_by_the_config_and_a_title_outside_latin_1_is_sent(openrouter, make_suite, cli) -> None:
    app = "app:\n  url: https://evals.example.org\n  title: évals ✓\n"
    project = make_suite(helper=EXACT_HELPER, config=LINEUP + "project: mine\n" + app, cases=many(1))
    with openrouter(None) as server:
        code, _, err = cli("compare", "--local", cwd=project)
        headers = server.chats()[0].headers
    assert code == 0, err
    assert headers["x-title"].encode("latin-1").decode("utf-8") == "évals ✓"  # UTF-8 bytes on the wire
    assert headers["http-referer"] == "https://evals.example.org"
    (project / "evals/.agent-eval.config.yml").write_text(LINEUP + "app:\n  colour: red\n")
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and "unknown key app.colour" in err


def test_a_local_server_gets_the_openai_shape_and_its_cost_header_is_read(make_suite, cli, monkeypatch) -> None:
    """A LiteLLM proxy: ids without a vendor, reasoning_effort (not OpenRouter's reasoning
    object), no OpenRouter attribution, and the cost in x-litellm-response-cost."""

    def respond(request):
        answer = chat_answer(request.body["messages"][-1]["content"], cost=None)
        answer.headers["x-litellm-response-cost"] = "0.0031"
        return answer

    with OpenAICompatible(respond, catalog=[{"id": "llama3"}]) as server:
        monkeypatch.setenv("LOCAL_BASE_URL", server.url + "/v1")
        project = make_suite(helper=EXACT_HELPER, config=LOCAL + "defaults:\n  max_tokens: 20\n", cases=many(2))
        code, _, err = cli("compare", "--local", "-p", "1", cwd=project)
        chats = server.chats()
    assert code == 0, err
    bodies = {r.body.get("reasoning_effort", "default") for r in chats}
    assert bodies == {"default", "low"} and all("reasoning" not in r.body for r in chats)
    assert all(r.body["max_tokens"] == 20 and "max_completion_tokens" not in r.body for r in chats)
    assert all("x-title" not in r.headers and "http-referer" not in r.headers for r in chats)
    logs = read_logs(project)
    assert [log["summary"]["usage"]["cost_usd"] for log in logs] == [pytest.approx(0.0062)] * 2


def test_usage_without_details_stays_as_it_was() -> None:
    assert ae.Usage(1, 2, 0.5).to_json() == {"input_tokens": 1, "output_tokens": 2, "cost_usd": 0.5}
    assert ae.Usage.coerce({"input_tokens": 1, "reasoning_tokens": 7}) == ae.Usage(1, 0, 0.0, 0, 7)


def test_a_dead_base_url_stops_a_20_case_run_at_once_with_one_line(make_suite, monkeypatch) -> None:
    import socket

    from conftest import run_agent_evals

    project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(20))
    with socket.socket() as sock:  # held bound, never listening: every connection is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        done = run_agent_evals("compare", "--local", cwd=project, env={"LOCAL_BASE_URL": url})
    assert done.returncode == 2 and done.stdout == ""  # found before any model was called: a setup error
    assert done.stderr.strip().splitlines() == [
        f"error: local: cannot reach {url} (ConnectionRefusedError: [Errno 111] Connection refused); start the "
        "server, or point LOCAL_BASE_URL at it"
    ]


def test_a_model_the_server_lacks_stops_that_contender_and_the_rest_run(openrouter, make_suite, cli) -> None:
    def respond(request):
        if request.body["model"] == "openai/gpt-4o-mini":
            return Answer(404, {"error": {"code": 404, "message": "No endpoints found for openai/gpt-4o-mini."}})
        return chat_answer(request.body["messages"][-1]["content"])

    config = LINEUP + "    - model: gpt-4o-mini\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(10))
    with openrouter(respond) as server:
        code, _, err = cli("compare", "--local", "-p", "1", "-j", "1", cwd=project)
        asked = [r.body["model"] for r in server.chats()]
    assert code == 1
    assert asked.count("openai/gpt-4o-mini") == 1 and asked.count("openai/gpt-4.1-mini") == 10
    assert (
        "error: [ds] openai/gpt-4o-mini effort=default stopped after 1 of 10 cases: openrouter: "
        "openai/gpt-4o-mini: HTTP 404: No endpoints found for openai/gpt-4o-mini. (check the model id" in err
    )
    logs = {log["contender"]["model"]: log for log in read_logs(project)}
    assert len(logs["openai/gpt-4o-mini"]["not_run"]) == 9 and len(logs["openai/gpt-4.1-mini"]["rows"]) == 10


def test_a_setting_the_server_refuses_stops_the_contender_after_three_alike(openrouter, make_suite, cli) -> None:
    def respond(request):
        if request.body.get("reasoning"):
            return Answer(400, {"error": {"code": 400, "message": "UnsupportedParamsError: reasoning_effort"}})
        return chat_answer(request.body["messages"][-1]["content"])

    config = LINEUP + "      effort: [default, high]\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(12))
    with openrouter(respond) as server:
        code, _, err = cli("compare", "--local", "-p", "1", "-j", "1", cwd=project)
        high = [r for r in server.chats() if r.body.get("reasoning")]
    assert code == 1 and len(high) == 3  # not twelve
    assert "error: [ds] openai/gpt-4.1-mini effort=high stopped after 3 of 12 cases:" in err
    assert "(its first 3 cases alike: check what it sends); --resume asks the rest once it is fixed" in err


def test_model_variants_are_checked_by_their_base_id_and_sent_as_written(openrouter, make_suite, cli) -> None:
    config = (
        "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini:floor\n    - model: "
        "gpt-4.1-mini:nitro\n"
    )
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(2))
    with openrouter(lambda r: chat_answer(r.body["messages"][-1]["content"], cost=None)) as server:
        code, out, err = cli("compare", "--local", cwd=project)
        sent = {r.body["model"] for r in server.chats()}
    assert code == 0, err
    assert sent == {"openai/gpt-4.1-mini:floor", "openai/gpt-4.1-mini:nitro"}
    assert "openai/gpt-4.1-mini:floor" in out and "openai/gpt-4.1-mini:nitro" in out  # the variant in the label
    logs = read_logs(project)  # priced at the base id's catalog price: 10 x 0.4/M + 5 x 1.6/M a case
    assert [log["summary"]["usage"]["cost_usd"] for log in logs] == [pytest.approx(2 * 0.000012)] * 2
    # a suffix that is no variant is still an unknown id, refused before anything is spent
    project = make_suite(helper=EXACT_HELPER, config=config.replace(":nitro", ":turbo"), cases=many(2))
    with openrouter(None):
        code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and "openai/gpt-4.1-mini:turbo: provider openrouter has no such model" in err


def test_provider_routing_expands_into_contenders_and_is_sent_as_the_spec_names_it(openrouter, make_suite, cli) -> None:
    config = (
        "request_types: [prompt]\n"
        "defaults:\n  provider:\n    data_collection: deny\n    zdr: true\n"
        "vendors:\n  meta-llama:\n    - model: llama-3.3-70b-instruct\n"
        "      provider:\n        - {order: [deepinfra], allow_fallbacks: false}\n"
        "        - {order: [together], allow_fallbacks: false, quantizations: [fp8]}\n"
        "  openai:\n    - model: gpt-4.1-mini\n"
    )
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(2))
    with openrouter(
        None, catalog=[{"id": "meta-llama/llama-3.3-70b-instruct"}, {"id": "openai/gpt-4.1-mini"}]
    ) as server:
        code, out, err = cli("compare", "--local", cwd=project)
        sent = [(r.body["model"], r.body.get("provider")) for r in server.chats()]
    assert code == 0, err
    llama = {json_key(p) for m, p in sent if m.startswith("meta-llama")}
    assert llama == {
        json_key({"order": ["deepinfra"], "allow_fallbacks": False}),
        json_key({"order": ["together"], "allow_fallbacks": False, "quantizations": ["fp8"]}),
    }
    # the entry's routings replace the defaults'; an entry without its own takes the defaults'
    assert {json_key(p) for m, p in sent if m.startswith("openai")} == {
        json_key({"data_collection": "deny", "zdr": True})
    }
    assert "meta-llama/llama-3.3-70b-instruct via deepinfra allow_fallbacks=false" in out
    assert "meta-llama/llama-3.3-70b-instruct via together allow_fallbacks=false quantizations=fp8" in out
    assert len(read_logs(project)) == 3  # three contenders, three logs that never collide


def test_defaults_routing_is_for_openrouter_and_an_entry_may_opt_out(openrouter, make_suite, cli, monkeypatch) -> None:
    # the README's defaults: provider: beside a local server and an entry that wants no routing
    config = (
        "request_types: [prompt]\ndefaults:\n  provider: {data_collection: deny}\n"
        "vendors:\n  openai:\n    - model: gpt-4.1-mini\n    - model: gpt-4.1-nano\n      provider: null\n"
        "direct:\n  local:\n    - model: llama3\n"
    )
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(1))
    catalog = [{"id": "openai/gpt-4.1-mini"}, {"id": "openai/gpt-4.1-nano"}]
    with OpenAICompatible(catalog=[{"id": "llama3"}]) as local, openrouter(None, catalog=catalog) as server:
        monkeypatch.setenv("LOCAL_BASE_URL", local.url + "/v1")
        code, out, err = cli("compare", "--local", cwd=project)
        sent = {r.body["model"]: r.body.get("provider") for r in server.chats()}
        asked_locally = [r.body.get("provider") for r in local.chats()]
    assert code == 0, err
    assert sent == {"openai/gpt-4.1-mini": {"data_collection": "deny"}, "openai/gpt-4.1-nano": None}
    assert asked_locally == [None] and "local/llama3 (direct)" in out
    # an entry of a direct provider that asks for routing itself is still refused by name
    project = make_suite(helper=EXACT_HELPER, config=config + "      provider: {zdr: true}\n", cases=many(1))
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 2 and "llama3: provider: routing preferences are OpenRouter's; local takes none" in err


def json_key(value: dict) -> str:
    import json

    return json.dumps(value, sort_keys=True)


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ("{sortt: price}", 'unknown key vendors.openai[0].provider.sortt (did you mean "sort"?)'),
        ("{order: deepinfra}", "vendors.openai[0].provider.order: 'deepinfra' is not of the kind OpenRouter takes"),
        ("{data_collection: never}", "vendors.openai[0].provider.data_collection: expected allow or deny"),
        ("[]", "vendors.openai[0].provider: expected provider preferences"),
        # values of the right kind that OpenRouter's spec does not take
        ("{preferred_max_latency: .nan}", "provider.preferred_max_latency: expected a number from 0 up, or p50"),
        ("{preferred_max_latency: -5}", "provider.preferred_max_latency: expected a number from 0 up"),
        ("{preferred_min_throughput: {p50: 100, p95: 9}}", "provider.preferred_min_throughput: expected a number"),
        ("{max_price: {prompt: cheap}}", "provider.max_price: expected prompt, completion, request, image or audio"),
        ("{max_price: {prompt: -1}}", "provider.max_price: expected prompt, completion, request"),
        ("{sort: {}}", "provider.sort: expected one of price, throughput, latency, exacto, or {by: price"),
        ("{sort: cheapest}", "provider.sort: expected one of price, throughput"),
        ("{sort: {by: price, partition: all}}", "provider.sort: expected one of price"),
        ("{quantizations: [fp8, q4]}", "provider.quantizations: expected a list of int4, int8"),
    ],
)
def test_routing_that_openrouter_would_refuse_is_one_line(make_suite, cli, routing, message) -> None:
    config = LINEUP + f"      provider: {routing}\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(1))
    code, out, err = cli("compare", "-n", cwd=project)
    assert (code, out) == (2, "") and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "routing",
    [
        "{sort: {by: latency, partition: none}}",
        "{max_price: {prompt: 1, completion: '2.5', request: 0}}",
        "{preferred_max_latency: {p50: 5, p90: 10}}",
        "{preferred_min_throughput: 100}",
    ],
)
def test_routing_values_openrouter_takes_pass(make_suite, cli, routing) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LINEUP + f"      provider: {routing}\n", cases=many(1))
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 0, err


def test_models_shows_a_local_servers_context_length(make_suite, cli, monkeypatch) -> None:
    catalog = [{"id": "llama3", "max_input_tokens": 8192}, {"id": "qwen", "context_length": 32768}]
    with OpenAICompatible(catalog=catalog) as server:
        monkeypatch.setenv("LOCAL_BASE_URL", server.url + "/v1")
        project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(1))
        code, out, err = cli("models", "--provider", "local", "--refresh", cwd=project)
    assert code == 0, err
    assert "│ local/llama3 │ local    │      - │       - │   8,192 │" in out
    assert "│ local/qwen   │ local    │      - │       - │  32,768 │" in out


def test_the_cache_keys_on_routing_and_keeps_a_cut_off_answer(tmp_path) -> None:
    cache = ae._Cache(tmp_path / "completions.sqlite3")
    provider = ae.OpenRouter()
    plain = ae.Model("openai/gpt-4.1-mini", provider)
    routed = ae.Model("openai/gpt-4.1-mini", provider, routing='{"order":["deepinfra"]}')
    request = {"system": None, "user": "x", "json": True}
    assert cache.key(plain, request) != cache.key(routed, request)  # another upstream, another answer
    raw = {"choices": [{"finish_reason": "length", "message": {"content": "{"}}]}
    cache.put(cache.key(plain, request), ae.Completion("{", ae.Usage(1, 8, 0.1), raw, finish_reason="length"))
    hit = cache.get(cache.key(plain, request))
    assert hit is not None and hit.finish_reason == "length" and hit.usage == ae.Usage(1, 8, 0.1)


def test_your_first_real_eval_as_the_readme_walks_it(tmp_path, monkeypatch) -> None:
    """The README's guide, step by step: copy the toy suite, list real models (its YAML block),
    give a key in a .env file, look before spending, then run, against a stand-in OpenRouter."""
    import re
    import shutil

    from servers import OpenAICompatible, chat_answer

    from conftest import ROOT, run_agent_evals

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    guide = readme[readme.index("## Your first real eval") : readme.index("## Writing a suite")]
    lineup = re.search(r"```yaml\n(.+?)\n\s*```", guide, re.S)[1]
    lineup = "\n".join(line[3:] if line.startswith("   ") else line for line in lineup.splitlines())
    project = tmp_path / "mine"
    for folder in ("evals", "toy_suite"):  # step 1: the suite, and the package with its adapter and scorer
        source = ROOT / "examples" / "toy_suite" / folder
        shutil.copytree(source, project / folder, ignore=shutil.ignore_patterns("log", "__pycache__"))
    helper = project / "evals" / "eval_helper.py"
    # step 4: the key in the project root's .env, named in configure(env_files=["../.env"])
    helper.write_text(helper.read_text().replace("configure(", 'configure(env_files=["../.env"], ', 1))
    (project / "evals" / ".agent-eval.config.yml").write_text(lineup + "\n")
    (project / ".env").write_text("OPENROUTER_API_KEY=sk-or-from-dotenv-123456\n")
    models = [m for m in re.findall(r"- model: (\S+)", lineup)]
    vendors = re.findall(r"^  (\w+):$", lineup, re.M)
    ids = ["openai/gpt-4.1-mini", "openai/gpt-4.1", "anthropic/claude-haiku-5.5"]
    assert models == ["gpt-4.1-mini", "gpt-4.1", "claude-haiku-5.5"] and vendors == ["openai", "anthropic"]
    catalog = [{"id": i, "pricing": {"prompt": "0.000001", "completion": "0.000004"}} for i in ids]

    def respond(request):
        text = request.body["messages"][-1]["content"]
        return chat_answer(text[text.index("Answer: ") + 8 :].strip() if "Answer: " in text else "{}")

    with OpenAICompatible(respond, catalog=catalog) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1"}
        for command in (["verify"], ["models", "gpt-4.1"], ["compare", "-n"]):
            done = run_agent_evals(*command, cwd=project, env=env)
            assert done.returncode in (0, 1), done.stderr  # verify may find the toy cases' own nits
        assert (
            "│ openai/gpt-4.1-mini │ openrouter │" in run_agent_evals("models", "gpt-4.1", cwd=project, env=env).stdout
        )
        dry = run_agent_evals("compare", "-n", cwd=project, env=env)
        assert dry.stdout.count("│ animals │") == 4 and "8 experiments, 32 case runs" in dry.stdout, dry.stdout
        assert server.chats() == []  # looking costs nothing
        one = run_agent_evals("run", "-m", "openai/gpt-4.1-mini", "-c", "clear/001", "--local", cwd=project, env=env)
        assert one.returncode == 0, one.stderr
        assert len(server.chats()) == 2  # one case in each of the two datasets
        assert all(r.headers["authorization"] == "Bearer sk-or-from-dotenv-123456" for r in server.chats())
        whole = run_agent_evals("compare", "--local", cwd=project, env=env)
        assert whole.returncode == 0, whole.stderr
    assert "leaderboard: all datasets" in whole.stdout and "sk-or-from-dotenv" not in whole.stdout + whole.stderr
    assert "stamp" in run_agent_evals("runs", cwd=project, env=env).stdout


def test_who_answered_is_logged_and_more_than_one_upstream_is_named(openrouter, make_suite, cli) -> None:
    # OpenRouter routes one id to several upstreams: the answers name theirs (and the model, the tier)
    def respond(request):
        text = request.body["messages"][-1]["content"]
        upstream = "Together" if int(text.split()[2].rstrip(".")[-1]) % 3 == 0 else "DeepInfra"
        return chat_answer(text, provider=upstream, model="meta-llama/llama-3.3-70b-instruct", service_tier="default")

    config = "request_types: [prompt]\nvendors:\n  meta-llama:\n    - model: llama-3.3-70b-instruct\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(9))
    catalog = [{"id": "meta-llama/llama-3.3-70b-instruct"}]
    with openrouter(respond, catalog=catalog):
        code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert {row["served"][0]["provider"] for row in log["rows"]} == {"DeepInfra", "Together"}
    assert log["rows"][0]["served"] == [
        {"provider": "DeepInfra", "model": "meta-llama/llama-3.3-70b-instruct", "service_tier": "default"}
    ]
    line = (
        "upstreams [ds] meta-llama/llama-3.3-70b-instruct effort=default: answered by 2 upstreams, DeepInfra "
        "(6 cases), Together (3 cases)"
    )
    assert f"warning: {line}; scores can differ between them: pin one with provider: {{only: [NAME]}}" in err
    assert "models [ds]" not in err  # one model behind the id
    # against a run whose answers all came from one upstream, the change is said
    first = sorted((project / "log" / "agent-evals").glob("*.json"))[-1]
    with openrouter(lambda r: chat_answer(r.body["messages"][-1]["content"], provider="Groq"), catalog=catalog):
        code, out, err = cli("compare", "--local", "--baseline", str(first))
    assert code == 0, err
    said = "upstream [ds] meta-llama/llama-3.3-70b-instruct: answered by DeepInfra, Together before and by Groq now"
    assert said in out


def test_openrouters_response_cache_never_fakes_a_repeat(monkeypatch, make_suite, cli) -> None:
    # issue #36 item 4: a cached answer is free and the same; --repeat must never score it twice
    project = make_suite(helper=EXACT_HELPER, config=LINEUP, cases=many(3))
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
    with OpenAICompatible(replays="preset") as server:  # a preset that would cache whatever is not sent "false"
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        for _ in range(2):
            code, _, err = cli("compare", "--local", "--repeat", "3", cwd=project)
            assert code == 0, err
        assert {r.headers["x-openrouter-cache"] for r in server.chats()} == {"false"}
        assert server.hits == 0 and "replayed" not in err
    asked = project / "evals" / ".agent-eval.config.yml"
    asked.write_text(asked.read_text() + "defaults:\n  openrouter_cache: true\n")
    with OpenAICompatible(replays=True) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        for _ in range(2):
            code, _, err = cli("compare", "--local", "--repeat", "3", cwd=project)
            assert code == 0, err
        sent = [(r.body["messages"][-1]["content"], r.headers["x-openrouter-cache"]) for r in server.chats()]
        assert sorted(h for _, h in sent).count("true") == 6  # the first repeat of each case, in both runs
        assert server.hits == 3  # the second run's first repeats, and nothing else
    rows = read_logs(project)[-1]["rows"]
    assert sorted((row["repeat"], tuple(row.get("replayed") or ())) for row in rows)[::3] == [
        (0, (1, 0)),
        (1, ()),
        (2, ()),
    ]
    assert all(row["usage"]["cost_usd"] == 0 for row in rows if row.get("replayed"))
    line = "replayed [ds] openai/gpt-4.1-mini effort=default: 3 answers in 3 of 9 case runs came from OpenRouter's"
    assert line in err and "warning: replayed" not in err

    def ignores_the_header(request):  # a cache that answers though told not to
        answer = chat_answer(request.body["messages"][-1]["content"])
        return Answer(200, answer.body, {"X-OpenRouter-Cache-Status": "HIT"})

    asked.write_text(LINEUP)
    with OpenAICompatible(ignores_the_header) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        code, _, err = cli("compare", "--local", "--repeat", "2", cwd=project)
    assert code == 0, err
    assert "warning: replayed [ds] openai/gpt-4.1-mini effort=default: 6 answers came from the response cache" in err
    assert "turn the preset's cache off" in err


def test_service_tiers_expand_are_sent_and_priced_as_billed(openrouter, make_suite, cli) -> None:
    # issue #36 item 5: service_tier: [default, flex] is two contenders, like effort
    def respond(request):
        text, tier = request.body["messages"][-1]["content"], request.body.get("service_tier")
        served = "standard" if tier == "flex" and '"v": 1' in text else tier  # flex not offered once
        cost = 0.001 if served == "flex" else 0.002
        return chat_answer(text, cost=cost, provider="OpenAI", service_tier=served)

    config = LINEUP + "defaults:\n  max_tokens: 100\n  service_tier: [default, flex]\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=many(4))
    with openrouter(respond) as server:
        code, out, err = cli("compare", "--local", cwd=project)
        assert code == 0, err
        assert sorted(r.body["service_tier"] for r in server.chats()) == ["default"] * 4 + ["flex"] * 4
        logs = {log["contender"].get("tier"): log for log in read_logs(project)}
        assert set(logs) == {"default", "flex"}
        assert logs["flex"]["summary"]["usage"]["cost_usd"] == pytest.approx(0.005)  # as billed: 3 flex, 1 standard
        assert "openai/gpt-4.1-mini tier=flex" in out
        assert (
            "warning: tier [ds] openai/gpt-4.1-mini tier=flex effort=default: asked for flex, answered on "
            "standard (1 case)" in err
        )
        assert "tier [ds] openai/gpt-4.1-mini tier=default" not in err
        # forecast from the catalog's price (no earlier runs): flex at half the default tier's
        for log in (project / "log" / "agent-evals").glob("*.json"):
            log.unlink()
        code, dry, err = cli("compare", "-n", "--format", "json", cwd=project)
        assert code == 0, err
        default, flex = (
            e["forecast"] for e in sorted(json.loads(dry)["experiments"], key=lambda e: e["contender"]["tier"])
        )
        assert (default["basis"], flex["basis"]) == ("input size", "input size, flex at half")
        assert flex["expected_usd"] is default["expected_usd"] is None  # no answer yet: no expected figure
        assert flex["least_usd"] == pytest.approx(default["least_usd"] / 2)
        assert flex["worst_usd"] == pytest.approx(default["worst_usd"])  # where flex is not offered: the list price
        # the flag beats the config; a dearer tier has no "at most"; a typo is named
        code, out, err = cli("compare", "-n", "--service-tier", "priority", cwd=project)
        assert code == 0, err
        assert "tier=priority" in out and "a dearer tier" in out and "at most" not in out.split("forecast:")[1]
        code, _, err = cli("compare", "-n", "--service-tier", "flx", cwd=project)
    assert code == 2 and "unknown service tier 'flx' (did you mean \"flex\"?)" in err, err
    local = LOCAL.replace("effort: [default, low]", "service_tier: flex")
    project.joinpath("evals", ".agent-eval.config.yml").write_text(local)
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 2 and "local/llama3: service_tier is OpenRouter's; local takes none" in err, err

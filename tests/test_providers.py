"""Providers beyond OpenRouter: your own, TypeSafe, LiteLLM; and shell completion."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import HELPER, ROOT, case_files, needs, read_logs

CUSTOM = """
import agent_evals as ae

class Upper(ae.FakeProvider):
    name = "upper"
    prefix = "acme/"
    efforts = ()

    def __init__(self):
        super().__init__({"m1": lambda s, u: u, "m2": lambda s, u: u})

    def catalog(self):
        return ["acme/m1", "acme/m2"]

class Greedy(ae.FakeProvider):
    name = "greedy"
    prefix = "acme/"

    def __init__(self):
        super().__init__({"m1": lambda s, u: "{}", "m2": lambda s, u: "{}"})

    def catalog(self):
        return ["acme/m1", "acme/m2"]

class Embed(ae.FakeProvider):
    name = "embed"
    prefix = "vec/"
    request_type = "embedding"
    request_type_description = "an embedding request"

class S(ae.Scorer):
    def call(self, case, reply, context):
        right = float(reply.output == case.expected)
        return ae.Score(value=right, metrics={"score": right})

# the last registered is asked first: Upper serves acme/ ids, not Greedy
ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[Greedy(), Embed(), Upper()])
"""


def test_custom_providers_route_by_prefix_last_registered_first(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  acme:\n    - model: m1\n  vec:\n    - model: e1\n"
    project = make_suite(helper=CUSTOM, config=config)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert "│ ds      │ acme/m1 │ default │    - │ 100.0% │" in out  # Upper answered, not Greedy
    assert "warning: vec/e1 refused: needs embedding; this suite produces prompt" in err
    (log,) = read_logs(project)
    assert log["provider"] == "upper"
    code, out, _ = cli("compare", "-n")
    assert "│ acme/m1 │ upper    │" in out


def test_a_custom_providers_efforts_are_refused_by_name(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  acme:\n    - model: m1\n      effort: low\n"
    project = make_suite(helper=CUSTOM, config=config)
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 2 and "acme/m1: effort 'low' is not accepted by provider upper (accepts: default)" in err


def test_request_types_of_registered_providers_are_known(make_suite, cli) -> None:
    config = "request_types: [embedding]\nvendors:\n  vec:\n    - model: e1\n  acme:\n    - model: m2\n"
    project = make_suite(helper=CUSTOM, config=config)
    code, _, err = cli("cases", cwd=project)
    assert code == 0 and "warning: acme/m2 refused: needs prompt; this suite produces embedding" in err


def test_a_direct_contender_and_a_vendors_one_with_the_same_id_stay_apart(make_suite, cli, monkeypatch) -> None:
    config = (
        "request_types: [prompt, typesafe]\nvendors:\n  typesafe:\n    - model: jev-latest\n"
        "direct:\n  typesafe:\n    - model: jev-latest\n"
    )
    project = make_suite(config=config)
    code, out, err = cli("compare", "-n", "-m", "typesafe/jev-latest", cwd=project)
    assert code == 0, err
    assert "│ typesafe/jev-latest          │ openrouter │" in out
    assert "│ typesafe/jev-latest (direct) │ typesafe   │" in out
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test-value-1")
    monkeypatch.setenv("TYPESAFE_API_KEY", "ts-test-value-1")
    monkeypatch.setenv("OPENROUTER_BASE_URL", "http://127.0.0.1:9/api/v1")  # nothing listens: no catalog, refused fast
    code, out, err = cli("compare", "--local", "--retries", "0", "-j", "2")
    # nothing answers at OpenRouter's URL in this run: a setup error that stops the run, named once
    assert code == 1 and "error: the run stopped after " in err and "cannot reach http://127.0.0.1:9/api/v1" in err
    names = sorted(p.name.split(".2")[0] for p in (project / "log" / "agent-evals").glob("*.json"))
    assert names == ["ds--typesafe-jev-latest--default", "ds--typesafe-jev-latest--direct-typesafe--default"]
    logs = {log["provider"]: log for log in read_logs(project)}
    typesafe = logs["typesafe"]  # stopped with the run: what it finished, and what it never asked
    assert all(row["error"].startswith("ProviderError: no typesafe consumer yet") for row in typesafe["rows"])
    assert len(typesafe["rows"]) + len(typesafe["not_run"]) == 4
    assert (
        logs["typesafe"]["contender"]["provider"] == "typesafe" and logs["openrouter"]["contender"]["provider"] is None
    )
    assert "cannot reach http://127.0.0.1:9/api/v1 (ConnectionRefusedError" in logs["openrouter"]["rows"][0]["error"]


def test_typesafe_ships_its_catalog_and_prices() -> None:
    typesafe = ae.TypeSafe()
    assert "typesafe/jev-latest" in typesafe.catalog() and typesafe.PRICES["typesafe/jev-latest"][1] > 0
    assert typesafe.efforts == ("low", "medium", "high") and typesafe.request_type == "typesafe"
    with pytest.raises(ae.ProviderError, match="no typesafe consumer yet"):
        ae.Model("typesafe/jev-latest", typesafe).complete(user="x")


def test_the_completion_scripts_come_from_the_parser(tmp_path) -> None:
    script = subprocess.run(
        [sys.executable, str(ROOT / "agent_evals.py"), "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    probe = tmp_path / "probe.sh"
    probe.write_text(
        script + "\ncomplete_words() "
        '{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _agent_evals; echo "${COMPREPLY[*]}"; }\n'
        + "complete_words agent-evals co\ncomplete_words agent-evals compare --ret\ncomplete_words agent-evals "
        "run -e h\n" + "complete_words agent-evals completion z\ncomplete_words agent-evals nothing --\n"
    )
    lines = subprocess.run(["bash", str(probe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines == ["compare completion", "--retries --retry-errors --retry-wait", "high", "zsh", ""]
    zsh = subprocess.run(
        [sys.executable, str(ROOT / "agent_evals.py"), "completion", "zsh"], capture_output=True, text=True, check=True
    ).stdout
    assert (
        zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n")
        and "complete -F _agent_evals agent-evals" in zsh
    )
    for flag in ("--fail-under", "--resume", "--junit", "--repeat", "--max-tokens"):
        assert flag in script


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the provider sets it: no download at import
needs_litellm = needs("litellm")

LITELLM_LINEUP = """
request_types: [prompt]
defaults:
  temperature: 0.3
  max_tokens: 50
  retry_backoff: 0.01
direct:
  litellm:
    - model: openai/gpt-4o-mini
      effort: [default, high]
"""


@pytest.fixture
def routed(monkeypatch):
    with OpenAICompatible() as server:
        monkeypatch.setenv("LITELLM_API_BASE", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-litellm-test-key")
        yield server


@needs_litellm
def test_litellm_over_its_openai_route_to_a_local_server(routed, make_suite, cli) -> None:
    config = LITELLM_LINEUP.replace("openai/gpt-4o-mini", "openai/o3-mini")
    project = make_suite(config=config)
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│ ds")]
    assert len(rows) == 2 and all("litellm/openai/o3-mini" in r for r in rows)
    assert all("│ 100.0% │      0 │" in r and "│     40 │      20 │ $0.0008 │" in r for r in rows)
    chats = routed.chats()
    assert len(chats) == 8 and {c.path for c in chats} == {"/v1/chat/completions"}
    body = chats[0].body
    assert body["model"] == "o3-mini" and body["response_format"] == {"type": "json_object"}
    assert body["max_completion_tokens"] == 50 and "temperature" not in body  # o3 takes none: dropped, not fatal
    assert sorted(c.body.get("reasoning_effort", "default") for c in chats) == ["default"] * 4 + ["high"] * 4
    assert chats[0].headers["authorization"] == "Bearer sk-litellm-test-key"
    for path in (project / "log").glob("compare.warnings.*.log"):  # what LiteLLM logs is kept off the screen
        assert "sk-litellm-test-key" not in path.read_text()


@needs_litellm
def test_litellm_drops_an_effort_the_model_does_not_take(routed, make_suite, cli) -> None:
    project = make_suite(config=LITELLM_LINEUP.replace("      effort: [default, high]\n", "      effort: high\n"))
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    body = routed.chats()[0].body
    assert "reasoning_effort" not in body and body["temperature"] == 0.3 and body["max_tokens"] == 50
    (log,) = read_logs(project)
    assert log["summary"]["usage"]["cost_usd"] == pytest.approx(0.0008)


ASYNC_ADAPTER = HELPER.replace(
    "class Adapter(ae.EchoAdapter):\n    pass\n",
    """class Adapter(ae.EchoAdapter):
    async def call(self, case, model):
        completion = await model.acomplete(user=case.input)
        return ae.Reply(output=ae._first_json_object(completion.text), usage=completion.usage)
""",
)


@needs_litellm
@pytest.mark.parametrize("adapter", ["sync", "async"])
def test_litellm_errors_are_retried_or_counted(routed, make_suite, cli, adapter) -> None:
    seen: dict[str, int] = {}

    def respond(request):
        text = request.body["messages"][-1]["content"]
        case = text.split()[2].rstrip(".")
        seen[case] = seen.get(case, 0) + 1
        if case == "a/001" and seen[case] == 1:
            return Answer(503, {"error": {"message": "overloaded"}})
        if case == "b/002":
            return Answer(400, {"error": {"message": "bad request from the vendor"}})
        return chat_answer(text)

    routed.respond = respond
    assert "async def call" in ASYNC_ADAPTER
    project = make_suite(
        helper=HELPER if adapter == "sync" else ASYNC_ADAPTER,
        config=LITELLM_LINEUP.replace("      effort: [default, high]\n", ""),
    )
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    rows = {row["case"]: row for row in log["rows"]}
    assert [rows[case]["score"] for case in ("a/001", "a/002", "b/001")] == [1.0, 1.0, 1.0]
    assert rows["a/001"]["retries"] == 1 and rows["a/001"]["error"] is None
    assert rows["b/002"]["error"].startswith(
        "ProviderError: litellm: litellm/openai/gpt-4o-mini: HTTP 400: BadRequestError"
    )
    assert "│ 100.0% ±0.0 │" not in out and "│      1 │" in out


@needs_litellm
def test_litellm_missing_key_fails_before_any_call(routed, make_suite, cli, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    project = make_suite(config=LITELLM_LINEUP)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and "OPENAI_API_KEY is not set (needed by litellm/openai/gpt-4o-mini)" in err
    assert routed.requests == []
    # two vendors' keys missing: one clause each; where either of two keys would do, it says so
    for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    (project / "evals" / ".agent-eval.config.yml").write_text(
        LITELLM_LINEUP + "    - model: gemini/gemini-2.5-flash\n    - model: vertex_ai/gemini-pro\n"
    )
    code, _, err = cli("compare", "--local")
    assert code == 2 and err.count("\n") == 1, err
    assert "GOOGLE_API_KEY or GEMINI_API_KEY is not set (needed by litellm/gemini/gemini-2.5-flash)" in err
    assert "; OPENAI_API_KEY is not set (needed by litellm/openai/gpt-4o-mini)" in err
    assert "VERTEXAI_LOCATION is not set (needed by litellm/vertex_ai/gemini-pro)" in err
    assert "probe" not in os.environ.get("GEMINI_API_KEY", "") + os.environ.get("GOOGLE_API_KEY", "")


def test_litellm_missing_package_names_the_extra(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)
    project = make_suite(config=LITELLM_LINEUP)
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2
    assert (
        err.strip() == "error: the litellm provider (direct: litellm:) needs the litellm package: pip install "
        "'agent-evals[litellm]'"
    )


def test_importing_agent_evals_never_imports_litellm() -> None:
    code = "import sys, agent_evals; agent_evals._builtin_providers(); print('litellm' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.strip()
        == "False"
    )


DIRECT_FAKE = (
    HELPER
    + """
class CheapDirect(ae.FakeProvider):
    name = "fake"
    direct = True
    COST_USD = 0.0005

ae.configure(providers=[ae.FakeProvider(), CheapDirect()])
"""
)


def test_the_direct_marker_is_on_every_line_that_names_a_direct_contender(make_suite, cli, tmp_path) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\ndirect:\n  fake:\n    - model: echo\n"
    project = make_suite(helper=DIRECT_FAKE, config=config)
    code, out, err = cli("compare", "--local", "--html", str(tmp_path / "r.html"), cwd=project)
    assert code == 0, err
    assert "│ ds      │ fake/echo (direct) │" in out and "│ ds      │ fake/echo          │" in out
    assert "best value [ds] (fake/echo (direct) effort=default): 100.0%" in out
    assert "then cost: 1 fake/echo (direct) effort=default, 2 fake/echo effort=default" in out  # the leaderboard
    assert "fake/echo (direct)" in (tmp_path / "r.html").read_text()
    code, out, _ = cli("report", *map(str, sorted((project / "log" / "agent-evals").glob("*.json"))))
    assert code == 0 and "best value [ds] (fake/echo (direct) effort=default)" in out
    code, out, _ = cli("compare", "-n")
    assert "│ fake/echo (direct) │ fake     │" in out


def test_help_inside_a_suite_lists_its_providers_request_types(make_suite, cli, tmp_path) -> None:
    project = make_suite(helper=CUSTOM, config="request_types: [embedding]\nvendors:\n  vec:\n    - model: e1\n")
    code, out, _ = cli("--help", cwd=project)
    assert code == 0 and "embedding" in out and "typesafe" in out
    code, out, _ = cli("--help", cwd=tmp_path)  # no suite here: the built-in types only
    assert code == 0 and "typesafe" in out and "embedding" not in out


TRACKING = (
    CUSTOM
    + """
class Jsonl(ae.Tracker):
    name = "jsonl"

ae.configure(trackers=[Jsonl])
"""
)


def test_completion_offers_the_suites_trackers_models_datasets_and_cases(make_suite, tmp_path) -> None:
    config = "request_types: [prompt]\nvendors:\n  acme:\n    - model: m2\n    - model: m1\n"
    project = make_suite(helper=TRACKING, config=config)
    script = subprocess.run(
        [sys.executable, str(ROOT / "agent_evals.py"), "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    # the script asks `agent-evals __complete KIND`: an agent-evals on PATH that runs this module
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "agent-evals").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "agent_evals.py"}" "$@"\n')
    (bin_dir / "agent-evals").chmod(0o755)
    probe = tmp_path / "probe.sh"
    probe.write_text(
        script + "\ncomplete_words() "
        '{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _agent_evals; echo "${COMPREPLY[*]}"; }\n'
        + 'complete_words agent-evals compare --tracker ""\ncomplete_words agent-evals compare -m ""\n'
        + 'complete_words agent-evals run -d ""\ncomplete_words agent-evals run -c a/\n'
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith(("PYTHONPATH", "AGENT_EVALS"))}
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True, cwd=project, env=env, timeout=300)
    assert done.stdout.splitlines() == [
        "none braintrust logfire jsonl",
        "acme/m2 acme/m1",
        "ds",
        "a/001 a/002",
    ], done.stderr
    lone = subprocess.run(["bash", str(probe)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert lone.stdout.splitlines()[:2] == ["none braintrust logfire", ""]  # no suite here: built-in trackers


LOCAL_LINEUP = "request_types: [prompt]\ndirect:\n  local:\n    - model: llama3.2:1b\n"


def test_a_local_server_with_vendor_free_ids_is_reached_and_its_catalog_checked(make_suite, cli, monkeypatch) -> None:
    catalog = [{"id": "llama3.2:1b", "object": "model"}, {"id": "qwen2.5:0.5b", "object": "model"}]
    with OpenAICompatible(catalog=catalog) as server:
        monkeypatch.setenv("LOCAL_BASE_URL", server.url + "/v1")
        project = make_suite(config=LOCAL_LINEUP)
        code, out, err = cli("compare", "--local", cwd=project)
        assert code == 0, err
        assert "│ ds      │ local/llama3.2:1b (direct) │" in out and "│ 100.0% │" in out
        chats = [r for r in server.requests if r.method == "POST"]
        assert {r.body["model"] for r in chats} == {"llama3.2:1b"}  # the server's own id, no prefix
        assert all("authorization" not in r.headers for r in server.requests)  # no key set: none sent
        warnings = [line for line in err.splitlines() if not line.startswith("forecast: ")]
        assert not any("no price" in line or "unpriced" in line for line in warnings), err
        assert "forecast: none: no experiment has a price to count with (1 from no price)" in err  # never $0
        (project / "evals" / ".agent-eval.config.yml").write_text(LOCAL_LINEUP.replace("1b", "1bb"))
        code, _, err = cli("compare", "--local")
        assert code == 2 and "local/llama3.2:1bb: provider local has no such model" in err
        code, out, err = cli("models", "--provider", "local", "--refresh")
        assert code == 0, err
        assert "│ local/llama3.2:1b  │ local    │      - │       - │       - │" in out and "local/qwen2.5:0.5b" in out


def test_models_lists_the_catalog_with_prices_and_context(make_suite, cli, monkeypatch) -> None:
    with OpenAICompatible() as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        project = make_suite()
        code, out, err = cli("models", "mini", "--provider", "openrouter", cwd=project)  # none cached: fetched
        assert code == 0, err
        assert "│ openai/gpt-4o-mini  │ openrouter │  $0.15 │   $0.60 │ 128,000 │" in out
        assert "│ openai/gpt-4.1-mini │ openrouter │  $0.40 │   $1.60 │       - │" in out and "llama" not in out
        code, out, err = cli("models", "mini", "--provider", "openrouter")  # cached now: not fetched again
        assert code == 0 and "│ openai/gpt-4o-mini  │" in out and len(server.requests) == 1
        code, out, err = cli("models", "mini", "--provider", "openrouter", "--refresh")
        assert code == 0 and "│ openai/gpt-4o-mini  │" in out, err
        fetched = len(server.requests)
    code, out, _ = cli("models", "*4o*", "--provider", "openrouter")  # the cached catalog: no server needed
    assert code == 0 and "openai/gpt-4o-mini" in out and "gpt-4.1" not in out and fetched == 2
    code, _, err = cli("models", "--provider", "openruter")
    assert code == 2 and 'did you mean "openrouter"' in err


LITELLM_AGENT = """
import agent_evals as ae

class Agent(ae.Adapter):
    uses_tools = True

    def call(self, case, model):
        run = ae.run_tools(model, [{"role": "user", "content": case.input}], {"lookup": lambda key: "found it"})
        return ae.Reply(output=run.answer, transcript=run.transcript)

class S(ae.Scorer):
    def call(self, case, reply, context):
        right = float(reply.output == "found it")
        return ae.Score(value=right, metrics={"score": right})

ae.configure(adapter=Agent(), scorer=S())
"""


@needs_litellm
def test_litellm_passes_tools_through_and_reads_the_tool_calls(routed, make_suite, cli) -> None:
    def respond(request):
        messages = request.body["messages"]
        if messages[-1]["role"] == "tool":
            return chat_answer(messages[-1]["content"])
        call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "k"}'}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        body = {"id": "x", "object": "chat.completion", "model": "gpt-4o-mini", "created": 1, "usage": usage}
        return Answer(body={**body, "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]})

    routed.respond = respond
    config = (
        "request_types: [prompt]\ndefaults:\n  retry_backoff: 0.01\ndirect:\n  litellm:\n    - model: "
        "openai/gpt-4o-mini\n"
    )
    project = make_suite(helper=LITELLM_AGENT, config=config, cases=case_files("ds", "a/001", {"v": 1}))
    code, _out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    chats = [r.body for r in routed.requests if r.method == "POST"]
    assert chats[0]["tools"][0]["function"]["name"] == "lookup"
    assert chats[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "found it"}
    (row,) = read_logs(project)[0]["rows"]
    assert row["score"] == 1.0 and row["turns"] == 2, row


def test_models_outside_a_suite_uses_the_built_in_providers_and_names_a_failing_catalog(
    make_suite, cli, tmp_path, monkeypatch
) -> None:
    code, out, err = cli("models", "--provider", "typesafe", cwd=tmp_path)  # no suite here
    assert code == 0 and "│ typesafe/jev-latest │ typesafe │" in out, err
    helper = CUSTOM.replace(
        '    def catalog(self):\n        return ["acme/m1", "acme/m2"]',
        "    def catalog(self):\n        raise OSError('catalog offline')",
        1,
    )
    project = make_suite(helper=helper, config="request_types: [prompt]\nvendors:\n  acme:\n    - model: m1\n")
    code, out, err = cli("models", "--provider", "upper", cwd=project)  # the first catalog replaced: Upper's
    assert code == 0 and out == ""
    assert "note: upper: no catalog (OSError: catalog offline); models --refresh needs its server running" in err
    assert "no models" in err


def test_models_shows_the_prices_typesafe_ships_and_fails_fast_offline(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setenv("OPENROUTER_BASE_URL", "http://127.0.0.1:9/api/v1")  # nothing listens there
    monkeypatch.setenv("LOCAL_BASE_URL", "http://127.0.0.1:9/v1")
    project = make_suite()
    code, out, err = cli("models", "--refresh", cwd=project)
    assert code == 0, err
    assert "│ typesafe/jev-latest │ typesafe │  $0.40 │   $1.60 │       - │" in out
    assert "note: openrouter: no catalog (ProviderError: openrouter: cannot reach http://127.0.0.1:9/api/v1" in err
    assert "models --refresh needs the network" in err and "ids not checked" not in err


def test_an_earlier_helpers_provider_classes_do_not_outlive_it(make_suite, cli, monkeypatch) -> None:
    # one process, two suites (a notebook, a test session): the first defines Greedy for acme/,
    # the second sends acme/ to OpenRouter and must not be refused for the first one's class
    config = "request_types: [prompt]\nvendors:\n  acme:\n    - model: m1\n"
    project = make_suite(helper=CUSTOM, config=config)
    assert cli("compare", "--local", cwd=project)[0] == 0
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    make_suite(helper=HELPER, config=config)
    code, out, err = cli("compare", "-n", cwd=project)
    assert code == 0, err
    assert "│ acme/m1 │ openrouter │" in out
    make_suite(helper=CUSTOM.replace("providers=[Greedy(), Embed(), Upper()]", "providers=[Embed()]"), config=config)
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 2 and "acme/m1 is served by Greedy (acme/...)" in err  # this helper's own classes still count

"""Agent suites: conversations, tool calls and the same honest accounting, offline and over real HTTP."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from servers import Answer, OpenAICompatible

import agent_evals as ae
from conftest import ROOT, case_files, read_logs, run_agent_evals

AGENT = ROOT / "examples" / "agent_suite"


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    shutil.copytree(AGENT, tmp_path / "agent_suite", ignore=shutil.ignore_patterns("log", "__pycache__"))
    return tmp_path / "agent_suite"


def test_the_agent_example_runs_through_the_real_cli(agent: Path) -> None:
    done = run_agent_evals("run", "--local", cwd=agent)
    assert done.returncode == 0, done.stderr
    assert "│ arith   │ fake/tooluser │ default │    - │  100.0% │    100.0% │      0 │" in done.stdout
    assert "│ arith   │ fake/echo     │ default │    - │    0.0% │      0.0% │      0 │" in done.stdout
    assert "│ mul/001 │ 100.0% │  100.0% │    100.0% │     2 │ multiply │" in done.stdout  # turns and tools
    assert "typesafe/jev-latest refused: provider typesafe cannot take a conversation or call tools" in done.stderr
    logs = {log["contender"]["model"]: log for log in read_logs(agent)}
    row = logs["fake/tooluser"]["rows"][0]
    assert row["turns"] == 2 and row["usage"]["cost_usd"] == pytest.approx(0.002)  # both turns paid for
    roles = [m["role"] for m in row["transcript"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert row["transcript"][2]["tool_calls"][0]["function"] == {"name": "multiply", "arguments": '{"a": 17, "b": 23}'}
    assert row["transcript"][3] == {"role": "tool", "tool_call_id": "call_0", "content": "391"}
    # rescore reads the stored transcripts and replies: the same numbers, no model called
    files = sorted(str(p) for p in (agent / "log" / "agent-evals").glob("*.json"))
    done = run_agent_evals("rescore", *files, cwd=agent)
    assert done.returncode == 0, done.stderr
    assert "│ arith   │ fake/tooluser │ default │    - │  100.0% │    100.0% │" in done.stdout


def test_max_turns_bounds_the_loop_and_the_adapter_sees_it(agent: Path) -> None:
    done = run_agent_evals("run", "--local", "-m", "fake/tooluser", "--max-turns", "1", cwd=agent)
    assert done.returncode == 0, done.stderr
    assert "│ mul/001 │  0.0% │    0.0% │      0.0% │     1 │ multiply │" in done.stdout
    assert "model failed: no answer after 1 turns" in done.stdout


def test_a_cached_agent_run_asks_nothing_and_scores_the_same(agent: Path) -> None:
    first = run_agent_evals("compare", "--local", "--cache", "-m", "fake/tooluser", cwd=agent)
    second = run_agent_evals("compare", "--local", "--cache", "-m", "fake/tooluser", cwd=agent)
    assert first.returncode == second.returncode == 0, second.stderr
    assert "│  100.0% │    100.0% │" in second.stdout
    newest = read_logs(agent)[-1]
    assert all(row["cached"] == 2 and row["usage"]["cost_usd"] == 0 for row in newest["rows"])  # both turns hit


TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}}}]


def test_tool_calls_parse_and_bad_arguments_are_kept_and_flagged() -> None:
    good = ae.ToolCall.parse({"id": "c1", "function": {"name": "add", "arguments": '{"a": 1}'}})
    assert (good.id, good.name, dict(good.arguments), good.error) == ("c1", "add", {"a": 1}, None)
    bad = ae.ToolCall.parse({"id": "c2", "function": {"name": "add", "arguments": "{not json"}})
    assert (
        bad.arguments == {} and bad.raw_arguments == "{not json" and bad.error.startswith("the arguments are not JSON")
    )
    assert ae.ToolCall.parse({"function": {"name": "add", "arguments": "[1]"}}, 3).error == (
        "the arguments are list, not an object"
    )
    assert ae.ToolCall.parse("junk").error == "the call names no tool"
    assert ae.ToolCall.parse({"function": {"name": "f", "arguments": {"x": 1}}}).arguments == {"x": 1}


def test_run_tools_gives_a_tool_failure_back_to_the_model() -> None:
    def lookup(key: str, default: int = 0) -> str:
        """Look a key up."""
        raise KeyError(key)

    definition = ae._tool_definition("lookup", lookup)
    assert definition["function"]["parameters"] == {
        "type": "object",
        "properties": {"key": {"type": "string"}, "default": {"type": "number"}},
        "required": ["key"],
    }
    model = ae.FakeModel("tooluser")
    run = ae.run_tools(model, [{"role": "user", "content": 'find {"key": "x"}'}], {"lookup": lookup})
    assert run.finished and run.turns == 2 and [c.name for c in run.calls] == ["lookup"]
    assert run.transcript[-2] == {"role": "tool", "tool_call_id": "call_0", "content": "error: KeyError: 'x'"}
    assert run.answer == "error: KeyError: 'x'"  # the fake model answers with what the tool said
    missing = ae.run_tools(model, [{"role": "user", "content": "{}"}], {}, definitions=TOOLS)
    assert missing.transcript[2]["content"].startswith("error: no tool named 'lookup'")
    with pytest.raises(ae.ProviderError, match="give messages= or system/user, not both"):
        model.complete(user="x", messages=[{"role": "user", "content": "x"}])
    typesafe = ae.Model("typesafe/jev-latest", ae.TypeSafe())
    with pytest.raises(ae.ProviderError, match="provider typesafe takes no messages= or tools="):
        typesafe.complete(messages=[{"role": "user", "content": "x"}])


SCORER = """
class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("answered", "1 when the agent answered.", primary=True)]

    def call(self, case, reply, context):
        answered = float(reply.output["answer"] == "done")
        return ae.Score(value=answered, metrics={"answered": answered})

ae.configure(adapter=Agent(), scorer=Scorer(), providers=[ae.FakeProvider()])
"""
AGENT_HELPER = (
    """
import agent_evals as ae

class Agent(ae.Adapter):
    uses_tools = True

    def call(self, case, model):
        tools = {"step": lambda n: f"step {n} done"}
        run = ae.run_tools(model, [{"role": "user", "content": case.input}], tools, max_turns=5)
        return ae.Reply(output={"answer": run.answer, "turns": run.turns}, transcript=run.transcript)
"""
    + SCORER
)
ASYNC_AGENT = (
    """
import agent_evals as ae

TOOLS = [{"type": "function", "function": {"name": "step", "parameters": {"type": "object"}}}]

class Agent(ae.Adapter):
    uses_tools = True

    async def call(self, case, model):  # its own loop, on the event loop: acomplete
        messages = [{"role": "user", "content": case.input}]
        for _ in range(model.max_turns):
            completion = await model.acomplete(messages=messages, tools=TOOLS)
            messages.append(dict(completion.message))
            if not completion.tool_calls:
                return ae.Reply(output={"answer": completion.text}, transcript=messages)
            for call in completion.tool_calls:
                done = f"step {call.arguments['n']} done"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": done})
        return ae.Reply(output={"answer": None}, transcript=messages)
"""
    + SCORER
)
LINEUP = "request_types: [prompt]\ndefaults:\n  retries: 0\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"


def tool_turn(n: int) -> Answer:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "step", "arguments": json.dumps({"n": n})}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "cost": 0.001}
    return Answer(body={"choices": [{"finish_reason": "tool_calls", "message": message}], "usage": usage})


def final_turn() -> Answer:
    message = {"role": "assistant", "content": "done"}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "cost": 0.001}
    return Answer(body={"choices": [{"finish_reason": "stop", "message": message}], "usage": usage})


@pytest.mark.parametrize("helper", [AGENT_HELPER, ASYNC_AGENT], ids=["run_tools", "async"])
@pytest.mark.parametrize("fail_at", [None, 3])
def test_tool_calls_over_real_http_and_a_failure_on_turn_3_of_5(make_suite, cli, monkeypatch, fail_at, helper) -> None:
    def respond(request):
        turn = sum(m["role"] == "assistant" for m in request.body["messages"]) + 1
        if turn == fail_at:
            return Answer(500, {"error": {"message": "upstream down"}})
        return final_turn() if turn == 5 else tool_turn(turn)

    with OpenAICompatible(respond) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test-agents")
        project = make_suite(helper=helper, config=LINEUP, cases=case_files("ds", "a/001", {"v": 1}))
        code, out, err = cli("compare", "--local", cwd=project)
        chats = [r.body for r in server.requests if r.method == "POST"]
    assert code == (0 if fail_at is None else 1), err  # its one case unanswered: the contender compared nothing
    (row,) = read_logs(project)[0]["rows"]
    assert chats[0]["tools"][0]["function"]["name"] == "step" and "response_format" not in chats[0]
    assert chats[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "step 1 done"}
    if fail_at is None:
        assert row["error"] is None and row["score"] == 1.0 and row["turns"] == 5
        assert row["usage"] == {"input_tokens": 50, "output_tokens": 25, "cost_usd": pytest.approx(0.005)}
        assert len(row["transcript"]) == 1 + 5 + 4  # the user, five answers, four tool results
    else:
        # a transport failure is an error, never a 0, and turns 1-2 stay paid for
        assert row["error"].startswith("ProviderError: openrouter: openai/gpt-4o-mini: HTTP 500: upstream down")
        assert row["score"] is None and row["turns"] == 3  # the third call was made, and failed
        assert row["usage"] == {"input_tokens": 20, "output_tokens": 10, "cost_usd": pytest.approx(0.002)}
        # the failed case keeps its conversation: what turn 3 sent (the user, two answers, two tool results)
        assert [m["role"] for m in row["transcript"]] == ["user", "assistant", "tool", "assistant", "tool"]
        assert row["transcript"] == chats[2]["messages"]
        assert "│      1 │" in out  # the errors column


def test_the_html_report_folds_each_agent_transcript_turn_by_turn(agent: Path, tmp_path: Path) -> None:
    page = tmp_path / "agent.html"
    done = run_agent_evals("compare", "--local", "--html", str(page), cwd=agent)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert html.count("<summary>transcript: 2 turns</summary>") == 4  # fake/tooluser: call, then answer
    assert html.count("<summary>transcript: 1 turns</summary>") == 4  # fake/echo never calls the tool
    assert "→ multiply({&quot;a&quot;: 17, &quot;b&quot;: 23})" in html and "<b>tool (call_0)</b>" in html


def test_a_conversation_that_is_no_list_of_messages_is_refused_by_name() -> None:
    model = ae.FakeModel("tooluser")
    with pytest.raises(ae.ProviderError, match="messages= must be a non-empty list of message objects"):
        model.complete(messages=[])
    with pytest.raises(ae.ProviderError, match="messages= must be a non-empty list"):
        model.complete(messages=["hi"])
    completion = model.complete(messages=[{"role": "user", "content": "hi"}], tool_choice="none")
    assert completion.text == "hi" and completion.finish_reason == "stop" and model.calls == 1


def test_a_transcript_that_is_no_list_of_messages_is_that_cases_error(make_suite, cli) -> None:
    helper = AGENT_HELPER.replace("transcript=run.transcript", "transcript='all of it'")
    project = make_suite(helper=helper, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: tooluser\n")
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    rows = read_logs(project)[0]["rows"]
    assert all(
        row["error"] == "SuiteError: adapter Agent.call returned a Reply whose transcript is str, "
        "not a list of messages (dicts with a role)"
        for row in rows
    )


def test_the_readme_agent_adapter_runs_as_written(agent: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- example: agent adapter -->\n```python\n(.+?)\n```", readme, re.S)
    assert match
    helper = agent / "evals" / "eval_helper.py"
    example = helper.read_text()
    scorer = example[example.index("class Scorer") :]  # the example suite's scorer and configure()
    helper.write_text(match[1] + "\n\nfrom pathlib import Path\n\n\n" + scorer)
    done = run_agent_evals("run", "--local", cwd=agent)
    assert done.returncode == 0, done.stderr
    assert "│ arith   │ fake/tooluser │ default │    - │  100.0% │    100.0% │      0 │" in done.stdout
    # fake/echo answers with the question, not a number: a wrong answer (0), never an error
    assert "│ arith   │ fake/echo     │ default │    - │    0.0% │      0.0% │      0 │" in done.stdout
    assert "model failed: not a number:" in done.stdout

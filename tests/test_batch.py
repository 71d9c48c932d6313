"""--batch: the suite's real adapter through OpenRouter's Batch API (a local stand-in of it),
with the same tables, logs and money as a run that asks one call at a time."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from servers import Answer, BatchAPI, OpenAICompatible, Received, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, ROOT, many, read_logs, run_agent_evals, walks

LINEUP = (
    "request_types: [prompt]\ndefaults:\n  max_tokens: 64\nvendors:\n  openai:\n    - model: gpt-4o-mini\n   "
    " - model: gpt-4.1-mini\n"
)
POLL = {"AGENT_EVALS_BATCH_POLL": "0.02"}


@contextlib.contextmanager
def batch_server(api: BatchAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAICompatible]:
    """``api`` served on 127.0.0.1 as OpenRouter, with a key and a quick poll, for the in-process CLI."""
    with OpenAICompatible(api) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-batch")
        monkeypatch.setenv("AGENT_EVALS_BATCH_POLL", "0.02")
        yield server


def toy_answer(received) -> Answer:
    """What a model answers the toy suite: the case's own fields, for cases 001; nothing right for 002."""
    text = received.body["messages"][-1]["content"]
    right = "001" in text or "red" in text.lower()
    return chat_answer(json.dumps({"name": text.split()[0]} if right else {}), cost=0.0004)


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return toy_project(tmp_path)


def toy_project(tmp_path: Path) -> Path:
    """The toy suite, its contenders the batch's lineup."""
    project = tmp_path / "toy"
    for folder in ("evals", "toy_suite"):
        source = ROOT / "examples" / "toy_suite" / folder
        shutil.copytree(source, project / folder, ignore=shutil.ignore_patterns("log", "__pycache__"))
    (project / "evals" / ".agent-eval.config.yml").write_text(LINEUP)
    return project


def tables(out: str) -> list[str]:
    """The table rows, without the time column (a batch waits; its answers are the same)."""
    return [re.sub(r"│ +[\d.]+s │", "│ T │", line) for line in out.splitlines() if line.startswith("│")]


def test_compare_batch_gives_the_tables_of_a_run_asked_call_by_call(toy: Path) -> None:
    api = BatchAPI(toy_answer)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        batched = run_agent_evals("compare", "--batch", "--local", cwd=toy, env=env)
        assert batched.returncode == 0, batched.stderr
        assert api.sync == 0 and len(api.submitted) == 4  # one batch per contender and dataset, nothing asked alone
        (log, *_) = read_logs(toy)
        shutil.rmtree(toy / "log")
        synchronous = run_agent_evals("compare", "--local", cwd=toy, env=env)
        assert synchronous.returncode == 0 and api.sync == 16
    assert tables(batched.stdout) == tables(
        synchronous.stdout.replace("$0.0016", "$0.0008").replace("$0.0032", "$0.0016")
    )
    assert "│ animals │ openai/gpt-4.1-mini │ default │    - │" in batched.stdout
    # the cost is what the stand-in reported for each result: half the synchronous price
    assert log["summary"]["usage"]["cost_usd"] == pytest.approx(0.0008)
    assert "as a batch: about $" in batched.stderr and "at half its price, its batch price not listed" in batched.stderr
    assert re.search(
        r"batch \d \[animals\] openai/gpt-4o-mini effort=default \(batch_\d, 4 requests\): completed, 4 of 4 done",
        batched.stderr,
    )
    body = api.submitted[0]
    assert list(body) == ["endpoint", "model", "requests"] and body["endpoint"] == "/v1/chat/completions"
    assert {r["body"]["model"] for r in body["requests"]} == {body["model"]}
    assert "sk-or-batch" not in batched.stdout + batched.stderr


def tool_answer(received) -> Answer:
    """A model that calls multiply with the case's numbers, then answers with the tool's result."""
    messages = received.body["messages"]
    if messages[-1]["role"] == "tool":
        return chat_answer(messages[-1]["content"], cost=0.0002)
    numbers = json.loads(messages[-1]["content"].split("The numbers: ")[1])
    call = {"id": "call_0", "type": "function", "function": {"name": "multiply", "arguments": json.dumps(numbers)}}
    return chat_answer(
        "",
        cost=0.0002,
        choices=[
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            }
        ],
    )


def test_an_agent_continues_turn_by_turn_a_batch_each_with_the_same_tables(tmp_path: Path) -> None:
    agent = tmp_path / "agent_suite"
    shutil.copytree(ROOT / "examples" / "agent_suite", agent, ignore=shutil.ignore_patterns("log", "__pycache__"))
    (agent / "evals" / ".agent-eval.config.yml").write_text(LINEUP.replace("max_tokens: 64", "max_turns: 4"))
    api = BatchAPI(tool_answer)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        batched = run_agent_evals("compare", "--batch", "--local", cwd=agent, env=env)
        assert batched.returncode == 0, batched.stderr
        assert api.sync == 0 and len(api.submitted) == 4  # two contenders, two turns: a batch per turn
        assert [len(b["requests"]) for b in api.submitted] == [4, 4, 4, 4]
        shutil.rmtree(agent / "log")
        synchronous = run_agent_evals("compare", "--local", cwd=agent, env=env)
    assert tables(batched.stdout) == tables(
        synchronous.stdout.replace("$0.0016", "$0.0008").replace("$0.0032", "$0.0016")
    )
    assert "│ arith   │ openai/gpt-4o-mini  │ default │    - │  100.0% │    100.0% │      0 │" in batched.stdout
    row = read_logs(agent)[0]["rows"][0]
    assert row["turns"] == 2 and [m["role"] for m in row["transcript"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_a_batch_refused_stops_that_contender_alone_and_sync_fallback_asks_instead(toy: Path) -> None:
    api = BatchAPI(toy_answer, refuse=frozenset({"openai/gpt-4.1-mini"}))
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals("compare", "--batch", "--local", "-d", "animals", cwd=toy, env=env)
        assert done.returncode == 1, done.stderr  # a contender stopped, as one whose model the server lacks
        assert "(ask it without --batch, or --batch-fallback sync)" in done.stderr
        assert api.sync == 0
        assert "│ animals │ openai/gpt-4o-mini  │ default │    - │" in done.stdout
        logs = {log["contender"]["model"]: log for log in read_logs(toy)}
        errors = [row["error"] for row in logs["openai/gpt-4.1-mini"]["rows"]]
        assert len(errors) == 4 and all(
            "the batch was refused: Model openai/gpt-4.1-mini is not available for batch" in e for e in errors
        )
        assert [row["error"] for row in logs["openai/gpt-4o-mini"]["rows"]] == [None] * 4
        shutil.rmtree(toy / "log")
        done = run_agent_evals(
            "compare", "--batch", "--batch-fallback", "sync", "--local", "-d", "animals", cwd=toy, env=env
        )
        assert done.returncode == 0, done.stderr
        assert api.sync == 4  # the refused contender's four, asked one by one
        assert "4 requests of 4 unanswered are asked again now, one by one (--batch-fallback sync)" in done.stderr
    assert all(row["error"] is None for log in read_logs(toy) for row in log["rows"])


def test_an_expired_batch_says_so_and_its_unanswered_requests_go_in_a_new_one(toy: Path) -> None:
    api = BatchAPI(toy_answer, expire=3)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals(
            "run", "--batch", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals", cwd=toy, env=env
        )
        assert done.returncode == 0, done.stderr
    assert [len(b["requests"]) for b in api.submitted] == [4, 3] and api.sync == 0
    assert "expired; 3 requests of 4 unanswered are asked again in the next batch, once" in done.stderr
    (log,) = read_logs(toy)
    assert [row["error"] for row in log["rows"]] == [None] * 4


def test_a_provider_without_a_batch_api_is_refused_by_name_before_anything(toy: Path) -> None:
    done = run_agent_evals(
        "compare", "--batch", "-C", str(ROOT / "examples" / "toy_suite" / "evals" / ".agent-eval.config.yml"), cwd=toy
    )
    assert done.returncode == 2
    assert "error: --batch: fake/echo effort=default temp=0.1, fake/echo effort=low temp=0.1, " in done.stderr
    assert "fake/parrot effort=default temp=0.1: the provider has no batch API; leave them out with -m" in done.stderr
    assert not (toy / "log").exists() or not list((toy / "log").rglob("*.json"))


def test_a_request_that_differs_each_time_the_case_runs_is_that_case_error_not_a_loop(
    make_suite, cli, monkeypatch
) -> None:
    helper = EXACT_HELPER.replace("adapter=ae.EchoAdapter()", "adapter=Noisy()").replace(
        "class S(",
        "class Noisy(ae.Adapter):\n    def call(self, case, model):\n        import time\n"
        "        return ae.Reply(output=model.complete(f'now {time.perf_counter_ns()}', case.input).text)\n\nclass S(",
    )
    api = BatchAPI()
    with batch_server(api, monkeypatch):
        project = make_suite(
            helper=helper,
            config="request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4o-mini\n",
            cases=many(3),
        )
        code, _, err = cli("run", "--batch", "--local", cwd=project)
    assert code == 0, err
    assert len(api.submitted) == 1  # its second run took none of the first batch's answers: no second batch
    (log,) = read_logs(project)
    assert all("asked the model something else when it ran again" in row["error"] for row in log["rows"])
    assert log["summary"]["usage"]["cost_usd"] == pytest.approx(3 * 0.0002)  # the answers it did not take: paid for


def test_repeats_cache_budget_and_until_decided_hold_under_batch(make_suite, cli, monkeypatch) -> None:
    api = BatchAPI()
    lineup = (
        "request_types: [prompt]\ndefaults:\n  max_tokens: 16\nvendors:\n  openai:\n    - model: "
        "gpt-4o-mini\n    - model: gpt-4.1-mini\n"
    )
    with batch_server(api, monkeypatch):
        project = make_suite(helper=EXACT_HELPER, config=lineup, cases=many(4))
        # --repeat: each repeat is its own request in the batch; --cache: stored as they are answered
        code, _, err = cli(
            "run", "--batch", "--local", "--repeat", "2", "--cache", "-m", "openai/gpt-4o-mini", cwd=project
        )
        assert code == 0, err
        assert [len(b["requests"]) for b in api.submitted] == [8]
        assert len({r["custom_id"] for r in api.submitted[0]["requests"]}) == 8
        # a cached answer is never sent again
        code, _, err = cli("run", "--batch", "--local", "--cache", "-m", "openai/gpt-4o-mini", cwd=project)
        assert code == 0, err
        assert len(api.submitted) == 1 and api.sync == 0
        # --budget holds each request's worst case until its batch settles; a run the budget stops before its
        # batch goes sends none of it (nothing spent), and --resume with a higher budget asks them
        code, _, err = cli("run", "--batch", "--local", "--budget", "0.0001", "-m", "openai/gpt-4.1-mini", cwd=project)
        assert code == 1 and len(api.submitted) == 1, err
        assert "error: budget reached: $0.0000 of $0.0001; 0 of 4 cases asked; --resume with a higher --budget" in err
        assert "(a batch not yet sent when it stopped was never sent, and costs nothing)" in err
        code, _, err = cli(
            "run", "--batch", "--local", "--budget", "0.01", "-m", "openai/gpt-4.1-mini", "--resume", cwd=project
        )
        assert code == 0 and [len(b["requests"]) for b in api.submitted[1:]] == [4], err
        # --until-decided: each of its rounds is a batch of each contender's
        before = len(api.submitted)
        code, _, err = cli("compare", "--batch", "--local", "--until-decided", cwd=project)
        assert code == 0, err
        assert len(api.submitted) > before and api.sync == 0
    logs = read_logs(project)
    assert all(row["error"] is None for row in logs[-1]["rows"]) and logs[-1]["summary"]["scored"] == 4


def test_failed_requests_flaky_polls_routing_and_a_request_two_batches_leave_unanswered(
    make_suite, cli, monkeypatch
) -> None:
    def answer(received) -> Answer:
        text = received.body["messages"][-1]["content"]
        if '"v": 1}' in text:
            return Answer(400, {"error": {"message": "context too long"}})
        if '"v": 2}' in text:  # an error inside a 200, as OpenRouter reports an upstream's
            return Answer(200, {"error": {"message": "upstream failed", "code": 502}, "usage": {"cost": 0.0001}})
        return chat_answer(text, cost=0.0004)

    class Flaky(BatchAPI):
        """Its first two looks at a batch fail; it answers the rest as OpenRouter does."""

        def _look(self, batch_id: str) -> Answer:
            self.failures = getattr(self, "failures", 0) + 1
            return Answer(500, {"error": {"message": "busy"}}) if self.failures <= 2 else super()._look(batch_id)

    api = Flaky(answer, expire=1, expiring=2)
    lineup = (
        "request_types: [prompt]\ndefaults:\n  retries: 0\nvendors:\n  openai:\n"
        "    - model: gpt-4o-mini\n      provider: {only: [azure]}\n"
    )
    with OpenAICompatible(api) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-batch")
        monkeypatch.setenv("AGENT_EVALS_BATCH_POLL", "not a number")
        assert ae._seconds_env("AGENT_EVALS_BATCH_POLL", 10.0) == 10.0  # not a number of seconds: the default
        monkeypatch.setenv("AGENT_EVALS_BATCH_POLL", "0.02")
        project = make_suite(helper=EXACT_HELPER, config=lineup, cases=many(4))
        code, _, err = cli("run", "--batch", "--local", cwd=project)
    assert code == 0, err
    assert api.submitted[0]["provider"] == {"only": ["azure"]}  # a batch runs on one upstream: only, alone
    assert [len(b["requests"]) for b in api.submitted] == [4, 1]  # the expired one went again, once
    (log,) = read_logs(project)
    errors = {row["case"]: row["error"] for row in log["rows"]}
    assert "openai/gpt-4o-mini: the batch's error: context too long" in errors["a/001"]
    assert "upstream failed" in errors["a/002"]
    assert errors["a/003"] is None
    assert "two batches ended without answering it (expired)" in errors["a/004"]
    assert "expired; 1 request of 4 unanswered are asked again in the next batch, once" in err


PREPARED_HELPER = EXACT_HELPER.replace(
    "ae.configure(",
    """class Prepared(ae.EchoAdapter):
    dataset = None

    def prepare(self, dataset):
        import os

        self.dataset = dataset
        if dataset == os.environ.get("PREPARE_ONCE") and os.path.exists(__file__ + ".prepared"):
            if dataset in open(__file__ + ".prepared").read().split():
                raise OSError(f"{dataset} is gone")
        with open(__file__ + ".prepared", "a") as calls:
            calls.write(dataset + "\\n")

    def call(self, case, model):
        if case.dataset != self.dataset:
            raise RuntimeError(f"prepared for {self.dataset}, ran {case.key}")
        return super().call(case, model)

ae.configure(""",
).replace("adapter=ae.EchoAdapter()", "adapter=Prepared()")


@pytest.mark.parametrize(("datasets", "once"), [(1, False), (2, False), (2, True)])
def test_a_batch_wait_holds_no_concurrency_slot_and_no_dataset_waits_for_another(
    datasets, once, make_suite, cli, monkeypatch
) -> None:
    # four experiments at -j 2 (four contenders of one dataset, or two of each of two datasets): each
    # batch is looked at as "in progress" until all four are sent (a failsafe of 15 minutes, never a bound
    # a loaded machine meets, ends the wait if they never are, and then the test fails):
    # had a batch's wait held its slot, or a dataset waited for the one before it, the second pair would
    # never be sent. A batch that comes back runs its cases with the adapter prepared for its dataset;
    # when that prepare fails (once: ds's second prepare raises), the cases it answered are not run, said.
    api = BatchAPI()
    deadline = time.monotonic() + 900

    def held(received):
        route = received.path.split("/api/v1", 1)[-1]
        if received.method == "GET" and route.startswith("/batches/") and "/results" not in route:
            if len(api.submitted) < 4 and time.monotonic() < deadline:
                return Answer(200, api._object(route.split("/")[2], "in_progress", (0, 0)))
            completed.append(len(api.submitted))
        return api(received)

    completed: list[int] = []
    temperatures = "\n      temperature: [0.0, 0.7]" if datasets == 1 else ""
    models = "".join(f"    - model: {m}{temperatures}\n" for m in ("gpt-4o-mini", "gpt-4.1-mini"))
    lineup = "request_types: [prompt]\ndefaults:\n  max_tokens: 16\nvendors:\n  openai:\n" + models
    cases = many(3) if datasets == 1 else {**many(3), **{k.replace("/ds/", "/other/"): v for k, v in many(2).items()}}
    with batch_server(held, monkeypatch):
        monkeypatch.setenv("PREPARE_ONCE", "ds" if once else "")
        project = make_suite(helper=PREPARED_HELPER, config=lineup, cases=cases)
        code, _, err = cli("compare", "--batch", "--local", "-j", "2", cwd=project)
    if once:  # ds came back after other was prepared: ds's prepare raised, its two experiments not run
        assert code == 1 and err.count("Prepared.prepare('ds') raised OSError: ds is gone: 1 experiment not run") == 2
        assert "ds] openai/gpt-4o-mini effort=default stopped after 0 of 3 cases: adapter Prepared.prepare" in err
        assert err.count("prepare") == 4 and "prepare('other')" not in err
        logs = read_logs(project)
        assert sorted(log["summary"]["scored"] for log in logs) == [0, 0, 2, 2]
        assert len(api.submitted) == 4 and api.sync == 0
        return
    assert code == 0, err
    assert len(api.submitted) == 4 and api.sync == 0
    assert completed and completed[0] == 4  # the first batch ended only once every batch had gone
    logs = read_logs(project)
    assert sorted(log["summary"]["scored"] for log in logs) == ([3] * 4 if datasets == 1 else [2, 2, 3, 3])
    assert all(row["error"] is None for log in logs for row in log["rows"])  # each ran with its dataset prepared
    # each dataset prepared before its cases are put off, and again when its batches' answers run after
    # the other's was prepared: at most once for each dataset's first pass and once for each round back
    prepared = (project / "evals" / "eval_helper.py.prepared").read_text().split()
    assert prepared[:datasets] == ["ds", "other"][:datasets] and len(prepared) <= datasets + 4, prepared


# #50: never pay twice, never loop. A run interrupted while its batch waits at the provider, then
# resumed as its hint says, or without --batch, or with its journal's batch record damaged.


def _interrupted_batch_run(
    toy: Path, api: BatchAPI, server: OpenAICompatible, sent: signal.Signals = signal.SIGTERM
) -> tuple[int, str, str]:
    """``run --batch`` on the animals, stopped by ``sent`` while its batch waits: its exit code and what it printed."""
    argv = ["run", "--batch", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals"]
    return _stopped_when(toy, server, argv, lambda: api.looks >= 2, sent)


def _stopped_when(
    cwd: Path, server: OpenAICompatible, argv: list[str], ready: Callable[[], bool], sent: signal.Signals
) -> tuple[int, str, str]:
    """The CLI run as a process against ``server`` and sent ``sent`` once ``ready`` (at most
    30 s): its exit code and what it printed."""
    env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
    environ = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("OPENROUTER", "AGENT_EVALS"))}
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "agent_evals.py"), *argv],
        cwd=cwd,
        env={**environ, **env, "NO_COLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    child.send_signal(sent)
    out, err = child.communicate(timeout=300)
    return child.returncode, out, err


def _resume_hint(toy: Path, api: BatchAPI, server: OpenAICompatible) -> str:
    """The resume command a ``run --batch`` stopped by SIGTERM while its batch waits printed."""
    code, out, err = _interrupted_batch_run(toy, api, server)
    assert code == 143 and len(api.submitted) == 1 and api.sync == 0, err
    (hint,) = re.findall(r"finish with: (.+)", out)
    return hint


def _journal(toy: Path) -> Path:
    """The stopped run's journal, alone: its log is removed, as a kill -9 leaves it (never written)."""
    folder = toy / "log" / "agent-evals"
    for log in folder.glob("*.json"):
        log.unlink()
    (journal,) = folder.glob("*.jsonl")
    return journal


@pytest.mark.parametrize("inline", [False, True], ids=["pages", "inline"])
def test_results_that_name_the_same_page_again_end_the_collection_with_one_line(toy: Path, inline: bool) -> None:
    api = BatchAPI(toy_answer, polls=1, misbehave="loop", inline=inline)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals(
            "run", "--batch", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals", cwd=toy, env=env
        )
    if inline:  # results in the batch itself: no page to follow
        assert done.returncode == 0 and api.pages == 0, done.stderr
        return
    assert done.returncode == 1 and api.pages <= 3, (api.pages, done.stderr)
    assert "results go round in circles" in done.stderr and "--resume --batch collects it" in done.stderr
    assert len([x for x in done.stderr.splitlines() if "round in circles" in x]) == 1


def test_a_request_answered_twice_is_that_cases_error_named(toy: Path) -> None:
    api = BatchAPI(toy_answer, polls=1, misbehave="twice", page=100)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals(
            "run", "--batch", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals", cwd=toy, env=env
        )
    rows = read_logs(toy)[-1]["rows"]
    assert rows and all("the batch answered one request twice" in row["error"] for row in rows)
    assert done.returncode == 1  # every case of the contender a provider error: never 0
    assert all(row["score"] is None for row in rows)  # an error, never a 0 from the second answer


# The catalog's word on batch: a model is asked as a batch only if the catalog lists its :batch
# variant, and the forecast counts that variant's price.
BATCH_CATALOG = [
    *(entry for entry in __import__("servers").CATALOG),
    {"id": "openai/gpt-4o-mini:batch", "pricing": {"prompt": "0.00000006", "completion": "0.0000003"}},
]


def test_a_model_without_a_batch_variant_is_refused_before_any_request(toy: Path) -> None:
    api = BatchAPI(toy_answer)
    with OpenAICompatible(api, catalog=BATCH_CATALOG) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        refused = run_agent_evals("compare", "--batch", "--local", cwd=toy, env=env)
        chats = [r for r in server.requests if r.method == "POST"]
    assert refused.returncode == 2 and not chats and not api.submitted, refused.stderr
    (line,) = [x for x in refused.stderr.splitlines() if x.startswith("error:")]
    assert "--batch: openai/gpt-4.1-mini effort=default: OpenRouter's catalog lists no :batch variant of it" in line
    assert "gpt-4o-mini" not in line  # the one with a variant is not named


def test_the_batch_forecast_is_the_variants_price_times_the_forecast_tokens(toy: Path) -> None:
    api = BatchAPI(toy_answer)
    with OpenAICompatible(api, catalog=BATCH_CATALOG) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals("compare", "--batch", "--local", "-m", "openai/gpt-4o-mini", cwd=toy, env=env)
    assert done.returncode == 0, done.stderr
    least = float(re.search(r"forecast: \$([\d.]+) to", done.stderr)[1])
    batch = float(re.search(r"as a batch: about \$([\d.]+) of that, at each model's batch price\n", done.stderr)[1])
    # no run has answered yet: the inputs alone, at the variant's input price (0.4 of the model's)
    assert batch == pytest.approx(least * 0.4, rel=0.1), done.stderr


def test_a_routing_a_batch_cannot_honour_is_refused_before_any_request(toy: Path) -> None:
    routed = LINEUP.replace(
        "    - model: gpt-4o-mini\n", "    - model: gpt-4o-mini\n      provider: {zdr: true, data_collection: deny}\n"
    )
    (toy / "evals" / ".agent-eval.config.yml").write_text(routed)
    api = BatchAPI(toy_answer)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        refused = run_agent_evals("compare", "--batch", "--local", cwd=toy, env=env)
        chats = [r for r in server.requests if r.method == "POST"]
    assert refused.returncode == 2 and not chats, refused.stderr
    assert "(data_collection, zdr): a batch runs on one upstream and honours no routing but provider.only" in (
        refused.stderr
    )


@pytest.mark.parametrize("limit", ["requests", "bytes"])
def test_a_round_past_a_batch_limit_goes_as_several_each_journaled_before_it_goes(
    make_suite, cli, monkeypatch, limit: str
) -> None:
    """OpenRouter takes 5,000 requests and 200 MB a batch: here 5 requests, or about 5 requests' bytes."""
    journaled: list[int] = []
    api = BatchAPI(lambda r: chat_answer(r.body["messages"][-1]["content"], cost=0.0004), polls=1)
    submit = api._submit

    def counted(received):  # at each submission, the round's records the journal holds already
        journal = next((project / "log" / "agent-evals").glob("*.jsonl"))
        journaled.append(sum('"round"' in line and '"id"' not in line for line in journal.read_text().splitlines()))
        return submit(received)

    api._submit = counted
    if limit == "requests":
        monkeypatch.setattr(ae.OpenRouter, "batch_most", 5)
    else:
        monkeypatch.setattr(ae.OpenRouter, "batch_bytes", 2000)  # four or five of these requests
    lineup = "request_types: [prompt]\ndefaults:\n  max_tokens: 16\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    with batch_server(api, monkeypatch):
        project = make_suite(helper=EXACT_HELPER, config=lineup, cases=many(12))
        code, _, err = cli("run", "--batch", "--local", cwd=project)
    assert code == 0 and api.sync == 0, err
    sizes = [len(b["requests"]) for b in api.submitted]
    assert sum(sizes) == 12 and len(sizes) >= 3 and max(sizes) <= 5, sizes
    assert journaled == list(range(1, len(sizes) + 1))  # each part's record written before it is sent
    rows = read_logs(project)[-1]["rows"]
    assert len(rows) == 12 and all(row["error"] is None for row in rows)


SIDE_BY_SIDE = {
    "threads": (
        "from concurrent.futures import ThreadPoolExecutor\nclass A(ae.Adapter):\n    def call(self, case, model):\n"
        "        with ThreadPoolExecutor(2) as pool:\n            first, _ = pool.map(lambda u: model.complete(user=u),"
        " [case.input, case.input + ' again'])\n        return ae.EchoAdapter._reply(first)\n"
    ),
    "gather": (
        "import asyncio\nclass A(ae.Adapter):\n    async def call(self, case, model):\n        first, _ = await "
        "asyncio.gather(model.acomplete(user=case.input), model.acomplete(user=case.input + ' again'))\n"
        "        return ae.EchoAdapter._reply(first)\n"
    ),
    "in turn": (
        "class A(ae.Adapter):\n    def call(self, case, model):\n        first = model.complete(user=case.input)\n"
        "        model.complete(user=case.input + ' again')\n        return ae.EchoAdapter._reply(first)\n"
    ),
}


@pytest.mark.parametrize("how", list(SIDE_BY_SIDE))
def test_calls_a_case_makes_side_by_side_go_in_one_round_and_in_turn_in_two(make_suite, cli, monkeypatch, how) -> None:
    helper = EXACT_HELPER.replace("adapter=ae.EchoAdapter()", "adapter=A()").replace(
        "class S(ae.Scorer):", SIDE_BY_SIDE[how] + "\nclass S(ae.Scorer):"
    )
    api = BatchAPI(lambda r: chat_answer(r.body["messages"][-1]["content"], cost=0.0004), polls=1)
    lineup = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    with batch_server(api, monkeypatch):
        project = make_suite(helper=helper, config=lineup, cases=many(4))
        code, _, err = cli("run", "--batch", "--local", cwd=project)
    assert code == 0 and api.sync == 0, err
    assert [len(b["requests"]) for b in api.submitted] == ([4, 4] if how == "in turn" else [8])
    assert all(row["error"] is None and row["score"] == 1.0 for row in read_logs(project)[-1]["rows"])


JUDGED_SCORER = """
import agent_evals as ae

judge = ae.Judge("Pass when the answer gives the value the expected answer gives.")

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("correct", "the judge's verdict", primary=True, judged=True)]

    def call(self, case, reply, context):
        verdict, reasons = judge(case, reply, context)
        return ae.Score(value=verdict, metrics={"correct": verdict}, diagnostics={"reasons": reasons})
"""
JUDGED_HELPER = (
    JUDGED_SCORER
    + """
import builtins
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

class MemoryFire(ae.Logfire):
    name = "memfire"

    def exporter(self):
        builtins._agent_evals_spans = InMemorySpanExporter()
        return builtins._agent_evals_spans

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), trackers=[MemoryFire])
"""
)


def judged_answer(received) -> Answer:
    """The contender echoes the case; the judge (gpt-4.1-mini) passes every answer but case 003's."""
    body = received.body
    if body["model"] != "openai/gpt-4.1-mini":
        return chat_answer(body["messages"][-1]["content"], cost=0.0004)
    verdict = "fail" if "003" in body["messages"][-1]["content"] else "pass"
    return chat_answer(json.dumps({"verdict": verdict, "reasons": "read it"}), cost=0.002)


def test_a_judges_calls_go_in_batches_of_their_own_held_by_the_budget_cached_and_traced(
    make_suite, cli, monkeypatch
) -> None:
    """--batch with a judge: a round of the contender's calls, then a round of the judge's (its
    own batch, its model at temperature 0), the judge's cost held by --budget and shown apart;
    --cache answers both the second time (nothing sent), and each judge call is a span."""
    pytest.importorskip("opentelemetry.sdk")
    import builtins

    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_us_testtoken")
    api = BatchAPI(judged_answer)
    lineup = "request_types: [prompt]\ndefaults:\n  max_tokens: 64\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    lineup += "judge: openai/gpt-4.1-mini\n"
    argv = ["compare", "--batch", "--cache", "--budget", "1", "--tracker", "memfire", "--format", "json"]
    with batch_server(api, monkeypatch):
        project = make_suite(helper=JUDGED_HELPER, config=lineup, cases=many(4))
        code, out, err = cli(*argv, cwd=project)
        assert code == 0, err
        first = json.loads(out)
        spans = builtins._agent_evals_spans.get_finished_spans()
        code, out, err = cli(*argv, cwd=project)
        assert code == 0, err
        again = json.loads(out)
    assert [b["model"] for b in api.submitted] == ["openai/gpt-4o-mini", "openai/gpt-4.1-mini"] and api.sync == 0
    judged = api.submitted[1]["requests"]
    assert len(judged) == 4 and all(r["body"]["temperature"] == 0.0 and r["body"]["seed"] == 0 for r in judged)
    assert all(
        "seed" not in r["body"] for r in api.submitted[0]["requests"]
    )  # a contender's requests: as the lineup says
    assert first["judge"]["usage"]["cost_usd"] == pytest.approx(4 * 0.001)  # the batch's half price
    (row,) = first["datasets"][0]["leaderboard"]
    assert row["cost_usd"] == pytest.approx(4 * 0.0002) and row["metrics"]["correct"]["mean"] == 0.75
    assert again["judge"]["usage"]["cost_usd"] == 0.0  # the cache answered the judge too
    evaluators = [s for s in spans if s.name == "judge openai/gpt-4.1-mini"]
    assert len(evaluators) == 4 and {s.attributes["openinference.span.kind"] for s in evaluators} == {"EVALUATOR"}
    logs = read_logs(project)
    assert [len(b["requests"]) for b in logs[0]["batches"]] == [4, 4] and logs[0]["batches"][1]["judge"]


class HeldJudge(BatchAPI):
    """A Batch API that keeps the judge's batches in progress while ``held``."""

    held = True

    def _look(self, batch_id: str) -> Answer:
        if self.held and self.batches[batch_id]["body"]["model"] == "openai/gpt-4.1-mini":
            self.looks += 1
            return Answer(200, self._object(batch_id, "in_progress", (0, 0)))
        return super()._look(batch_id)


def test_a_judge_under_batch_is_held_to_the_contenders_rules(make_suite, monkeypatch) -> None:
    """--batch with a judge: a judge OpenRouter's catalog lists no :batch variant of is refused
    by name before anything is sent; one whose provider has no batch API is asked at once, said
    once; the judge's batches are named as the judge's in the progress lines."""
    lineup = "request_types: [prompt]\ndefaults:\n  max_tokens: 64\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    helper = (
        JUDGED_SCORER
        + "\nae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider("
        + ("""{"judge": lambda s, u: '{"verdict": "pass"}'})])\n""")
    )
    project = make_suite(helper=helper, config=lineup + "judge: openai/gpt-4.1-mini\n", cases=many(3))
    api = BatchAPI(judged_answer)
    with OpenAICompatible(api, catalog=BATCH_CATALOG) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        refused = run_agent_evals("run", "--batch", "--local", cwd=project, env=env)
        assert refused.returncode == 2 and not api.submitted and api.sync == 0, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            "error: --batch: judge openai/gpt-4.1-mini: OpenRouter's catalog lists no :batch variant of it, so it "
            "cannot be asked as a batch; name a judge that has one with --judge, or run without --batch"
        )
        fake = run_agent_evals("run", "--batch", "--local", "--judge", "fake/judge", cwd=project, env=env)
        assert fake.returncode == 0, fake.stderr
        assert [b["model"] for b in api.submitted] == ["openai/gpt-4o-mini"] and api.sync == 0
        said = "--batch: judge fake/judge: fake has no batch API, so its verdicts are asked at once"
        assert fake.stderr.count(said) == 1
    with OpenAICompatible(BatchAPI(judged_answer)) as server:  # a catalog with no :batch variants at all
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals("run", "--batch", "--local", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"batch 2 \[ds\] judge openai/gpt-4\.1-mini of openai/gpt-4o-mini effort=default \(\S+, 3 requests\)",
        done.stderr,
    ), done.stderr
    assert re.search(r"batch 1 \[ds\] openai/gpt-4o-mini effort=default \(\S+, 3 requests\)", done.stderr), done.stderr


class TakenUnanswered(BatchAPI):
    """A Batch API that takes the first submission and closes the connection without an
    answer (at once, or after ``delay`` seconds); later ones are answered."""

    delay = 0.0

    def _submit(self, received) -> Answer:
        answer = super()._submit(received)
        if len(self.submitted) == 1:
            return Answer(drop=True, delay=self.delay)
        return answer


@pytest.mark.hostile
@pytest.mark.parametrize("delay", [0.0, 2.0])
def test_a_batch_submission_that_gets_no_answer_is_never_sent_again_blind(toy: Path, delay: float) -> None:
    """POST /batches taken by the server, and the connection closed with no answer: one batch
    at the provider, never a second; the run stops with one line saying what to check there,
    its cases are not run (no error rows, no cost), and --resume --batch sends them again
    once the user has looked."""
    api = TakenUnanswered(toy_answer)
    api.delay = delay
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        argv = ["run", "--batch", "--local", "-m", "openai/gpt-4o-mini", "-d", "animals"]
        stopped = run_agent_evals(*argv, cwd=toy, env=env)
        assert len(api.submitted) == 1 and api.sync == 0, stopped.stderr
        (line,) = [x for x in stopped.stderr.splitlines() if x.startswith("error:")]
        assert "the batch's submission got no answer" in line and "look at its batches there" in line
        assert "--resume --batch --resend-lost sends it again (without that flag, never)" in line
        assert (
            "finish with: agent-evals run --batch --local -m openai/gpt-4o-mini -d animals --resume" in stopped.stderr
        )
        assert stopped.returncode == 1
        rows = [row for log in read_logs(toy) for row in log["rows"]]
        assert not rows, rows  # not run: never an error row
        refused = run_agent_evals(*argv, "--resume", cwd=toy, env=env)
        assert refused.returncode == 2 and len(api.submitted) == 1, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            "error: --resume: 1 batch submission of that run got no answer, so the provider may hold it: "
            "[animals] openai/gpt-4o-mini round 1 (4 requests). Look at your batches there and cancel any it holds, "
            "then add --resend-lost to send them again (never sent blind: each would be paid twice)"
        )
        resumed = run_agent_evals(*argv, "--resume", "--resend-lost", cwd=toy, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(api.submitted) == 2


class BothTakenUnanswered(BatchAPI):
    """A proxy restart: every submission in flight taken by the server, and its answer lost."""

    def _submit(self, received) -> Answer:
        answer = super()._submit(received)
        return Answer(drop=True, delay=2.0) if len(self.submitted) <= 2 else answer


@pytest.mark.hostile
def test_two_batch_submissions_lost_at_once_are_both_named_and_neither_is_sent_again_blind(toy: Path) -> None:
    """Two contenders at -j 2 whose POST /batches answers are both lost: the stop names both
    (cancelling the one a single line named, then resuming, paid the other twice), and
    --resume --batch sends neither until --resend-lost says the provider holds none."""
    api = BothTakenUnanswered(toy_answer)
    with OpenAICompatible(api) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        argv = ["compare", "--batch", "--local", "-j", "2", "-d", "animals"]
        stopped = run_agent_evals(*argv, cwd=toy, env=env)
        assert stopped.returncode == 1 and len(api.submitted) == 2, stopped.stderr
        (line,) = [x for x in stopped.stderr.splitlines() if x.startswith("error:")]
        assert "(all 2 submissions that got no answer: " in line, line
        assert "[animals] openai/gpt-4o-mini round 1 (4 requests)" in line
        assert "[animals] openai/gpt-4.1-mini round 1 (4 requests)" in line
        refused = run_agent_evals(*argv, "--resume", cwd=toy, env=env)
        assert refused.returncode == 2 and len(api.submitted) == 2, refused.stderr
        assert (
            "--resume: 2 batch submissions of that run got no answer, so the provider may hold them: " in refused.stderr
        )
        resumed = run_agent_evals(*argv, "--resume", "--resend-lost", cwd=toy, env=env)
    assert resumed.returncode == 0 and len(api.submitted) == 4, resumed.stderr


def test_a_round_splits_under_200_000_000_bytes_counted_in_utf8() -> None:
    """OpenRouter's documented "200 MB" read as the stricter (200,000,000 bytes, not MiB), and
    a request's size counted in the bytes it goes as: 210 requests of 1 MB of 'é' (500,000
    characters each) go as two batches, each under the limit as sent."""
    model = ae.Model("openai/gpt-4o-mini", ae.OpenRouter())
    text = "é" * 500_000
    asked = {f"c{i:03d}": (model, {"user": text}, None) for i in range(210)}
    pieces = ae._Batch.pieces(asked)
    assert len(pieces) == 2 and sum(map(len, pieces)) == 210
    for piece in pieces:
        sent = sum(len(json.dumps(asked[c][1], ensure_ascii=False).encode()) for c in piece)
        assert sent < 200_000_000


def test_forecasts_after_a_batch_run_are_what_the_next_run_spends(toy: Path) -> None:
    """Costs a --batch run paid at the batch price are taken back to list price for later
    forecasts: the next --batch run and the next sync run are each forecast within 10% of
    what they spend (they were 5x low)."""
    half = [
        {"id": "openai/gpt-4o-mini", "pricing": {"prompt": "0.00000015", "completion": "0.0000006"}},
        {"id": "openai/gpt-4o-mini:batch", "pricing": {"prompt": "0.000000075", "completion": "0.0000003"}},
    ]
    api = BatchAPI(toy_answer)
    argv = ["run", "--local", "-m", "openai/gpt-4o-mini", "--format", "json"]

    def spent(done) -> float:
        return sum(r["cost_usd"] for d in json.loads(done.stdout)["datasets"] for r in d["leaderboard"])

    with OpenAICompatible(api, catalog=half) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        first = run_agent_evals(*argv, "--batch", cwd=toy, env=env)
        batch = run_agent_evals(*argv, "--batch", cwd=toy, env=env)
        sync = run_agent_evals(*argv, cwd=toy, env=env)
    assert first.returncode == batch.returncode == sync.returncode == 0, (batch.stderr, sync.stderr)
    as_batch = float(re.search(r"as a batch: about \$([\d.]+) of that", batch.stderr)[1])
    assert as_batch == pytest.approx(spent(batch), rel=0.1), batch.stderr
    expected = float(re.search(r"forecast: \$([\d.]+) expected", sync.stderr)[1])
    assert expected == pytest.approx(spent(sync), rel=0.1), sync.stderr
    assert spent(sync) == pytest.approx(2 * spent(batch))


@pytest.mark.parametrize(
    "change",
    [{"metadata": {"run": "x"}}, {"endpoint": "/v1/completions"}, {"provider": {"order": ["a"]}}, {"extra": 1}],
)
def test_the_stand_in_refuses_what_the_api_reference_does_not_define(change) -> None:
    """The contract the batch tests hold the tool to: a body the reference's BatchSubmitBody does
    not describe is refused, so a tool that sent one would fail every --batch test."""
    base = {"endpoint": "/v1/chat/completions", "model": "m", "requests": [{"custom_id": "a", "body": {}}]}
    api = BatchAPI()
    assert api(Received("POST", "/api/v1/batches", {}, base)).status == 202
    assert api(Received("POST", "/api/v1/batches", {}, {**base, **change})).status == 400
    assert api(Received("GET", "/api/v1/batches/batch_1/results?limit=1001", {}, None)).status == 400


def test_a_cached_batch_run_asks_the_key_before_its_first_batch_and_stops_there(make_suite, cli, monkeypatch) -> None:
    """--cache --batch on a key that cannot pay: no part of the round is submitted (the first is
    refused, the next finds the run stopped), its cases not run."""
    monkeypatch.setattr(ae.OpenRouter, "batch_most", 2)  # a round of 3 goes as two batches
    config = "request_types: [prompt]\ncache: true\ndefaults:\n  max_tokens: 16\n"
    config += "vendors:\n  openai:\n    - model: gpt-4o-mini\n"
    api = BatchAPI()
    key = {"limit_remaining": 0.000001}
    with OpenAICompatible(api, key=key) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-batch")
        monkeypatch.setenv("AGENT_EVALS_BATCH_POLL", "0.02")
        project = make_suite(helper=EXACT_HELPER, config=config, cases=many(3))
        code, _, err = cli("run", "--batch", "--local", cwd=project)
        assert code == 1 and api.submitted == [] and api.sync == 0, err
        assert "left (limit_remaining); this run can cost" in err and "finish with:" in err, err
        key["limit_remaining"] = 10.0
        code, out, err = cli("run", "--batch", "--local", "--resume", cwd=project)
        assert code == 0 and [len(b["requests"]) for b in api.submitted] == [2, 1] and "100.0%" in out, err
        assert [r.path for r in server.requests].count("/api/v1/key") == 2


def test_each_case_run_walks_the_table_from_waiting_through_its_batch_to_done(toy: Path, monkeypatch, cli) -> None:
    seen = walks(monkeypatch)
    with batch_server(BatchAPI(toy_answer), monkeypatch):
        code, _, err = cli("run", "--batch", "--local", "--repeat", "2", "-m", "openai/gpt-4o-mini", cwd=toy)
    assert code == 0, err
    for log in read_logs(toy):
        units = sorted(unit for dataset, _, unit in seen if dataset == log["dataset"])
        assert units == list(range(len(log["rows"]))) and len(units) >= 4
    walk = ["waiting", "running", "put off", "replaying", "running", "done"]
    assert seen and all(states == walk for states in seen.values()), seen


def test_a_batch_answered_by_another_model_than_asked_is_named_and_a_dated_snapshot_is_not(toy: Path) -> None:
    """Every answer of gpt-4o-mini's batches says gpt-4o (another model); gpt-4.1-mini's say its
    dated snapshot, gpt-4.1-mini-2025-04-14: the same model, no line."""

    def answer(received) -> Answer:
        reply = toy_answer(received)
        asked = received.body["model"]
        reply.body["model"] = "openai/gpt-4o" if asked == "openai/gpt-4o-mini" else f"{asked}-2025-04-14"
        return reply

    with OpenAICompatible(BatchAPI(answer)) as server:
        env = {"OPENROUTER_BASE_URL": server.url + "/api/v1", "OPENROUTER_API_KEY": "sk-or-batch", **POLL}
        done = run_agent_evals("compare", "--batch", "--local", cwd=toy, env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    for dataset in ("animals", "colors"):
        line = f"model [{dataset}] openai/gpt-4o-mini effort=default: asked for openai/gpt-4o-mini, every answer"
        assert f"{line} (4 cases) came from openai/gpt-4o" in said, said
    assert "asked for openai/gpt-4.1-mini" not in said

"""Spend nothing twice: rescore, async adapters, shards and report."""

from __future__ import annotations

import json

import pytest

from conftest import EXACT_HELPER, case_files, read_logs

SYNC = (
    EXACT_HELPER
    + """
class A(ae.Adapter):
    def call(self, case, model):
        completion = model.complete(user=case.input)
        return ae.Reply(output=ae._first_json_object(completion.text), raw=completion.text, usage=completion.usage)

ae.configure(adapter=A(), providers=[ae.FakeProvider()])
"""
)

ASYNC = SYNC.replace(
    """    def call(self, case, model):
        completion = model.complete(user=case.input)""",
    """    async def call(self, case, model):
        import asyncio
        await asyncio.sleep(0.01 if case.id.endswith("1") else 0)
        completion = await model.acomplete(user=case.input)""",
)

LINEUP = (
    "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: parrot\n      effort: [default, low]\n"
)


def cases() -> dict[str, str]:
    files = {**case_files("one", "a/001", {"v": 1}), **case_files("one", "a/002", {"v": 2}, expected={"v": 0})}
    return files | case_files("two", "b/001", {"v": 3}) | case_files("two", "b/002", {"v": 4})


def comparable(log: dict) -> dict:
    rows = [{k: v for k, v in row.items() if k != "duration"} for row in log["rows"]]
    summary = {k: v for k, v in log["summary"].items() if k != "duration"}
    return {"experiment": log["experiment"], "rows": rows, "summary": summary}


def test_async_and_sync_adapters_give_the_same_logs(make_suite, cli, tmp_path) -> None:
    results = []
    for helper in (SYNC, ASYNC):
        project = make_suite(helper=helper, config=LINEUP, cases=cases())
        code, out, err = cli("compare", "--local", "-p", "2", cwd=project)
        assert code == 0, err
        results.append(
            (
                [comparable(log) for log in read_logs(project)],
                [line for line in out.splitlines() if line.startswith("│ ")],
            )
        )
        (project.parent / "done").mkdir(exist_ok=True)
        project.rename(project.parent / "done" / f"run{len(results)}")
    assert results[0][0] == results[1][0]
    strip_time = [[cell for i, cell in enumerate(line.split("│")) if i != 7] for line in results[0][1]]
    assert strip_time == [[cell for i, cell in enumerate(line.split("│")) if i != 7] for line in results[1][1]]


def test_rescore_after_changing_the_scorer_calls_no_model(make_suite, cli) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    code, before, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    (journal,) = {p.name.split(".")[-2] for p in (project / "log" / "agent-evals").glob("*.jsonl")}
    any_log = next((project / "log" / "agent-evals").glob("*.json"))
    lenient = SYNC.replace("right = float(reply.output == case.expected)", "right = 1.0")
    (project / "evals" / "eval_helper.py").write_text(lenient.replace("providers=[ae.FakeProvider()]", "providers=[]"))
    code, after, err = cli("rescore", str(any_log))
    assert code == 0, err
    assert "rescored, no model was called" in err
    assert "│ one     │ fake/echo   │ default │    - │ 50.0% [" in before
    assert "│ one     │ fake/echo   │ default │    - │ 100.0% │" in after
    newest = [log for log in read_logs(project) if log["command"] == "rescore"]
    assert len(newest) == 6 and all(log["rescored_from"] == [journal] for log in newest)
    assert newest[0]["rows"][0]["output"] is not None


def test_rescore_keeps_errors_and_reports_a_scorer_fault(make_suite, cli) -> None:
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: broken\n    - model: echo\n"
    project = make_suite(helper=SYNC, config=config, cases=cases())
    cli("compare", "--local", cwd=project)
    log = next((project / "log" / "agent-evals").glob("*.json"))
    faulty = SYNC.replace("right = float(reply.output == case.expected)", "right = 1 / 0")
    (project / "evals" / "eval_helper.py").write_text(faulty)
    code, _, err = cli("rescore", str(log))
    assert code == 0, err
    logs = {(g["contender"]["model"], g["dataset"]): g for g in read_logs(project) if g["command"] == "rescore"}
    assert logs[("fake/broken", "one")]["rows"][0]["error"].startswith("ProviderError")
    assert logs[("fake/echo", "one")]["rows"][0]["error"] == "ZeroDivisionError: division by zero"


def test_shards_cover_the_matrix_once_and_report_equals_compare(make_suite, cli) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    code, whole, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    shard_logs, seen = [], []
    for k in (1, 2, 3):
        before = set((project / "log" / "agent-evals").glob("*.json"))
        code, _, err = cli("compare", "--local", "--shard", f"{k}/3")
        assert code == 0, err
        new = sorted(set((project / "log" / "agent-evals").glob("*.json")) - before)
        seen += [json.loads(p.read_text())["experiment"] for p in new]
        assert all(json.loads(p.read_text())["shard"] == f"{k}/3" for p in new)
        shard_logs.append(str(new[0]))
    assert sorted(seen) == sorted(log["experiment"] for log in read_logs(project) if log["shard"] is None)
    assert len(seen) == len(set(seen)) == 6
    code, merged, err = cli("report", *shard_logs)
    assert code == 0, err

    def scores(text: str) -> list[list[str]]:
        return [
            [c.strip() for i, c in enumerate(line.split("│")) if i != 7]
            for line in text.splitlines()
            if line.startswith("│ ")
        ]

    assert scores(merged) == scores(whole)
    assert [line for line in merged.splitlines() if line.startswith("best value")] == [
        line for line in whole.splitlines() if line.startswith("best value")
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [("4/3", "--shard 4/3: expected K/N"), ("x", "--shard x: expected K/N"), ("1/³", "--shard 1/³: expected K/N")],
)
def test_bad_shard(make_suite, cli, spec, message) -> None:
    project = make_suite()
    code, _, err = cli("compare", "-n", "--shard", spec, cwd=project)
    assert code == 2 and message in err


def test_report_refuses_logs_that_do_not_belong_together(make_suite, cli, tmp_path) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    cli("compare", "--local", cwd=project)
    log = next((project / "log" / "agent-evals").glob("*.json"))
    every = sorted(str(p) for p in (project / "log" / "agent-evals").glob("*.json"))
    code, out, err = cli("report", *every)  # every file of one run: the run counts once
    assert code == 0 and out.count("│ one ") == 3, err
    copy = project / "copy"
    copy.mkdir()
    (copy / log.name).write_text(log.read_text())
    code, _, err = cli("report", str(log), str(copy / log.name))
    assert code == 2 and "is in two of the logs given; give each shard's run once" in err
    other = json.loads(log.read_text())
    other["suite"], other["dataset"] = "another", "elsewhere"
    stray = tmp_path / "x.20260101-000000-000.json"
    stray.write_text(json.dumps(other))
    code, _, err = cli("report", str(log), str(stray))
    assert code == 2 and "report: the logs come from different suites" in err
    other["suite"], other["metrics"] = json.loads(log.read_text())["suite"], [{"name": "other"}]
    stray.write_text(json.dumps(other))
    code, _, err = cli("report", str(log), str(stray))
    assert code == 2 and "the logs declare different metrics" in err


def test_no_raw_keeps_output_but_not_raw(make_suite, cli) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    code, _, _ = cli("compare", "--local", "--no-raw", "-m", "fake/echo", cwd=project)
    assert code == 0
    row = read_logs(project)[0]["rows"][0]
    assert row["raw"] is None and row["output"] == {"v": 1}
    code, _, _ = cli("compare", "--local", "-m", "fake/echo")
    assert read_logs(project)[-1]["rows"][0]["raw"] is not None


def test_no_raw_belongs_to_its_run_only(make_suite, cli) -> None:
    # one process, as a notebook or a test runner: a --no-raw run, then a rescore of a run
    # that kept its raw replies, keeps them
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    logs = project / "log" / "agent-evals"
    assert cli("compare", "--local", "-m", "fake/echo", cwd=project)[0] == 0
    kept = sorted(logs.glob("*.json"))
    assert cli("compare", "--local", "--no-raw", "-m", "fake/echo")[0] == 0
    before = {p.name for p in logs.glob("*.json")}
    code, _, err = cli("rescore", *map(str, kept))
    assert code == 0, err
    rescored = [p for p in logs.glob("*.json") if p.name not in before]
    assert len(rescored) == len(kept)
    rows = [row for p in rescored for row in json.loads(p.read_text())["rows"]]
    assert rows and all(row["raw"] is not None for row in rows)


BLOCKING = (
    EXACT_HELPER
    + """
import threading

class Slow(ae.Provider):
    name = "slow"
    prefix = "slow/"
    gate = threading.Barrier(12, timeout=300)  # passes only when twelve requests are in flight at once

    def complete(self, model, *, system=None, user, json=True):
        self.gate.wait()
        return ae.Completion(user)

class A(ae.Adapter):
    async def call(self, case, model):
        completion = await model.acomplete(user=case.input)
        return ae.Reply(output=ae._first_json_object(completion.text), usage=completion.usage)

ae.configure(adapter=A(), providers=[Slow()])
"""
)


def test_an_async_adapter_over_a_blocking_provider_keeps_p_requests_in_flight(make_suite, cli) -> None:
    # a provider with no async client runs on worker threads: -p of them, not the
    # executor's default (a handful on a small machine)
    files = {}
    for n in range(1, 13):
        files |= case_files("ds", f"a/{n:03d}", {"v": n})
    config = "request_types: [prompt]\nvendors:\n  slow:\n    - model: m\n"
    project = make_suite(helper=BLOCKING, config=config, cases=files)
    code, _, err = cli("compare", "--local", "-p", "12", cwd=project)
    assert code == 0, err
    (log,) = read_logs(project)
    assert [row["error"] for row in log["rows"]] == [None] * 12
    assert log["summary"]["scored"] == 12

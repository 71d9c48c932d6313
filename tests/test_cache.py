"""Spend nothing twice: the response cache."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from servers import OpenAICompatible

import agent_evals as ae
from conftest import EXACT_HELPER, ROOT, case_files, read_logs

LINEUP = "request_types: [prompt]\ndefaults:\n  temperature: 0.2\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"


def table(out: str) -> list[str]:
    return [line.split("│")[5].strip() for line in out.splitlines() if line.startswith("│ ds")]


def test_a_second_cached_compare_asks_nothing_and_scores_the_same(make_suite, cli, monkeypatch) -> None:
    with OpenAICompatible() as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-cache-test-1")
        project = make_suite(helper=EXACT_HELPER, config=LINEUP)
        code, first, err = cli("compare", "--local", "--cache", cwd=project)
        assert code == 0, err
        asked = len(server.chats())
        assert asked == 4
        code, second, err = cli("compare", "--local", "--cache")
        assert code == 0, err
        assert len(server.chats()) == asked  # every answer came from the cache
        assert table(second) == table(first) == ["100.0%"]
        assert (
            "cache [ds] openai/gpt-4.1-mini effort=default temp=0.2: 4 answers of 4 runs from the cache; $0.0008 "
            "not spent again" in second
        )
        # the cost column is what the answers cost, cached or not; the cache line says this run spent nothing
        assert "│ $0.0008 │" in second.split("best value")[0] and "│ $0.0008 │" in first.split("best value")[0]
        assert "this run spent $0.0000)" in second
        newest = read_logs(project)[-1]
        assert newest["summary"]["cached"] == 4 and newest["summary"]["saved_usd"] == 0.0008
        # a change of temperature misses; so does a change of prompt
        code, _, _ = cli("compare", "--local", "--cache", "-t", "0.7")
        assert len(server.chats()) == asked + 4
        (project / "evals" / "datasets" / "ds" / "cases" / "a" / "001" / "input.txt").write_text(
            'Changed prompt for a/001. {"v": "a1"}'
        )
        code, _, _ = cli("compare", "--local", "--cache")
        assert len(server.chats()) == asked + 5
        # repeats never hit each other: repeat 0 hits, repeats 1 and 2 are asked
        code, _, _ = cli("compare", "--local", "--cache", "--repeat", "3")
        assert len(server.chats()) == asked + 5 + 8
        # without --cache every case is asked again
        code, _, _ = cli("compare", "--local")
        assert len(server.chats()) == asked + 5 + 8 + 4


def test_only_successful_completions_are_stored(make_suite, cli) -> None:
    project = make_suite(
        config="request_types: [prompt]\ncache: true\nvendors:\n  fake:\n    - model: broken\n    - model: echo\n"
    )
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 1, err  # a contender no case of which was answered
    code, out, _ = cli("cache", "stats")
    # its size counts the write-ahead log, which a connection the run left open (in this process) keeps
    sized = re.sub(r", 0\.[01] MB$", ", 0.x MB", out.splitlines()[0])
    assert code == 0 and [sized, *out.splitlines()[1:]] == [
        "log/agent-evals/cache/completions.sqlite3: 4 answers, first paid $0.0040, 0.x MB",
        "  fake/echo: 4 answers, first paid $0.0040",  # by model: the broken one's failures were never stored
    ]
    code, out, _ = cli("cache", "clear")
    assert code == 0 and out.strip() == "log/agent-evals/cache/completions.sqlite3: cleared 4 answers"
    code, out, _ = cli("cache", "stats")
    assert "0 answers" in out


def test_cache_commands_without_a_cache(make_suite, cli) -> None:
    project = make_suite()
    code, out, _ = cli("cache", "stats", cwd=project)
    assert code == 0 and "no cache yet (run with --cache, or cache: true in the config)" in out


def test_two_processes_sharing_the_cache_corrupt_nothing(tmp_path) -> None:
    path = tmp_path / "shared.sqlite3"
    writer = (
        "import sys\nsys.path.insert(0, sys.argv[1])\nimport agent_evals as ae\n"
        "cache = ae._Cache(ae.Path(sys.argv[2]))\n"
        "for i in range(200):\n    model = ae.FakeModel('echo', steps=[cache], ledger=ae._Ledger(repeat=i))\n"
        "    model.complete(user=f'{sys.argv[3]} {i}')\n"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", writer, str(ROOT), str(path), name], env={**os.environ})
        for name in ("first", "second")
    ]
    assert [child.wait(60) for child in children] == [0, 0]
    cache = ae._Cache(path)
    assert cache.stats() == [("fake/echo", 400, pytest.approx(0.4))]
    model = ae.FakeModel("echo", steps=[cache], ledger=ae._Ledger(repeat=7))
    assert model.complete(user="second 7").text == "second 7"
    assert model.ledger.hits == 1 and model.ledger.saved == 0.001


def test_a_cached_case_still_counts_its_tokens(make_suite, cli) -> None:
    project = make_suite(cases=case_files("ds", "a/001", {"v": 1}))
    cli("compare", "--local", "--cache", cwd=project)
    code, out, _ = cli("compare", "--local", "--cache")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("│ ds"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[-3:] == ["10", "10", "$0.0010"]  # the answer's tokens, and what it cost when first paid for

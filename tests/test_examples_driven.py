"""Every example suite driven as its users and a CI pipeline drive it: `compare --local`
twice, then each command that reads what the runs left (`diff` of the two runs, `compare
--baseline`, `report` as a table and as JSON, `runs`, `rescore`). No command crashes or
hangs, each exits as the README promises, and two runs of the same offline suite never
differ: the diff finds no regression and the gate passes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, run_agent_evals

EXAMPLES = sorted(p.name for p in (ROOT / "examples").iterdir() if (p / "evals").is_dir())
CRASH = ("Traceback (most recent call last)", "agent-evals stopped:")


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_run_twice_then_read_every_way(name: str, tmp_path: Path) -> None:
    copied = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", copied, ignore=shutil.ignore_patterns("log", "__pycache__"))
    suite = copied / name
    env = {"PYTHONPATH": str(copied / "toy_suite")} if name == "config_only_suite" else {}

    def run(*argv: str, codes: tuple[int, ...] = (0,)):
        done = run_agent_evals(*argv, cwd=suite, env=env)
        said = done.stdout + done.stderr
        assert not any(c in said for c in CRASH), (argv, said[-2000:])
        assert done.returncode in codes, (argv, done.returncode, said[-2000:])
        return done

    run("compare", "--local")
    run("compare", "--local")
    logs = sorted((suite / "log" / "agent-evals").glob("*.json"), key=lambda p: p.name.rsplit(".", 2)[-2])
    stamps = sorted({log.name.rsplit(".", 2)[-2] for log in logs})
    assert len(stamps) == 2
    old = [log for log in logs if stamps[0] in log.name]
    new = [log for log in logs if stamps[1] in log.name]
    for first, second in zip(old, new, strict=True):
        diff = run("diff", str(first), str(second))
        assert "\n0 regressions: " in diff.stdout and " improved " not in diff.stdout, diff.stdout
        if name == "judge_suite":  # the same answers: their difference known, with no label, to be 0
            assert "│ +0.0 [+0.0, +0.0] │ 1 (Holm 1) │" in diff.stdout, diff.stdout
    gate = run("compare", "--local", "--baseline", stamps[0], "--fail-on-regression", "--format", "json")
    document = json.loads(gate.stdout)
    assert document["datasets"] and "regressed" not in json.dumps(document.get("baseline", {}))
    assert run("report", "log/agent-evals").stdout.strip()
    assert json.loads(run("report", "log/agent-evals", "--format", "json").stdout)["datasets"]
    listed = json.loads(run("runs", "--format", "json").stdout)["runs"]
    assert len(listed) == 3 and all(r["state"] == "complete" for r in listed)
    judged = name == "judge_suite"  # a judged suite's rescore is refused by name (exit 2), before anything
    rescored = run("rescore", str(new[0]), codes=(2,) if judged else (0, 1))
    if judged:
        assert rescored.stderr.startswith("error: rescore: a judge gives correct and rescore calls no model")
    assert os.listdir(suite / "log" / "agent-evals")

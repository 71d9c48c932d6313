"""Out to many machines: --shard auto reads the engine, shards share a run id, report merges and says what is missing.

The README's engine examples (GitHub Actions, Kubernetes, Slurm) run here as written, with
the variables each engine sets: three shard processes at once into one folder, then the merge.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_spend_once import LINEUP, SYNC, cases

import agent_evals as ae
from conftest import ROOT, read_logs

README = (ROOT / "README.md").read_text(encoding="utf-8")


def engine(name: str) -> str:
    """The README block after ``<!-- engine: NAME -->``."""
    match = re.search(rf"<!-- engine: {name} -->\n```\w+\n(.+?)\n```", README, re.S)
    assert match, f"README.md has no engine: {name} block"
    return match[1]


@pytest.mark.parametrize(
    ("env", "spec", "want"),
    [
        ({"AGENT_EVALS_SHARD": "2/3"}, "auto", "2/3"),
        ({"AGENT_EVALS_SHARD": "2/3"}, "auto/3", "2/3"),
        ({"JOB_COMPLETION_INDEX": "0"}, "auto/4", "1/4"),
        ({"JOB_COMPLETION_INDEX": "3", "AGENT_EVALS_SHARDS": "4"}, "auto", "4/4"),
        ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1"}, "auto", "2/3"),
        ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_MAX": "9"}, "auto", "3/5"),
        (
            {
                "SLURM_ARRAY_TASK_ID": "4",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "8",
                "SLURM_ARRAY_TASK_STEP": "2",
            },
            "auto",
            "3/5",
        ),
        ({}, "3/5", "3/5"),
    ],
)
def test_shard_auto_reads_the_engine(env, spec, want) -> None:
    assert ae._shard_spec(spec, env) == want


@pytest.mark.parametrize(
    ("env", "spec", "message"),
    [
        ({}, "auto", "--shard auto: no shard in the environment: set AGENT_EVALS_SHARD=K/N, or run as a Kubernetes"),
        (
            {"AGENT_EVALS_SHARD": "1/2", "SLURM_ARRAY_TASK_ID": "1"},
            "auto",
            "--shard auto: AGENT_EVALS_SHARD and SLURM_ARRAY_TASK_ID are all set; give --shard K/N",
        ),
        ({"AGENT_EVALS_SHARD": "2/3"}, "auto/4", "--shard auto/4: AGENT_EVALS_SHARD says 2/3, not one of 4"),
        (
            {"JOB_COMPLETION_INDEX": "1"},
            "auto",
            "JOB_COMPLETION_INDEX gives the index but not the count: give --shard auto/N",
        ),
        ({"JOB_COMPLETION_INDEX": "5"}, "auto/3", "--shard auto/3: the environment gives 6/3; expected K/N"),
        ({"AGENT_EVALS_SHARD": "two"}, "auto", "--shard auto: AGENT_EVALS_SHARD='two' is not K/N, like 2/3"),
        ({"SLURM_ARRAY_TASK_ID": "1"}, "auto", "or set AGENT_EVALS_SHARDS=N (or SLURM_ARRAY_TASK_COUNT)"),
        ({"SLURM_ARRAY_TASK_ID": "x1"}, "auto", "SLURM_ARRAY_TASK_ID 'x1', _MIN or _STEP is not a count"),
        # digits int() refuses though str.isdigit takes them
        ({}, "²/3", "--shard ²/3: expected K/N with 1 <= K <= N"),
        ({"SLURM_ARRAY_TASK_ID": "²"}, "auto", "SLURM_ARRAY_TASK_ID '²', _MIN or _STEP is not a count"),
        ({"JOB_COMPLETION_INDEX": "²"}, "auto/3", "--shard auto/3: the environment gives ?/3; expected K/N"),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MAX": "²"}, "auto", "gives the index but not the count"),
    ],
)
def test_a_missing_or_inconsistent_shard_is_one_line(make_suite, cli, monkeypatch, env, spec, message) -> None:
    project = make_suite()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = cli("compare", "-n", "--shard", spec, cwd=project)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.parametrize(
    ("env", "run_id"),
    [
        ({"AGENT_EVALS_RUN_ID": "nightly-7", "SLURM_ARRAY_JOB_ID": "42"}, "nightly-7"),
        ({"SLURM_ARRAY_JOB_ID": "42"}, "slurm-42"),
        ({"GITHUB_RUN_ID": "9001", "GITHUB_RUN_ATTEMPT": "2"}, "github-9001-2"),
        ({"JOB_COMPLETION_INDEX": "2", "HOSTNAME": "evals-nightly-2-x7k2p"}, "k8s-evals-nightly"),
        ({"JOB_COMPLETION_INDEX": "2", "HOSTNAME": "laptop"}, None),
        ({}, None),
    ],
)
def test_the_shards_of_one_run_share_its_id(env, run_id) -> None:
    assert ae._run_id(env) == run_id


def project_with_module(make_suite) -> Path:
    """The suite as a user's repo holds it: agent_evals.py copied in beside evals/."""
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    shutil.copy(ROOT / "agent_evals.py", project / "agent_evals.py")
    return project


def environ(extra: dict[str, str]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_EVALS", "SLURM", "GITHUB_", "JOB_"))}
    return keep | {"PYTHONIOENCODING": "utf-8", "NO_COLOR": "1"} | extra


def at_once(project: Path, command: str, envs: list[dict[str, str]]) -> list[subprocess.CompletedProcess[str]]:
    """``command`` (a README line) in N processes started together, one per engine environment."""
    argv = shlex.split(command.replace("python ", f"{shlex.quote(sys.executable)} ", 1))
    children = [
        subprocess.Popen(argv, cwd=project, env=environ(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for env in envs
    ]
    done = []
    for child in children:
        out, err = child.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(argv, child.returncode, out, err))
    return done


def merge(project: Path, command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return at_once(project, command, [env or {}])[0]


def leaderboard(text: str) -> list[str]:
    return sorted(
        line.split("│")[2].strip() + line.split("│")[3] for line in text.splitlines() if line.startswith("│ ")
    )


def check_merged(project: Path, whole: str, merged: subprocess.CompletedProcess[str], shards: int) -> None:
    assert merged.returncode == 0, merged.stderr
    assert "partial" not in merged.stderr and "twice" not in merged.stderr
    stamps = {log["stamp"] for log in read_logs(project) if log["shard"]}
    assert len(stamps) == shards and all(re.search(r"-shard\d+of\d+$", s) for s in stamps)
    assert leaderboard(merged.stdout) == leaderboard(whole)


@pytest.fixture
def whole(make_suite, cli) -> str:
    """compare's tables of the same suite on one machine: what the merge must equal."""
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    shutil.rmtree(project)
    return out


def test_the_slurm_array_of_the_readme(make_suite, whole) -> None:
    project = project_with_module(make_suite)
    script = engine("slurm")
    assert "#SBATCH --array=1-3" in script
    (command,) = [line for line in script.splitlines() if line.startswith("python ")]
    array = {"SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "3"}
    array |= {"SLURM_ARRAY_TASK_COUNT": "3", "SLURM_SUBMIT_DIR": str(project)}
    runs = at_once(project, command, [array | {"SLURM_ARRAY_TASK_ID": str(k)} for k in (1, 2, 3)])
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert {log["run_id"] for log in read_logs(project)} == {"slurm-4242"}
    submit = README[README.index(script) :]
    wrap = re.search(r'--wrap "(python agent_evals.py report [^"]+)"', submit)
    assert wrap
    check_merged(project, whole, merge(project, wrap[1]), 3)
    # a shard lost (its task failed): the others are shown, and what is missing is said
    for log in (project / "log" / "agent-evals").glob("*-shard2of3.json*"):
        log.unlink()
    partial = merge(project, wrap[1])
    assert partial.returncode == 0 and "warning: report: shard 2/3 of run slurm-4242 missing: partial" in partial.stderr
    assert 0 < len(leaderboard(partial.stdout)) < len(leaderboard(whole))


def test_the_kubernetes_indexed_job_of_the_readme(make_suite, whole) -> None:
    project = project_with_module(make_suite)
    job = yaml.safe_load(engine("kubernetes"))
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 3
    (container,) = job["spec"]["template"]["spec"]["containers"]
    command = container["command"][-1].split(" && ")[-1]  # the pip install before it is the image's business
    name = job["metadata"]["name"]
    pods = [{"JOB_COMPLETION_INDEX": str(i), "HOSTNAME": f"{name}-{i}-ab{i}cd"} for i in range(3)]
    runs = at_once(project, command, pods)
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert {log["run_id"] for log in read_logs(project)} == {"k8s-evals"}
    report = re.search(r"(python agent_evals.py report [^\"]+)\"", README[README.index(engine("kubernetes")) :])
    assert report
    check_merged(project, whole, merge(project, report[1]), 3)


def test_the_github_actions_matrix_of_the_readme(make_suite, whole) -> None:
    project = project_with_module(make_suite)
    workflow = yaml.safe_load(engine("github"))
    evals, report = workflow["jobs"]["evals"], workflow["jobs"]["report"]
    (step,) = [s for s in evals["steps"] if "agent_evals.py compare" in s.get("run", "")]
    shards = evals["strategy"]["matrix"]["shard"]
    envs = [
        {
            "GITHUB_RUN_ID": "77",
            "AGENT_EVALS_SHARD": step["env"]["AGENT_EVALS_SHARD"].replace("${{ matrix.shard }}", str(k)),
        }
        for k in shards
    ]
    runs = at_once(project, step["run"], envs)
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    # each job uploads its logs; the report job downloads them all into logs/
    (upload,) = [s for s in evals["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["with"]["path"] == "log/agent-evals/*.json" and report["if"] == "always()"
    (download,) = [s for s in report["steps"] if s.get("uses", "").startswith("actions/download-artifact")]
    folder = project / download["with"]["path"]
    folder.mkdir()
    for log in (project / "log" / "agent-evals").glob("*.json"):
        shutil.copy(log, folder / log.name)
    (merge_step,) = [s for s in report["steps"] if "agent_evals.py report" in s.get("run", "")]
    check_merged(project, whole, merge(project, merge_step["run"]), 3)


def test_a_shard_given_twice_shows_its_newer_run_and_says_so(make_suite, cli, monkeypatch) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    monkeypatch.setenv("AGENT_EVALS_RUN_ID", "nightly")
    for k in (1, 2, 2):  # shard 2 retried
        monkeypatch.setenv("AGENT_EVALS_SHARD", f"{k}/2")
        code, _, err = cli("compare", "--local", "--shard", "auto", cwd=project)
        assert code == 0, err
    logs = project / "log" / "agent-evals"
    stamps = sorted({log["stamp"] for log in read_logs(project)})
    code, out, err = cli("report", *map(str, logs.glob("*.json")), "--format", "json")
    assert code == 0, err
    first, second = sorted(s for s in stamps if s.endswith("shard2of2"))
    note = f"shard 2/2 of run nightly is given twice ({first} and {second}): the newer, {second}, is shown"
    assert f"warning: report: {note}" in err
    document = json.loads(out)
    assert document["partial"] == [note] and set(document["stamps"]) == {stamps[0], second} | {
        s for s in stamps if s.endswith("shard1of2")
    }
    # the newest run's shards, found from the folder alone
    code, out, err = cli("report", str(logs))
    assert code == 0 and "partial" not in err and "twice" not in err, err
    assert len([line for line in out.splitlines() if line.startswith("│ ")]) >= 6
    # a run that is no shard of it is refused, as ever
    code, _, _ = cli("compare", "--local", cwd=project)
    code, _, err = cli("report", *map(str, logs.glob("*.json")))
    assert code == 2 and "is in two of the logs given" in err


def test_shard_logs_record_shard_and_run_id_even_in_a_journal(make_suite, cli, monkeypatch) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    monkeypatch.setenv("AGENT_EVALS_RUN_ID", "r1")
    code, _, err = cli("compare", "--local", "--shard", "1/2", cwd=project)
    assert code == 0, err
    journals = list((project / "log" / "agent-evals").glob("*.jsonl"))
    assert journals and all(
        json.loads(j.read_text().splitlines()[0]) | {"shard": "1/2", "run_id": "r1"}
        == json.loads(j.read_text().splitlines()[0])
        for j in journals
    )


def test_a_shard_log_with_a_broken_header_is_no_sibling_and_no_traceback(make_suite, cli, monkeypatch) -> None:
    project = make_suite(helper=SYNC, config=LINEUP, cases=cases())
    monkeypatch.setenv("AGENT_EVALS_RUN_ID", "r1")
    code, _, err = cli("compare", "--local", "--shard", "1/2", cwd=project)
    assert code == 0, err
    logs = project / "log" / "agent-evals"
    (logs / "x.20000101-000000-000-shard2of2.json").write_text('{\n  "run_id": "\\q", "rows": [')
    code, out, err = cli("report", str(logs))
    assert code == 0 and "Traceback" not in err
    assert "warning: report: shard 2/2 of run r1 missing: partial" in err and "│ one " in out


# -- a shard killed mid-run: SIGTERM (a Slurm time limit, an eviction, a CI cancel) ----

PACED = '{"paced": lambda s, u: (__import__("time").sleep(0.15), u)[1]}'
TWO = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: paced\n"


def shard_process(project: Path, spec: str, *argv: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "agent_evals", "compare", "--local", "--shard", spec, "-p", "1", *argv]
    env = environ({"AGENT_EVALS_RUN_ID": "nightly", "PYTHONPATH": str(ROOT)})
    return subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def journal_rows(project: Path, shard: str) -> int:
    return sum(len(p.read_text().splitlines()) - 1 for p in (project / "log" / "agent-evals").glob(f"*{shard}.jsonl"))


def test_a_shard_ended_by_sigterm_keeps_its_log_and_the_merge_shows_every_shard(make_suite, cli, monkeypatch) -> None:
    import signal
    import time

    from conftest import many

    project = make_suite(fakes=PACED, config=TWO, cases=many(12))
    first = shard_process(project, "1/2")  # fake/echo: quick
    second = shard_process(project, "2/2")  # fake/paced: 0.15 s a case
    assert first.wait(timeout=300) == 0, first.communicate()[1]
    deadline = time.monotonic() + 300
    while journal_rows(project, "shard2of2") < 3:
        assert time.monotonic() < deadline and second.poll() is None
        time.sleep(0.02)
    second.send_signal(signal.SIGTERM)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 143, err
    assert "interrupted by SIGTERM: the cases in flight may finish for up to 10s (SIGTERM again abandons them)" in err
    assert out.startswith("partial: interrupted by SIGTERM after ")
    logs = project / "log" / "agent-evals"
    (log,) = [g for g in read_logs(project) if g["shard"] == "2/2"]
    asked = [row["case"] for row in log["rows"]]
    assert 3 <= len(asked) < 12 and sorted(asked + log["not_run"]) == [f"a/{i:03d}" for i in range(1, 13)]
    # the merge shows both shards: the finished one whole, the killed one as far as it got
    code, out, err = cli("report", str(logs), cwd=project)
    assert code == 0, err
    assert re.search(r"│ ds +│ fake/echo  │", out) and f"│ ds ({len(asked)} of 12) │ fake/paced │" in out
    assert f"warning: report: [ds] fake/paced effort=default: {len(asked)} of 12 case runs" in err
    # killed harder (SIGKILL, out of memory): only its journal is left, and it is shown
    (written,) = logs.glob("*-shard2of2.json")
    whole = written.read_text()
    written.unlink()
    code, out, err = cli("report", str(logs), cwd=project)
    assert code == 0, err
    assert "│ ds      │ fake/paced │" in out and "ended before writing its log: its journal is shown" in err
    # a log cut short drops only itself (its journal stands in), never its intact sibling
    written.write_text(whole[: len(whole) // 2])
    code, out, err = cli("report", str(logs), cwd=project)
    assert code == 0, err
    assert f"{written.name}: not an agent-evals log of this version" in err and "left out, the other files" in err
    assert re.search(r"│ ds +│ fake/echo  │", out) and re.search(r"│ ds[ (\d+of)]*│ fake/paced │", out)
    for journal in logs.glob("*-shard2of2.jsonl"):
        journal.unlink()
    code, out, err = cli("report", str(logs), cwd=project)
    assert code == 0 and "shard 2/2 of run nightly missing: partial" in err, err
    assert "fake/echo" in out and "fake/paced" not in out
    written.write_text(whole)
    # --resume finds the run of the same shard, never its sibling's: nothing is asked twice
    resumed = shard_process(project, "2/2", "--resume")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resume: {len(asked)} finished cases from the run of " in err and "-shard2of2 are not asked" in err
    (newer,) = [g for g in read_logs(project) if g["shard"] == "2/2" and g["stamp"] != log["stamp"]]
    assert sorted(row["case"] for row in newer["rows"]) == [f"a/{i:03d}" for i in range(1, 13)]
    again = shard_process(project, "1/2", "--resume")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "resume: 12 finished cases" in err and "-shard1of2 are not asked" in err, err


def test_report_over_a_killed_shard_names_what_is_partial_and_missing_and_ranks_nothing_unlike(make_suite, cli) -> None:
    import signal
    import time

    from conftest import many

    fakes = '{"paced": lambda s, u: (__import__("time").sleep(0.2), u)[1]}'
    lineup = "request_types: [prompt]\nvendors:\n  fake:\n    - model: paced\n      effort: [low, medium, high]\n"
    cases = {**many(4), **{k.replace("/ds/", "/other/"): v for k, v in many(4).items()}}
    project = make_suite(fakes=fakes, config=lineup, cases=cases)
    first = shard_process(project, "1/2", "-j", "1")
    second = shard_process(project, "2/2", "-j", "1")
    deadline = time.monotonic() + 300
    while journal_rows(project, "shard2of2") < 1:
        assert time.monotonic() < deadline and second.poll() is None
        time.sleep(0.02)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=300) == 143 and first.wait(timeout=300) == 0
    logs = read_logs(project)
    (cut,) = [log for log in logs if log["shard"] == "2/2"]  # its first experiment, cut short; two never started
    held, planned = len(cut["rows"]), len(cut["rows"]) + len(cut["not_run"])
    assert 1 <= held < planned == 4 and len(cut["plan"]) == 3
    label = f"[{cut['dataset']}] fake/paced effort={cut['contender']['effort']}"
    code, out, err = cli("report", str(project / "log" / "agent-evals"), cwd=project)
    assert code == 0, err
    assert f"warning: report: {label}: {held} of 4 case runs" in err
    never = [p for p in cut["plan"] if p != label]
    assert f"warning: report: planned but never started: {', '.join(never)}" in err
    assert f"│ {cut['dataset']} ({held} of 4) │" in out  # the row says what it holds
    assert "leaderboard: all datasets, not ranked: the contenders ran different cases (" in out
    assert "│ 1 │" not in out.split("leaderboard: all datasets")[1]  # no place is given
    page = project / "report.html"
    assert cli("report", str(project / "log" / "agent-evals"), "-o", str(page), cwd=project)[0] == 0
    board = page.read_text().split("<h2>Leaderboard, all datasets</h2>")[1].split("</section>")[0]
    places = re.findall(r"<tr[^>]*><td[^>]*>([^<]*)</td>", board)
    assert "not ranked" in board and places == ["-", "-", "-"]  # no places here either
    code, out, _ = cli("report", str(project / "log" / "agent-evals"), "--format", "json", cwd=project)
    document = json.loads(out)
    assert code == 0 and f"{label}: {held} of 4 case runs" in document["partial"] and document["overall_not_ranked"]
    # every shard whole: ranked as ever
    shutil.rmtree(project / "log")
    for spec in ("1/2", "2/2"):
        assert shard_process(project, spec).wait(timeout=300) == 0
    code, out, err = cli("report", str(project / "log" / "agent-evals"), cwd=project)
    assert code == 0 and "warning" not in err and "case-weighted, ranked by" in out, err

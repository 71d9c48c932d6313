"""Judged metrics: people's labels, asked blind by ``label``, correct a judge's figures (PPI)."""

from __future__ import annotations

import builtins
import json
import math
import re
import shutil
import time
from collections.abc import Callable, Sequence

import pytest

import agent_evals as ae
from conftest import case_files

# The "judge" passes every right answer and, biased, half the wrong ones (those whose v is
# a multiple of 6): judged 5/6 right where people find 2/3.
JUDGED = """
import agent_evals as ae

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("correct", "the judge's verdict", primary=True, judged=True)]

    def call(self, case, reply, context):
        verdict = float(reply.output == case.expected or reply.output["v"] % 6 == 0)
        return ae.Score(value=verdict, metrics={"correct": verdict})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""
LINEUP = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n"


def cases(n: int = 60) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in range(1, n + 1):  # a third are wrong: expected is not what the echo answers
        out |= case_files("ds", f"a/{v:03d}", {"v": v}, expected={"v": v if v % 3 else -v})
    return out


def test_labels_asked_blind_correct_a_biased_judge(make_suite, cli, monkeypatch, capsys) -> None:
    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases())
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert "judged [ds] correct: no labels yet, so the judged figure is uncorrected (agent-evals label)" in out
    shown: list[str] = []

    def person(prompt: str) -> str:  # a person at the terminal: right when the answer is what was expected
        screen = capsys.readouterr().out
        shown.append(screen)
        if len(shown) > 30:
            return "q"
        v = int(re.findall(r"\[\d+ of 60\] ds a/(\d+)", screen)[-1])
        assert "the judge said" not in screen.split(f"a/{v:03d}")[-1]  # blind: the verdict comes after
        return "y" if v % 3 else "n"

    monkeypatch.setattr(builtins, "input", person)
    code, out, err = cli("label")
    assert code == 0, err
    assert "label: 30 labels added to evals/labels/labels.jsonl (30 in all)" in out
    # before any label: what labels alone need, with the judge's spread standing in for theirs;
    # 60 cases cannot give ±5 points whatever is labelled
    assert (
        "label: labels for ±5 points: [ds] fake/echo default out of reach (too few cases: more cases narrow it)"
        in (shown[0])
    )
    assert "the judge said right: you disagree" in "".join(shown) + out  # a wrong answer the judge passed
    rows = [json.loads(line) for line in (project / "evals" / "labels" / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and set(rows[0]) == {"dataset", "case", "case_hash", "answer_hash", "metric", "label"}
    assert len({r["case"] for r in rows}) == 30  # drawn without repeats
    order = sorted((f"ds/a/{v:03d}" for v in range(1, 61)), key=ae._order)
    assert [f"ds/{r['case']}" for r in rows] == order[:30]  # in the one random order: the first 30
    code, out, err = cli("compare", "--local", "--format", "json", cwd=project)
    (fixed,) = json.loads(out)["corrected"]
    assert fixed["metric"] == "correct" and fixed["labels"] == 30 and fixed["n"] == 60
    # the figure the tables rank by: PPI++ over the judge's 60 values and the 30 labelled
    labelled = {int(r["case"][2:]): r["label"] for r in rows}
    judge = {v: float(v % 3 != 0 or v % 6 == 0) for v in range(1, 61)}
    fig = ae._ppi([], list(judge.values()), [(judge[v], y) for v, y in labelled.items()])
    mean, var, low, high = fig.mean, fig.var, fig.low, fig.high
    assert (fixed["mean"], fixed["se"] ** 2, fixed["low"], fixed["high"]) == pytest.approx((mean, var, low, high))
    assert fixed["judged"] == 50 / 60 and fixed["method"] == "corrected"
    assert all(label == float(v % 3 != 0) for v, label in labelled.items())  # what the person said
    code, out, err = cli("compare", "--local")
    line = next(x for x in out.splitlines() if x.startswith("judged [ds] correct:"))
    assert (
        "the judge agrees on" in line
        and "(sensitivity 100%, specificity" in line
        and re.search(r"\(judged 83\.3%, corrected from 30 labels; judge sensitivity 100%, specificity \d+%\)", line)
    )
    # an edited case drops its label, and says so
    (label,) = [r for r in rows if r["case"] == rows[0]["case"]]
    expected = project / "evals" / "datasets" / "ds" / "cases" / label["case"] / "expected.json"
    expected.write_text(json.dumps({"v": 999}))
    code, out, err = cli("compare", "--local")
    assert "labels [ds] correct: 1 case edited since labelled: their labels left out" in out
    # its case is still in the planned sample, now a gap: the judge's figure until it is labelled again
    assert (
        "fake/echo effort=default judged 83.3%, uncorrected: 29 of its planned 30 labelled "
        "(agent-evals label asks the other 1)" in out
    )


def test_label_refuses_a_suite_with_no_judged_metric(make_suite, cli) -> None:
    project = make_suite(helper=JUDGED.replace(", judged=True", ""), config=LINEUP, cases=cases(4))
    assert cli("compare", "--local", cwd=project)[0] == 0
    code, _, err = cli("label", "--metric", "correct")
    assert code == 2 and "label: correct is not one of the scorer's metrics; none is (Metric(..., judged=True))" in err


def test_label_before_any_run_says_to_run_one_never_baseline(make_suite, cli) -> None:
    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases(4))
    code, _, err = cli("label", cwd=project)
    assert code == 2 and "no run's answers to label; run agent-evals compare first" in err and "--baseline" not in err


def test_a_labels_file_that_is_not_one_names_its_lines(tmp_path, capsys) -> None:
    path = tmp_path / "labels.jsonl"
    good = {"dataset": "ds", "case": "a/001", "case_hash": "h", "answer_hash": "a", "metric": "m", "label": 1}
    lines = [json.dumps(good), "{not json", json.dumps(good | {"label": 2}), "[1]", json.dumps(good | {"label": "NaN"})]
    path.write_text("\n".join([*lines, ""]))
    assert ae._read_labels(tmp_path) == {("ds", "a/001", "h", "a", "m"): 1.0}
    (warned,) = capsys.readouterr().err.splitlines()  # one line for them all, with where they are
    assert "labels.jsonl: 4 lines not a label (2, 3, 4, 5): each is a JSON object with dataset" in warned
    assert ae._read_labels(tmp_path / "none") == {}
    path.write_text("\n".join(["{not json"] * 100_000))
    assert ae._read_labels(tmp_path) == {} and len(capsys.readouterr().err.splitlines()) == 1


@pytest.mark.hostile
def test_a_labels_folder_of_a_fifo_a_loop_or_a_file_never_hangs_or_loses_a_label(make_suite, cli, tmp_path) -> None:
    """A FIFO in evals/labels/ hung every command that reads labels; a link loop: one line each,
    left out. evals/labels as a file: label refuses before it asks (it lost the first answer)."""
    import os

    folder = tmp_path / "labels"
    folder.mkdir()
    os.mkfifo(folder / "pipe.jsonl")
    (folder / "loop.jsonl").symlink_to(folder / "loop.jsonl")
    assert ae._read_labels(folder) == {}
    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases(4))
    assert cli("compare", "--local", cwd=project)[0] == 0
    (project / "evals" / "labels").write_text("not a folder")
    code, out, err = cli("label", cwd=project)
    assert code == 2 and "right?" not in out and "cannot be written (something else is in its place)" in err


def test_label_takes_a_grade_skips_and_stops_at_the_end_of_input(make_suite, cli, monkeypatch) -> None:
    """A graded judged metric asks for a number; a word it does not know is asked again; s
    skips, which ends that contender's labelled sample (so its questions) until the gap is
    filled; the end of the input (a closed pipe, Ctrl-D) stops with every label kept."""
    graded = JUDGED.replace('float(reply.output == case.expected or reply.output["v"] % 6 == 0)', "0.5")
    project = make_suite(helper=graded, config=LINEUP, cases=cases(6))
    assert cli("compare", "--local", cwd=project)[0] == 0
    said = iter(["maybe", "2", "0.25", "1", "s"])

    def person(prompt: str) -> str:
        assert prompt == "a grade from 0 to 1, then Enter (s skips, q quits): "
        return next(said)  # then EOFError: StopIteration is not it, so end it as input() does

    def ask(prompt: str) -> str:
        try:
            return person(prompt)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(builtins, "input", ask)
    code, out, _ = cli("label")
    assert code == 0 and "  y, n, s or q, or a number from 0 to 1" in out and out.count("the judge said 0.5") == 2
    assert "label: 2 labels added" in out
    rows = [json.loads(line) for line in (project / "evals" / "labels" / "labels.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == [0.25, 1.0]
    assert "[1 of 6] ds a/" in out and "[ds] fake/echo" in out and "skipped: [ds] fake/echo default's" in out
    code, out, _ = cli("compare", "--local")
    assert "judged [ds] correct: the judge has 2 labels, too alike for a correlation; corrected: " in out


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(not (CHROMIUM and shutil.which("chromedriver")), reason="Debian's chromium and chromium-driver")
def test_labels_given_in_the_report_are_downloaded_and_compare_reads_them(make_suite, cli, tmp_path) -> None:
    """The HTML report's labelling in headless Chromium, as a person who knows the right
    answer: "label next" walks label's queue (the one random order) for 50 answers, one more
    is labelled out of turn (recorded as chosen), a reload keeps all 51 clicks, and the
    download dropped in evals/labels/ corrects compare's figure with the 50 (the chosen one
    counts for the judge's agreement only; the next report marks labelled cells and keeps
    the chosen one in the queue); a case edited since drops its label with a line saying so."""
    from selenium.webdriver.common.by import By
    from test_html import chrome

    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases())
    page = tmp_path / "report.html"
    assert cli("compare", "--local", "--html", str(page), cwd=project)[0] == 0
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    order = [int(u.split("/")[-1]) for u in sorted((f"ds/a/{v:03d}" for v in range(1, 61)), key=ae._order)]

    def case_of(box) -> int:
        row = box.find_element(By.XPATH, "./ancestor::tr")
        return int(row.find_element(By.TAG_NAME, "td").get_attribute("textContent").split("/")[1])

    def answer(box) -> None:  # what the person knows: right when the answer is what was expected
        button = box.find_element(By.CSS_SELECTOR, f"button[data-value='{int(case_of(box) % 3 != 0)}']")
        driver.execute_script("arguments[0].click()", button)

    driver = chrome(tmp_path, 1280)
    try:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        driver.get(page.as_uri())
        walked = []
        for _ in range(50):
            driver.execute_script("document.getElementById('next').click()")
            box = driver.find_element(By.CSS_SELECTOR, ".lab.next")
            walked.append(case_of(box))
            answer(box)
        assert walked == order[:50]  # the queue's order: the one random order
        (last,) = [b for b in driver.find_elements(By.CSS_SELECTOR, ".lab") if case_of(b) == order[-1]]
        answer(last)  # out of turn: chosen
        driver.refresh()  # the clicks are kept across a reload
        link, queue = driver.find_element(By.ID, "labels"), driver.find_element(By.ID, "next")
        assert link.get_attribute("textContent") == "download labels (51)"
        assert queue.get_attribute("textContent") == "label next (10 in the queue)"  # the chosen one still in it
        assert len(driver.find_elements(By.CSS_SELECTOR, ".lab.done")) == 50
        (chosen,) = driver.find_elements(By.CSS_SELECTOR, ".lab.chosen")
        assert case_of(chosen) == order[-1] and chosen.find_element(By.CSS_SELECTOR, "[aria-pressed=true]")
        driver.execute_script("arguments[0].click()", link)
        deadline = time.monotonic() + 300
        while not (done := [p for p in downloads.glob("labels-*.jsonl") if p.stat().st_size]):
            assert time.monotonic() < deadline, list(downloads.iterdir())
            time.sleep(0.1)
    finally:
        driver.quit()
    (saved,) = done
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert len(rows) == 51 and all(r["label"] == float(int(r["case"][2:]) % 3 != 0) for r in rows)
    assert [int(r["case"][2:]) for r in rows if r.get("chosen")] == [order[-1]]
    (project / "evals" / "labels").mkdir()
    shutil.move(saved, project / "evals" / "labels" / saved.name)
    code, out, _ = cli("compare", "--local", "--format", "json", "--html", str(page), cwd=project)
    (fixed,) = json.loads(out)["corrected"]
    judge = {v: float(v % 3 != 0 or v % 6 == 0) for v in range(1, 61)}
    mean = ae._ppi([], list(judge.values()), [(judge[v], float(v % 3 != 0)) for v in order[:50]]).mean
    assert fixed["mean"] == pytest.approx(mean)  # the queue's 50 correct it; the chosen one does not
    html = page.read_text()
    assert html.count('class="lab done"') == 50 and html.count('class="lab chosen"') == 1
    # each labelled cell says the label's verdict beside the judge's, its button pressed: a wrong
    # answer the judge passed (v a multiple of 6) reads "right" judged and "wrong" labelled
    wrong_passed = next(v for v in order[:50] if v % 6 == 0)
    cell = html.split(f"a/{wrong_passed:03d}</td>")[1].split("</tr>")[0]
    assert 'data-judged="1"' in cell and 'data-said="wrong"' in cell and 'data-value=0 aria-pressed="true"' in cell
    code, out, _ = cli("compare", "--local", cwd=project)
    assert code == 0 and "the judge agrees on " in out and " of 51 labels" in out  # agreement: all 51
    first = project / "evals" / "datasets" / "ds" / "cases" / rows[0]["case"] / "expected.json"
    first.write_text(json.dumps({"v": 999}))
    code, out, _ = cli("compare", "--local", cwd=project)
    assert "labels [ds] correct: 1 case edited since labelled: their labels left out" in out and " of 50 labels" in out


def judge_suite(graded: bool = False, fakes: str = "") -> str:
    """A suite whose scorer asks a Judge; ``fakes``: FakeProvider's own models (OpenRouter is built in)."""
    return f"""
import agent_evals as ae

judge = ae.Judge("Pass when the answer gives the value the expected answer gives.", graded={graded})

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("correct", "the judge's verdict", primary=True, judged=True)]

    def call(self, case, reply, context):
        verdict, reasons = judge(case, reply, context)
        return ae.Score(value=verdict, metrics={{"correct": verdict}}, diagnostics={{"reasons": reasons}})

ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider({fakes})])
"""


def test_a_judge_asks_the_named_model_the_way_contenders_are_asked(make_suite) -> None:
    """A scorer's Judge asks --judge's model over real HTTP at temperature 0, with the rubric,
    the case and the answer; its verdict scores the case, an answer that is no verdict is that
    case's error (named), its spend is shown apart from the contender's, --cache answers it
    the second time, and --budget holds it; a judge no provider serves is refused first."""
    from servers import OpenAICompatible, chat_answer

    from conftest import run_agent_evals

    def respond(request):
        user = request.body["messages"][-1]["content"]
        answer = user.split("Answer to grade:\n")[1]
        if '"v": 4' in answer:
            return chat_answer("I would rather not grade this.")
        verdict = "fail" if '"v": 3' in answer else "pass"
        return chat_answer(json.dumps({"verdict": verdict, "reasons": f"v {answer}"}), cost=0.01)

    project = make_suite(helper=judge_suite(), config=LINEUP, cases=cases(6))
    with OpenAICompatible(respond) as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", "OPENROUTER_API_KEY": "sk-or-v1-test"}
        argv = ["compare", "--local", "--judge", "openai/gpt-4.1-mini", "--cache", "--format", "json"]
        done = run_agent_evals(*argv, cwd=project, env=env)
        asked = server.chats()
        again = run_agent_evals(*argv, cwd=project, env=env)
        # the second run: all from the cache but the answer that was no verdict, which the judge is asked again
        assert len(asked) == 6 and len(server.chats()) == 7, done.stderr
        assert '"v": 4' in server.chats()[-1].body["messages"][-1]["content"]
        broke = run_agent_evals(
            "compare", "--local", "--judge", "openai/gpt-4.1-mini", "--budget", "0.015", cwd=project, env=env
        )
        missing = run_agent_evals("compare", "--local", "--judge", "openai/gpt-4.1-nano", cwd=project, env=env)
    sent = asked[0].body
    assert sent["model"] == "openai/gpt-4.1-mini" and sent["temperature"] == 0.0 and sent["seed"] == 0
    # a bound on its answer, so --budget holds each call's worst case before it is sent
    assert sent["max_completion_tokens"] == ae.JUDGE_MAX_TOKENS
    assert sent["messages"][0]["content"].startswith("You grade an answer by this rubric:\nPass when the answer")
    assert "Input:\n" in sent["messages"][1]["content"] and "Expected answer:\n" in sent["messages"][1]["content"]
    document = json.loads(done.stdout)
    assert document["judge"]["model"] == "openai/gpt-4.1-mini"
    assert document["judge"]["usage"]["cost_usd"] == pytest.approx(0.0502)  # 5 verdicts at $0.01, a refusal
    (row,) = document["datasets"][0]["leaderboard"]
    assert row["errors"] == 1 and row["cost_usd"] == pytest.approx(0.006)  # the contender's six calls, not the judge's
    log = json.loads(min((project / "log" / "agent-evals").glob("*.json")).read_text())  # the first run's
    errors = [r["error"] for r in log["rows"] if r["error"]]
    assert errors == [
        "SuiteError: judge openai/gpt-4.1-mini gave no verdict (pass or fail): 'I would rather not grade this.'"
    ]
    # a second run spends on the judge only what it asks again: the answer that was no verdict
    assert json.loads(again.stdout)["judge"]["usage"]["cost_usd"] == pytest.approx(0.0002)
    assert broke.returncode == 1 and "--budget" in broke.stderr
    assert missing.returncode == 2 and "judge openai/gpt-4.1-nano: openrouter does not list it" in missing.stderr


def test_the_judge_example_shows_a_lenient_judge_corrected_by_its_labels(tmp_path) -> None:
    """examples/judge_suite as a newcomer runs it: offline, a judge that passes a country's
    largest city as its capital judges the sloppy contender 100% right; the labels the example
    ships (the first 10 cases of the one random order, both contenders) correct it to 60% (truly
    62.5%), so the leaderboard and the best value put careful first, the glossary says the figure
    is corrected, and a line says how the judge errs."""
    from conftest import ROOT, run_agent_evals

    suite = tmp_path / "judge_suite"
    shutil.copytree(ROOT / "examples" / "judge_suite", suite, ignore=shutil.ignore_patterns("log", "__pycache__"))
    done = run_agent_evals("compare", "--local", "--format", "json", cwd=suite)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    board = [(r["contender"]["model"], r["metrics"]["correct"]["mean"]) for r in document["datasets"][0]["leaderboard"]]
    assert board == [("fake/careful", 1.0), ("fake/sloppy", pytest.approx(0.6))]  # 10/10 and 6/10 of the labels
    corrected = {c["contender"]["model"]: c for c in document["corrected"]}
    assert corrected["fake/sloppy"]["judged"] == 1.0 and corrected["fake/sloppy"]["labels"] == 10
    assert corrected["fake/sloppy"]["low"] <= 10 / 16 <= corrected["fake/sloppy"]["high"] < 1.0
    assert corrected["fake/careful"]["mean"] > corrected["fake/sloppy"]["mean"]
    assert document["judge"]["model"] == "fake/judge" and document["judge"]["usage"]["cost_usd"] == pytest.approx(0.032)
    assert "judge fake/judge: not forecast until a run has asked it; --budget holds each" in done.stderr
    second = run_agent_evals("compare", "--local", cwd=suite)
    table = second.stdout
    assert "judge fake/judge: about $0.0320 besides, from earlier runs' judge cost per case run" in second.stderr
    assert "judged [capitals] correct: the judge agrees on 16 of 20 labels (sensitivity 100%, specificity 0%)" in table
    assert "best value [capitals] (fake/careful effort=default)" in table
    assert "correct  (primary) (judged, corrected by labels) " in table and "  corrected: a judged metric's" in table
    # runs, the pull request's summary and the HTML report: the corrected figure, the judged beside
    # it, the judge's spend
    runs = run_agent_evals("runs", cwd=suite).stdout
    assert re.search(r"│ \$0\.0320 │ \$0\.0320 │ correct 100\.0% corrected fake/careful \[capitals\] │", runs), runs
    listed = json.loads(run_agent_evals("runs", "--format", "json", cwd=suite).stdout)["runs"]
    assert [r["judge_usd"] for r in listed] == [pytest.approx(0.032)] * 2
    summary = run_agent_evals("report", "--format", "markdown", listed[0]["stamp"], cwd=suite)
    assert "- judge: $0.0320, apart from the contenders' cost" in summary.stdout, summary.stderr
    # a judge that passes every answer cannot be corrected, only replaced: the line says so
    assert (
        "fake/sloppy effort=default 60.0% \\[31.3–83.2\\] (by its 10 labels alone: the judge's 100.0% left "
        "uncorrected, its verdicts too unlike the labels or the labels too few to narrow it"
    ) in summary.stdout
    assert run_agent_evals("compare", "--local", "--html", "page.html", cwd=suite).returncode == 0
    page = (suite / "page.html").read_text()
    assert "<h2>Judged metrics</h2><p>judge: $0.0320, apart from the contenders&#x27; cost</p>" in page


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("graded", "says", "verdict"),
    [
        (False, '\'{"verdict": "PASS", "reasons": 5}\'', 1.0),
        (False, "'{\"verdict\": null}'", None),
        (False, "'[1, 2]'", None),
        (False, "'x' * 100_000", None),
        (False, "'[' * 100_000", None),
        (True, '\'{"score": "NaN"}\'', None),
        (True, "'{\"score\": 1e999}'", None),
        (True, "'{\"score\": -0.5}'", None),
        (True, '\'{"score": 0.25, "reasons": "partly"}\'', 0.25),
    ],
)
def test_a_judge_that_says_no_verdict_is_that_cases_error_never_a_zero(make_suite, cli, graded, says, verdict) -> None:
    helper = judge_suite(graded, f'{{"judge": lambda s, u: {says}}}')
    project = make_suite(helper=helper, config=LINEUP + "judge: fake/judge\n", cases=cases(2))
    code, out, err = cli("compare", "--local", "--format", "json", cwd=project)
    assert code == 0, err
    (row,) = json.loads(out)["datasets"][0]["leaderboard"]
    if verdict is None:
        assert row["errors"] == 2 and row["metrics"]["correct"]["mean"] is None
        log = json.loads(next((project / "log" / "agent-evals").glob("*.json")).read_text())
        error = log["rows"][0]["error"]
        assert error.startswith("SuiteError: judge fake/judge gave no verdict (") and len(error) < 200
    else:
        assert row["errors"] == 0 and row["metrics"]["correct"]["mean"] == verdict


def test_report_and_diff_read_the_suites_labels_and_compare_the_corrected_figures(make_suite, cli) -> None:
    """Labels of every answer: the corrected figure is the people's own rate, in report's
    leaderboard and on diff's lines (its paired test over the corrected values), not the judge's."""
    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases(60))
    assert cli("compare", "--local", cwd=project)[0] == 0
    log = min((project / "log" / "agent-evals").glob("*.json"))
    rows = json.loads(log.read_text())["rows"]
    labels = project / "evals" / "labels" / "labels.jsonl"
    for row in rows:  # a person's verdict on each answer: right when it is what was expected
        key = ("ds", row["case"], row["case_hash"], ae._answer_hash(row["output"]), "correct")
        ae._add_label(labels, key, float(int(row["case"][2:]) % 3 != 0))
    assert cli("compare", "--local", cwd=project)[0] == 0
    newest = max((project / "log" / "agent-evals").glob("*.json"))
    code, out, err = cli("report", "--format", "json", str(newest))
    assert code == 0, err
    (row,) = json.loads(out)["datasets"][0]["leaderboard"]
    assert row["metrics"]["correct"]["mean"] == pytest.approx(40 / 60)  # the judge says 50 of 60
    code, out, err = cli("diff", str(log), str(newest))
    assert code == 0, err
    line = next(x for x in out.splitlines() if "correct" in x)
    assert "66.7%" in line and "83.3%" not in line


@pytest.mark.hostile
def test_corrected_values_at_their_extremes_give_an_honest_interval_never_a_crash() -> None:
    """One label of 1,000 answers corrects nothing (no spread to widen it by): the judged
    figure stands; two that disagree give PPI's figure with an interval within 0..1; one
    shared case is no test."""
    judge = {f"ds/{i}": 1.0 for i in range(1000)}
    first = sorted(judge, key=ae._order)
    one = ae._Values(judge, dict.fromkeys(judge) | {first[0]: 0.0})
    assert ae._estimate_of(one).method == "wilson" and ae._point(one) == 1.0
    two = ae._Values(judge, dict.fromkeys(judge) | {first[0]: 0.0, first[1]: 0.0})
    estimate = ae._estimate_of(two)
    assert estimate is not None and 0.0 <= estimate.low <= estimate.mean <= estimate.high <= 1.0
    paired = ae._paired(ae._Values({"ds/x": 0.3}, {"ds/x": 0.0}), ae._Values({"ds/x": 0.9}, {"ds/x": 1.0}))
    assert paired is not None and paired.p is None and not paired.significant


@pytest.mark.parametrize("how", ["threads", "async"])
def test_a_scorer_asks_its_judge_from_a_thread_pool_or_an_event_loop(make_suite, cli, how) -> None:
    """A scorer that grades two aspects at once in a thread pool, and an ``async def`` scorer
    that asks from a thread of its loop: each finds the run's judge in its context (a context
    variable was lost in a pool's threads: every case failed)."""
    helper = """
import asyncio
from concurrent.futures import ThreadPoolExecutor
import agent_evals as ae

judge = ae.Judge("Pass when the answer is the expected one.")

class Threads(ae.Scorer):
    def metrics(self):
        return [ae.Metric("correct", "the judge's verdict", primary=True, judged=True)]

    def call(self, case, reply, context):
        with ThreadPoolExecutor(2) as pool:
            (verdict, _), _ = pool.map(lambda _: judge(case, reply, context), range(2))
        return ae.Score(value=verdict, metrics={"correct": verdict})

class Async(Threads):
    async def call(self, case, reply, context):
        verdict, _ = await asyncio.to_thread(judge, case, reply, context)
        return ae.Score(value=verdict, metrics={"correct": verdict})

ae.configure(adapter=ae.EchoAdapter(), scorer=SCORER(),
             providers=[ae.FakeProvider({"judge": lambda s, u: '{"verdict": "pass", "reasons": "fine"}'})])
""".replace("SCORER", "Threads" if how == "threads" else "Async")
    project = make_suite(helper=helper, config=LINEUP + "judge: fake/judge\n", cases=cases(8))
    code, out, err = cli("compare", "--local", "--format", "json", cwd=project)
    assert code == 0, err
    (row,) = json.loads(out)["datasets"][0]["leaderboard"]
    assert row["errors"] == 0 and row["metrics"]["correct"]["mean"] == 1.0
    assert json.loads(out)["judge"]["model"] == "fake/judge"


def test_rescore_of_a_judged_suite_is_refused_by_name_before_anything(make_suite, cli) -> None:
    """rescore calls no model, so a judged metric cannot be scored again there: one line, exit 2,
    never every case turned into an error under exit 0."""
    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases(4))
    assert cli("compare", "--local", cwd=project)[0] == 0
    log = min((project / "log" / "agent-evals").glob("*.json"))
    code, out, err = cli("rescore", str(log), cwd=project)
    assert code == 2 and out == "" and "rescore: a judge gives correct and rescore calls no model" in err


def test_a_judged_run_under_budget_never_spends_past_it_against_a_server_billing_every_token(make_suite) -> None:
    """--budget 0.10 on a judged run against a stand-in that bills every token it counts at its
    catalog's price, the judge writing all the output it is let (a rambling judge): the run
    stops at the budget, said, and the server billed at most $0.10, the judge's calls included."""
    from servers import CATALOG, OpenAICompatible, chat_answer

    from conftest import run_agent_evals

    price = {"openai/gpt-4.1-mini": (0.00001, 0.00004), "openai/gpt-4o-mini": (0.00000015, 0.0000006)}
    catalog = [
        e | {"pricing": {"prompt": f"{price[e['id']][0]:.8f}", "completion": f"{price[e['id']][1]:.8f}"}}
        for e in CATALOG
        if e["id"] in price
    ]
    billed: list[float] = []

    def respond(request):
        body, (p_in, p_out) = request.body, price[request.body["model"]]
        read = -(-len(json.dumps(body["messages"])) // 4)  # every token of the request billed
        if body["model"] == "openai/gpt-4.1-mini":  # the judge: all it is let, or 4,096 tokens unbounded
            written, text = body.get("max_completion_tokens", 4096), json.dumps({"verdict": "pass", "reasons": "…"})
        else:
            written, text = 20, body["messages"][-1]["content"]
        billed.append(read * p_in + written * p_out)
        return chat_answer(text, prompt_tokens=read, completion_tokens=written, cost=billed[-1])

    config = "request_types: [prompt]\ndefaults:\n  max_tokens: 20\nvendors:\n  openai:\n    - model: gpt-4o-mini\n"
    project = make_suite(helper=judge_suite(), config=config + "judge: openai/gpt-4.1-mini\n", cases=cases(12))
    with OpenAICompatible(respond, catalog=catalog) as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", "OPENROUTER_API_KEY": "sk-or-v1-test"}
        done = run_agent_evals("run", "--local", "--budget", "0.10", "-p", "4", cwd=project, env=env)
        judged = [c for c in server.chats() if c.body["model"] == "openai/gpt-4.1-mini"]
    assert done.returncode == 1 and "--budget" in done.stderr, done.stderr
    assert judged and all(c.body["max_completion_tokens"] == ae.JUDGE_MAX_TOKENS for c in judged)
    assert 0.04 < sum(billed) <= 0.10, (sum(billed), done.stderr)  # it spent, and never past the budget


def label_on_a_terminal(project):
    """``agent-evals label`` run in ``project`` on a pseudo-terminal: the process and the terminal's side to type on."""
    import os
    import pty
    import subprocess
    import sys

    from conftest import ROOT

    main, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENROUTER", "AGENT_EVALS"))}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "agent_evals.py"), "label"],
        cwd=project,
        env={**env, "NO_COLOR": "1"},
        stdin=child,
        stdout=child,
        stderr=child,
        start_new_session=True,
    )
    os.close(child)
    return proc, main


def test_label_at_a_real_terminal_counts_names_refuses_a_grade_and_keeps_labels_on_ctrl_c(make_suite, cli) -> None:
    """label on a pseudo-terminal, as a person types: each answer shown as [k of N]; 0.5 at a
    y/n prompt refused; the contender named after each answer; Ctrl-C (the terminal's own
    interrupt) ends it with how many labels were kept and where, and they are on disk."""
    import os
    import select

    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases(8))
    assert cli("compare", "--local", cwd=project)[0] == 0
    proc, main = label_on_a_terminal(project)
    screen = b""

    def until(text: bytes) -> None:
        nonlocal screen
        while text not in screen:
            ready, _, _ = select.select([main], [], [], 300)
            assert ready, screen.decode()[-2000:]
            screen += os.read(main, 65536)

    until(b"right? y/n")
    os.write(main, b"0.5\n")
    until(b"y, n, s or q")
    os.write(main, b"y\n")
    until(b"[2 of 8]")
    until(b"right? y/n")
    os.write(main, b"n\n")
    until(b"[3 of 8]")
    until(b"right? y/n")
    import signal

    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C goes to the whole foreground group
    until(b"labels kept in")
    assert proc.wait(timeout=300) == 130
    os.close(main)
    text = screen.decode().replace("\r\n", "\n")
    assert "[1 of 8] ds a/" in text and text.count("  [ds] fake/echo default") == 2  # the contender after each
    assert "label: interrupted; 2 labels kept in evals/labels/labels.jsonl" in text
    rows = (project / "evals" / "labels" / "labels.jsonl").read_text().splitlines()
    assert [json.loads(r)["label"] for r in rows] == [1.0, 0.0]


def test_diff_report_and_runs_read_the_labels_of_the_logs_suite_from_any_folder(tmp_path, cli) -> None:
    """Labels travel with the runs: ``diff`` of two runs of examples/judge_suite gives the same
    corrected figures from inside the suite, from the folder above (where CI runs) and from its
    evals/; so do ``report`` and ``runs``. Logs copied where no suite is are compared as judged,
    and one line says the labels were not found."""
    from conftest import ROOT

    suite = tmp_path / "repo" / "judge_suite"
    shutil.copytree(ROOT / "examples" / "judge_suite", suite, ignore=shutil.ignore_patterns("log", "__pycache__"))
    for _ in range(2):
        assert cli("compare", "--local", "-q", cwd=suite)[0] == 0
    old, new = sorted((suite / "log" / "agent-evals").glob("*sloppy*.json"))
    assert json.loads(old.read_text())["labels"] == "../../evals/labels"

    def sloppy(out: str) -> str:
        return next(line for line in out.splitlines() if "fake/sloppy" in line)

    seen = {}
    for where in (suite, suite.parent, suite / "evals"):
        code, out, err = cli("diff", str(old), str(new), cwd=where)
        assert code == 0 and "no labels found" not in err, err
        seen[where] = sloppy(out)
        code, out, err = cli("report", "--format", "json", str(new), cwd=where)
        board = json.loads(out)["datasets"][0]["leaderboard"]
        assert {r["contender"]["model"]: r["metrics"]["correct"]["mean"] for r in board}[
            "fake/sloppy"
        ] == pytest.approx(0.6)
        code, out, err = cli("runs", "--format", "json", str(suite / "log" / "agent-evals"), cwd=where)
        assert [r["best_primary"] for r in json.loads(out)["runs"]] == [
            "correct 100.0% corrected fake/careful [capitals]"
        ] * 2
    assert len(set(seen.values())) == 1 and re.search(r"│ +60\.0% │ +60\.0% │", seen[suite]), seen
    away = tmp_path / "artifacts"
    away.mkdir()
    for log in (old, new):
        shutil.copy(log, away / log.name)
    code, out, err = cli("diff", str(away / old.name), str(away / new.name), cwd=tmp_path)
    assert code == 0 and "diff: no labels found for these logs' suite" in err and "compared as judged" in err
    assert re.search(r"│ +100\.0% │ +100\.0% │", sloppy(out))  # the judge's figure, said to be one


# A model whose right answers fall from 85% to 55% (RATE) over 300 cases that share their
# difficulty across runs (80% of cases keep their draw), judged by a lenient judge: it passes a
# right answer 95% of the time and a wrong one half the time.
GATED = """
import hashlib, os
import agent_evals as ae

def draw(*parts):
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16) / 2**32

def answer(system, user):
    v = int(user.rsplit(":", 1)[1].strip(" }\\n"))
    rate, kept = float(os.environ["RATE"]), draw("kept", v) < 0.8
    u = draw("u", v) if kept else draw("fresh", v, os.environ["RATE"])
    return ("right" if u < rate else "wrong") + f" {v}" + ("" if kept else f" {os.environ['RATE']}")

class Adapter(ae.Adapter):
    def call(self, case, model):
        completion = model.complete("", case.input)
        return ae.Reply(output=completion.text, usage=completion.usage)

class S(ae.Scorer):
    def metrics(self):
        return [ae.Metric("correct", "the judge's verdict", primary=True, judged=True)]

    def call(self, case, reply, context):
        right = reply.output.startswith("right")
        verdict = float(draw("judge", reply.output) < (0.95 if right else 0.5))
        return ae.Score(value=verdict, metrics={"correct": verdict})

ae.configure(adapter=Adapter(), scorer=S(), providers=[ae.FakeProvider({"model": answer})])
"""


def test_label_asks_the_gates_question_until_decided_and_the_gate_then_fails_on_the_corrected_figure(
    make_suite, cli, monkeypatch
) -> None:
    """On a pseudo-terminal, as a person labels: a run compared with its baseline (85% -> 55%
    right, the lenient judge hiding much of the fall); ``label`` with no flag asks that gate's
    question, both runs' answers of each case in the one order, and stops by itself once its
    anytime-valid interval and the gate's corrected figure agree, within 120 labels; then
    ``compare --baseline OLD --fail-on-regression`` fails the gate on the corrected difference."""
    import os
    import select

    from conftest import many

    project = make_suite(helper=GATED, config=LINEUP.replace("echo", "model"), cases=many(300))
    monkeypatch.setenv("RATE", "0.85")
    assert cli("compare", "--local", "-q", cwd=project)[0] == 0
    (old,) = (project / "log" / "agent-evals").glob("*.json")
    monkeypatch.setenv("RATE", "0.55")
    code, out, _ = cli("compare", "--local", "-q", "--baseline", str(old), cwd=project)
    assert code == 0 and "labels in" not in out
    proc, main = label_on_a_terminal(project)
    screen, asked = b"", 0
    while b" added to evals/labels/labels.jsonl" not in screen:
        ready, _, _ = select.select([main], [], [], 300)
        assert ready and asked <= 400, screen.decode()[-2000:]  # a hang failsafe, and never past every answer
        screen += os.read(main, 65536)
        if screen.endswith(b"(s skips, q quits): "):  # the truth: right when the answer is a right one
            shown = re.findall(r"answer:\r?\n  (\w+)", screen.decode())[-1]
            os.write(main, b"y\n" if shown == "right" else b"n\n")
            asked += 1
    assert proc.wait(timeout=300) == 0
    os.close(main)
    text = screen.decode().replace("\r\n", "\n")
    assert "label: 1 line to decide (baseline)" in text
    decided = re.search(
        r"decided \[correct\] \[ds\] fake/model default: regressed by [\d.]+ points .* after (\d+) labels", text
    )
    assert decided and int(decided[1]) == asked <= 120, text[-3000:]
    assert re.search(r"a fixed sample of equal power needs about \d+ labels", text)
    code, out, err = cli("compare", "--local", "-q", "--baseline", str(old), "--fail-on-regression", cwd=project)
    assert code == 1 and "gate failed: --fail-on-regression: [ds] fake/model effort=default correct fell" in err
    assert "(corrected t, p=" in err


def versus_suite(make_suite):
    """GATED's suite with two contenders of fixed rates: good (85% right) and weak (55%)."""
    helper = GATED.replace(
        'providers=[ae.FakeProvider({"model": answer})]',
        'providers=[ae.FakeProvider({"good": lambda s, u: at(0.85, u), "weak": lambda s, u: at(0.55, u)})]',
    ).replace(
        "def answer(system, user):",
        "def at(rate, user):\n    os.environ['RATE'] = str(rate)\n    return answer('', user)\n\n"
        "def answer(system, user):",
    )
    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: good\n    - model: weak\n"
    return make_suite(helper=helper, config=config, cases=many_cases(300))


def many_cases(n: int) -> dict[str, str]:
    from conftest import many

    return many(n)


def truthful(capsys, said: list[str], script: Sequence[str] = ()) -> Callable[[str], str]:
    """A person at the terminal who answers each label truthfully (y for a right answer), after
    the scripted answers first; what the screen showed is kept in ``said``."""
    queue = list(script)

    def person(prompt: str) -> str:
        screen = capsys.readouterr().out
        said.append(screen)
        if queue:
            return queue.pop(0)
        return "y" if re.findall(r"answer:\n  (\w+)", screen)[-1] == "right" else "n"

    return person


def test_label_versus_and_bar_decide_with_few_labels_and_say_what_they_did(
    make_suite, cli, monkeypatch, capsys
) -> None:
    """``label --versus good weak`` asks both contenders' answers of each case and stops once
    good is shown better; ``--bar 50`` then decides each contender against 50% (weak's 55% is
    too close to tell within its cap: said, with how many more labels at this rate)."""
    project = versus_suite(make_suite)
    assert cli("compare", "--local", "-q", cwd=project)[0] == 0
    said: list[str] = []
    monkeypatch.setattr(builtins, "input", truthful(capsys, said))
    code, out, err = cli("label", "--versus", "good", "weak")
    text = "".join(said) + out
    assert code == 0, err
    assert "label: 1 line to decide (versus)" in text
    decided = re.search(
        r"decided \[correct\] \[ds\] fake/good default against fake/weak default: better by [\d.]+ points "
        r"\[\+[\d.]+, \+[\d.]+\] after (\d+) labels \((\d+) cases\)",
        text,
    )
    assert decided and int(decided[1]) <= 2 * int(decided[2]), text[-2000:]
    rows = [json.loads(line) for line in (project / "evals" / "labels" / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == int(decided[1])
    # nothing labelled before: only the cases whose two answers differ were asked, both answers, for the question
    by_case: dict[str, set[str]] = {}
    for row in rows:
        assert row["paired"] is True
        by_case.setdefault(row["case"], set()).add(row["answer_hash"])
    assert all(len(answers) == 2 for answers in by_case.values()) and int(decided[2]) > len(by_case)
    said.clear()
    code, out, err = cli("label", "--bar", "50", "--cap", "30")
    text = "".join(said) + out
    assert code == 0, err
    # each side's own walk, in turn from the first case: the answers labelled for the two sides are taken as given
    after = [json.loads(line) for line in (project / "evals" / "labels" / "labels.jsonl").read_text().splitlines()]
    taken = [
        r for r in after[len(rows) :] if (r["case"], r["answer_hash"]) in {(p["case"], p["answer_hash"]) for p in rows}
    ]
    assert taken and all("paired" not in r for r in after[len(rows) :])
    assert len(after) - len(rows) == len(said) + len(taken), (len(after), len(rows), len(said), len(taken))
    assert re.search(r"decided \[correct\] \[ds\] fake/good default: above 50\.0%: [\d.]+% \[[\d.]+–[\d.]+\]", text), (
        text[-2000:]
    )
    assert re.search(r"undecided \[ds\] fake/weak default after \d+ cases: \[[\d.]+–[\d.]+\]; at this rate", text), (
        text[-2000:]
    )
    assert "labels added to evals/labels/labels.jsonl" in out


def test_label_questions_refuse_what_they_cannot_ask_and_keep_every_label(make_suite, cli, monkeypatch, capsys) -> None:
    """Bad questions are one line each, naming the flag; a skip ends that line (said), q stops
    with the labels kept, and Ctrl-C exits 130 with them kept too."""
    project = versus_suite(make_suite)
    assert cli("compare", "--local", "-q", cwd=project)[0] == 0
    for argv, said in (
        (("--versus", "good", "good"), "label --versus good good: no dataset where they are two contenders"),
        (
            ("--versus", "nosuch", "weak"),
            "label --versus nosuch: no contender of the run is named so; "
            "it has [ds] fake/good default, [ds] fake/weak default",
        ),
        (("--versus", "fake", "weak"), "label --versus fake: names more than one contender; give more of its id"),
        (("--bar", "0.5"), "label --bar 0.5: 0.5 is a percentage here"),
        (("--bar", "80", "--versus", "a", "b"), "label: --versus and --bar ask different questions: give one"),
        (("--cap", "0"), "label --cap 0: expected a number of labels of at least 1"),
        (("--baseline", "nosuch"), "label --baseline nosuch"),
    ):
        code, out, err = cli("label", *argv, cwd=project)
        assert code == 2 and said in err and "Traceback" not in err, (argv, err)
    shown: list[str] = []
    monkeypatch.setattr(builtins, "input", truthful(capsys, shown, ["s", "q"]))  # a skip, then stop
    code, out, _ = cli("label", "--bar", "50")
    said = "".join(shown) + out
    assert code == 0 and "undecided [ds] fake/good default: skipped after 0 cases labelled" in said
    assert "undecided [ds] fake/weak default: nothing labelled yet" in said and "label: 0 labels added" in out
    monkeypatch.setattr(builtins, "input", truthful(capsys, shown, ["y", "q"]))
    code, out, _ = cli("label", "--versus", "good", "weak")
    assert code == 0 and "label: 1 label added" in out

    path = project / "evals" / "labels" / "labels.jsonl"
    (first,) = map(json.loads, path.read_text().splitlines())  # asked past every sample: the two sides' only
    assert first["paired"] is True
    monkeypatch.setattr(builtins, "input", truthful(capsys, shown, ["q"]))
    code, out, _ = cli("label", "--fixed")  # no question: the planned sample in order, as before
    assert code == 0 and "label: answers in each labelled sample: [ds] fake/good default " in "".join(shown)
    # the first answer in turn was labelled for the question: taken as it was, not asked again
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert "label: 0 labels added" in out and len(rows) == 2, rows
    assert all(r["label"] == first["label"] and r.get("paired", False) is (r is rows[0]) for r in rows)

    def interrupted(prompt: str) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(builtins, "input", interrupted)
    code, out, _ = cli("label", "--versus", "good", "weak")
    assert code == 130 and "label: interrupted; 0 labels kept in evals/labels/labels.jsonl" in out
    assert len(path.read_text().splitlines()) == len(rows)


def tokens(text: str, verdict_at: int, sure: float, split: int = 0) -> list[dict[str, object]]:
    """An answer's ``logprobs.content``: ``text`` in three tokens, the verdict's word at
    ``verdict_at`` (``split`` characters of its quote ahead of it in the same token), with the
    judge's ``sure`` probability that it is the word it wrote and the other word's the rest."""
    start = verdict_at - split
    word = text[verdict_at : verdict_at + 4]
    other = {"pass": "fail", "fail": "pass"}[word.lower()]
    alts = [{"token": text[start:verdict_at] + w, "logprob": math.log(p)} for w, p in ((word, sure), (other, 1 - sure))]
    return [
        {"token": text[:start], "logprob": 0.0, "top_logprobs": []},
        {"token": text[start : verdict_at + 4], "logprob": alts[0]["logprob"], "top_logprobs": alts},
        {"token": text[verdict_at + 4 :], "logprob": 0.0, "top_logprobs": []},
    ]


def with_logprobs(content: list[dict[str, object]]) -> dict[str, object]:
    return {"choices": [{"message": {"content": ""}, "logprobs": {"content": content}}]}


@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize(("said", "sure", "chance"), [("pass", 0.9, 0.9), ("fail", 0.8, 0.2), ("PASS", 0.6, 0.6)])
def test_a_judges_probability_is_read_at_its_verdicts_first_token(said, sure, chance, split) -> None:
    """The probability of pass is the verdict token's alternatives that spell pass against those
    that spell fail, whether the token holds the quote before it or not, whatever the case, the
    reasons before or after it."""
    for text in (f'{{"verdict": "{said}", "reasons": "x"}}', f'{{"reasons": "the \\"verdict\\"", "verdict":"{said}"}}'):
        at = text.rindex(said)
        got = ae._verdict_chance(with_logprobs(tokens(text, at, sure, split)), text)
        assert got == pytest.approx(chance)


@pytest.mark.hostile
def test_an_answer_whose_logprobs_are_missing_or_nonsense_gives_no_probability_never_a_crash() -> None:
    text = '{"verdict": "pass", "reasons": "x"}'
    good = tokens(text, 13, 0.9)
    nan = [good[0], {**good[1], "top_logprobs": [{"token": "pass", "logprob": math.nan}]}, good[2]]
    only = [good[0], {**good[1], "top_logprobs": None}, good[2]]  # no alternatives: the token's own
    for raw in (None, "x", {}, {"choices": []}, {"choices": [{"logprobs": None}]}, with_logprobs([])):
        assert ae._verdict_chance(raw, text) is None
    assert ae._verdict_chance(with_logprobs([{"token": 5}]), text) is None
    assert ae._verdict_chance(with_logprobs(good[:1]), text) is None  # it stops before the verdict
    assert ae._verdict_chance(with_logprobs(good), text.replace("pass", "fail")) is None  # not the text
    assert ae._verdict_chance(with_logprobs(good), '{"reasons": 1}') is None
    assert ae._verdict_chance(with_logprobs(nan), text) is None
    assert ae._verdict_chance(with_logprobs(good[:1]), text[:13]) is None  # the verdict's word never comes
    assert ae._verdict_chance(with_logprobs(only), text) == 1.0
    merged = [  # the word and the quote after it in one token; an alternative of another form counts for neither
        {"token": '{"verdict": "', "logprob": 0.0},
        {
            "token": 'pass", ',
            "logprob": math.log(0.6),
            "top_logprobs": [
                {"token": 'pass", ', "logprob": math.log(0.6)},
                {"token": "fail", "logprob": math.log(0.2)},
                {"token": "{fail", "logprob": math.log(0.2)},
            ],
        },
        {"token": '"reasons": "x"}', "logprob": 0.0},
    ]
    assert ae._verdict_chance(with_logprobs(merged), text) == pytest.approx(0.75)


def test_a_judges_probabilities_are_logged_and_are_what_its_labels_correct(make_suite, cli) -> None:
    """A judge whose answers carry token log-probabilities is asked for them; each row logs its
    probability of pass, and the corrected figure is PPI++ on those probabilities, not on the
    0/1 verdicts: where the judge is unsure (its lenient passes), the labels correct a smaller
    surprise."""
    from servers import OpenAICompatible, chat_answer

    from conftest import run_agent_evals

    def respond(request):
        user = request.body["messages"][-1]["content"]
        answer, expected = user.split("Answer to grade:\n")[1], user.split("Expected answer:\n")[1]
        v = json.loads(answer)["v"]
        right = json.loads(expected.split("\n\n")[0])["v"] == v
        verdict, sure = ("pass", 0.95) if right else ("pass", 0.6) if v % 6 == 0 else ("fail", 0.9)
        text = json.dumps({"verdict": verdict, "reasons": "x"})
        answer = chat_answer(text)
        answer.body["choices"][0]["logprobs"] = {"content": tokens(text, text.index(verdict), sure)}
        return answer

    project = make_suite(helper=judge_suite(), config=LINEUP, cases=cases(60))
    with OpenAICompatible(respond) as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", "OPENROUTER_API_KEY": "sk-or-v1-test"}
        argv = ["compare", "--local", "--judge", "openai/gpt-4.1-mini"]
        first = run_agent_evals(*argv, cwd=project, env=env)
        assert first.returncode == 0, first.stderr
        sent = server.chats()[0].body
        log = min((project / "log" / "agent-evals").glob("*.json"))
        rows = json.loads(log.read_text())["rows"]
        labels = project / "evals" / "labels" / "labels.jsonl"
        by_unit = {ae._unit("ds", row["case"], None): row for row in rows}
        order = sorted(by_unit, key=ae._order)
        for unit in order[:20]:  # people label the first 20 of the one order: right unless v is a multiple of 3
            row = by_unit[unit]
            key = ("ds", row["case"], row["case_hash"], ae._answer_hash(row["output"]), "correct")
            ae._add_label(labels, key, float(row["output"]["v"] % 3 != 0))
        done = run_agent_evals(*argv, "--format", "json", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5
    chances = [by_unit[u]["judge_chance"]["correct"] for u in order]
    assert sorted(set(chances)) == pytest.approx([0.1, 0.6, 0.95])
    truth = [float(by_unit[u]["output"]["v"] % 3 != 0) for u in order[:20]]
    (row,) = json.loads(done.stdout)["datasets"][0]["leaderboard"]
    expected = ae._ppi([], chances, list(zip(chances[:20], truth, strict=True)))
    verdicts = [by_unit[u]["metrics"]["correct"] for u in order]
    by_verdicts = ae._ppi([], verdicts, list(zip(verdicts[:20], truth, strict=True)))
    assert row["metrics"]["correct"]["mean"] == pytest.approx(expected.mean)
    assert abs(expected.mean - by_verdicts.mean) > 1e-6


def test_label_ended_by_sigterm_keeps_its_labels_and_exits_143(make_suite, cli) -> None:
    """A label session a supervisor ends (SIGTERM): the labels given are on disk, the line says
    what ended it, and the exit code is SIGTERM's (143), not Ctrl-C's."""
    import os
    import select
    import signal

    project = make_suite(helper=JUDGED, config=LINEUP, cases=cases(8))
    assert cli("compare", "--local", cwd=project)[0] == 0
    proc, main = label_on_a_terminal(project)
    screen = b""
    for answer in (b"y\n", None):
        while b"(s skips, q quits): " not in screen.rsplit(b"]", 1)[-1]:
            ready, _, _ = select.select([main], [], [], 300)  # a hang failsafe
            assert ready, screen.decode()[-2000:]
            screen += os.read(main, 65536)
        if answer is None:
            proc.send_signal(signal.SIGTERM)
        else:
            os.write(main, answer)
            screen = b""
    assert proc.wait(timeout=300) == 143
    rest = b""
    while select.select([main], [], [], 1)[0]:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        rest += chunk
    os.close(main)
    assert "label: interrupted by SIGTERM; 1 label kept in evals/labels/labels.jsonl" in (screen + rest).decode()
    rows = (project / "evals" / "labels" / "labels.jsonl").read_text().splitlines()
    assert [json.loads(r)["label"] for r in rows] == [1.0]


def test_label_counts_an_answer_two_contenders_share_once(make_suite, cli, monkeypatch, capsys) -> None:
    """Two contenders whose answers are the same: six cases are six answers to label, asked
    [1 of 6] to [6 of 6] (each label serves both), never [4 of 12] then done."""
    lineup = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n      effort: [default, low]\n"
    project = make_suite(helper=JUDGED, config=lineup, cases=cases(6))
    assert cli("compare", "--local", cwd=project)[0] == 0
    said: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda prompt: said.append(capsys.readouterr().out) or "y")
    code, out, err = cli("label", "--fixed", cwd=project)
    text = "".join(said) + out
    assert code == 0, err
    assert re.findall(r"\[(\d+) of (\d+)\]", text) == [(str(k), "6") for k in range(1, 7)], text
    assert "label: 6 labels added" in text


def test_labels_for_a_question_of_two_sides_correct_the_difference_and_never_grow_a_sides_sample() -> None:
    """``_PAIRED`` labels: a side's sample ends at the first case nobody labelled in turn, however
    many paired labels lie past it (they are ``later``); the two sides' difference is corrected
    over the cases whose answers differ, in the one order, up to the first one a side lacks."""
    units = sorted((f"ds/c{i}" for i in range(10)), key=ae._order)
    shared, paired, truth = {units[0], units[3]}, {units[1], units[2], units[4], units[6]}, 0.0

    def side(name: str) -> ae._Values:
        entries = []
        for i, unit in enumerate(units):
            verdict = 1.0 if unit in shared else float((i + (name == "b")) % 2)
            answer = f"same {i}" if unit in shared else f"{name} {i}"
            label = truth if unit == units[0] else None  # the first case labelled in turn
            later = truth if unit == units[0] or unit in paired else None
            entries.append(((unit, unit.split("/")[1]), verdict, label, answer, None, later))
        return ae._units(entries, "mean", {units[0]})

    a, b = side("a"), side("b")
    assert a.labels == {u: truth if u == units[0] else None for u in units}  # its sample: the first case only
    assert a.later == dict.fromkeys(paired, truth) and ae._corrected(a) is None
    figure, how, _ = ae._alike(a, b)
    diff = {u: 0.0 if u in shared else a[u] - b[u] for u in units}
    asked = {u: 0.0 if u in (units[1], units[2], units[4]) else None for u in units if u not in shared}
    expected = ae._corrected(ae._Values(diff, asked))  # the unshared cases up to units[5], unlabelled
    assert how == "corrected" and figure == expected and figure is not None

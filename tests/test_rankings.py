"""Errors never win (issue #22): every ranking, frontier and recommendation counts an
error as a failed case, and the screen says why cases failed."""

from __future__ import annotations

import json
import random
import re
import threading

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from agent_evals import Case, Contender, Metric, Provider, RunResult, Score, Usage
from conftest import EXACT_HELPER, case_files

PRIMARY = Metric("acc", "Accuracy.", primary=True)


def experiment(model: str, answers: list[float | None], price: float, dataset: str = "ds") -> ae.Experiment:
    """Case ``i`` scored ``answers[i]``; None: it raised before spending."""
    x = ae.Experiment(Contender(model), Provider(), dataset, [], 1)
    for i, value in enumerate(answers):
        case = Case(f"c{i:03d}", dataset)
        if value is None:
            x.results.append(RunResult(x, case, error="ProviderError: HTTP 500: upstream busy"))
        else:
            x.results.append(RunResult(x, case, score=Score(value, {"acc": value}), usage=Usage(10, 5, price)))
    return x


def text_order(table: str) -> list[str]:
    """The model column of a box table, top to bottom."""
    return [line.split("│")[2].strip() for line in table.splitlines() if line.startswith("│ ") and "model" not in line]


def line_order(report: str) -> list[str]:
    """The models of a one-dataset report's leaderboard line, in their places."""
    ranked = report.split("\nleaderboard: ranked by ", 1)[1].split("then cost: ", 1)[1]
    return [place.split()[1] for place in ranked.replace("\n", " ").split(", ")]


def html_order(page: str, heading: str) -> list[str]:
    section = page.split(f"<h2>{heading}</h2>", 1)[1].split("</table>", 1)[0]
    return [m for m in re.findall(r"<tr[^>]*><td[^>]*>[^<]*</td><td>([^<]*)</td>", section)]


def test_a_contender_with_errors_never_ranks_above_an_equally_scoring_one_without(tmp_path) -> None:
    """Seeded: a clone of an error-free contender, right on the same cases it answers,
    cheaper, whose other cases raise. In no output does it rank above the original."""
    rng = random.Random(22)
    for trial in range(150):
        n = rng.randrange(5, 60)
        answers = [float(rng.random() < rng.choice((0.3, 0.7, 1.0))) for _ in range(n)]
        failed = set(rng.sample(range(n), rng.randrange(1, max(2, n // 4))))
        clean = experiment("clean", answers, price=0.01)
        flaky = experiment("flaky", [None if i in failed else v for i, v in enumerate(answers)], price=0.004)
        others = [experiment(f"other{k}", [float(rng.random() < 0.6) for _ in range(n)], 0.02) for k in range(2)]
        lineup = [flaky, *others, clean]
        rng.shuffle(lineup)
        rows = ae._rows(lineup, [PRIMARY])
        overall = ae._overall(rows, [PRIMARY], PRIMARY)
        report = ae._render_report(lineup, [PRIMARY], "box")
        document = ae._results_document(lineup, [PRIMARY], {})
        page = ae._render_html(lineup, [PRIMARY], title="t")
        orders = {
            "rows": [r.contender.model for r in rows],
            "overall": [r.contender.model for r in overall],
            "table": text_order(report.split("\nbest value")[0]),
            "leaderboard": line_order(report),
            "json dataset": [r["model"] for r in document["datasets"][0]["leaderboard"]],
            "json overall": [r["model"] for r in document["overall"]],
            "html dataset": html_order(page, "ds"),
            "html overall": html_order(page, "Leaderboard, all datasets"),
        }
        for where, order in orders.items():
            assert order.index("clean") < order.index("flaky"), (trial, where, order)
        # the plot's frontier is drawn over the ranked score: the flaky clone never sits above the clean one
        best = ae._best_value(rows, PRIMARY)
        svg = ae._scatter(rows, PRIMARY, best)
        points = [tuple(map(float, p.split(","))) for p in svg.split('points="')[1].split('"')[0].split()]
        ys = {r.contender.model: r.strict_mean("acc") for r in rows}
        assert ys["flaky"] <= ys["clean"]
        top = min(y for _, y in points)  # svg y grows downward: the highest frontier point
        # on the score axis zoomed to the scores: a tenth of their spread (1 to 5 points) above and below
        margin = min(0.05, max(0.01, (max(ys.values()) - min(ys.values())) / 10))
        low, high = max(0.0, min(ys.values()) - margin), min(1.0, max(ys.values()) + margin)
        assert top == pytest.approx(24 + (high - max(ys.values())) / (high - low) * (300 - 24 - 40), abs=0.06)
        assert best is None or best.contender.model != "flaky" or best.strict_mean("acc") >= ys["clean"] - 0.02


def test_per_dataset_tables_are_ranked_and_show_what_they_rank_by() -> None:
    worse = experiment("worse", [1.0, 0.0, 0.0, 0.0], 0.01)
    better = experiment("better", [1.0, 1.0, 1.0, None], 0.01)
    report = ae._render_report([worse, better], [PRIMARY], "box")
    table = report.split("\nbest value")[0]
    assert text_order(table) == ["better", "worse"]  # lineup order was worse first
    header = table.splitlines()[1]
    assert "ranked" in header and "75.0%" in table.splitlines()[3]  # better: 3 of 4 with the error as wrong
    assert "ranked   acc with every error counted as wrong" in report
    assert "ranked by acc (errors counted as wrong) then cost" in report


def test_no_best_value_when_no_contender_answered() -> None:
    dead = [experiment(m, [None] * 5, 0.01) for m in ("a", "b")]
    rows = ae._rows(dead, [PRIMARY])
    assert ae._best_value(rows, PRIMARY) is None
    assert ae._best_value_lines(rows, PRIMARY) == ["no best value [ds]: no contender answered (see the errors)"]
    document = ae._results_document(dead, [PRIMARY], {})
    assert document["datasets"][0]["best_value"] is None
    assert document["datasets"][0]["no_best_value"] == "no contender answered"
    # one that answered nothing is never the pick beside one that answered, however cheap
    rows = ae._rows([experiment("dead", [None] * 5, 0.0), experiment("poor", [0.0] * 5, 1.0)], [PRIMARY])
    assert ae._best_value(rows, PRIMARY).contender.model == "poor"


def test_reasons_are_grouped_counted_and_masked(monkeypatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-v1-" + "s3cr3t" * 6)
    ae._Secrets.refresh()
    x = experiment("m", [1.0, None, None, 1.0], 0.01)
    x.results[1] = RunResult(x, x.results[1].case, error="ConnectionRefusedError: [Errno 111] Connection refused")
    x.results.append(RunResult(x, Case("c9", "ds"), error="ProviderError: key sk-or-v1-" + "s3cr3t" * 6 + " refused"))
    (row,) = ae._rows([x], [PRIMARY])
    assert [n for n, _ in row.reasons] == [1, 1, 1]
    assert all("s3cr3t" not in text for _, text in row.reasons)
    lines = ae._reason_lines([row], most=2)
    assert lines[0] == "errors [ds] m effort=default: 1 × ConnectionRefusedError: [Errno 111] Connection refused"
    assert lines[-1] == "errors [ds] m effort=default: 1 × other reasons (the log has each)"
    document = ae._results_document([x], [PRIMARY], {})
    assert document["overall"][0]["error_reasons"][0]["count"] == 1


def test_a_flaky_cheaper_contender_no_longer_tops_the_leaderboard(make_suite, cli, monkeypatch) -> None:
    """The issue's reproduction through the real CLI and a real local server: acme/flaky
    answers HTTP 500 on every fifth request and is right otherwise, and is cheaper."""
    catalog = [
        {"id": "acme/perfect", "pricing": {"prompt": "0.000002", "completion": "0.000002"}},
        {"id": "acme/flaky", "pricing": {"prompt": "0.000001", "completion": "0.000001"}},
    ]
    asked = {"acme/flaky": 0}
    lock = threading.Lock()

    def respond(request) -> Answer:
        if request.body["model"] == "acme/flaky":
            with lock:
                asked["acme/flaky"] += 1
                if asked["acme/flaky"] % 5 == 0:
                    return Answer(500, {"error": {"code": 500, "message": "upstream overloaded"}})
        return chat_answer(request.body["messages"][-1]["content"])

    cases = {}
    for i in range(20):
        cases |= case_files("ds", f"a/{i:03d}", {"v": i})
    config = "request_types: [prompt]\nvendors:\n  acme:\n    - model: flaky\n    - model: perfect\n"
    project = make_suite(helper=EXACT_HELPER, config=config, cases=cases)
    with OpenAICompatible(respond, catalog=catalog) as server:
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        code, out, err = cli("compare", "--local", "--retries", "0", "-p", "1", cwd=project)
        assert code == 0, err
        assert line_order(out) == ["acme/perfect", "acme/flaky"], out
        assert "errors [ds] acme/flaky effort=default: 4 × ProviderError" in err and "upstream overloaded" in err
        code, out, _ = cli("compare", "--local", "--retries", "0", "-p", "1", "--format", "json", cwd=project)
        document = json.loads(out)
        assert [r["model"] for r in document["overall"]] == ["acme/perfect", "acme/flaky"]
        assert document["overall"][1]["error_reasons"][0]["count"] == 4

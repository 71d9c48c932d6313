"""Renderers are pure functions: exact strings in, exact strings out."""

from __future__ import annotations

import io

import agent_evals as ae
from agent_evals import Contender, Metric, Usage

METRICS = [Metric("acc", "Mean accuracy.", primary=True), Metric("strict", "")]


def row(
    dataset: str,
    model: str,
    acc: float | None,
    cost: float,
    *,
    effort: str = "default",
    temp: float | None = None,
    errors: int = 0,
    n: int = 4,
) -> ae._Row:
    values = {f"{dataset}/c{i}": acc for i in range(n)} if acc is not None else {}
    return ae._Row(
        dataset,
        Contender(model, effort, temp),
        {"acc": ae._Values(values), "strict": ae._Values()},
        errors,
        n,
        1.5,
        Usage(100, 20, cost),
        Usage(),
    )


def test_box_and_ascii_tables() -> None:
    box = ae._table(["name", "n"], [["a", "1"], ["bbb", "22"]], [False, True])
    assert box == ("┌──────┬────┐\n│ name │  n │\n├──────┼────┤\n│ a    │  1 │\n│ bbb  │ 22 │\n└──────┴────┘")
    ascii_ = ae._table(["name", "n"], [["a", "1"]], [False, True], "ascii")
    assert ascii_ == "+------+---+\n| name | n |\n+------+---+\n| a    | 1 |\n+------+---+"
    assert ae._table(["h"], [], [False]) == "┌───┐\n│ h │\n├───┤\n└───┘"


def test_style_follows_the_stream_encoding() -> None:
    assert ae._style_for(io.TextIOWrapper(io.BytesIO(), encoding="utf-8")) == "box"
    assert ae._style_for(io.TextIOWrapper(io.BytesIO(), encoding="ascii")) == "ascii"
    assert ae._style_for(io.TextIOWrapper(io.BytesIO(), encoding="latin-1")) == "ascii"
    assert ae._style_for(object()) == "ascii"


def test_formats() -> None:
    assert ae._fmt_pct(1.0) == "100.0%" and ae._fmt_pct(0.6666) == "66.7%" and ae._fmt_pct(None) == "-"
    assert ae._fmt_cost(0.004) == "$0.0040" and ae._fmt_cost(12.34567) == "$12.3457"
    assert ae._fmt_temp(None) == "-" and ae._fmt_temp(0) == "0.0" and ae._fmt_temp(0.75) == "0.75"
    assert ae._fmt_time(0.123) == "0.12s" and ae._fmt_time(1234.4) == "1234s"
    assert ae._clip("a  b\nc") == "a b c" and ae._clip("x" * 80, 10) == "xxxxxxxxx…"
    assert ae._safe_name("ds--openai/gpt 4o:free") == "ds--openai-gpt-4o-free"
    assert ae._safe_name("///") == "experiment"


def test_results_table_golden() -> None:
    rows = [row("ds", "fake/echo", 1.0, 0.004), row("ds", "fake/broken", None, 0.0, errors=4, temp=0.2)]
    assert ae._results_table(rows, METRICS, "box") == (
        "┌─────────┬─────────────┬─────────┬──────┬────────┬────────┬────────┬────────┬───────┬────────┬─────────┬─────────┐\n"
        "│ dataset │ model       │ effort  │ temp │    acc │ strict │ errors │ ranked │  time │ tok_in │ tok_out "
        "│    cost │\n"
        "├─────────┼─────────────┼─────────┼──────┼────────┼────────┼────────┼────────┼───────┼────────┼─────────┼─────────┤\n"
        "│ ds      │ fake/echo   │ default │    - │ 100.0% │      - │      0 │ 100.0% │ 1.50s │    100 │      20 "
        "│ $0.0040 │\n"
        "│ ds      │ fake/broken │ default │  0.2 │      - │      - │      4 │      - │ 1.50s │    100 │      20 "
        "│ $0.0000 │\n"
        "└─────────┴─────────────┴─────────┴──────┴────────┴────────┴────────┴────────┴───────┴────────┴─────────┴─────────┘"
    )
    # no row with errors: no ranked column (it would repeat the primary metric)
    assert "ranked" not in ae._results_table(rows[:1], METRICS, "box")


def test_best_value_is_the_cheapest_within_two_points() -> None:
    primary = METRICS[0]
    rows = [
        row("ds", "big", 0.90, 1.00),
        row("ds", "mid", 0.885, 0.10),  # 1.5 points below the top: in
        row("ds", "small", 0.87, 0.01),  # 3 points below: out
        row("other", "big", None, 0.5),
    ]
    assert ae._best_value(rows[:3], primary).contender.model == "mid"
    assert ae._best_value_lines(rows, primary) == [
        # every case differs by the same 1.5 points: the exact sign-flip test's p, 2^(1-4), no verdict
        "best value [ds] (mid effort=default): 88.5% at $0.1000; -1.5 points vs the top (big effort=default): "
        "not significant (sign-flip, p=0.12, 4 cases)",
        "best value [other]: none (acc was not scored)",
    ]
    exactly_two = [row("ds", "top", 0.90, 1.0), row("ds", "edge", 0.88, 0.5)]
    assert ae._best_value(exactly_two, primary).contender.model == "edge"
    tie = [row("ds", "a", 0.80, 0.5), row("ds", "b", 0.81, 0.5)]
    assert ae._best_value(tie, primary).contender.model == "b"


def test_best_value_names_the_temperature_only_when_it_varies() -> None:
    rows = [row("ds", "m", 0.9, 0.2, temp=0.0), row("ds", "m", 0.9, 0.1, temp=0.7)]
    assert ae._best_value_lines(rows, METRICS[0]) == ["best value [ds] (m effort=default temp=0.7): 90.0% at $0.1000"]


def test_overall_is_case_weighted_and_ranked_by_primary_then_cost() -> None:
    rows = [
        row("one", "a", 1.0, 0.1, n=1),
        row("two", "a", 0.5, 0.1, n=3),  # a: (1*1 + 0.5*3) / 4 = 62.5%
        row("one", "b", 0.625, 0.05, n=2),
        row("two", "b", 0.625, 0.05, n=2),
        row("one", "c", None, 0.0, errors=4),
    ]
    overall = ae._overall(rows, METRICS, METRICS[0])
    assert [(r.contender.model, r.mean("acc"), round(r.usage.cost_usd, 4), r.errors) for r in overall] == [
        ("b", 0.625, 0.1, 0),
        ("a", 0.625, 0.2, 0),
        ("c", None, 0.0, 4),
    ]
    table = ae._leaderboard_table(overall, METRICS, "ascii")
    assert table.splitlines()[3:5] == [
        "| 1 | b     | default |    - |              62.5% |      - |      0 |  62.5% | 3.00s |    200 |      40 "
        "| $0.1000 |",
        # the interval as it is: 62.5% is not its middle
        "| 2 | a     | default |    - | 62.5% [22.7-100.0] |      - |      0 |  62.5% | 3.00s |    200 |      40 "
        "| $0.2000 |",
    ]


def test_glossary_lists_every_column() -> None:
    text = ae._glossary(METRICS)
    lines = text.splitlines()
    assert lines[0] == "glossary:"
    assert "  acc      (primary) Mean accuracy." in lines
    assert "  strict   declared by the scorer" in lines
    assert lines[-1].startswith(
        "  best value: the cheapest per scored run of those shown (95% interval) to be at most 2"
    )
    assert lines[-2].startswith("  rank: by acc with errors counted as wrong, then fewer errors, then cost")
    names = [line.split()[0] for line in lines[1:-3]]
    assert names == [
        "dataset",
        "model",
        "effort",
        "temp",
        "acc",
        "strict",
        "errors",
        "time",
        "tok_in",
        "tok_out",
        "cost",
    ]
    assert "  ranked   acc with every error counted as wrong: what the tables rank by" in ae._glossary(
        METRICS, ranked=True
    )


def test_contender_label() -> None:
    assert Contender("fake/echo").label == "fake/echo effort=default"
    assert Contender("typesafe/jev", "low", 0.5, None, "typesafe").label == "typesafe/jev (direct) effort=low temp=0.5"


def test_tables_fit_a_narrow_terminal_and_say_what_they_left_out() -> None:
    """At a terminal: columns equal on every row go into one line above the table; then the
    secondary columns go, and a line says which; then text is cut as far as the rows still
    read apart. A pipe or a file gets every column."""
    metrics = [*METRICS, Metric("extra", "")]
    rows = [row("dataset-one", "vendor/a-long-model-name", 0.9, 0.004, temp=0.7), row("dataset-one", "v/b", 0.8, 0.1)]
    rows[1] = ae.dataclasses.replace(rows[1], usage=Usage(300, 40, 0.1))
    full = ae._results_table(rows, metrics, "box")
    assert len(full.splitlines()[0]) > 100 and "hidden" not in full and "every row" not in full
    for width in (60, 80):
        fitted = ae._results_table(rows, metrics, "box", width).splitlines()
        assert all(len(line) <= width for line in fitted), width
        assert fitted[0].startswith("every row: dataset\u00a0dataset-one · effort\u00a0default · ")
        header = next(line for line in fitted if line.startswith("│"))
        assert "acc" in header and "cost" in header and "dataset" not in header  # the primary and cost stay
    # at 80 the line above is room enough; at 60 the tokens go too, and a line under says so
    assert "tok_in" in header and "hidden" not in "".join(fitted)
    narrower = " ".join(line.strip() for line in ae._results_table(rows, metrics, "box", 60).splitlines())
    assert narrower.endswith("┘ (hidden to fit 60 columns: tok_in, tok_out; | cat shows all)")
    assert "hidden" not in ae._results_table(rows, metrics, "box", 400)
    # at any width, a column that tells two rows apart stays: two efforts of one model never read the same
    efforts = [row("ds", "fake/echo", 0.9, 0.01), row("ds", "fake/echo", 0.8, 0.01, effort="low")]
    lines = ae._results_table(efforts, metrics, "box", 30).splitlines()
    body = [line for line in lines if line.startswith("│")]
    assert "effort" in body[0] and len(set(body[1:])) == 2 and "effort" not in lines[-1]
    ranked = ae._leaderboard_table(efforts, metrics, "box", 30).splitlines()  # a rank is no name: effort stays
    assert "effort" in next(line for line in ranked if line.startswith("│")) and "effort" not in ranked[-1]
    # text is cut while the rows still read apart: two long ids that differ at their ends are never cut
    # alike, and what they share (vendor/model-) goes first
    twins = [row("ds", "vendor/model-" + "x" * 30 + end, 0.5, 0.1, effort=end) for end in ("a", "b")]
    cut = [line for line in ae._results_table(twins, metrics, "box", 40).splitlines() if line.startswith("│ ")]
    assert len(set(cut)) == 3 and all(len(line) <= 40 for line in cut) and cut[1].startswith("│ …xxx")
    unmarked = [Metric("first", ""), Metric("second", "")]  # none marked: the first is the primary, and stays
    narrow = ae._results_table([row("ds", "m", 0.5, 0.1)], unmarked, "box", 60)
    assert "first" in narrow.splitlines()[1] and "second" not in narrow.splitlines()[1]


def test_the_best_value_line_leads_with_the_figure_it_was_picked_by() -> None:
    """A contender right on all it answered but with an error: the line opens with what it
    was ranked by (errors as wrong), the 100% of those answered after it, and its gap to the
    top is the ranked one, never +0.0 points."""

    def ranked(model: str, strict: dict[str, float], cost: float) -> ae._Row:
        answered = {k: v for k, v in strict.items() if k != "ds/c399" or model == "dear"}
        errors = len(strict) - len(answered)
        return ae._Row(
            "ds",
            Contender(model),
            {"acc": ae._Values(answered)},
            errors,
            400,
            1.0,
            Usage(1, 1, cost),
            Usage(),
            strict={"acc": ae._Values(strict)},
        )

    every = {f"ds/c{i}": 1.0 for i in range(400)}
    cheap, top = ranked("cheap", every | {"ds/c399": 0.0}, 0.4), ranked("dear", every, 40.0)
    (line,) = ae._best_value_lines([top, cheap], METRICS[0])
    assert line.startswith("best value [ds] (cheap effort=default): 99.8% [98.6–100.0] ranked, its 1 error as wrong ")
    assert (
        "(100.0% of those answered) at $0.4000; -0.2 points vs the top (dear effort=default): not significant" in line
    )
    assert (
        "+0.0 points" not in line
        and "errors count as wrong for the pick (cheap effort=default: 1 of 400 raised)" in line
    )


def test_a_tie_shares_its_place_and_is_marked() -> None:
    """Rows equal on the ranked figure, the errors and the cost share a place (the label only
    orders them); the next row takes the place after them all, as in a competition."""
    tied = [row("ds", "a", 0.9, 0.1), row("ds", "b", 0.9, 0.1 + 1e-17), row("ds", "c", 0.9, 0.2)]
    tied.append(row("ds", "d", 0.8, 0.0))
    assert ae._places(tied, METRICS[0]) == ["1=", "1=", "3", "4"]
    assert ae._places(tied, METRICS[0], placed=False) == ["-"] * 4
    assert ae._places([row("ds", "a", 0.9, 0.1, errors=1), row("ds", "b", 0.9, 0.1)], METRICS[0]) == ["1", "2"]
    board = ae._leaderboard_table(tied[:2], METRICS, "ascii")
    assert "| 1= | a " in board and "| 1= | b " in board

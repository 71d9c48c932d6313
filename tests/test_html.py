"""The HTML report: safe by construction, and checked in a real headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import struct
import zlib
from pathlib import Path

import pytest

import agent_evals as ae
from agent_evals import Contender, Metric, Usage
from conftest import case_files

METRICS = [Metric("acc", "Accuracy.", primary=True)]


def row(model: str, acc: float, cost: float) -> ae._Row:
    return ae._Row("ds", Contender(model), {"acc": ae._Values({"ds/a": acc})}, 0, 1, 1.0, Usage(1, 1, cost), Usage())


def test_pareto_frontier_and_scaling() -> None:
    assert ae._pareto([(1.0, 0.5), (2.0, 0.4), (3.0, 0.9), (0.5, 0.5)]) == [(0.5, 0.5), (3.0, 0.9)]
    rows = [row("cheap", 0.5, 0.001), row("mid", 0.8, 0.01), row("dear", 0.9, 1.0), row("waste", 0.4, 0.5)]
    svg = ae._scatter(rows, METRICS[0], rows[1])
    assert "cost, log scale" in svg and svg.count("<circle") == 4 and svg.count('class="best"') == 1
    frontier = svg.split('points="')[1].split('"')[0].split()
    assert len(frontier) == 3  # waste is dominated
    linear = ae._scatter([row("a", 0.5, 0.001), row("b", 0.9, 0.002)], METRICS[0], None)
    assert "cost, log scale" not in linear and "best value" not in linear
    assert "Nothing was scored" in ae._scatter([], METRICS[0], None)


def test_every_value_is_escaped() -> None:
    case = ae.Case("a/001", "ds", "a", input="<script>alert(1)</script>", expected={"k": "</pre><b>"})
    x = ae.Experiment(Contender("m<x>"), ae.FakeProvider(), "ds", [case], 1)
    reply = ae.Reply(output={"k": "<img src=x onerror=alert(2)>"})
    x.results = [ae.RunResult(x, case, reply, ae.Score(0.0, {"acc": 0.0}, {}, {"why": "<i>"}), 0.1)]
    page = ae._render_html([x], METRICS, title="t<itle>", refused=["r<efused>"])
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "<b>" not in page and "<i>" not in page and "m<x>" not in page
    assert "t&lt;itle&gt;" in page and "r&lt;efused&gt;" in page
    assert page.count("<script>") == 1  # our own, inline
    assert "http://" not in page and "https://" not in page and "src=" not in page.replace("src=x", "")


def test_report_writes_html_from_logs_and_compare_html(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", "--html", cwd=project)
    assert code == 0, err
    (page,) = (project / "log").glob("compare.*.html")
    assert f"report: log/{page.name}" in err and "fake/echo" in page.read_text()
    log = next((project / "log" / "agent-evals").glob("*.json"))
    code, out, err = cli("report", str(log), "-o", "out/report.html")
    assert code == 0 and out == "" and "report: out/report.html" in err
    text = (project / "out" / "report.html").read_text()
    assert "Question for a/001." in text and "prefers-color-scheme" in text and "<svg" in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def png_has_content(png: bytes) -> bool:
    """Not a blank page: the decoded pixels take more than a handful of values."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    data, pos = b"", 8
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(data))) > 16


@pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver (.ci/run installs them)")
def test_the_report_in_headless_chromium(make_suite, cli, tmp_path) -> None:
    import json

    from selenium.webdriver.common.by import By

    config = "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n    - model: broken\n    - model: mute\n"
    cases = {**case_files("ds", "a/001", {"v": 1}), **case_files("ds", "a/002", {"v": 2}, expected={"v": 0})}
    cases |= {**case_files("ds", "b/001", {"v": "<script>window.pwned=1</script>"})}
    project = make_suite(config=config, cases=cases)
    code, _, err = cli("compare", "--local", "--html", str(tmp_path / "report.html"), cwd=project)
    assert code == 1, err  # fake/broken got no answer at all
    driver = chrome(tmp_path, 1280, logging=True)
    try:
        driver.get((tmp_path / "report.html").as_uri())
        assert driver.title == "agent-evals: t"
        assert driver.execute_script("return window.pwned === undefined")
        table = driver.find_element(By.CSS_SELECTOR, "section table.sortable")

        def models() -> list[str]:
            rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
            return [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]

        before = models()
        header = next(b for b in table.find_elements(By.CSS_SELECTOR, "th button") if b.text == "exact")  # the primary
        header.click()
        after = models()
        assert before[0] == "fake/echo"  # ranked as it arrives: errors counted as wrong
        assert sorted(after) == sorted(before) and after[0] == "fake/echo"
        header.click()
        assert models()[0] != "fake/echo"
        driver.execute_script("document.querySelectorAll('details').forEach(function (d) { d.open = true; })")

        def shown() -> list[str]:
            return [
                r.get_attribute("class") for r in driver.find_elements(By.CSS_SELECTOR, "tr.case") if r.is_displayed()
            ]

        everything = shown()
        assert len(everything) == 9
        driver.find_element(By.CSS_SELECTOR, "button[data-filter=only-errors]").click()
        assert shown() == ["case error"] * 3
        driver.find_element(By.CSS_SELECTOR, "button[data-filter=only-wrong]").click()
        assert shown() == ["case wrong"] * 4  # echo's wrong answer and mute's three
        driver.find_element(By.CSS_SELECTOR, "button[data-filter='']").click()
        assert shown() == everything
        png = driver.get_screenshot_as_png()
        (tmp_path / "report.png").write_bytes(png)
        assert png_has_content(png)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        requests = [
            json.loads(e["message"])["message"]["params"].get("request", {}).get("url", "")
            for e in driver.get_log("performance")
            if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"
        ]
        assert [u for u in requests if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))] == []
        assert any(u.endswith("report.html") for u in requests)  # the log did see our page load
    finally:
        driver.quit()
    if os.environ.get("AGENT_EVALS_KEEP_SCREENSHOT"):
        Path(os.environ["AGENT_EVALS_KEEP_SCREENSHOT"]).write_bytes(png)


def tie_page() -> str:
    """Three contenders tied at 100% and $0, one that raised on two cases, one wrong once:
    every cost $0, as a local server reports."""
    contenders = {"a/tie": [1, 1, 1, 1], "b/tie": [1, 1, 1, 1], "c/tie": [1, 1, 1, 1]}
    contenders |= {"d/flaky": [1, None, None, 1], "e/wrong": [1, 0, 1, 1]}
    experiments = []
    for model, answers in contenders.items():
        x = ae.Experiment(Contender(model), ae.FakeProvider(), "ds", [], 1)
        for i, value in enumerate(answers):
            case = ae.Case(f"a/{i:03d}", "ds", "a", input=f"q{i}", expected={"v": i})
            if value is None:
                x.results.append(ae.RunResult(x, case, error="ProviderError: HTTP 500: upstream busy"))
            else:
                score = ae.Score(float(value), {"acc": float(value)})
                x.results.append(ae.RunResult(x, case, ae.Reply(output={"v": i}), score, 0.1, usage=Usage(5, 5, 0.0)))
        experiments.append(x)
    return ae._render_html(experiments, METRICS, title="ties")


def test_ties_and_free_contenders_are_each_identifiable() -> None:
    page = tie_page()
    plot = page.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert plot.count("<circle") == 3  # the three ties share one dot; flaky and wrong have their own
    assert ">1,2,3 best value</text>" in plot  # the shared dot lists every contender on it
    assert "#1 a/tie effort=default: 100.0% at $0.0000; #2 b/tie" in plot
    assert "no contender reported any" in plot and "$1.0000" not in plot  # no invented cost axis
    assert "acc, errors as wrong" in plot and plot.count('text-anchor="end">') >= 5  # a y title, five ticks


def test_a_free_contender_on_a_log_axis_has_a_place_of_its_own() -> None:
    rows = [row("free", 0.6, 0.0), row("cheap", 0.8, 0.001), row("dear", 0.9, 1.0)]
    svg = ae._scatter(rows, METRICS[0], None)
    assert "cost, log scale ($0 at the left)" in svg and ">$0.0000</text>" in svg and ">$0.0010</text>" in svg
    xs = [float(c.split('cx="')[1].split('"')[0]) for c in svg.split("<circle")[1:]]
    assert len(set(xs)) == 3 and xs[0] < xs[1] - 40  # never drawn at another contender's cost
    frontier = [p.split(",")[0] for p in svg.split('points="')[1].split('"')[0].split()]
    assert len(frontier) == len(set(frontier)) == 3  # no vertical first segment


def test_a_log_cost_axis_has_a_tick_per_decade() -> None:
    rows = [row("a", 0.5, 0.0001), row("b", 0.8, 0.01), row("c", 0.9, 1.0)]
    svg = ae._scatter(rows, METRICS[0], None)
    assert "cost, log scale" in svg
    assert all(f">{cost}</text>" in svg for cost in ("$0.0001", "$0.0010", "$0.0100", "$0.1000", "$1.0000"))


def chrome(tmp_path: Path, width: int, height: int = 1600, logging: bool = False):
    """Debian's headless Chromium as the probe starts it: no network of its own, a fresh
    profile; ``logging``: the console and network logs kept for the test to read."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / f'profile-{width}'}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    if logging:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=options)


@pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver (.ci/run installs them)")
def test_the_grid_ties_and_a_narrow_screen_in_headless_chromium(tmp_path) -> None:
    from selenium.webdriver.common.by import By

    (tmp_path / "ties.html").write_text(tie_page(), encoding="utf-8")
    driver = chrome(tmp_path, 1280)
    try:
        driver.get((tmp_path / "ties.html").as_uri())
        table = driver.find_element(By.CSS_SELECTOR, "section table.sortable")

        def models() -> list[str]:
            return [
                r.find_elements(By.TAG_NAME, "td")[1].text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")
            ]

        assert models() == ["a/tie", "b/tie", "c/tie", "e/wrong", "d/flaky"]  # ranked: errors as wrong
        cost = table.find_elements(By.TAG_NAME, "th")[-1]
        driver.execute_script("arguments[0].click()", cost)  # the cell itself, not its label
        assert cost.get_attribute("aria-sort") == "descending"
        grid = driver.find_element(By.CSS_SELECTOR, "table.grid")

        def shown() -> list[str]:
            return [
                r.find_element(By.TAG_NAME, "td").text
                for r in grid.find_elements(By.CSS_SELECTOR, "tbody tr")
                if r.is_displayed()
            ]

        assert shown() == ["a/000", "a/001", "a/002", "a/003"]
        assert [
            c.text for c in grid.find_elements(By.CSS_SELECTOR, "tbody tr")[1].find_elements(By.TAG_NAME, "td")
        ] == ["a/001", "100.0%", "100.0%", "100.0%", "0.0%", "error"]
        driver.find_element(By.CSS_SELECTOR, "button[data-grid=only-differ]").click()
        assert shown() == ["a/001", "a/002"]
        driver.find_element(By.CSS_SELECTOR, "button[data-grid=only-errors]").click()
        assert shown() == ["a/001", "a/002"]
        driver.find_element(By.CSS_SELECTOR, "button[data-grid='']").click()
        assert shown() == ["a/000", "a/001", "a/002", "a/003"]
        # one click from a cell to the case's whole row, its folded list opened
        error_cell = grid.find_elements(By.CSS_SELECTOR, "tbody tr")[1].find_elements(By.TAG_NAME, "a")[-1]
        target = error_cell.get_attribute("href").split("#")[1]
        error_cell.click()
        row = driver.find_element(By.ID, target)
        assert row.is_displayed() and "upstream busy" in row.text
        # a case's answers side by side: its input and expected once, then each contender's answer
        case = grid.find_elements(By.CSS_SELECTOR, "tbody tr")[1].find_element(By.CSS_SELECTOR, "button.side")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", case)
        case.click()
        side = grid.find_element(By.CSS_SELECTOR, "tr.side")
        boxes = side.find_elements(By.CSS_SELECTOR, ".side-grid > div")
        assert case.get_attribute("aria-expanded") == "true" and side.is_displayed()
        assert side.text.startswith('input\nq1\nexpected\n{"v": 1}')
        assert [b.text.split("\n")[0] for b in boxes] == [
            "a/tie effort=default · 100.0%",
            "b/tie effort=default · 100.0%",
            "c/tie effort=default · 100.0%",
            "e/wrong effort=default · 0.0%",
            "d/flaky effort=default · error",
        ]
        assert '{"v": 1}' in boxes[0].text and "ProviderError: HTTP 500: upstream busy" in boxes[4].text
        (tmp_path / "wide.png").write_bytes(driver.get_screenshot_as_png())
        case.click()
        assert grid.find_elements(By.CSS_SELECTOR, "tr.side") == [] and case.get_attribute("aria-expanded") == "false"
    finally:
        driver.quit()
    narrow = chrome(tmp_path, 400, 900)
    try:  # a window is 500 px at least: a phone's 400 is emulated
        metrics = {"width": 400, "height": 900, "deviceScaleFactor": 1, "mobile": True}
        narrow.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        narrow.get((tmp_path / "ties.html").as_uri())
        assert narrow.execute_script("return window.innerWidth") == 400
        overflow = narrow.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0  # every table scrolls in its own box; the page never runs off the side
        table = narrow.find_element(By.CSS_SELECTOR, "section table.sortable")
        heads = [h.text for h in table.find_elements(By.CSS_SELECTOR, "th")]
        assert heads[:4] == ["#", "model", "ranked", "errors"]  # the figure the rows are ordered by, in sight
        flaky = table.find_elements(By.CSS_SELECTOR, "tbody tr")[-1].find_elements(By.TAG_NAME, "td")
        assert flaky[2].text == "50.0%" and narrow.execute_script(
            "return arguments[0].getBoundingClientRect().right <= window.innerWidth", flaky[2]
        )
        # a row is one line: time, tokens and secondary metrics are hidden on a phone, figures never wrap
        heights = [r.rect["height"] for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert max(heights) <= 48, heights
        # what failed is what the eye finds: a wrong or an error cell is red and bold, a right one muted
        grid = narrow.find_element(By.CSS_SELECTOR, "table.grid")
        wrong, right = (grid.find_element(By.CSS_SELECTOR, f"td.{kind}") for kind in ("wrong", "right"))
        assert wrong.value_of_css_property("font-weight") == "700"
        assert wrong.value_of_css_property("color") != right.value_of_css_property("color")
        # a case's answers side by side are stacked within the screen, never off its side
        case = grid.find_elements(By.CSS_SELECTOR, "tbody tr")[1].find_element(By.CSS_SELECTOR, "button.side")
        narrow.execute_script("arguments[0].scrollIntoView({block: 'center'})", case)
        case.click()
        boxes = grid.find_elements(By.CSS_SELECTOR, "tr.side .side-grid > div")
        edges = [narrow.execute_script("return arguments[0].getBoundingClientRect()", b) for b in boxes]
        assert len(boxes) == 5 and all(e["right"] <= 400 and e["left"] >= 0 for e in edges), edges
        assert len({round(e["left"]) for e in edges}) == 1  # one above the other
        png = narrow.get_screenshot_as_png()
        (tmp_path / "narrow.png").write_bytes(png)
        assert png_has_content(png)
    finally:
        narrow.quit()
    if os.environ.get("AGENT_EVALS_KEEP_SCREENSHOT"):
        for name in ("wide.png", "narrow.png"):
            Path(os.environ["AGENT_EVALS_KEEP_SCREENSHOT"]).with_suffix(f".{name}").write_bytes(
                (tmp_path / name).read_bytes()
            )


def test_the_plot_is_zoomed_to_the_scores_it_shows() -> None:
    """Contenders between 96.7% and 100%: the score axis runs over them (within five points
    either side, its range in its title), so the frontier visibly passes above dominated points."""
    rows = [row("a", 1.0, 0.3), row("b", 0.967, 0.1), row("c", 0.98, 0.2)]
    svg = ae._scatter(rows, ae.Metric("acc", primary=True), rows[1])
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([\d.]+)%</text>', svg)]
    assert len(ticks) == 5 and 96.7 - 5 <= min(ticks) < 96.7 and max(ticks) == 100.0
    assert "acc, errors as wrong (95.7% to 100.0%)" in svg  # a point of room below the lowest
    cys = [float(y) for y in re.findall(r'<circle[^>]*cy="([\d.]+)"', svg)]
    assert max(cys) - min(cys) > 150  # spread over the plot's height, not squeezed into its top


@pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver (.ci/run installs them)")
def test_a_report_against_a_baseline_names_the_regression_and_the_cases_that_flipped_in_chromium(
    make_suite, tmp_path
) -> None:
    """``compare --baseline OLD --html R`` on a run whose first eight cases now answer wrong: the
    page a reviewer opens says what regressed and, open under it, every case that flipped."""
    from selenium.webdriver.common.by import By
    from test_stats import FLIPPING, cli_run

    from conftest import many

    project = make_suite(
        helper=FLIPPING, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: model\n", cases=many(20)
    )
    assert cli_run(project, "compare", "--local", "-q").returncode == 0
    (old,) = (project / "log" / "agent-evals").glob("*.json")
    report = tmp_path / "report.html"
    done = cli_run(project, "compare", "--local", "--baseline", str(old), "--html", str(report), env={"BROKEN": "1"})
    assert done.returncode == 0, done.stderr
    driver = chrome(tmp_path, 1280)
    try:
        driver.get(report.as_uri())
        section = driver.find_element(By.XPATH, "//section[h2='Against the baseline']")
        assert "regressed: [ds] fake/model effort=default right fell 100.0% -> 60.0%" in section.text
        flipped = [li.text for li in section.find_elements(By.CSS_SELECTOR, "details[open] li") if li.is_displayed()]
        assert flipped == [f"a/00{n} Right {n} → Wrong {n} right → wrong" for n in range(1, 9)]
        row = section.find_element(By.CSS_SELECTOR, "tbody tr")
        assert row.find_elements(By.TAG_NAME, "td")[-1].text == "regressed"
    finally:
        driver.quit()

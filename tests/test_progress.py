"""What a run shows while it goes: the progress line and its ETA, and the suite's stray output captured."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import agent_evals as ae
from conftest import ROOT


def test_progress_draws_on_a_terminal_and_is_erased(make_suite) -> None:
    import pty

    project = make_suite(
        fakes="{'slow': lambda s, u: (__import__('time').sleep(0.15), u)[1]}",
        config="request_types: [prompt]\nvendors:\n  fake:\n    - model: slow\n",
    )
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "120"}
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local", "-p", "1"]
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    out, _ = child.communicate(timeout=300)
    screen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    os.close(primary)
    text = screen.decode()
    assert child.returncode == 0
    assert "] 2/4 cases · 0 errors · 0:00 · ETA 0:00 · $0.0020\x1b[K" in text
    frames = [f.removesuffix("\x1b[K") for f in text.split("\r") if f.endswith("\x1b[K") and "cases" in f]
    assert frames and all(len(f) == 119 and f.startswith("[") for f in frames)  # a bar that fits 120 columns
    assert text.count("\r\x1b[K") >= 1  # erased before the closing lines
    assert b"cases \xc2\xb7" not in out  # the bar never touches STDOUT


def _window(fd: int, columns: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))


def test_the_bar_fits_the_terminal_it_is_drawn_on_and_follows_a_resize(make_suite) -> None:
    """No COLUMNS, STDOUT a pipe (as during every run): the bar is measured on the terminal
    it is drawn on, 80 columns, then 40 once the window is narrowed; no redraw wraps."""
    import pty
    import select

    project = make_suite(
        fakes="{'slow': lambda s, u: (__import__('time').sleep(0.4), u)[1]}",
        config="request_types: [prompt]\nvendors:\n  fake:\n    - model: slow\n",
    )
    primary, secondary = pty.openpty()
    _window(secondary, 80)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local", "-p", "1"]
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    screen, resized_at = b"", None
    while True:
        if select.select([primary], [], [], 300)[0] == []:
            break
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        screen += chunk
        if resized_at is None and b"1/4 cases" in screen:
            _window(primary, 40)
            resized_at = len(screen)
    child.communicate(timeout=300)
    os.close(primary)
    assert child.returncode == 0 and resized_at is not None

    def frames(text: bytes) -> list[str]:
        return [f.removesuffix("\x1b[K") for f in text.decode().split("\r") if f.endswith("\x1b[K") and "cases" in f]

    wide, narrow = frames(screen[:resized_at]), frames(screen[resized_at:])
    assert wide and all(len(f) == 79 and f.startswith("[") for f in wide)  # the bar takes the 80 columns
    assert narrow and all(len(f) <= 39 for f in narrow)  # then fits 40: no line left behind
    assert all(not f.startswith("[") and " · ETA " in f for f in narrow)  # the bar gave way, the ETA stayed


def test_the_progress_line_is_not_drawn_off_a_terminal(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 0 and "cases ·" not in err


def test_stray_output_goes_to_the_warnings_file(make_suite) -> None:
    helper = """
import logging, warnings
import agent_evals as ae
logging.basicConfig(level=logging.INFO)
class A(ae.EchoAdapter):
    def call(self, case, model):
        print("debug print from the adapter", case.id)
        warnings.warn("a library warning")
        logging.getLogger("lib").info("a log line")
        return super().call(case, model)
ae.configure(adapter=A(), scorer=ae.Scorer(), providers=[ae.FakeProvider()])
"""
    project = make_suite(helper=helper)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, str(ROOT / "agent_evals.py"), "compare", "--local"]
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (
        "debug print" not in result.stdout + result.stderr and "a library warning" not in result.stdout + result.stderr
    )
    (path,) = (project / "log").glob("compare.warnings.*.log")
    lines = path.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("debug print")) == [
        f"debug print from the adapter {v}/{n:03d}" for v in "ab" for n in (1, 2)
    ]
    assert any(line.endswith("UserWarning: a library warning") for line in lines)
    assert lines.count("INFO:lib:a log line") == 4
    assert f"warnings: what the suite printed or logged during the run is in log/{path.name}" in result.stderr
    assert result.stdout.startswith("┌")


def test_capture_restores_the_streams_and_logging_handlers(tmp_path) -> None:
    import logging

    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        before = sys.stdout, sys.stderr
        with ae._Capture(tmp_path / "w.log") as capture:
            print("partial", end="")
            print(" line")
            logging.getLogger("x").warning("captured")
            assert handler.stream is capture
        assert (sys.stdout, sys.stderr) == before and handler.stream is before[1]
    finally:
        root.removeHandler(handler)
    assert (tmp_path / "w.log").read_text().splitlines() == ["partial line", "captured"]


def test_progress_line_and_clock() -> None:
    line = ae._progress_line(0, 10, 0, 1.0, 0.0, width=60)
    assert line == "[----------] 0/10 cases · 0 errors · 0:01 · ETA - · $0.0000" and len(line) == 59
    assert ae._progress_line(1, 3, 1, 3700, 1.5, width=80).endswith(
        "] 1/3 cases · 1 error · 1:01:40 · ETA 2:03:20 · $1.5000"
    )
    for width in (20, 30, 40, 60, 80, 120, 200):  # the line always fits; the count, ETA and spend stay
        line = ae._progress_line(123, 4567, 8, 3600, 12.5, 700, width)
        assert len(line) < width and "123/4567" in line and (width < 40 or ("ETA 11:40" in line and "$12.5000" in line))


def test_the_eta_waits_for_the_slowest_experiment() -> None:
    """Two experiments of 10 cases: a fast one done in 1 s, a slow one at 1 case a second.
    The whole run's pace says about a second is left; the slow one's own says nine."""
    progress = ae._Progress(None, 20)
    now = time.monotonic()
    fast, slow = (
        ae.Experiment(ae.Contender(m), ae.FakeProvider(), "ds", [ae.Case(str(i)) for i in range(10)], 1) for m in "fs"
    )
    fast.began = slow.began = now - 1.0
    for _ in range(10):
        progress.add(ae.RunResult(fast, ae.Case("x")))
    progress.add(ae.RunResult(slow, ae.Case("y")))
    progress.started = now - 1.0
    assert progress.eta(now) == pytest.approx(9.0, rel=0.01)


def test_progress_draws_throttled_and_clears() -> None:
    import io

    stream = io.StringIO()
    progress = ae._Progress(stream, 4)
    progress.add(ae.RunResult(None, ae.Case("a"), error="x", usage=ae.Usage(1, 1, 0.5)))
    progress.draw()
    progress.draw()  # within 0.1s: not drawn again
    progress.clear()
    assert stream.getvalue().count("1/4 cases · 1 error") == 1 and stream.getvalue().endswith("\r\x1b[K")
    silent = ae._Progress(None, 4)
    silent.draw()
    silent.clear()
    assert not silent.shown

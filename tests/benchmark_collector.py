"""What the tool's collector setting costs a suite's own code (#73): peak memory and CPU of a
command whose adapter makes cyclic garbage, against the same module with the collector left
as Python sets it (``_few_collections`` made a no-op in a copy), each side a fresh process.

    python tests/benchmark_collector.py [--runs 3] [--against COMMIT]

Three adapters, each a real suite under a temporary folder, offline (``fake/echo``), ``-p 4``:

- ``exception``: a caught exception kept in a local beside a 256 KiB body (the frame, its
  traceback and the exception make a cycle that holds the body), 2,000 cases;
- ``cycles``: 200 small cycles a case, each holding 16 KiB, 2,000 cases;
- ``objects``: 3,000 small objects in cycles a case, 20,000 cases.

Printed per workload: each side's median peak RSS (the child's ``ru_maxrss``) and CPU (user +
system), and their ratios (this module over the default collector's). ``--against COMMIT``
measures that commit's module instead of this tree's, beside the same default-collector copy.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GARBAGE = {
    "exception": """
        body = bytes(256 * 1024)
        try:
            raise ValueError(case.id)
        except ValueError as e:
            kept = e
""",
    "cycles": """
        for _ in range(200):
            a = [bytes(16 * 1024)]
            a.append(a)
""",
    "objects": """
        for _ in range(1000):
            a, b = {}, []
            a["b"], b[:] = b, [a, object()]
""",
}
CASES = {"exception": 2_000, "cycles": 2_000, "objects": 20_000}

HELPER = """
from pathlib import Path
import agent_evals as ae

class Adapter(ae.EchoAdapter):
    def call(self, case, model):
{garbage}
        return super().call(case, model)

class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "1 when right.", primary=True)]

    def call(self, case, reply, context):
        return ae.Score(value=1.0, metrics={{"exact": 1.0}})

ae.configure(suite="gc", root=Path(__file__).parent, adapter=Adapter(), scorer=Scorer(),
             providers=[ae.FakeProvider(None)])
"""


def suite(folder: Path, workload: str) -> Path:
    evals = folder / workload / "evals"
    (evals / "datasets").mkdir(parents=True)
    (evals / "eval_helper.py").write_text(HELPER.format(garbage=GARBAGE[workload]))
    (evals / ".agent-eval.config.yml").write_text("request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n")
    for i in range(CASES[workload]):
        case = evals / "datasets" / "ds" / "cases" / f"{i:05d}"
        case.mkdir(parents=True)
        (case / "input.txt").write_text(f'Case {i}.\nAnswer: {{"v": {i}}}\n')
        (case / "expected.json").write_text(f'{{"v": {i}}}')
    return evals


def measure(module: Path, evals: Path) -> tuple[float, float]:
    """One command in a fresh process: its peak RSS (MiB) and CPU (s)."""
    env = {**os.environ, "PYTHONPATH": str(module.parent), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "agent_evals", "compare", "--local", "-p", "4"]
    child = subprocess.Popen(command, cwd=evals, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, child.stderr.read().decode() if child.stderr else child.returncode
    return usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", help="a commit whose module is measured in place of this tree's")
    parser.add_argument("--only", choices=sorted(GARBAGE), action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        source = (ROOT / "agent_evals.py").read_text()
        if args.against:
            source = subprocess.run(
                ["git", "show", f"{args.against}:agent_evals.py"], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
        plain = re.sub(
            r"(def _few_collections\(\) -> Iterator\[None\]:\n    \"\"\"[\s\S]*?\"\"\"\n)",
            r"\1    yield\n    return\n",
            source,
        )
        assert plain != source, "no _few_collections to neutralise"
        sides = {"this": source, "default collector": plain}
        modules = {}
        for name, text in sides.items():
            (folder / name).mkdir()
            modules[name] = folder / name / "agent_evals.py"
            modules[name].write_text(text)
        for workload in args.only or GARBAGE:
            evals = suite(folder, workload)
            figures = {name: [measure(module, evals) for _ in range(args.runs)] for name, module in modules.items()}
            rss = {name: statistics.median(r for r, _ in runs) for name, runs in figures.items()}
            cpu = {name: statistics.median(c for _, c in runs) for name, runs in figures.items()}
            base = "default collector"
            print(
                f"{workload:9s} ({CASES[workload]:,} cases): peak RSS {rss['this']:.0f} MiB vs {rss[base]:.0f} "
                f"({rss['this'] / rss[base]:.2f}x), CPU {cpu['this']:.2f} s vs {cpu[base]:.2f} "
                f"({cpu['this'] / cpu[base]:.2f}x)"
            )


if __name__ == "__main__":
    main()

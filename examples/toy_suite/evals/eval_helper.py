"""The toy suite: two datasets, two variants, fake models; no network, no keys."""

from pathlib import Path

from agent_evals import configure
from toy_suite.evals import Adapter, Scorer

configure(
    suite="toy",
    root=Path(__file__).parent,
    cases="datasets/*/cases/**/input.txt",
    adapter=Adapter(),
    scorer=Scorer(),
)

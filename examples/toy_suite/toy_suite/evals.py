"""The toy suite's adapter and scorer: field extraction graded against expected.json.

The adapter is agent_evals' own EchoAdapter (the fake models answer from the input);
the scorer is what a real extraction suite would write. Importing this module
registers the fake provider, so ``fake/<name>`` ids need no network and no key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import agent_evals
from agent_evals import Case, EchoAdapter, FakeProvider, Metric, Reply, SchemaValidator, Score

SCHEMAS: dict[str, dict[str, dict[str, Any]]] = {
    "animals": {
        "name": {"type": "string"},
        "legs": {"type": "integer"},
        "habitat": {"type": "enum", "enum": ["land", "water", "air"]},
        "sound": {"type": "string", "nullable": True},
    },
    "colors": {
        "name": {"type": "string"},
        "hex": {"type": "string"},
        "warm": {"type": "boolean"},
        "moods": {"type": "multi_enum", "enum": ["calm", "bold", "sad", "happy"], "nullable": True},
    },
}


class Adapter(EchoAdapter):
    """Sends the case text; parses the first JSON object of the reply."""

    system = "Extract the fields as one JSON object."

    def context(self, case: Case) -> Mapping[str, Any]:
        return {"schema": SCHEMAS[case.dataset]}

    def verify(self, dataset: str) -> list[str]:
        return [] if dataset in SCHEMAS else [f"no schema for dataset {dataset}; add it to SCHEMAS"]

    def metadata(self) -> Mapping[str, Any]:
        return {"prompt": "toy-v1"}


class Scorer(agent_evals.Scorer):
    """Per-field accuracy, exact match, and restraint on fields the text never answers."""

    def metrics(self) -> list[Metric]:
        return [
            Metric("field_accuracy", "Mean per-field score.", primary=True),
            Metric("exact_match", "1 when every field is right."),
            Metric("restraint", "Of the fields the text never answers, the share left null."),
        ]

    def call(self, case: Case, reply: Reply, context: Mapping[str, Any]) -> Score:
        expected: dict[str, Any] = case.expected
        output = reply.output if isinstance(reply.output, dict) else {}
        fields = {name: float(output.get(name) == want) for name, want in expected.items()}
        unanswered = [name for name, want in expected.items() if want is None]
        mean = sum(fields.values()) / len(fields)
        return Score(
            value=mean,
            metrics={
                "field_accuracy": mean,
                "exact_match": 1.0 if all(v == 1.0 for v in fields.values()) else 0.0,
                # None: no field is unanswered in this case, so restraint does not apply
                "restraint": (sum(output.get(n) is None for n in unanswered) / len(unanswered) if unanswered else None),
            },
            outcomes={"right": sum(v == 1.0 for v in fields.values()), "wrong": sum(v < 1.0 for v in fields.values())},
            diagnostics={n: {"want": expected[n], "got": output.get(n)} for n, v in fields.items() if v < 1.0},
        )

    def verify(self, case: Case, context: Mapping[str, Any]) -> list[str]:
        return SchemaValidator(context["schema"]).problems(case.expected)

    def summary(self, case: Case) -> str:
        expected = case.expected or {}
        return f"{sum(v is not None for v in expected.values())}/{len(expected)} answered"


agent_evals.configure(providers=[FakeProvider()])

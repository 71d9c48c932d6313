"""The public surface: names, values, the schema validator, fakes and configure()."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest

import agent_evals as ae
from conftest import ROOT


def test_all_lists_every_public_name_and_nothing_leaks() -> None:
    public = {
        name
        for name, value in vars(ae).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == "agent_evals"
        and (inspect.isclass(value) or inspect.isfunction(value))
    }
    # Experiment and Summary are what every tracker receives: exported with the rest
    assert public | {"REQUEST_TYPES"} == set(ae.__all__)
    assert set(ae.REQUEST_TYPES) == set(ae._request_types(ae._builtin_providers()))  # the built-in providers' own
    assert {"Experiment", "Summary"} <= set(ae.__all__)
    assert set(ae.__all__) <= set(vars(ae))
    assert len(ae.__all__) == len(set(ae.__all__))


def test_public_signatures_are_pinned() -> None:
    assert str(inspect.signature(ae.configure)) == "(**settings: 'Any') -> 'None'"
    assert str(inspect.signature(ae.main)) == "(argv: 'Sequence[str] | None' = None) -> 'int'"
    assert list(inspect.signature(ae.Adapter.call).parameters) == ["self", "case", "model"]
    assert list(inspect.signature(ae.Scorer.call).parameters) == ["self", "case", "reply", "context"]
    # the system/user form stays positional as it was; a conversation is keyword-only
    complete = inspect.signature(ae.Model.complete).parameters
    assert list(complete) == ["self", "system", "user", "json", "messages", "tools", "tool_choice"]
    assert all(complete[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("messages", "tools", "tool_choice"))
    fields = {
        cls.__name__: [f.name for f in dataclasses.fields(cls)]
        for cls in (ae.Case, ae.Reply, ae.Metric, ae.Score, ae.Contender)
    }
    assert fields == {
        "Case": ["id", "dataset", "variant", "input", "expected", "path", "metadata"],
        "Reply": ["output", "raw", "usage", "error", "metadata", "transcript"],
        "Metric": ["name", "description", "aggregate", "primary", "judged"],
        "Score": ["value", "metrics", "outcomes", "diagnostics"],
        "Contender": ["model", "effort", "temperature", "max_tokens", "provider", "routing", "tier"],
    }


def test_import_loads_no_optional_package_and_no_network_module() -> None:
    code = (
        "import sys, agent_evals\n"
        "bad = [m for m in ('yaml', 'braintrust', 'opentelemetry', 'litellm', 'ssl', 'http.client',"
        " 'urllib.request', 'concurrent.futures') if m in sys.modules]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_values_are_frozen_with_defaults() -> None:
    reply = ae.Reply(error="not JSON", raw="oops")
    assert (reply.output, reply.usage, reply.metadata) == (None, None, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        reply.error = "x"  # type: ignore[misc]
    assert ae.Metric("m").aggregate == "mean"
    assert ae.Case("a/001", dataset="ds").key == "ds/a/001"


def test_usage_adds_and_coerces_mappings() -> None:
    total = ae.Usage(1, 2, 0.5) + ae.Usage(3, 4, 0.25)
    assert total == ae.Usage(4, 6, 0.75)
    completion = ae.Completion(text="x", usage={"input_tokens": 5, "output_tokens": 7, "cost_usd": 0.1})
    assert completion.usage == ae.Usage(5, 7, 0.1)
    assert ae.Reply(usage={"input_tokens": 2}).usage == ae.Usage(2, 0, 0.0)
    with pytest.raises(TypeError, match="usage must be"):
        ae.Usage.coerce(3)  # type: ignore[arg-type]


def test_schema_validator_reports_each_problem() -> None:
    schema = {
        "flag": {"type": "boolean"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "name": {"type": "string", "nullable": True},
        "kind": {"type": "enum", "enum": ["a", "b"]},
        "tags": {"type": "multi_enum", "enum": ["x", "y"]},
    }
    validator = ae.SchemaValidator(schema)
    assert validator.problems({"flag": True, "count": 3, "ratio": 0.5, "name": None, "kind": "a", "tags": ["x"]}) == []
    problems = validator.problems(
        {"flag": 1, "count": True, "ratio": "1", "name": 3, "kind": "c", "tags": ["z"], "extra": 1, "knd": 2}
    )
    assert problems == [
        "extra: not in the schema",
        'knd: not in the schema (did you mean "kind"?)',
        "flag: expected a boolean, got 1",
        "count: expected an integer, got true",
        'ratio: expected a number, got "1"',
        "name: expected a string, got 3",
        'kind: "c" is not one of a, b',
        'tags: ["z"] not among x, y',
    ]
    assert validator.problems({"flag": None, "count": 1, "ratio": 1, "name": "n", "kind": "b", "tags": "x"}) == [
        "flag: null, but the field is not nullable",
        'tags: expected a list, got "x"',
    ]
    assert validator.problems([1]) == ["expected an object, got list"]


def test_schema_validator_rejects_a_bad_schema() -> None:
    with pytest.raises(ae.ConfigError, match=r"unknown type 'strng' \(did you mean \"string\"\?\)"):
        ae.SchemaValidator({"a": {"type": "strng"}})
    with pytest.raises(ae.ConfigError, match="needs a non-empty enum"):
        ae.SchemaValidator({"a": {"type": "enum"}})


def test_fake_models_answer_and_count_usage() -> None:
    model = ae.FakeModel("echo", effort="low", temperature=0.3)
    assert (model.id, model.name, model.effort, model.temperature) == ("fake/echo", "echo", "low", 0.3)
    completion = model.complete(system="be brief", user="hello there, twelve")
    assert completion.text == "hello there, twelve"
    assert completion.usage == ae.Usage(2 + 5, 5, 0.001)
    model.complete(user="x")
    assert model.calls == 2 and model.usage.cost_usd == pytest.approx(0.002)
    assert ae.FakeModel("fake/parrot").complete(user='say {"a": [1, 2]} now').text == '{"a": [1, 2]}'
    assert ae.FakeModel("mute").complete(user="x").text == ""
    with pytest.raises(ae.ProviderError, match="connection refused"):
        ae.FakeModel("broken").complete(user="x")
    with pytest.raises(ae.ProviderError, match="no such fake model; known: fake/broken, fake/echo"):
        ae.FakeModel("nope").complete(user="x")
    assert ae.FakeModel("echo", effort="default").effort is None
    assert "fake/echo" in repr(model)


def test_echo_adapter_parses_the_first_json_object_or_reports_the_model_failure() -> None:
    adapter = ae.EchoAdapter()
    case = ae.Case("a", input='noise {broken then {"k": 1} tail')
    reply = adapter.call(case, ae.FakeModel("echo"))
    assert reply.output == {"k": 1} and reply.error is None and reply.usage.cost_usd == 0.001
    failed = adapter.call(ae.Case("b", input="no json here"), ae.FakeModel("echo"))
    assert failed.error == "no JSON object in the reply" and failed.raw == "no json here"


def test_base_classes_have_harmless_defaults_and_clear_unwritten_hooks() -> None:
    adapter, scorer = ae.Adapter(), ae.Scorer()
    case = ae.Case("a")
    assert adapter.prepare("ds") is None and adapter.context(case) == {} and adapter.verify("ds") == []
    assert adapter.metadata() == {}
    assert scorer.verify(case, {}) == [] and scorer.summary(case) == ""
    assert [m.name for m in scorer.metrics()] == ["score"]
    with pytest.raises(NotImplementedError, match=r"Adapter.call\(case, model\)"):
        adapter.call(case, ae.FakeModel())
    with pytest.raises(NotImplementedError, match=r"Scorer.call"):
        scorer.call(case, ae.Reply(), {})
    with pytest.raises(NotImplementedError, match="does not implement complete"):
        ae.Provider().complete(ae.FakeModel(), user="x")
    tracker = ae.Tracker({"suite": "s"})
    assert tracker.enabled() and tracker.context == {"suite": "s"}
    assert tracker.finish(None, None) == {"url": None}  # type: ignore[arg-type]


def test_provider_returning_something_else_is_a_provider_error() -> None:
    class Bad(ae.Provider):
        name = "bad"

        def complete(self, model, *, system=None, user, json=True):
            return "text"

    with pytest.raises(ae.ProviderError, match="returned str, not a Completion"):
        ae.Model("bad/x", Bad()).complete(user="x")


def test_configure_merges_lists_and_rejects_unknown_settings() -> None:
    first, second = ae.FakeProvider(), ae.FakeProvider()
    ae.configure(providers=[first], env_files=".env", suite="a")
    ae.configure(providers=second, env_files=["b.env"], suite="b", root="/tmp")
    conf = ae._configuration
    assert conf.providers == [first, second] and conf.env_files == [".env", "b.env"]
    assert conf.suite == "b" and str(conf.root) == "/tmp"
    with pytest.raises(ae.ConfigError, match=r"unknown setting 'adaptor' \(did you mean \"adapter\"\?\)"):
        ae.configure(adaptor=1)

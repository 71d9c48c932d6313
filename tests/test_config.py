"""The lineup file: keys, types, request types, expansion, and flags beating the file."""

from __future__ import annotations

import argparse

import pytest

import agent_evals as ae
from conftest import CONFIG

LINEUP = """
project: p
request_types: [prompt]
defaults:
  effort: low
  temperature: 0.2
  max_tokens: 100
  parallelism: 3
vendors:
  fake:
    - model: echo
      effort: [default, high]
      temperature: [0.0, 0.7]
    - model: parrot
      max_tokens: 50
"""


def matrix_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│ ds")]


def test_lists_multiply_and_defaults_fill(make_suite, cli) -> None:
    project = make_suite(config=LINEUP)
    code, out, err = cli("compare", "-n", cwd=project)
    assert code == 0, err
    assert matrix_rows(out) == [
        ["ds", "fake/echo", "fake", "default", "0.0", "100", "4", "3"],
        ["ds", "fake/echo", "fake", "default", "0.7", "100", "4", "3"],
        ["ds", "fake/echo", "fake", "high", "0.0", "100", "4", "3"],
        ["ds", "fake/echo", "fake", "high", "0.7", "100", "4", "3"],
        ["ds", "fake/parrot", "fake", "low", "0.2", "50", "4", "3"],
    ]
    assert out.rstrip().endswith("5 experiments, 20 case runs; nothing was called (dry run)")
    assert not (project / "log").exists()


def test_flags_beat_the_file(make_suite, cli) -> None:
    project = make_suite(config=LINEUP)
    code, out, err = cli(
        "run", "-n", "-e", "medium", "-t", "1.5", "--max-tokens", "9", "-p", "2", "-m", "fake/echo", cwd=project
    )
    assert code == 0, err
    assert matrix_rows(out) == [["ds", "fake/echo", "fake", "medium", "1.5", "9", "4", "2"]]
    code, out, _ = cli("run", "-n", "-e", "low,high", "-m", "fake/parrot")
    assert [r[3] for r in matrix_rows(out)] == ["low", "high"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("request_types: [prompt]\nvendros: {}\n", 'unknown key vendros (did you mean "vendors"?)'),
        ("vendors: {}\n", "request_types is required"),
        ("request_types: []\n", "request_types is required"),
        (
            "request_types: [promt]\n",
            "request_types: unknown type 'promt' (did you mean \"prompt\"?); known: prompt, typesafe",
        ),
        (
            "request_types: [prompt]\ndirect:\n  typesaf:\n    - model: x\n",
            "direct: unknown provider 'typesaf' (did you mean \"typesafe\"?); known: typesafe",
        ),
        (
            "request_types: [prompt]\nvendors:\n  - fake\n",
            "vendors: expected a mapping of name to a list of models, got list",
        ),
        ("request_types: [prompt]\nvendors:\n  fake: echo\n", "vendors.fake: expected a list of entries"),
        (
            "request_types: [prompt]\nvendors:\n  fake:\n    - modle: echo\n",
            'unknown key vendors.fake[0].modle (did you mean "model"?)',
        ),
        (
            "request_types: [prompt]\nvendors:\n  fake:\n    - effort: low\n",
            "vendors.fake[0].model: expected a model name, got None",
        ),
        (
            "request_types: [prompt]\nvendors:\n  fake:\n    - 3\n",
            "vendors.fake[0]: expected a mapping with model:, got 3",
        ),
        (
            "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n      effort: hgh\n",
            "vendors.fake[0].effort: unknown effort 'hgh' (did you mean \"high\"?)",
        ),
        (
            "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n      temperature: 3\n",
            "temperature must be a number from 0 to 2, got 3",
        ),
        (
            "request_types: [prompt]\nvendors:\n  fake:\n    - model: echo\n      max_tokens: -1\n",
            "max_tokens: expected a whole number from 1 to 10,000,000, got -1",
        ),
        (
            "request_types: [prompt]\ndefaults:\n  paralelism: 2\n",
            "unknown key defaults.parallelism".replace("parallelism", "paralelism"),
        ),
        ("request_types: [prompt]\ndefaults: [1]\n", "defaults: expected a mapping"),
        (
            "request_types: [prompt]\ndefaults:\n  parallelism: true\n",
            "defaults.parallelism: expected a whole number from 1 to 4,096, got True",
        ),
        (
            "request_types: [prompt]\ndefaults:\n  temperature: hot\n",
            "defaults.temperature: temperature must be a number",
        ),
        (
            "request_types: [prompt]\ndefaults:\n  effort: [low, 3]\n",
            "defaults.effort: expected str or a list of them, got 3",
        ),
        ("request_types: [prompt]\nproject: [a]\n", "project: expected a string, got ['a']"),
        ("- just\n- a list\n", "expected a mapping of keys"),
        ("request_types: [prompt\nvendors: {}\n", "line 2, column 8: invalid YAML"),
        ("request_types: [prompt]\nlocal: {}\n", "unknown key local"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(make_suite, cli, config, message) -> None:
    project = make_suite(config=config)
    code, out, err = cli("compare", "-n", cwd=project)
    assert code == 2 and out == ""
    assert err.startswith("error: evals/.agent-eval.config.yml: "), err
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_config_that_is_not_utf8(make_suite, cli) -> None:
    project = make_suite(config=None, extra={"evals/.agent-eval.config.yml": b"request_types: [\xff]\n"})
    code, _, err = cli("cases", cwd=project)
    assert code == 2 and "not UTF-8 text" in err


def test_empty_config_asks_for_request_types(make_suite, cli) -> None:
    project = make_suite(config="# nothing yet\n")
    code, _, err = cli("cases", cwd=project)
    assert code == 2 and "request_types is required" in err


def test_refusal_is_a_warning_and_never_a_row(make_suite, cli) -> None:
    project = make_suite(config=CONFIG + "direct:\n  typesafe:\n    - model: jev-latest\n")
    for argv in (["cases"], ["compare", "-n"], ["compare", "--local"]):
        code, out, err = cli(*argv, cwd=project)
        assert code == 0, err
        assert "warning: typesafe/jev-latest refused: needs typesafe; this suite produces prompt" in err
        assert "jev-latest" not in out


def test_suite_declaring_typesafe_admits_it_and_fails_on_the_missing_key(make_suite, cli) -> None:
    project = make_suite(
        config="request_types: [typesafe]\ndirect:\n  typesafe:\n    - model: jev-latest\n      effort: low\n"
    )
    code, out, err = cli("compare", "-n", cwd=project)
    assert code == 0 and "typesafe/jev-latest (direct) │ typesafe │ low" in out
    code, _, err = cli("compare", "--local")
    assert code == 2
    assert "TYPESAFE_API_KEY is not set (needed by typesafe/jev-latest)" in err


def test_effort_a_provider_does_not_take_is_refused_by_name(make_suite, cli) -> None:
    project = make_suite(
        config="request_types: [typesafe]\ndirect:\n  typesafe:\n    - model: jev-latest\n      effort: xhigh\n"
    )
    code, _, err = cli("compare", "-n", cwd=project)
    assert code == 2
    assert (
        "typesafe/jev-latest: effort 'xhigh' is not accepted by provider typesafe (accepts: default, low, medium, high)"
        in err
    )


def test_unknown_model_flag_and_unknown_catalog_model(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("run", "-m", "fake/ech", cwd=project)
    assert code == 2 and '-m fake/ech: not in the lineup (did you mean "fake/echo"?)' in err
    (project / "evals" / ".agent-eval.config.yml").write_text(
        "request_types: [prompt]\nvendors:\n  fake:\n    - model: eco\n"
    )
    code, _, err = cli("compare", "--local")
    assert code == 2 and 'fake/eco: provider fake has no such model (did you mean "fake/echo"?)' in err


def test_everything_refused_is_a_usage_error(make_suite, cli) -> None:
    project = make_suite(config="request_types: [prompt]\ndirect:\n  typesafe:\n    - model: jev-latest\n")
    code, _, err = cli("compare", "--local", cwd=project)
    assert code == 2 and "nothing to run: every contender was refused" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["compare", "-e", "hgh"],
            "argument -e/--effort: unknown effort 'hgh' (did you mean 'high'?)".replace("'high'", '"high"'),
        ),
        (["compare", "-t", "warm"], "temperature must be a number from 0 to 2, got 'warm'"),
        (["compare", "-p", "0"], "argument -p/--parallelism: expected a whole number from 1 to 4,096, got '0'"),
        (["compare", "-j", "-1"], "argument -j/--concurrency: expected a whole number from 0 to 4,096"),
        (["compare", "--bogus"], "unknown to agent-evals compare: --bogus"),
        (["frobnicate"], "no command 'frobnicate'"),
    ],
)
def test_bad_flags_are_one_line(cli, tmp_path, argv, message) -> None:
    code, out, err = cli(*argv, cwd=tmp_path)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_reserved_logging_flags(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("compare", "-l", cwd=project)
    assert code == 2 and "-l and -L are reserved for logging and not yet implemented" in err


def _values(setting: ae._Setting) -> tuple[list, list]:
    """(values the setting takes, values it refuses), as the config file would write them."""
    if setting.kind == "whole":
        return [setting.low, setting.high or setting.low + 10], [setting.low - 1, (setting.high or 10**30) + 1]
    if setting.kind == "choices":
        return [list(setting.choices[-2:])], [["loud"]]
    if setting.kind == "temperatures":
        return [[0.0, 0.7]], [[2.5]]
    if setting.kind == "switch":
        return [True, False], [0, "yes", None]
    return [0, 2.5], [-1]


@pytest.mark.parametrize("setting", ae._SETTINGS, ids=lambda s: s.key or s.flags[-1])
def test_a_setting_is_checked_alike_in_the_config_file_and_on_its_flag(setting) -> None:
    # one table of settings: the config check and the flag's type share the bounds
    good, bad = _values(setting)
    for value in good:
        from_config = ae._check_setting(setting, value, "cfg", "defaults.x")
        if setting.flags:
            flag_value = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            assert ae._flag_type(setting)(flag_value) == from_config
    for value in bad:
        with pytest.raises(ae.ConfigError, match=r"^cfg: defaults\.x: "):
            ae._check_setting(setting, value, "cfg", "defaults.x")
        if setting.flags:
            flag_value = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            with pytest.raises(argparse.ArgumentTypeError):
                ae._flag_type(setting)(flag_value)


def test_help_states_each_settings_default_from_the_table(cli) -> None:
    code, out, _ = cli("run", "--help")
    assert code == 0
    text = " ".join(out.split())
    for setting in ae._SETTINGS:
        if setting.key and setting.flags:
            assert f"defaults.{setting.key}, else" in text, setting.key
    assert "(default: defaults.parallelism, else 4)" in text and "defaults.case_timeout, else 3600)" in text
    assert ae.Provider.timeout == ae._SETTING["timeout"].default and ae._Defaults().repeat == 1

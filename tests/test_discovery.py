"""Finding the suite: upward search, --helper, AGENT_EVALS_HELPER, config-only suites."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import agent_evals as ae
from conftest import CONFIG, ROOT, write

PLUGIN = """
import agent_evals as ae

class Adapter(ae.EchoAdapter):
    pass

class Scorer(ae.Scorer):
    def metrics(self):
        return [ae.Metric("exact", "right", primary=True)]

    def call(self, case, reply, context):
        exact = float(reply.output == case.expected)
        return ae.Score(value=exact, metrics={"exact": exact})

ae.configure(providers=[ae.FakeProvider()])
"""


def test_found_upward_from_a_subfolder(make_suite, cli) -> None:
    project = make_suite()
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    code, out, err = cli("cases", cwd=deep)
    assert code == 0, err
    assert "│ ds      │ a/001 │ a          │ 1 fields │" in out


def test_no_suite_says_what_to_create(tmp_path, cli) -> None:
    code, out, err = cli("cases", cwd=tmp_path)
    assert code == 2 and out == ""
    assert err.startswith("error: no suite is configured: create evals/eval_helper.py")
    assert "evals/.agent-eval.config.yml" in err and "--helper PATH" in err
    assert len(err.strip().splitlines()) == 1


def test_helper_flag_and_environment_variable(make_suite, cli, tmp_path, monkeypatch) -> None:
    project = make_suite()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, _ = cli("cases", "--helper", str(project / "evals" / "eval_helper.py"), cwd=elsewhere)
    assert code == 0 and "a/001" in out
    monkeypatch.setenv("AGENT_EVALS_HELPER", str(project / "evals" / "eval_helper.py"))
    code, out, _ = cli("cases")
    assert code == 0 and "b/002" in out
    code, _, err = cli("cases", "--helper", str(elsewhere / "missing.py"))
    assert code == 2 and "--helper" in err and "no such file" in err


def test_helper_flag_may_name_the_config_file(make_suite, cli, tmp_path) -> None:
    project = make_suite()
    code, out, _ = cli("cases", "--helper", str(project / "evals" / ".agent-eval.config.yml"), cwd=tmp_path)
    assert code == 0 and "a/002" in out


def test_config_only_suite_with_require(make_suite, cli, tmp_path) -> None:
    project = make_suite(
        helper=None,
        config="require: plug_cfg_only.evals\nadapter: plug_cfg_only.evals:Adapter\nscorer: "
        "plug_cfg_only.evals.Scorer\n" + CONFIG,
    )
    write(tmp_path / "lib", {"plug_cfg_only/__init__.py": "", "plug_cfg_only/evals.py": PLUGIN})
    # without the plugin on the path: exit 2 naming the require: value
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert "require: plug_cfg_only.evals could not be imported" in err and "PYTHONPATH" in err
    import sys

    sys.path.insert(0, str(tmp_path / "lib"))
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 0, err
    assert "│ ds      │ fake/echo │ default │    - │ 100.0% │" in out


def test_config_keys_fill_what_the_helper_left_unset(make_suite, cli, tmp_path) -> None:
    helper = "import agent_evals as ae\nfrom plug_fill.evals import Scorer\nae.configure(scorer=Scorer())\n"
    config = "require: [plug_fill.evals]\nadapter: plug_fill.evals:Adapter\nscorer: plug_fill.evals:Nope\n" + CONFIG
    project = make_suite(helper=helper, config=config)
    write(project, {"plug_fill/__init__.py": "", "plug_fill/evals.py": PLUGIN})
    code, out, err = cli("compare", "--local", cwd=project)
    # scorer: names a missing class, but the helper already set one, so the key is never read
    assert code == 0, err
    assert "100.0%" in out


def test_unknown_adapter_name_and_bad_spec(make_suite, cli) -> None:
    project = make_suite(
        helper=None,
        config="require: plug_bad.evals\nadapter: plug_bad.evals:Adaptr\nscorer: plug_bad.evals:Scorer\n" + CONFIG,
    )
    write(project, {"plug_bad/__init__.py": "", "plug_bad/evals.py": PLUGIN})
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert 'adapter: plug_bad.evals:Adaptr: module plug_bad.evals has no Adaptr (did you mean "Adapter"?)' in err
    (project / "evals" / ".agent-eval.config.yml").write_text("adapter: nodots\nscorer: x:Y\n" + CONFIG)
    code, _, err = cli("cases")
    assert code == 2 and "adapter: nodots is not of the form package.module:Class" in err


@pytest.mark.parametrize("command", [["cases"], ["compare", "-n"], ["compare", "--local"]])
def test_an_adapter_key_naming_no_adapter_is_refused_before_the_network(make_suite, cli, monkeypatch, command) -> None:
    # OpenRouter unreachable (nothing listens there): the suite's own fault is named first, not the network
    monkeypatch.setenv("OPENROUTER_BASE_URL", "http://127.0.0.1:9/api/v1")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    lineup = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"
    project = make_suite(helper=None, config="adapter: os:sep\nscorer: agent_evals:Scorer\n" + lineup)
    code, out, err = cli(*command, cwd=project)
    assert (code, out) == (2, ""), err
    assert err.strip() == (
        "error: evals/.agent-eval.config.yml: adapter: os:sep is '/', not an Adapter; name its class as module:Class"
    )


def test_no_adapter_or_scorer_names_file_and_keys(make_suite, cli) -> None:
    project = make_suite(helper="import agent_evals\n")
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert "no suite is configured: no adapter and scorer" in err
    assert "configure(adapter=..., scorer=...)" in err and "adapter: and scorer:" in err
    one = make_suite(helper="import agent_evals as ae\nae.configure(adapter=ae.EchoAdapter())\n")
    code, _, err = cli("cases", cwd=one)
    assert code == 2 and "no scorer; register it in evals/eval_helper.py with configure(scorer=...)" in err
    assert "or name it with scorer: in evals/.agent-eval.config.yml (or its .json)" in err


def test_helper_that_raises_is_one_line_with_file_and_line(make_suite, cli) -> None:
    project = make_suite(helper="import agent_evals\n\nraise RuntimeError('boom')\n")
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert err.strip() == "error: evals/eval_helper.py:3 raised RuntimeError: boom"
    code, _, err = cli("cases", "--debug")
    assert code == 2 and "Traceback" in err


def test_plugin_that_raises_on_import_or_construction(make_suite, cli) -> None:
    project = make_suite(
        helper=None, config="require: plug_raise\nadapter: plug_ctor:A\nscorer: plug_ctor:A\n" + CONFIG
    )
    write(
        project,
        {
            "plug_raise.py": "raise ValueError('bad plugin')\n",
            "plug_ctor.py": "class A:\n    def __init__(self):\n        raise OSError('no')\n",
        },
    )
    code, _, err = cli("cases", cwd=project)
    assert code == 2 and "require: importing plug_raise raised ValueError: bad plugin" in err
    (project / "evals" / ".agent-eval.config.yml").write_text("adapter: plug_ctor:A\nscorer: plug_ctor:A\n" + CONFIG)
    code, _, err = cli("cases")
    assert code == 2 and "adapter: plug_ctor:A() raised OSError: no" in err


def test_missing_config_file(make_suite, cli) -> None:
    project = make_suite(config=None)
    code, _, err = cli("cases", cwd=project)
    assert code == 2 and "evals/.agent-eval.config.yml: not found" in err and "request_types" in err


def test_config_flag_uses_another_lineup(make_suite, cli) -> None:
    project = make_suite()
    write(project, {"other.yml": "request_types: [prompt]\nvendors:\n  fake:\n    - model: parrot\n"})
    code, out, err = cli("compare", "-n", "-C", "other.yml", cwd=project)
    assert code == 0, err
    assert "fake/parrot" in out and "fake/echo" not in out


def test_scorer_metrics_are_checked(make_suite, cli) -> None:
    for body, message in [
        ("return []", "must return a non-empty list of Metric"),
        ("return [ae.Metric('a'), ae.Metric('a')]", "declares a name twice"),
        ("return [ae.Metric('a', aggregate='median')]", "aggregate 'median' is not supported"),
        ("raise KeyError('x')", "metrics() raised KeyError"),
    ]:
        helper = (
            "import agent_evals as ae\nclass S(ae.Scorer):\n    def metrics(self):\n        "
            + body
            + "\nae.configure(adapter=ae.EchoAdapter(), scorer=S())\n"
        )
        project = make_suite(helper=helper)
        code, _, err = cli("cases", cwd=project)
        assert code == 2 and message in err, err


def test_verbose_names_the_suite(make_suite, cli) -> None:
    project = make_suite()
    code, _, err = cli("cases", "-v", cwd=project)
    assert code == 0 and "note: suite t at evals; lineup evals/.agent-eval.config.yml" in err


def test_a_suite_loaded_twice_in_one_process_keeps_what_its_modules_register(tmp_path, cli, monkeypatch) -> None:
    # the toy suite registers its fake provider when its package is imported; the second
    # main() must import it again, not send fake/echo to OpenRouter
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    project = tmp_path / "toy"
    shutil.copytree(ROOT / "examples" / "toy_suite", project, ignore=shutil.ignore_patterns("log"))
    monkeypatch.syspath_prepend(str(project))
    for name in [m for m in sys.modules if m == "toy_suite" or m.startswith("toy_suite.")]:
        monkeypatch.delitem(sys.modules, name)  # the first load imports the copy's package
    for _ in range(2):
        code, out, err = cli("compare", "--local", cwd=project)
        assert code == 0, err
        assert "fake/parrot" in out and "OPENROUTER_API_KEY" not in err


def test_a_model_id_never_falls_through_to_openrouter(make_suite, cli, monkeypatch) -> None:
    # FakeProvider serves fake/...; a suite that forgot to register it is told so by name
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test")
    project = make_suite(
        helper=PLUGIN.replace("ae.configure(providers=[ae.FakeProvider()])", "")
        + "\nae.configure(adapter=Adapter(), scorer=Scorer())\n"
    )
    code, out, err = cli("compare", "--local", cwd=project)
    assert code == 2 and out == ""
    assert "fake/echo is served by FakeProvider (fake/...), which this suite does not register" in err
    assert "configure(providers=[FakeProvider()])" in err


JSON_CONFIG = '{"request_types": ["prompt"], "defaults": {"repeat": 1}, "vendors": {"fake": [{"model": "echo"}]}}'


def test_a_json_config_is_found_and_read_like_the_yaml_one(make_suite, cli) -> None:
    # written by an editor that starts the file with a byte-order mark
    project = make_suite(config=None, extra={"evals/.agent-eval.config.json": "\ufeff" + JSON_CONFIG})
    code, out, err = cli("compare", "--local", cwd=project / "evals")
    assert code == 0, err
    assert "│ ds      │ fake/echo │" in out
    lineup = project / "lineup.json"
    lineup.write_text(JSON_CONFIG.replace('"repeat": 1', '"repeat": 2'))
    code, out, err = cli("compare", "--local", "-n", "-C", str(lineup))
    assert code == 0 and "8 case runs" in out, err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"request_types": ["prompt"],}', "line 1, column 30: invalid JSON: Expecting property name"),
        ('{"request_types": ["prompt"], "request_types": []}', "invalid JSON: the key 'request_types' is given twice"),
        ("[1, 2]", "expected a mapping of keys (request_types:, vendors:, ...), got list"),
        ('{"request_types": ["prompt"], "defaults": {"repeat": NaN}}', "defaults.repeat: expected a whole number"),
        ("[" * 100_000, "invalid JSON: nested too deep"),
    ],
    ids=["trailing comma", "key twice", "a list", "NaN", "deep"],
)
def test_a_bad_json_config_is_one_line_naming_the_file(make_suite, cli, text, message) -> None:
    project = make_suite(config=None, extra={"evals/.agent-eval.config.json": text})
    code, out, err = cli("cases", cwd=project)
    assert code == 2 and out == ""
    assert err.startswith("error: evals/.agent-eval.config.json: ") and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_yaml_and_a_json_config_side_by_side_are_refused(make_suite, cli) -> None:
    project = make_suite(extra={"evals/.agent-eval.config.json": JSON_CONFIG})
    code, _, err = cli("cases", cwd=project)
    assert code == 2
    assert "both .agent-eval.config.yml and .agent-eval.config.json; keep one of them" in err


def test_the_helper_variable_is_named_and_a_folder_is_a_suite(make_suite, cli, monkeypatch, tmp_path) -> None:
    project = make_suite()
    monkeypatch.setenv("AGENT_EVALS_HELPER", "missing.py")
    code, _, err = cli("cases", cwd=tmp_path)
    assert code == 2 and err.startswith("error: AGENT_EVALS_HELPER missing.py: no such file;"), err
    code, _, err = cli("cases", "--helper", "missing.py")
    assert code == 2 and err.startswith("error: --helper missing.py: no such file;"), err
    monkeypatch.delenv("AGENT_EVALS_HELPER")
    for folder in (project / "evals", project):  # the evals/ folder, or the project that holds it
        code, out, err = cli("cases", "--helper", str(folder), cwd=tmp_path)
        assert code == 0 and "│ ds      │ a/001 │" in out, err
    code, _, err = cli("cases", "--helper", str(tmp_path / "project" / "evals" / "datasets"))
    assert code == 2 and "a folder with neither eval_helper.py nor .agent-eval.config.yml" in err


def test_reloading_a_suite_never_forgets_the_interpreters_own_modules(monkeypatch) -> None:
    # a project folder that holds the interpreter itself (a suite in a home folder with pyenv)
    import json as json_module
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    kept = dict(sys.modules)
    monkeypatch.setattr(sys, "modules", kept)
    ae._forget_modules(under=stdlib.parent.parent)
    assert kept["json"] is json_module and "threading" in kept and "agent_evals" in kept

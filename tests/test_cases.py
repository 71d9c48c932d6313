"""Cases on disk: layout, ids, metadata, selection with -d and -c, and verify."""

from __future__ import annotations

import json

import agent_evals as ae
from conftest import case_files, read_logs


def test_layout_ids_and_metadata(make_suite, cli) -> None:
    cases = {
        **case_files("animals", "clear/001", {"a": 1}),
        **case_files("animals", "single", {"a": 2}),
        **case_files("colors", "vague/010", {"a": 3}),
        "evals/datasets/colors/cases/vague/010/metadata.json": json.dumps({"difficulty": "hard", "source": "x"}),
    }
    project = make_suite(cases=cases)
    code, out, err = cli("cases", cwd=project)
    assert code == 0, err
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│ ")]
    assert rows == [
        ["dataset", "id", "difficulty", "summary", "words"],
        ["animals", "clear/001", "clear", "1 fields", "6"],
        ["animals", "single", "single", "1 fields", "6"],
        ["colors", "vague/010", "hard", "1 fields", "6"],
    ]


def test_selection_by_dataset_and_case(make_suite, cli) -> None:
    cases = {**case_files("animals", "clear/001", {"a": 1}), **case_files("animals", "clear/002", {"a": 1})}
    cases |= {**case_files("animals", "vague/001", {"a": 1}), **case_files("colors", "clear/001", {"a": 1})}
    project = make_suite(cases=cases)

    def ids(*argv: str) -> list[str]:
        code, out, err = cli("cases", *argv, cwd=project)
        assert code == 0, err
        return [line.split("│")[2].strip() for line in out.splitlines()[3:-1]]

    assert ids("-d", "animals") == ["clear/001", "clear/002", "vague/001"]
    assert ids("-d", "animals", "-c", "clear") == ["clear/001", "clear/002"]
    assert ids("-c", "clear/002") == ["clear/002"]
    assert ids("-c", "vague/001,colors/clear/001") == ["vague/001", "clear/001"]
    assert ids("-d", "colors,animals", "-c", "vague") == ["vague/001"]
    code, _, err = cli("cases", "-d", "animal")
    assert code == 2 and 'error: -d animal: no such dataset (did you mean "animals"?); known: animals, colors' in err
    code, _, err = cli("cases", "-c", "clear/003")
    assert code == 2 and "-c clear/003: no case or variant matches" in err


def test_glob_matching_nothing(make_suite, cli) -> None:
    project = make_suite(cases={"evals/datasets/README": "nothing"})
    code, _, err = cli("cases", cwd=project)
    assert code == 2 and "no cases match datasets/*/cases/**/input.txt under evals" in err


def test_custom_glob_from_the_config(make_suite, cli) -> None:
    project = make_suite(
        config="request_types: [prompt]\ncases: 'suites/*/cases/**/input.txt'\nvendors:\n  fake:\n    - model: echo\n",
        cases={
            "evals/suites/x/cases/v/001/input.txt": 'A {"a": 1}',
            "evals/suites/x/cases/v/001/expected.json": '{"a": 1}',
        },
    )
    code, out, err = cli("cases", cwd=project)
    assert code == 0, err
    assert "│ x       │ v/001 │" in out


def test_verify_reports_every_problem_with_its_path(make_suite, cli) -> None:
    cases = {
        **case_files("ds", "a/001", {"v": 1}),
        "evals/datasets/ds/cases/a/002/input.txt": "   \n",
        "evals/datasets/ds/cases/a/002/expected.json": '{"v": 2}',
        "evals/datasets/ds/cases/a/003/input.txt": "text",
        "evals/datasets/ds/cases/a/004/input.txt": "text",
        "evals/datasets/ds/cases/a/004/expected.json": '{"v": ',
        "evals/datasets/ds/cases/a/005/input.txt": b"caf\xe9\n",
        "evals/datasets/ds/cases/a/005/expected.json": '{"v": 5}',
        "evals/datasets/ds/cases/a/006/input.txt": "text",
        "evals/datasets/ds/cases/a/006/expected.json": '{"v": 6}',
        "evals/datasets/ds/cases/a/006/metadata.json": "[1]",
        "evals/datasets/ds/cases/a/007/input.txt": "text",
        "evals/datasets/ds/cases/a/007/expected.json": b'{"v": "\xff"}',
    }
    project = make_suite(cases=cases)
    code, out, err = cli("verify", cwd=project)
    assert code == 1, err
    base = "evals/datasets/ds/cases/a"
    assert out.splitlines() == [
        f"{base}/002/input.txt: empty input",
        f"{base}/003/expected.json: missing",
        f"{base}/004/expected.json: line 1, column 7: invalid JSON: Expecting value",
        f"{base}/005/input.txt: not UTF-8 text (invalid continuation byte at byte 3); save it as UTF-8",
        f"{base}/006/metadata.json: expected an object, got list",
        f"{base}/007/expected.json: not UTF-8 text (invalid start byte at byte 7)",
        "6 problems in 7 cases, 1 dataset",
    ]
    code, out, _ = cli("verify", "-c", "a/001")
    assert code == 0 and out.strip() == "ok: 1 case, 1 dataset, 1 contender"


def test_verify_runs_the_adapter_and_scorer_checks(make_suite, cli) -> None:
    helper = """
import agent_evals as ae
SCHEMA = {"v": {"type": "integer"}}
class A(ae.EchoAdapter):
    def prepare(self, dataset):
        self.dataset = dataset
    def context(self, case):
        return {"schema": SCHEMA}
    def verify(self, dataset):
        return ["the prompt has no examples"] if dataset == "ds" else []
class S(ae.Scorer):
    def verify(self, case, context):
        if case.id == "b/002":
            raise ValueError("cannot read")
        return ae.SchemaValidator(context["schema"]).problems(case.expected)
ae.configure(adapter=A(), scorer=S(), providers=[ae.FakeProvider()])
"""
    cases = {
        **case_files("ds", "a/001", {"v": 1}),
        **case_files("ds", "b/001", {"v": "x"}),
        **case_files("ds", "b/002", {"v": 2}),
    }
    project = make_suite(
        helper=helper, cases=cases, config="request_types: [prompt]\nvendors:\n  fake:\n    - model: eco\n"
    )
    code, out, _ = cli("verify", cwd=project)
    assert code == 1
    assert out.splitlines() == [
        'fake/eco: provider fake has no such model (did you mean "fake/echo"?)',
        "ds: the prompt has no examples",
        'evals/datasets/ds/cases/b/001/expected.json: v: expected an integer, got "x"',
        "evals/datasets/ds/cases/b/002/expected.json: scorer S.verify raised ValueError: cannot read",
        "4 problems in 3 cases, 1 dataset",
    ]


def test_a_dataset_the_adapter_does_not_know_is_one_line_not_one_per_case(make_suite, cli) -> None:
    """The toy scorer copied for a new dataset: its adapter says why first, and the KeyError
    its context raises for every case is one line with their count."""
    helper = """
import agent_evals as ae
SCHEMAS = {"known": {"v": {"type": "integer"}}}
class A(ae.EchoAdapter):
    def context(self, case):
        return {"schema": SCHEMAS[case.dataset]}
    def verify(self, dataset):
        return [] if dataset in SCHEMAS else [f"no schema for dataset {dataset}; add it to SCHEMAS"]
class S(ae.Scorer):
    def verify(self, case, context):
        return ae.SchemaValidator(context["schema"]).problems(case.expected)
ae.configure(adapter=A(), scorer=S(), providers=[ae.FakeProvider()])
"""
    cases = {k: v for n in range(1, 31) for k, v in case_files("mine", f"a/{n:03d}", {"v": n}).items()}
    project = make_suite(helper=helper, cases=cases)
    code, out, _ = cli("verify", cwd=project)
    assert code == 1
    assert out.splitlines() == [
        "mine: no schema for dataset mine; add it to SCHEMAS",
        "evals/datasets/mine/cases/a/001/expected.json: adapter A.context raised KeyError: 'mine' "
        "(and 29 more cases of mine alike)",
        "2 problems in 30 cases, 1 dataset",
    ]


def test_verify_reports_a_failing_adapter_per_dataset(make_suite, cli) -> None:
    helper = """
import agent_evals as ae
class A(ae.EchoAdapter):
    def verify(self, dataset):
        raise RuntimeError("schema file missing")
ae.configure(adapter=A(), scorer=ae.Scorer(), providers=[ae.FakeProvider()])
"""
    project = make_suite(helper=helper)
    code, out, _ = cli("verify", cwd=project)
    assert code == 1 and "ds: adapter A raised RuntimeError: schema file missing" in out


def test_summary_that_raises_is_shown_not_fatal(make_suite, cli) -> None:
    helper = """
import agent_evals as ae
class S(ae.Scorer):
    def summary(self, case):
        return {}["x"]
ae.configure(adapter=ae.EchoAdapter(), scorer=S(), providers=[ae.FakeProvider()])
"""
    project = make_suite(helper=helper)
    code, out, _ = cli("cases", cwd=project)
    assert code == 0 and "summary raised KeyError: 'x'" in out


def test_a_run_reads_each_case_as_it_goes_and_names_what_was_wrong_after(make_suite, cli) -> None:
    base = "evals/datasets/ds/cases/a"
    cases = {**case_files("ds", "a/001", {"v": 1}), **case_files("ds", "a/002", {"v": 2})}
    cases |= {f"{base}/003/input.txt": 'Answer: {"v": 3}', f"{base}/003/expected.json": '{"v": '}
    cases |= {f"{base}/004/expected.json": '{"v": 4}'}
    project = make_suite(cases=cases)
    (project / base / "004" / "input.txt").symlink_to(project / "nowhere.txt")  # found, but cannot be read
    code, out, err = cli("compare", "--local", cwd=project)
    assert "│ 66.7% [20.8–93.9] │" in out and "│      1 │  50.0% │" in out  # a/004 is an error, a/003 a 0
    assert code == 0, err
    assert f"warning: {base}/003/expected.json: line 1, column 7: invalid JSON: Expecting value" in err
    assert f"warning: {base}/004/input.txt: cannot be read (No such file or directory)" in err
    assert err.index("003/expected.json") < err.index("004/input.txt")  # in case order
    (log,) = read_logs(project)
    rows = {row["case"]: row for row in log["rows"]}
    assert sorted(rows) == ["a/001", "a/002", "a/003", "a/004"]
    assert [rows[c]["score"] for c in ("a/001", "a/002", "a/003", "a/004")] == [1.0, 1.0, 0.0, None]
    # an input that cannot be read is never sent as an empty prompt: the case's error, naming the file
    assert rows["a/004"]["error"] == f"SuiteError: {base}/004/input.txt: cannot be read (No such file or directory)"
    code, _, err = cli("compare", "-n", cwd=project)  # a dry run reads them all to say so too
    assert code == 0 and f"{base}/004/input.txt: cannot be read" in err


def test_cases_are_read_when_first_asked_for(make_suite, monkeypatch) -> None:
    project = make_suite()
    monkeypatch.chdir(project)
    suite = ae._load_suite(str(project / "evals" / "eval_helper.py"), None)
    found, twice = ae._find_cases(suite)
    cases = ae._Cases(found)
    assert cases.ids == ["a/001", "a/002", "b/001", "b/002"] and twice == []
    (project / "evals/datasets/ds/cases/b/002/expected.json").write_text('{"v": "changed"}')
    (project / "evals/datasets/ds/cases/a/002/input.txt").unlink()
    assert cases[3].expected == {"v": "changed"}  # read now, not when found
    assert cases[1].input == "" and [c.id for c in cases[0:2]] == ["a/001", "a/002"]
    assert cases.problems() == [
        ("ds/a/002", "evals/datasets/ds/cases/a/002/input.txt: cannot be read (No such file or directory)")
    ]
    assert cases[3] is cases[3]  # read once


def test_cases_run_in_path_order_folder_by_folder(make_suite, monkeypatch) -> None:
    # "x" < "x-y" < "x0" as folders, though "x/" sorts after "x-" as text; a folder's own
    # input.txt comes before those of its subfolders
    cases = {}
    for case_id in ("x0/001", "x-y/001", "x/002", "x/001", "x", "w/b/001", "w-a/001"):
        cases |= case_files("ds", case_id, {"id": case_id})
    project = make_suite(cases=cases)
    monkeypatch.chdir(project)
    suite = ae._load_suite(str(project / "evals" / "eval_helper.py"), None)
    found, _ = ae._find_cases(suite)
    assert [f.folder.split("cases/", 1)[1] for f in found] == [
        "w/b/001",
        "w-a/001",
        "x",
        "x/001",
        "x/002",
        "x-y/001",
        "x0/001",
    ]

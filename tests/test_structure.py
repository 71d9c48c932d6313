"""The module's structure, read from its source: its size in code tokens, functions and the
limiter's class within their lines, each section using only what stands above it, the runner's
table of case runs moved in one place, and no hidden channels between the parts (#49, #67, #73)."""

from __future__ import annotations

import ast
import re

import pytest

import agent_evals as ae
from conftest import ROOT

# The module's size, in code tokens (names, operators, literals: comments and layout do not count,
# so packing lines saves nothing). Each change that moves it says what paid for it: `git log -p
# tests/test_structure.py tests/test_api.py` has the history (in test_api.py until #73 moved the
# structure tests here), with the line counts that stood here before #49.
# #71's planned sample, label's questions and its sequence, Fisher's flag: +3,600; #72's catalog,
# lost batches, the server's numbers and the kept pace: +1,150; #71's judge probability (asked,
# read at the verdict's token, logged, and the prediction labels correct): +906; #74's label
# saying the judge's verdict as right or wrong, and that Enter sends: +7; #74's cases that flipped
# (terminal, summary, JSON) and the comparison in the HTML report: +1,118; #74's shorter default (the
# metrics' glossary, -v for every column's; a two-line note under a comparison): +105; #74's small
# items (report's newest run, a capped error line, label's SIGTERM, the missing piece named, widths in
# terminal cells, a baseline's stamp, runs fitted, a resume's forecast, a judge's non-verdict never
# cached; label's answer read beside the signals): +510; the review: the run's records made once for the
# comparison and its upstream lines, its printing a function of its own (_print_results within 60 lines): +47
# #74: one dataset's leaderboard as one line of places, not its table again: +56; every answer from one
# model other than the one asked (a batch's too), named: +104; #73: the collector's thresholds left as
# the caller set them, a caller's freeze kept, no freeze at exit: -26; #73's channels closed (the credit a
# forecast found is a step of its own, _Credit, not an attribute left on the provider; a call's model
# made by Model's constructor, not object.__new__): +176; #73: a case run's moves a compare-and-set
# against the declared _MOVES, an undeclared one raising (the five call sites' own guards gone): +94;
# #72: a slow start's refused clump paces at half of it: +14; the review: report with no LOG looks for a run
# itself, where it caught an error by its words: +18
# #71: label's question of two sides asks, past every side's own sample, only the answers that differ
# (paired labels: the difference corrected over them, a side's sample never grown by them, taken as given
# in turn by label --fixed and any question's own walk): +727
# #72: a cut never under the pace last taken whole, a pace held just under one cut, the next run starting at
# the last pace taken whole (what a cut took no longer kept): +45
# #73: a batch round's decision returned (_Round a value; send handed the case runs put off, which the runner
# holds with what each asked and its round's answers; the batches sent logged through a function; the stop
# said, never set by _Batch; _Decider's verdicts said through one; a replay's answers read without the lock): +116;
# a metric no judge gave skips the labels' truths: +4; #72: a slow start's clump counted whole while its threads
# still start (the first verdict came on 13 of -p 64 sent): +22; the review: a paired label taken in turn by one
# helper, where label's two walks each wrote it: +15
CEILING = 110280
SOURCE = (ROOT / "agent_evals.py").read_text(encoding="utf-8")


def test_the_module_stays_under_its_ceiling() -> None:
    import io
    import tokenize

    layout = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    tokens = tokenize.generate_tokens(io.StringIO(SOURCE).readline)
    assert sum(1 for token in tokens if token.type not in layout) <= CEILING


# Any says "not checked": where a value is only tested or passed on, object is its type, and the
# user-facing values a suite reads (Case.expected, Reply.output, ToolCall.arguments, ...) stay Any.
ANY_CEILING = 130  # 126 at #34's end; #36's logged records of who answered, 3; #62's label queue over logged runs, 1


def test_any_is_kept_to_what_is_not_checked() -> None:

    assert len(re.findall(r"\bAny\b", SOURCE)) <= ANY_CEILING


def test_no_function_runs_past_sixty_lines() -> None:
    # a longer one holds more than one phase: name each (as _cmd_run and _report do)
    long = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(SOURCE))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60
    }
    assert long == {}


def test_the_limiter_is_one_rule_in_a_hundred_lines() -> None:
    # #49: its rule held in one class a reader takes in at once, its constants in one place; #72's floor
    # under a cut (the pace last taken whole) and the hold just under a pace cut: four lines more; a slow
    # start's clump counted whole while its threads still start: one
    (limiter,) = (node for node in ast.parse(SOURCE).body if isinstance(node, ast.ClassDef) and node.name == "_Limiter")
    assert limiter.end_lineno - limiter.lineno + 1 <= 105
    first_method = min(node.lineno for node in limiter.body if isinstance(node, ast.FunctionDef))
    assert all(node.lineno < first_method for node in limiter.body if isinstance(node, ast.Assign))


def _sections() -> tuple[ast.Module, dict[str, tuple[int, str]]]:
    """The parsed module, and each top-level name's (statement index, section title)."""
    tree = ast.parse(SOURCE)
    lines = SOURCE.splitlines()
    titles = [(n + 2, lines[n + 1][2:].split(":")[0]) for n, line in enumerate(lines) if line.startswith("# ═══")][::2]

    def section(lineno: int) -> str:
        return max(((at, title) for at, title in titles if at <= lineno), default=(0, "preamble"))[1]

    defined: dict[str, tuple[int, str]] = {}
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.setdefault(node.name, (i, section(node.lineno)))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined.setdefault(target.id, (i, section(node.lineno)))
    return tree, defined


# attribute names the module's classes define that are also what the standard library's objects carry:
# a Path's or a socket's name and read, a file's write, a queue's put, sys.stderr, an enum's value,
# argparse's args.baseline, email's parse, a module spec's origin
STDLIB_NAMES = {"name", "read", "write", "put", "stderr", "value", "baseline", "parse", "origin"}


def test_no_section_calls_into_a_later_sections_classes_by_attribute() -> None:
    # a method or field that only the classes of a later section define, reached from an earlier one
    # (Model calling _Budget.first_alone was one): the name rule above cannot see an attribute's use
    tree, defined = _sections()
    order = list(dict.fromkeys(title for _, title in sorted(defined.values())))
    stdlib = {name for kind in (dict, str, list, set, bytes, Exception, int, float, tuple, type) for name in dir(kind)}
    sections: dict[str, set[int]] = {}  # attribute name -> the sections whose classes define it
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in ast.walk(node):
                name = item.name if isinstance(item, ast.FunctionDef) else None
                if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                    name = item.attr
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = item.target.id
                if name:
                    sections.setdefault(name, set()).add(order.index(defined[node.name][1]))
    later = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            mine = order.index(defined[node.name][1])
            later |= {
                (node.name, n.attr)
                for n in ast.walk(node)
                if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Load)
                and n.attr not in stdlib | STDLIB_NAMES
                and min(sections.get(n.attr, {-1})) > mine
            }
    assert not later, sorted(later)


def test_each_section_uses_only_what_stands_above_it_but_the_three_stated() -> None:
    tree, defined = _sections()
    order = list(dict.fromkeys(title for _, title in sorted(defined.values())))
    early = set()
    for node in tree.body:
        # annotations are never evaluated (from __future__ import annotations): not a use
        notes = [n.annotation for n in ast.walk(node) if isinstance(n, ast.arg | ast.AnnAssign) and n.annotation]
        notes += [n.returns for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n.returns]
        skip = {id(n) for note in notes for n in ast.walk(note)}
        uses = {
            n.id
            for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in skip
        }
        mine = order.index(defined[node.name][1]) if isinstance(node, ast.FunctionDef | ast.ClassDef) else -1
        early |= {name for name in uses if name in defined and order.index(defined[name][1]) > mine >= 0}
    assert early == {"_builtin_providers", "_builtin_trackers", "LocalTracker"}
    assert order == [
        "preamble",
        "Errors",
        "Small helpers used everywhere",
        "Values",
        "What a suite writes",
        "Discovery and the config file",
        "Cases",
        "The lineup",
        "HTTP/1.1 transport",
        "Built-in providers",
        "Statistics",
        "The response cache",
        "Spend",
        "The runner",
        "Trackers",
        "Logs and journals",
        "Rendering",
        "Baselines, gates and JUnit",
        "The HTML report",
        "Terminal I/O",
        "The command line",
    ]


def test_the_docstrings_map_of_sections_is_the_files_own_order() -> None:
    """The module docstring's map (which the README points to) names every section banner, in
    the file's order: a section moved or added is a map to redraw."""
    lines = SOURCE.splitlines()
    banners = [
        lines[i + 1].removeprefix("# ").split(":")[0].lower()
        for i in range(len(lines) - 2)
        if lines[i].startswith("# ═══") and lines[i + 2].startswith("# ═══") and not lines[i + 1].startswith("# ═══")
    ]
    doc = ae.__doc__ or ""
    listed = doc.split("each section using only what stands above it:\n", 1)[1].split(".\n", 1)[0]
    assert [name.strip().lower() for name in " ".join(listed.split()).split(" · ")] == banners


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    (found,) = (node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)
    return found


def test_the_batch_and_the_decider_never_see_the_runner_and_it_reads_only_their_decisions() -> None:
    # #65: --batch and --until-decided answer what the runner asks, and the runner applies what they decide
    tree = ast.parse(SOURCE)
    runner = _class(tree, "_ExperimentRun")
    fields = {
        node.attr
        for node in ast.walk(runner)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }
    fields -= {"results", "repeat", "steps"}  # also a BatchState's, a ledger's and a model's
    for name in ("_Batch", "_Decider"):
        body = _class(tree, name)
        names = {node.id for node in ast.walk(body) if isinstance(node, ast.Name)}
        names |= {node.arg for node in ast.walk(body) if isinstance(node, ast.arg)}
        annotations = " ".join(
            ast.unparse(node.annotation)
            for node in ast.walk(body)
            if isinstance(node, ast.arg)
            if node.annotation is not None
        )
        assert not names & {"_ExperimentRun", "_Session", "run", "runner", "session"}, name
        assert "_ExperimentRun" not in annotations and "_Session" not in annotations, name
        # what it reads of another object is never one of the runner's fields
        foreign = {
            node.attr
            for node in ast.walk(body)
            if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        }
        assert not foreign & fields, (name, foreign & fields)
    # the runner calls their methods and reads none of their attributes
    parents = {child: node for node in ast.walk(runner) for child in ast.iter_child_nodes(node)}
    calls = 0
    for node in ast.walk(runner):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("self.batch", "self.decider", "decider"):
            assert isinstance(parents[node], ast.Call) and parents[node].func is node, ast.unparse(parents[node])
            calls += 1
    assert calls >= 6


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment, plain or augmented, writes; nothing for any other node."""
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target] if isinstance(node, ast.AugAssign) else []


def test_a_case_runs_state_is_one_entry_of_its_runners_table_moved_in_one_place() -> None:
    # #65: the state of each case run is one entry of _ExperimentRun.state, which _move alone writes; what the
    # experiment needs of the main thread is read off it in one place (next_step), which _settle and advance call
    runner = _class(ast.parse(SOURCE), "_ExperimentRun")
    writers = set()
    for method in runner.body:
        for node in ast.walk(method):
            for target in _targets(node):
                if any(ast.unparse(t).startswith("self.state[") for t in ast.walk(target)):
                    writers.add(getattr(method, "name", ""))
    assert writers == {"_move"}
    for name in ("_settle", "advance"):
        text = ast.unparse(next(m for m in runner.body if getattr(m, "name", "") == name))
        assert "self.next_step()" in text and not re.search(r"self\.(active|blocked|wanted|inflight)\b", text)
    assert ae._ExperimentRun.next_step.__doc__ and "finish" in ae._ExperimentRun.next_step.__doc__


def test_a_case_run_moves_only_as_the_table_allows_and_a_lost_race_is_no_move() -> None:
    # #73: _move is a compare-and-set against the declared moves, as concurrent.futures.Future refuses a
    # state change it does not expect: a move from another state than named is no move, one not declared raises
    from types import SimpleNamespace

    move, row = getattr(ae._ExperimentRun._move, "__wrapped__", ae._ExperimentRun._move), SimpleNamespace(state=["x"])
    row.state = [ae._RUNNING]
    assert not move(row, 0, ae._PUT_OFF, ae._WAITING) and row.state == [ae._RUNNING]
    assert move(row, 0, ae._DONE, ae._RUNNING) and row.state == [ae._DONE]
    for to in (ae._RUNNING, ae._STOPPED, ae._WAITING):  # a finished case run never moves again
        with pytest.raises(AssertionError, match="no move from done to"):
            move(row, 0, to)
    assert (ae._PUT_OFF, ae._RUNNING) not in ae._MOVES and (ae._PUT_OFF, ae._REPLAYING) in ae._MOVES


def test_what_a_run_is_given_is_whole_when_built() -> None:
    # #65: the plan is frozen (a stage that learns more makes a new one); an experiment's inputs, a
    # ledger's and a session's fields are set by their constructors alone; an experiment's outcome
    # (its rows, its duration, why it stopped) is what its runner writes, and the log reader rebuilds
    assert ae._Plan.__dataclass_params__.frozen  # type: ignore[attr-defined]
    tree = ast.parse(SOURCE)
    inputs = {"contender", "provider", "dataset", "cases", "parallelism", "repeat", "order", "max_turns"}
    inputs |= {"keep_raw", "labels", "name"}
    held = {"experiment", "self.experiment", "run.experiment", "ledger", "model.ledger", "session", "run.run"}
    typed = {"_Session", "_Ledger", "Experiment"}
    set_after = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.name == "__init__":
            continue
        names = set(held) | {a.arg for a in function.args.args if a.annotation and ast.unparse(a.annotation) in typed}
        for node in ast.walk(function):
            for target in (t for t in _targets(node) for t in (t.elts if isinstance(t, ast.Tuple) else [t])):
                if isinstance(target, ast.Attribute) and ast.unparse(target.value) in names:
                    whose = ast.unparse(target.value)
                    if "experiment" not in whose or target.attr in inputs:
                        set_after.append(f"{function.name}: {ast.unparse(target)}")
    assert set_after == []


def test_no_hidden_channels() -> None:
    # #65: what a step or a figure needs is handed to it: no context variable carries a call or a
    # judge, and no dict subclass carries state beside its items (labels ride on _Values as fields)
    tree = ast.parse(SOURCE)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert "ContextVar" not in names and "contextvars" not in names
    dicts = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for base in node.bases
        if ast.unparse(base).split("[")[0] in ("dict", "collections.OrderedDict", "OrderedDict", "defaultdict")
    ]
    assert dicts == []
    assert not issubclass(ae._Values, dict) and {"by_unit", "labels", "answers"} <= set(ae._Values.__slots__)
    # #73: the credit a forecast found reaches what sends as a step of its own, not as an attribute
    # left on the provider for a later send to find; a call's model is made by its constructor
    calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "object.__new__" not in calls and "credit" not in vars(ae.OpenRouter())
    assert not [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr == "credit" and ast.unparse(n.value) == "provider"
    ]


def test_a_batch_round_returns_its_decision_and_neither_part_stops_the_run_or_fills_what_it_was_handed() -> None:
    # #73: _Batch holds what is the batch's, not a case run's; it is handed the case runs put off and its send
    # returns the _Round; it and _Decider say why the run should stop, never stop it, and write nothing they
    # were handed (a list, a round): what they report goes through a function the runner hands in (a step's
    # before and after answer the call they are handed, as every step of a model call does)
    tree = ast.parse(SOURCE)
    batch = _class(tree, "_Batch")
    fields = {t.attr for node in ast.walk(batch) for t in _targets(node) if isinstance(t, ast.Attribute)}
    fields |= {
        e.attr
        for node in ast.walk(batch)
        for t in _targets(node)
        if isinstance(t, ast.Tuple)
        for e in t.elts
        if isinstance(e, ast.Attribute)
    }
    assert not fields & {"waiting", "fresh", "replay", "round"}, fields
    send = next(n for n in batch.body if isinstance(n, ast.FunctionDef) and n.name == "send")
    assert send.returns is not None and ast.unparse(send.returns) == "_Round"
    for name in ("_Batch", "_Decider"):
        body = _class(tree, name)
        for method in (n for n in body.body if isinstance(n, ast.FunctionDef) and n.name not in ("before", "after")):
            given = {a.arg for a in method.args.args[1:]}
            for node in ast.walk(method):
                for target in _targets(node):
                    for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                        written = t.value if isinstance(t, ast.Attribute | ast.Subscript) else None
                        assert not (isinstance(written, ast.Name) and written.id in given), (name, ast.unparse(t))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    receiver = ast.unparse(node.func.value)
                    assert not (node.func.attr == "set" and receiver.endswith("stop")), (name, ast.unparse(node))
                    assert not (node.func.attr in ("append", "extend") and receiver.split(".")[-1] in given), name

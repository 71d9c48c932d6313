"""agent-evals: the eval harness every LLM project ends up writing, written once.

A suite is an adapter that calls your real prompt builder and parser, a scorer that
turns a reply into declared metrics, and folders of cases. List the models and
settings to compare in ``evals/.agent-eval.config.yml`` and get an honest leaderboard:
score per metric, errors, time, tokens, cost, and the cheapest contender within two
points of the top.

    $ cd examples/toy_suite && agent-evals compare --local

A suite's ``evals/eval_helper.py``::

    from pathlib import Path
    from agent_evals import Adapter, Metric, Reply, Score, Scorer, configure

    class MyAdapter(Adapter):
        def call(self, case, model):
            completion = model.complete(user=case.input, json=True)
            return Reply(output=my_parser(completion.text), raw=completion.text,
                         usage=completion.usage)

    class MyScorer(Scorer):
        def metrics(self):
            return [Metric("exact", "1 when the answer is right.", primary=True)]

        def call(self, case, reply, context):
            right = float(reply.output == case.expected)
            return Score(value=right, metrics={"exact": right})

    configure(suite="mine", root=Path(__file__).parent,
              adapter=MyAdapter(), scorer=MyScorer())

The failure rules: ``Reply(error=...)`` is the model's failure and scores 0; an
exception from the adapter or the provider is an error, counted and never scored; a
metric of ``None`` does not apply and is skipped in its mean; a contender whose
request type the suite does not declare is refused by name, never scored.

Standard library only; PyYAML reads the config file. Public names: ``__all__``.

The file reads top to bottom, each section using only what stands above it:
errors · small helpers used everywhere · values · what a suite writes · discovery and the
config file · cases · the lineup · HTTP/1.1 transport · built-in providers · statistics ·
the response cache · spend · the runner · trackers · logs and journals · rendering ·
baselines, gates and JUnit · the HTML report · terminal I/O · the command line.

Three names are used before their section (``tests/test_api.py`` keeps the count):
discovery lists the built-in providers and trackers (``_builtin_providers``,
``_builtin_trackers``), and the runner tells the local log's write failures apart
(``LocalTracker``).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [
    # values
    "Case",
    "Completion",
    "Contender",
    "Experiment",
    "Metric",
    "Reply",
    "RunResult",
    "Score",
    "Summary",
    "Usage",
    "BatchState",
    "ToolCall",
    "ToolRun",
    # what a suite subclasses or calls
    "Adapter",
    "Model",
    "Provider",
    "SchemaValidator",
    "Scorer",
    "Tracker",
    "Judge",
    "configure",
    "run_tools",
    # built in
    "REQUEST_TYPES",
    "EchoAdapter",
    "FakeModel",
    "FakeProvider",
    "Braintrust",
    "LocalTracker",
    "Logfire",
    "LiteLLM",
    "LocalServer",
    "OpenRouter",
    "TypeSafe",
    # errors
    "ConfigError",
    "EvalError",
    "MissingDependency",
    "ProviderError",
    "SuiteError",
    # the command line
    "main",
]

import contextlib
import signal
import sys

# Run as a program (agent-evals, python -m agent_evals): a Ctrl-C while the module is still
# loading exits 130 quietly, as one during a run does; main() puts its own handler in place.
# (So the imports below follow code: E402 is off for this file.)
if __name__ == "__main__" or sys.argv[0].rpartition("/")[2].startswith("agent-evals"):
    with contextlib.suppress(ValueError):  # loaded off the main thread: its signals are not its own
        signal.signal(signal.SIGINT, lambda *_: sys.exit(130))

import argparse
import atexit
import collections
import dataclasses
import functools
import importlib
import inspect
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Collection, ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from pathlib import Path

TYPE_CHECKING = False  # typing is for the checker only: importing it would slow every start
if TYPE_CHECKING:
    from typing import Any, ClassVar, TextIO, TypeVar

    _T = TypeVar("_T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_EXIT_CODES = (
    (EXIT_OK, "the command did its job (errors inside a run are reported, not fatal)"),
    (
        EXIT_FAILED,
        "verify found problems, a gate failed, a contender got no answer at all (every case raised), a "
        "dataset's prepare failed, the provider stopped the run (a refused key, no credits), the budget was "
        "reached, a file of the run could not be written, or agent-evals itself failed",
    ),
    (EXIT_USAGE, "usage or configuration error, before any model is called"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); what finished is kept"),
    (143, "ended by SIGTERM (129: SIGHUP) as by Ctrl-C: what finished is kept"),
)

CONFIG_NAME = ".agent-eval.config.yml"
LOG_DIR = Path("log", "agent-evals")  # under the project root: logs, journals, the cache
CONFIG_JSON = ".agent-eval.config.json"  # the same keys as JSON: read with the standard library alone
HELPER_NAME = "eval_helper.py"
DEFAULT_CASES = "datasets/*/cases/**/input.txt"
BEST_VALUE_MARGIN = 0.02  # "within two points of the top", on a 0..1 scale

# The request types the built-in providers answer (the original's Config::REQUEST_TYPES);
# a suite's own provider may add one, and --help lists those of the suite found.
REQUEST_TYPES = ("prompt", "typesafe")

# Reasoning efforts a lineup may name. "default" sends none, leaving the model's own.
EFFORTS = ("default", "none", "minimal", "low", "medium", "high", "xhigh", "max")
# OpenRouter's service tiers (OpenAI's names), and what each does to the listed price (the standard
# tier's) in a forecast: the least and the most it multiplies it by (None: no bound known), and the note
# that says so. Flex is about half where offered (the standard price where not); priority and scale can
# cost more, as can ``:nitro`` (the fastest upstream, which may be a priority one)
TIERS: dict[str, tuple[float, float | None, str]] = {
    "auto": (1.0, 1.0, ""),
    "default": (1.0, 1.0, ""),
    "flex": (0.5, 1.0, ", flex at half"),
    "priority": (1.0, None, ", a dearer tier"),
    "scale": (1.0, None, ", a dearer tier"),
}


@dataclass(frozen=True, eq=False)
class _Setting:
    """One run setting, declared once: the config file's check, the flag's type, the
    ``--help`` line and the shell completion all read it from ``_SETTINGS``."""

    key: str  # defaults.<key> in the config file; "" when only the flag sets it
    flags: tuple[str, ...]  # the run/compare flags; () when only the config file sets it
    kind: str  # choices | temperatures | whole | seconds | number | switch
    default: Any  # what applies when neither the flag nor the config file sets it
    help: str
    low: int = 0  # the least a whole number may be
    high: int | None = None  # the most a whole number may be: past it, a typo would build
    # a run in memory that no machine holds (cases x repeats) or open more threads than exist
    metavar: str = "N"
    transport: bool = False  # an attribute of every provider (timeout, retries, ...)
    entry: bool = False  # a lineup entry may set it too, for its own contenders
    choices: tuple[str, ...] = ()  # kind choices: the names it takes, a contender each


_SETTINGS = (
    _Setting(
        "effort",
        ("-e", "--effort"),
        "choices",
        "default",
        "reasoning effort, or a comma list",
        metavar="EFFORT",
        entry=True,
        choices=EFFORTS,
    ),
    _Setting(
        "service_tier",
        ("--service-tier",),
        "choices",
        None,
        "OpenRouter's service tier, or a comma list (none: the server's own)",
        metavar="TIER",
        entry=True,
        choices=tuple(TIERS),
    ),
    _Setting(
        "temperature",
        ("-t", "--temperature"),
        "temperatures",
        None,
        "temperature 0..2, or a comma list",
        metavar="T",
        entry=True,
    ),
    _Setting("max_tokens", ("--max-tokens",), "whole", None, "output token limit", low=1, high=10_000_000, entry=True),
    _Setting("parallelism", ("-p", "--parallelism"), "whole", 4, "cases in flight per experiment", low=1, high=4096),
    _Setting(
        "",
        ("-j", "--concurrency"),
        "whole",
        None,
        "experiments at once (default: CPU count; 0: all together)",
        high=4096,
    ),
    _Setting("repeat", ("--repeat",), "whole", 1, "run every case N times per contender", low=1, high=1000),
    _Setting(
        "max_turns",
        ("--max-turns",),
        "whole",
        10,
        "most model calls an agent's loop makes per case (the adapter sees model.max_turns)",
        low=1,
        high=1000,
    ),
    _Setting(
        "case_timeout",
        ("--case-timeout",),
        "seconds",
        3600.0,
        "seconds one case (adapter, its model calls, scorer) may take; then it is that case's error (0: no limit)",
        metavar="S",
    ),
    _Setting(
        "tracker_timeout",
        ("--tracker-timeout",),
        "seconds",
        10.0,
        "seconds a tracker may take for one call, and to send what is left once the cases end (0: no limit)",
        metavar="S",
    ),
    _Setting(
        "budget",
        ("--budget",),
        "number",
        None,
        "most dollars the run may spend: refused when the forecast says more; no call starts that could pass it",
        metavar="USD",
    ),
    _Setting("timeout", ("--timeout",), "seconds", 600.0, "seconds to wait for an answer", metavar="S", transport=True),
    _Setting("connect_timeout", (), "seconds", 10.0, "seconds to wait for a connection", transport=True),
    _Setting(
        "retries",
        ("--retries",),
        "whole",
        4,
        "tries after the first for failures worth retrying",
        high=100,
        transport=True,
    ),
    _Setting(
        "retry_wait",
        ("--retry-wait",),
        "seconds",
        120.0,
        "most seconds one request waits between tries",
        metavar="S",
        transport=True,
    ),
    _Setting(
        "retry_backoff",
        (),
        "seconds",
        1.0,
        "the first wait between tries; it doubles each time, with jitter",
        transport=True,
    ),
    _Setting(
        "max_response_mb",
        (),
        "number",
        32.0,
        "the largest response body read, in MiB; more is that case's error",
        transport=True,
    ),
    _Setting(
        "check_models",
        (),
        "switch",
        True,
        "check the lineup's ids against each server's model list before the run (false: a local server "
        "that loads models on demand lists none; the first answer tells)",
        transport=True,
    ),
    _Setting(
        "drop_params",
        (),
        "switch",
        False,
        "ask a LiteLLM proxy to drop the settings its deployment refuses (reasoning_effort, say) instead of "
        "answering 400",
        transport=True,
    ),
    _Setting(
        "openrouter_cache",
        (),
        "switch",
        False,
        "let OpenRouter answer a request it has seen from its response cache (free, and the same answer: "
        "sent off by default; repeats after the first are never asked through it)",
        transport=True,
    ),
)
# each setting by its config key (or, for a flag-only one, its long flag's name)
_SETTING = {setting.key or setting.flags[-1].lstrip("-"): setting for setting in _SETTINGS}


# ═══════════════════════════════════════════════════════════════════════════════
# Errors: one root, a leaf per kind of failure the user sees
# ═══════════════════════════════════════════════════════════════════════════════


class EvalError(Exception):
    """A failure the user sees as one line; ``exit_code`` is what the CLI returns."""

    exit_code = EXIT_USAGE


class ConfigError(EvalError):
    """The suite, its config file or a flag is wrong; nothing was called."""


class MissingDependency(EvalError):
    """An optional package is not installed; the message names its pip extra."""


class ProviderError(EvalError):
    """A provider could not get an answer: counted as an error, never scored.

    ``stops_run=True`` (a refused key, no credits) ends the whole run at once instead
    of failing every remaining case the same way.
    """

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, stops_run: bool = False, stops_contender: bool = False) -> None:
        super().__init__(message)
        self.stops_run = stops_run
        self.stops_contender = stops_contender  # a model the server does not have: its other cases would fail alike


class SuiteError(EvalError):
    """The suite's own code (helper, adapter, scorer) failed where it must not."""


# ═══════════════════════════════════════════════════════════════════════════════
# Small helpers used everywhere: hints, JSON, secrets, the stop flag, suite faults
# ═══════════════════════════════════════════════════════════════════════════════


def _shown(value: Any) -> str:
    """A value in a message: its repr, cut short (a 5,000-digit number is not a message)."""
    try:
        text = repr(value)
    except ValueError:
        text = f"<a number of {value.bit_length() * 0.30103:,.0f} digits>"
    return text if len(text) <= 60 else text[:57] + "..."


def _hint(name: str, known: Iterable[str]) -> str:
    """' (did you mean "x"?)' for the nearest known name, or ''."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.75)  # --quiet is no --junit
    return f' (did you mean "{close[0]}"?)' if close else ""


# module -> (distribution, pip extra or None when it is a core dependency)
_OPTIONAL = {"yaml": ("PyYAML", None), "litellm": ("litellm", "litellm"), "braintrust": ("braintrust", "braintrust")}


def _import_optional(module: str, purpose: str) -> Any:
    """Import an optional package on the path that needs it, or name how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        dist, extra = _OPTIONAL.get(module, (module, None))
        how = f"pip install 'agent-evals[{extra}]'" if extra else f"pip install {dist}"
        raise MissingDependency(f"{purpose} needs the {dist} package: {how}") from None


def _display(path: Path | str) -> str:
    """A path as the user would type it: relative to the working directory when inside."""
    path = Path(path)
    try:  # the folders resolved, not the file: a broken or linked case file keeps its own name
        return str((path.parent.resolve() / path.name).relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _Stop:
    """A run's stop flag: set by Ctrl-C or by an error that ends the run; waits end at once.
    Each run has its own (``_Session.stop``), and it reaches the providers' retry waits
    through ``Model.stop``: two runs in one process never stop each other."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the run was stopped meanwhile."""
        return self.event.wait(seconds)


# The user's own Ctrl-C, noted by the command's SIGINT handler before it becomes a
# KeyboardInterrupt, so that one raised by suite code is told apart from it. A signal
# belongs to the process, not to a run: ``main`` clears it as it returns. SIGTERM (a
# scheduler's time limit, an eviction, a CI cancel) and SIGHUP end a run as Ctrl-C does;
# _SIGNALLED holds which came, for the messages and the exit code (128 + its number).
_CTRL_C = threading.Event()
_SIGNALLED: list[signal.Signals] = []
# One thread at a time formats a traceback: CPython 3.11 parses code for its carets with process-wide
# AST state that concurrent parses corrupt (gh-106905), failing every ast.parse after (coverage's too).
_TRACEBACKS = threading.Lock()


# What suite code may raise (anything at all: see ``_suite_fault``), caught at every hook.
_SUITE_EXCEPTIONS = BaseException


def _reraise_ctrl_c(error: BaseException) -> None:
    """Inside ``except _SUITE_EXCEPTIONS``: the user's own Ctrl-C goes on as one."""
    if not _suite_fault(error):
        raise error


def _suite_fault(error: BaseException) -> bool:
    """Whether ``error``, raised by suite code, is that code's own failure: any exception at
    all, SystemExit, GeneratorExit and BaseException subclasses included, and a
    KeyboardInterrupt the code raised itself. Only the user's Ctrl-C (which reaches the
    main thread alone) goes on as what it is."""
    if isinstance(error, KeyboardInterrupt):
        return not _CTRL_C.is_set() or threading.current_thread() is not threading.main_thread()
    return True


def _interruption() -> tuple[str, str, int]:
    """What interrupted the run as the user knows it (Ctrl-C, SIGTERM), the words that say
    so after "interrupted" (none for Ctrl-C, the usual case), and the exit code."""
    if not _SIGNALLED or _SIGNALLED[0] == signal.SIGINT:
        return "Ctrl-C", "", EXIT_INTERRUPTED
    return _SIGNALLED[0].name, f" by {_SIGNALLED[0].name}", 128 + _SIGNALLED[0].value


def _said(text: str, most: int = 2000) -> str:
    """An error as its one line says it: control characters escaped (``_visible``), at most
    ``most`` characters, then how many more (a 100,000-character model id named by its start).

    >>> _said("x" * 2010)[-26:]
    'xxxx… (10 characters more)'
    """
    line = _visible(text, newlines=True)
    return line if len(line) <= most else f"{line[:most]}… ({len(line) - most:,} characters more)"


def _some(names: Sequence[str], most: int = 5) -> str:
    """The first ``most`` names, and how many more."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _is_count(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes ``²`` and other digits ``int`` refuses."""
    return text.isascii() and text.isdigit()


_DECODER = json.JSONDecoder()


def _first_json_object(text: str) -> object:
    """The first JSON object in ``text``; ValueError when there is none."""
    start = text.find("{")
    while start != -1:
        try:
            return _DECODER.raw_decode(text, start)[0]
        except ValueError:
            start = text.find("{", start + 1)
    raise ValueError("no JSON object in the reply")


def _safe_name(text: str) -> str:
    """A file-name-safe rendering of any model id or label (no ``/``, no spaces), short
    enough for any file system with a stamp after it: a longer one keeps its start and a
    hash of the whole, so two long names never collide.

    >>> _safe_name("ds--openai/gpt 4"), len(_safe_name("x" * 500))
    ('ds--openai-gpt-4', 160)
    """
    name = re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-.") or "experiment"
    if len(name) > 160:
        import hashlib

        name = f"{name[:143]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return name


def _describe(error: BaseException) -> tuple[str, str]:
    """An exception as the log keeps it: ``Type: message`` and a short traceback, secrets masked."""
    import traceback

    try:
        message = f"sys.exit({error.code!r}) was called" if isinstance(error, SystemExit) else str(error)
    except Exception:  # a message that cannot be read must not lose the row
        message = "(its message could not be read)"
    try:
        with _TRACEBACKS:
            trace = "".join(traceback.format_exception(type(error), error, error.__traceback__, limit=-4))
    except Exception:
        trace = ""
    return _redact(f"{type(error).__name__.lstrip('_')}: {message}"), _redact(trace)


def _json_dumps(value: object, **kwargs: Any) -> str:
    """JSON as the logs hold it: valid JSON always (NaN and the like are refused by the
    encoder, then written as ``_jsonable`` converts them)."""
    try:
        if kwargs:
            return json.dumps(value, ensure_ascii=False, default=_json_default, allow_nan=False, **kwargs)
        return _ENCODER.encode(value)  # one encoder for the run: a row a case is the hot path
    except (ValueError, TypeError, RecursionError, OverflowError):
        return json.dumps(_jsonable(value), ensure_ascii=False, allow_nan=False, **kwargs)


def _json_default(value: object) -> object:
    """What the encoder cannot write itself, converted as ``_jsonable`` does."""
    if isinstance(value, set | frozenset | tuple):
        return _sorted_if_possible(value) if isinstance(value, set | frozenset) else list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return _jsonable(value, depth=_MAX_DEPTH - 1)


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=_json_default, allow_nan=False)
_SORTED = json.JSONEncoder(ensure_ascii=False, default=_json_default, allow_nan=False, sort_keys=True)  # for hashes
_MAX_DEPTH = 100  # deeper than this, a value is not written to a log


class _Unwritable(ValueError):
    """A value no log can hold (it contains itself, or nests too deep): names where."""


def _jsonable(
    value: object, where: str = "value", depth: int = 0, seen: frozenset[int] = frozenset(), mend: bool = False
) -> Any:
    """``value`` as plain JSON, converted the way the README states: keys that are not
    strings become their ``str``; sets and tuples become lists; bytes become text (bad
    UTF-8 as ``\\\\xNN``); NaN and infinities become the strings ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``; an integer too long for ``str`` becomes a hex
    string; any other object its ``repr``. A value that contains itself, or nests
    deeper than 100 levels, raises ``_Unwritable`` naming the place (``mend``: becomes
    the string ``"<contains itself>"`` or ``"<nests too deep>"`` instead).

    >>> _jsonable({(1, 2): {3}, "x": float("nan"), "b": b"hi"})
    {'(1, 2)': [3], 'x': 'NaN', 'b': 'hi'}
    """
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 14000 else hex(value)  # str() refuses past 4,300 digits
    if isinstance(value, float):
        return (
            value if math.isfinite(value) else ("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))
        )
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if depth >= _MAX_DEPTH or id(value) in seen:
        if mend:
            return "<nests too deep>" if depth >= _MAX_DEPTH else "<contains itself>"
        raise _Unwritable(
            f"{where} " + ("contains itself" if id(value) in seen else f"nests more than {_MAX_DEPTH} levels deep")
        )
    inner = seen | {id(value)}
    if isinstance(value, Mapping):
        return {
            (k if isinstance(k, str) else str(k)): _jsonable(v, f"{where}[{k!r}]", depth + 1, inner, mend)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        items = value if isinstance(value, list | tuple) else _sorted_if_possible(value)
        return [_jsonable(v, f"{where}[{n}]", depth + 1, inner, mend) for n, v in enumerate(items)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _jsonable(fields, where, depth + 1, inner, mend)
    if isinstance(value, Path):
        return str(value)
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _sorted_if_possible(items: Iterable[object]) -> list[Any]:
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _header_fields(path: Path, *keys: str) -> dict[str, object]:
    """Top-level string (or null) fields of a log or journal, read from its first 8 KiB alone
    (its header comes first): None for one absent, unreadable or not a JSON string."""
    try:
        with path.open(encoding="utf-8", errors="replace") as file:
            head = file.read(8192)
    except OSError:
        head = ""
    fields: dict[str, object] = dict.fromkeys(keys)
    for key in keys:
        for value in re.findall(rf'"{key}": ("(?:[^"\\]|\\.)*"|null)', head)[:1]:  # the first: the header's
            with contextlib.suppress(ValueError):  # no JSON string after all
                fields[key] = json.loads(value)
    return fields


def _importable(module: str) -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that is not a package, or a module set to None
        return False


def _fmt_temp(value: float | None) -> str:
    return "-" if value is None else repr(float(value))


def _limiter_on() -> bool:
    """AGENT_EVALS_LIMITER: on (the default) paces each key by what it refuses; off lets every
    request meet a rate limit alone. Another word is a mistake to say, not to guess at."""
    value = os.environ.get("AGENT_EVALS_LIMITER", "on").strip().lower()
    if value not in ("on", "off", "true", "false", "1", "0", "yes", "no", ""):
        raise ConfigError(f"AGENT_EVALS_LIMITER={_visible(value[:40])}: say on or off (unset: on)")
    return value not in ("off", "false", "0", "no")


def _seconds_env(name: str, default: float) -> float:
    """A number of seconds from the environment, or ``default`` when it is unset or not one."""
    try:
        value = float(os.environ.get(name) or default)
    except ValueError:
        return default
    return value if 0 < value < math.inf else default


def _n(count: int, word: str) -> str:
    """``1 case``, ``2 cases``: a count and its noun.

    >>> _n(1, "experiment"), _n(1200, "case")
    ('1 experiment', '1,200 cases')
    """
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _fmt_cost(value: float, up: bool = False) -> str:
    """Dollars to four places, or to two significant digits where four places would show
    none: a local server's $0.000027 is not shown as $0.0000. ``up``: rounded up, for a
    bound that must never read below what it bounds.

    >>> _fmt_cost(0.004), _fmt_cost(2.7e-05), _fmt_cost(0.0), _fmt_cost(12.34567), _fmt_cost(0.01374, up=True)
    ('$0.0040', '$0.000027', '$0.0000', '$12.3457', '$0.0138')
    """
    places = 4 if not 0 < value < 0.00005 else 1 - math.floor(math.log10(value))
    if up:
        value = math.ceil(value * 10**places - 1e-9) / 10**places
    return f"${value:.{places}f}"


def _warn(message: str) -> None:
    print(f"warning: {_visible(_redact(message), newlines=True)}", file=sys.stderr)


# Variables whose values never appear in output, logs or errors, whatever their length:
# every provider's and tracker's env_keys, and every *_KEY, *_TOKEN, *_SECRET, *_PASSWORD.
_SECRET_SUFFIX = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
# A name that merely contains one of the words: its value is masked when it is long enough
# to be a credential (a short value such as KEYTIMEOUT=1 would mask every "1" in a table).
_SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
_SECRET_KEYS: set[str] = set()  # the env_keys of every provider and tracker a suite loaded
_URL_PASSWORD = re.compile(r"(?<=://)[^/@\s:'\"]*:[^/@\s'\"]*@")  # user:password@ in any URL
_MASK = "[redacted]"


class _Secrets:
    """The values to mask, and one regex that finds any of them in any form a file may
    hold them (as is, JSON-escaped, HTML-escaped, URL-encoded). Short values are matched
    only where they stand alone, so a one-letter key masks that key, not every word."""

    values: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    ready = False

    @classmethod
    def refresh(cls) -> None:
        found = set()
        for name, value in os.environ.items():
            if not value:
                continue
            if name in _SECRET_KEYS or _SECRET_SUFFIX.search(name) or (len(value) >= 8 and _SECRET_NAMES.search(name)):
                found.add(value)
            if "://" in value and "@" in value:
                for match in _URL_PASSWORD.finditer(value):
                    found.update(part for part in match[0][:-1].split(":", 1) if part)
        values = tuple(sorted(found, key=lambda v: (-len(v), v)))
        if values != cls.values or not cls.ready:
            cls.values, cls.ready = values, True
            cls.pattern = cls._compile(values) if values else None

    @staticmethod
    def _compile(values: Sequence[str]) -> re.Pattern[str]:
        import html
        import urllib.parse

        forms: dict[str, None] = {}
        for value in values:
            for form in (value, json.dumps(value)[1:-1], html.escape(value), urllib.parse.quote(value, safe="")):
                forms[form] = None
        parts = []
        for form in sorted(forms, key=lambda v: (-len(v), v)):
            text = re.escape(form)
            parts.append(text if len(form) >= 6 else rf"(?<![A-Za-z0-9]){text}(?![A-Za-z0-9])")
        return re.compile("|".join(parts))


def _redact(text: str) -> str:
    """``text`` with every secret value masked, and the password of any URL in it."""
    if not _Secrets.ready:
        _Secrets.refresh()
    if _Secrets.pattern is not None:
        text = _Secrets.pattern.sub(_MASK, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(_MASK + "@", text)
    return text


def _redact_json(line: str, value: object) -> str:
    """``line`` (``value`` as JSON) with secrets masked inside its strings alone, so that
    the document stays valid JSON even when a short secret looks like a number in it."""
    if not _Secrets.ready:
        _Secrets.refresh()
    if (_Secrets.pattern is None or not _Secrets.pattern.search(line)) and not ("://" in line and "@" in line):
        return line  # the common case: one regex search over the line, in C
    try:
        return json.dumps(_mask_strings(_jsonable(value)), ensure_ascii=False, allow_nan=False)
    except _Unwritable:
        return _redact(line)


def _mask_strings(value: object) -> Any:
    if isinstance(value, str):
        return _redact(value)
    if isinstance(value, dict):
        return {_redact(str(k)): _mask_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_strings(v) for v in value]
    return value


# C0 and C1 control characters (tab and newline aside), bidirectional overrides, line
# separators and lone surrogates: shown as escapes, never sent to a terminal raw.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(text: str, newlines: bool = False) -> str:
    r"""``text`` with control characters escaped (``\x1b``); ``newlines`` escapes those too.

    >>> _visible("red \x1b[31mtext\r\n", newlines=True)
    'red \\x1b[31mtext\\r\\n'
    """
    if newlines:
        text = text.replace("\n", "\\n")
    return _CONTROLS.sub(lambda m: repr(m[0])[1:-1] if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _write_text(path: Path, text: str, unwritten: list[str]) -> bool:
    """Write an output file whole (a temporary file, then a rename; none left behind on
    failure), secrets masked; a failure is named in ``unwritten``, never a traceback."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not path.is_file():  # /dev/stdout, a pipe: written in place, never replaced
            with open(path, "w", encoding="utf-8", errors="backslashreplace") as file:
                file.write(_redact(text))
            return True
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as file:
            file.write(_redact(text))
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        unwritten.append(f"{_display(path)} ({e.strerror or e})")
        return False
    return True


class _This:
    """Run as a program, the file is ``__main__``: this finder answers every import of the same
    file, ``agent_evals`` or the name a repo vendored it under (``vendored.agent_evals``,
    ``third_party.evals.agent_evals``), with that one module, so the suite's ``configure``
    reaches the module that runs, never a second copy of it."""

    def __init__(self, module: object) -> None:
        import importlib.machinery
        import importlib.util  # here, not in find_spec: importing there would ask find_spec again

        self.module, self.file = module, Path(__file__).resolve()
        self.finders, self.specs = importlib.machinery, importlib.util

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: object = None) -> object:
        if name.rpartition(".")[2] != self.file.stem:
            return None
        spec = self.finders.PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None or Path(spec.origin).resolve() != self.file:
            return None
        return self.specs.spec_from_loader(name, self)  # type: ignore[arg-type]

    def create_module(self, spec: object) -> object:
        return self.module

    def exec_module(self, module: object) -> None:
        """Nothing to run: the module is the one already running."""


# ═══════════════════════════════════════════════════════════════════════════════
# Values: frozen records, converted to JSON only at the edges
# ═══════════════════════════════════════════════════════════════════════════════


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and dollars one or more completions spent."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached_tokens: int = 0  # of the input, read from the provider's prompt cache
    reasoning_tokens: int = 0  # of the output, spent thinking: what a higher effort costs
    # answers whose reported cost was no price (NaN, infinite, below 0, not a number): taken as
    # unknown, so $0 or the catalog's price; the run warns once per contender
    no_price: int = 0

    def __post_init__(self) -> None:
        cost = self.cost_usd
        if not (type(cost) is float or isinstance(cost, int | float)) or not 0.0 <= cost < math.inf:
            object.__setattr__(self, "cost_usd", 0.0)
            object.__setattr__(self, "no_price", self.no_price + 1)

    def __add__(self, other: Usage) -> Usage:
        return Usage.total((self, other))

    @staticmethod
    def total(usages: Iterable[Usage]) -> Usage:
        """The sum of many, field by field: one Usage made, not one an addition (a table's totals
        add up thousands)."""
        a = b = d = e = f = 0
        c = 0.0
        for u in usages:
            a, b, c = a + u.input_tokens, b + u.output_tokens, c + u.cost_usd
            d, e, f = d + u.cached_tokens, e + u.reasoning_tokens, f + u.no_price
        return Usage(a, b, c, d, e, f)

    def to_json(self) -> dict[str, Any]:
        details = {
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "no_price": self.no_price,
        }
        totals = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "cost_usd": self.cost_usd}
        return totals | {key: n for key, n in details.items() if n}

    @classmethod
    def coerce(cls, value: Usage | Mapping[str, Any] | None) -> Usage | None:
        """Accept a ``Usage``, a mapping of its fields (as the original's hashes), or None."""
        if value is None or isinstance(value, Usage):
            return value
        if isinstance(value, Mapping):
            return cls(
                int(value.get("input_tokens") or 0),
                int(value.get("output_tokens") or 0),
                float(value.get("cost_usd") or 0.0),
                int(value.get("cached_tokens") or 0),
                int(value.get("reasoning_tokens") or 0),
                int(value.get("no_price") or 0),
            )
        raise TypeError(f"usage must be a Usage or a mapping, not {type(value).__name__}")


_NOTHING = Usage()  # what nothing spent: one shared (a Usage is frozen), not one made a case run


@dataclass(frozen=True, slots=True)
class Case:
    """One input with its expected answer. ``id`` is ``variant/NNN`` (or the variant)."""

    id: str
    dataset: str = ""
    variant: str = ""
    input: str = ""
    expected: Any = None
    path: Path | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``dataset/id``: unique across the suite."""
        return f"{self.dataset}/{self.id}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the model asked for: ``arguments`` parsed from the JSON it sent. Arguments
    that are not a JSON object are kept as sent in ``raw_arguments`` and named in
    ``error``, never raised: the agent's loop answers the model with that error."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw_arguments: str = ""
    error: str | None = None

    @classmethod
    def parse(cls, data: Any, index: int = 0) -> ToolCall:
        """One entry of an OpenAI-shape ``tool_calls`` list, whatever it holds."""
        data = data if isinstance(data, Mapping) else {}
        function = data.get("function") if isinstance(data.get("function"), Mapping) else {}
        name, raw = str(function.get("name") or ""), function.get("arguments")
        call_id = str(data.get("id") or f"call_{index}")
        if isinstance(raw, Mapping):  # some servers send the object itself
            return cls(call_id, name, dict(raw), _json_dumps(raw))
        text = raw if isinstance(raw, str) else "" if raw is None else _json_dumps(raw)
        try:
            arguments = json.loads(text) if text.strip() else {}
        except (ValueError, RecursionError) as e:
            return cls(call_id, name, {}, text, f"the arguments are not JSON ({str(e)[:80]})")
        if not isinstance(arguments, dict):
            return cls(call_id, name, {}, text, f"the arguments are {type(arguments).__name__}, not an object")
        return cls(call_id, name, arguments, text, None if name else "the call names no tool")

    @classmethod
    def of(cls, message: Mapping[str, object] | None) -> tuple[ToolCall, ...]:
        """The calls an assistant message (OpenAI's shape) asks for; none when it has no list."""
        calls = (message or {}).get("tool_calls")
        return tuple(cls.parse(call, i) for i, call in enumerate(calls)) if isinstance(calls, list) else ()


@dataclass(frozen=True, slots=True)
class Completion:
    """What a provider returned for one request. For a conversation (``messages=``), the
    assistant ``message`` as the API shapes it, the ``tool_calls`` it asks for, and why
    it stopped (``finish_reason``: ``stop``, ``tool_calls``, ``length``, ...)."""

    text: str
    usage: Usage = _NOTHING
    raw: Any = None
    message: Mapping[str, Any] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "usage", Usage.coerce(self.usage) or _NOTHING)


@dataclass(frozen=True, slots=True)
class BatchState:
    """Where one ``--batch`` batch stands (``Provider.collect``): its status as the API names
    it, how many of its requests are done of how many, and, once it has ended (``results``
    not None), each custom id's ``Completion`` or ``ProviderError``; a request missing from
    them went unanswered (an expired or cancelled batch). ``error``: why the whole batch
    failed, when it did (a model that cannot be batched, a request it refused)."""

    status: str
    done: int = 0
    total: int = 0
    results: Mapping[str, object] | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """The adapter's answer. ``error``: the model failed (scored 0); raise for transport."""

    output: Any = None
    raw: Any = None
    usage: Usage | None = None
    error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # an agent's whole conversation (every message, tool call and tool result), when the
    # adapter ran one: logged with the row, and what a scorer sees for "used the tool"
    transcript: Sequence[Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "usage", Usage.coerce(self.usage))
        if self.error is not None and not isinstance(self.error, str):
            raise TypeError(f"Reply(error={_shown(self.error)}): expected the model's failure as text (str), or None")
        if not isinstance(self.metadata, dict | Mapping):  # dict first: no ABC check for the usual case
            raise TypeError(f"Reply(metadata={_shown(self.metadata)}): expected a dict")


@dataclass(frozen=True, slots=True)
class Metric:
    """A number the scorer reports per case; its mean skips ``None``."""

    name: str
    description: str = ""
    aggregate: str = "mean"
    primary: bool = False
    judged: bool = False  # a judge (a model, a rubric) gives it: people's labels correct it (agent-evals label)

    def __post_init__(self) -> None:
        for key, kind, what in (
            ("name", str, "a non-empty str"),
            ("description", str, "a str"),
            ("primary", bool, "True or False"),
            ("judged", bool, "True or False"),
        ):
            value = getattr(self, key)
            if not isinstance(value, kind) or (key == "name" and not str(value).strip()):
                raise ConfigError(f"Metric({key}={_shown(value)}): expected {what}")


@dataclass(frozen=True, slots=True)
class Score:
    """``value`` in 0..1; ``metrics`` maps each declared name to a float or None."""

    value: float = 0.0
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    outcomes: Mapping[str, object] = field(default_factory=dict)
    diagnostics: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.metrics) is type(self.outcomes) is type(self.diagnostics) is dict:  # the usual case, at once
            return
        for key in ("metrics", "outcomes", "diagnostics"):
            if not isinstance(value := getattr(self, key), Mapping):
                raise TypeError(f"Score({key}={_shown(value)}): expected a dict of names to values")


def _shown_model(model: object, provider: object) -> str:
    return str(model) if provider is None else f"{model} (direct)"


def _routing_text(routing: str) -> str:
    """Provider preferences in a few words: ``order: [deepinfra]`` is ``deepinfra``.

    >>> _routing_text('{"order": ["deepinfra", "together"], "zdr": true}')
    'deepinfra,together zdr'
    """
    words = []
    for key, value in sorted(json.loads(routing).items(), key=lambda item: item[0] != "order"):  # order first
        text = ",".join(map(str, value)) if isinstance(value, list) else _json_dumps(value).strip('"')
        words.append(text if key == "order" else key if value is True else f"{key}={text}")
    return " ".join(words)


@dataclass(frozen=True, slots=True)
class Contender:
    """A model with its settings. ``provider``: None for ``vendors:``, a name for ``direct:``."""

    model: str
    effort: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    provider: str | None = None
    routing: str | None = None  # OpenRouter's provider preferences, as canonical JSON
    tier: str | None = None  # the service tier asked for (None: the server's own)

    @property
    def shown(self) -> str:
        """The model id as every table, line and page shows it: a direct contender (the
        vendor's own API) is marked, so it never looks like the OpenRouter one of that id,
        and a routed one says where it was routed (``via deepinfra``)."""
        routed = f" via {_routing_text(self.routing)}" if self.routing else ""
        return _shown_model(self.model, self.provider) + routed + (f" tier={self.tier}" if self.tier else "")

    @property
    def label(self) -> str:
        """``model effort=e temp=t``, as the warnings and the best-value line show it."""
        parts = [self.shown]
        parts.append(f"effort={self.effort or 'default'}")
        if self.temperature is not None:
            parts.append(f"temp={_fmt_temp(self.temperature)}")
        return " ".join(parts)

    def to_json(self) -> dict[str, object]:
        # no routing or tier, no key: logs (and the keys --resume and --baseline match on) stay as they were
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("routing", "tier") or v is not None}


@dataclass(frozen=True, slots=True)
class RunResult:
    """One case run by one experiment. ``error``: it raised, so it has no score."""

    experiment: Any
    case: Case
    reply: Reply | None = None
    score: Score | None = None
    duration: float = 0.0
    error: str | None = None
    usage: Usage = _NOTHING
    traceback: str | None = None
    retries: int = 0
    repeat: int = 0  # which of ``--repeat N`` independent runs of the case, from 0
    cached: int = 0  # completions the response cache answered (no spend)
    saved: float = 0.0  # what those completions cost when first paid for
    turns: int = 0  # the model calls the case made (an agent's loop makes several)
    finish_reason: str | None = None  # why the last answer ended: "length" is cut off at max_tokens
    transcript: Sequence[Mapping[str, object]] | None = None  # the reply's, or the turns so far of a failed case
    ended: float = 0.0  # when it ended (time.time()): the trackers show it where it ran
    exchanges: tuple[Mapping[str, object], ...] = ()  # each model call, when a tracker shows them
    served: tuple[Mapping[str, str], ...] = ()  # who answered its calls: upstream, model, tier (distinct)
    replayed: tuple[int, int] = (0, 0)  # answers a server's response cache gave: all, those not asked of it
    case_hash: str | None = None  # the case as its log holds it (report); None: the case's own
    judge_usage: Usage = _NOTHING  # what a Judge's calls spent scoring it: apart from ``usage``
    chances: Mapping[str, float] = dataclasses.field(default_factory=dict)  # judged metric: P(pass) the judge gave

    @property
    def label(self) -> str:
        """The case id, with ``#repeat`` when the case runs more than once."""
        return (
            f"{self.case.id}#{self.repeat}"
            if self.repeat or getattr(self.experiment, "repeat", 1) > 1
            else self.case.id
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """One experiment's totals: what ``Tracker.finish`` receives."""

    cases: int
    scored: int
    errors: int
    score: float | None
    means: Mapping[str, float | None]
    usage: Usage
    duration: float
    retries: int = 0
    intervals: Mapping[str, Mapping[str, object] | None] = field(default_factory=dict)
    lost: Usage = field(default_factory=Usage)  # what the runs that ended in an error spent
    cached: int = 0  # completions the response cache answered
    saved: float = 0.0  # what they cost when first paid for
    rate_limited: tuple[float, float] = (0.0, 0.0)  # seconds of the run the key's rate limit held calls back; summed

    def to_json(self) -> dict[str, object]:
        return {
            "cases": self.cases,
            "scored": self.scored,
            "errors": self.errors,
            "error_rate": self.errors / self.cases if self.cases else 0.0,
            "score": self.score,
            "means": dict(self.means),
            "intervals": dict(self.intervals),
            "usage": self.usage.to_json(),
            "lost_to_errors": self.lost.to_json(),
            "duration": self.duration,
            "retries": self.retries,
            "cached": self.cached,
            "saved_usd": self.saved,
            "rate_limited_s": round(self.rate_limited[0], 3),
            "rate_limited_calls_s": round(self.rate_limited[1], 3),
        }


CLUSTER = "cluster"  # the metadata.json key that groups cases into one unit of the statistics


def _case_hash(case: Case) -> str:
    """What the case asks and expects (input, expected, metadata) in 16 hex digits: a case
    edited since a run is told apart from the one that run answered."""
    import hashlib

    content = [case.input, case.expected, case.metadata]
    try:
        text = _SORTED.encode(content)
    except (ValueError, TypeError, RecursionError, OverflowError):
        text = _json_dumps(content, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _answer_hash(output: object) -> str:
    """An answer (the parsed output) in 16 hex digits: a label is for this answer, never a
    later, different one to the same case."""
    import hashlib

    text = _json_dumps(_jsonable(output, mend=True), sort_keys=True)  # as the log holds it, or as it was
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _label_key(result: RunResult, metric: str) -> tuple[str, ...]:
    """What a label of this answer is filed under (``_LABEL_KEYS``)."""
    case, output = result.case, result.reply.output if result.reply is not None else None
    return (case.dataset, case.id, result.case_hash or _case_hash(case), _answer_hash(output), metric)


# ═══════════════════════════════════════════════════════════════════════════════
# What a suite writes: provider, model, adapter, scorer, tracker, and configure()
# ═══════════════════════════════════════════════════════════════════════════════


class SchemaValidator:
    """Checks a mapping against ``{name: {"type":, "enum":, "nullable":}}``.

    >>> v = SchemaValidator({"legs": {"type": "integer"}, "sound": {"type": "string", "nullable": True}})
    >>> v.problems({"legs": 4, "sound": None})
    []
    >>> v.problems({"legs": "four"})
    ['legs: expected an integer, got "four"', 'sound: missing']
    """

    TYPES = ("boolean", "integer", "number", "string", "enum", "multi_enum")

    def __init__(self, schema: Mapping[str, Mapping[str, object]]) -> None:
        for name, spec in schema.items():
            kind = spec.get("type")
            if kind not in self.TYPES:
                raise ConfigError(
                    f"schema field {name}: unknown type {kind!r}{_hint(str(kind), self.TYPES)}; "
                    f"known: {', '.join(self.TYPES)}"
                )
            if kind in ("enum", "multi_enum") and not spec.get("enum"):
                raise ConfigError(f"schema field {name}: type {kind} needs a non-empty enum list")
        self.schema = schema

    def problems(self, value: object) -> list[str]:
        """Readable problems, one a string; empty when ``value`` fits."""
        if not isinstance(value, Mapping):
            return [f"expected an object, got {type(value).__name__}"]
        out = [f"{key}: not in the schema{_hint(key, self.schema)}" for key in value if key not in self.schema]
        for name, spec in self.schema.items():
            if name not in value:
                out.append(f"{name}: missing")
            elif value[name] is None:
                if not spec.get("nullable"):
                    out.append(f"{name}: null, but the field is not nullable")
            else:
                problem = self._field_problem(spec, value[name])
                if problem:
                    out.append(f"{name}: {problem}")
        return out

    @staticmethod
    def _field_problem(spec: Mapping[str, Any], item: object) -> str | None:
        kind = spec["type"]
        shown = json.dumps(item, default=str)
        if kind == "boolean" and not isinstance(item, bool):
            return f"expected a boolean, got {shown}"
        if kind == "integer" and (isinstance(item, bool) or not isinstance(item, int)):
            return f"expected an integer, got {shown}"
        if kind == "number" and (isinstance(item, bool) or not isinstance(item, int | float)):
            return f"expected a number, got {shown}"
        if kind == "string" and not isinstance(item, str):
            return f"expected a string, got {shown}"
        allowed = spec.get("enum") or ()
        if kind == "enum" and item not in allowed:
            return f"{shown} is not one of {', '.join(map(str, allowed))}"
        if kind == "multi_enum":
            if not isinstance(item, list):
                return f"expected a list, got {shown}"
            wrong = [x for x in item if x not in allowed]
            if wrong:
                return f"{json.dumps(wrong)} not among {', '.join(map(str, allowed))}"
        return None


class Provider:
    """Wraps one API: the request type it answers, the keys it needs, and ``complete``.

    A provider serving ``vendors:`` ids declares which with ``prefix`` (None claims
    every id); a ``direct`` one is reached only through a ``direct:`` key equal to its
    ``name``. ``efforts`` lists the reasoning efforts it takes (None: any). A transport
    failure raises: the run counts it as an error, not as a wrong answer.
    """

    name: str = "provider"
    request_type: str = "prompt"
    request_type_description: str = "a chat completion: system and user text in, text out"
    prefix: str | None = None
    env_keys: Sequence[str] = ()
    efforts: Sequence[str] | None = None
    direct: bool = False
    # takes a conversation: complete(model, messages=[...], tools=[...], tool_choice=..., json=...)
    # as well as system/user, and answers with the assistant message and its tool calls
    conversations: bool = False
    # Set by the run from flags and the config's defaults: (see README, "Timeouts and retries")
    timeout: float = _SETTING["timeout"].default  # seconds to wait for an answer; reasoning models think for minutes
    connect_timeout: float = _SETTING["connect_timeout"].default
    check_models: bool = True  # the lineup's ids are checked against its catalog before the run
    unread: str = ""  # why its catalog could not be read to its end, when it could not (None from catalog())
    drop_params: bool = False  # LiteLLM: settings a deployment refuses are dropped (sent as drop_params)
    openrouter_cache: bool = False  # OpenRouter's response cache may answer (X-OpenRouter-Cache: true)
    retries: int = _SETTING["retries"].default  # tries after the first, for failures worth retrying
    retry_wait: float = _SETTING["retry_wait"].default  # most seconds one request may spend waiting between tries
    retry_backoff: float = _SETTING["retry_backoff"].default  # the first wait; it doubles with each retry
    max_response_mb: float = _SETTING["max_response_mb"].default  # a larger response body is that case's error
    offline: bool = False  # verify and -n: catalogs come from the cache, never the network
    cache_dir: Path | None = None
    app_name: str = "agent-evals"  # attribution: the app's title (config: app.title)
    referer: str = "https://pypi.org/project/agent-evals/"  # and its URL (config: app.url)

    def catalog(self) -> list[str] | None:
        """The model ids it serves, when known offline; None when it cannot tell."""
        return None

    def catalog_entries(self) -> list[tuple[str, float | None, float | None, int | None]] | None:
        """``agent-evals models``: (id, $ per prompt token, $ per completion token, context
        length) of each model it serves, None where unknown; None when it cannot tell."""
        ids = self.catalog()
        return None if ids is None else [(model_id, None, None, None) for model_id in ids]

    def price(self, model_id: str) -> tuple[float, float, float] | None:
        """Dollars per input token, per output token and per request for ``model_id``, when
        known: the forecast and ``--budget`` count with it. None: no price (never taken as $0)."""
        return None

    def complete(self, model: Model, *, system: str | None = None, user: str, json: bool = True) -> Completion:
        """Ask ``model`` once: the text it answered and what it cost, as a ``Completion``.

        ``model.name`` is the id as the API spells it and ``model.settings`` the contender's
        effort, temperature and max_tokens (None: send nothing). ``json``: ask for a JSON
        object when the API can. Raise ``ProviderError`` for a failure of the model or the
        network: the case is then an error, counted and never scored. Retry transient
        failures within ``timeout``, ``retries`` and ``retry_wait`` (the run sets them).
        """
        raise NotImplementedError(f"provider {self.name} does not implement complete()")

    async def acomplete(self, model: Model, **request: Any) -> Completion:
        """``complete`` for async code: on a thread of its own, so the event loop never blocks."""
        import asyncio

        return await asyncio.to_thread(self.complete, model, **request)

    # --batch: a provider that sends many requests as one batch, at its batch price, says so
    # and implements submit and collect (OpenRouter's Batch API; OpenAI's or Anthropic's own could)
    batches: bool = False
    # the most requests and bytes one batch may hold: "200 MB" read as the stricter, 200,000,000 bytes
    batch_most, batch_bytes = 5000, 200_000_000

    def submit(self, model: Model, requests: Sequence[tuple[str, Mapping[str, object]]]) -> str:
        """Send ``requests`` (each a custom id and ``complete``'s keyword arguments) to
        ``model`` as one batch; the batch's id. Raise ``ProviderError`` when it is refused."""
        raise ProviderError(f"provider {self.name} has no batch API: run it without --batch")

    def collect(self, model: Model, batch_id: str) -> BatchState:
        """Where batch ``batch_id`` stands; once it has ended, its results by custom id."""
        raise ProviderError(f"provider {self.name} has no batch API: run it without --batch")

    def missing_keys(self, model_id: str) -> list[str]:
        """The environment variables ``model_id`` needs that are not set."""
        return [key for key in self.env_keys if not os.environ.get(key)]

    def serves(self, model_id: str) -> bool:
        return self.prefix is None or model_id.startswith(self.prefix)

    def model_name(self, model_id: str) -> str:
        """The id as the API spells it: without the provider's own prefix."""
        for prefix in (self.prefix, f"{self.name}/" if self.direct else None):
            if prefix and model_id.startswith(prefix):
                return model_id[len(prefix) :]
        return model_id


class _Deferred(BaseException):
    """``--batch``: a call went into the next batch, so its case is put off and runs again once
    the batch has answered (a BaseException: an adapter's ``except Exception`` lets it by)."""


class _Ledger:
    """What one run of one case spent and saw through its model: the runner makes it, the
    model's calls fill it, and the runner reads it into the case's row. ``notes`` keeps a
    step's own record of the case run (``--batch``'s custom ids)."""

    def __init__(
        self,
        case: str = "",
        repeat: int = 0,
        exchanges: bool = False,
        *,
        judge: bool = False,
        notes: dict[object, object] | None = None,
    ) -> None:
        self.case, self.repeat = case, repeat  # the case run: its id and which independent run (--repeat)
        self.usage = _NOTHING
        self.calls = self.retries = self.hits = 0  # hits: calls the response cache answered
        self.saved = 0.0  # what those cost when they were first paid for
        self.finish_reason: str | None = None  # the last answer's
        self.empty = ""  # why the last answer had no text, when it had none
        self.waits: list[tuple[float, float]] = []  # when its calls waited on the key's rate limit (never retries)
        self.transcript: list[dict[str, object]] | None = None  # a conversation's messages, the answers included
        self.exchanges: list[dict[str, object]] | None = [] if exchanges else None  # each call, for a tracker
        self.served: list[dict[str, str]] = []  # who answered: each distinct upstream, model and tier
        self.replayed = [0, 0]  # answers OpenRouter's response cache gave: all, and those not asked of it
        self.notes: dict[object, Any] = {} if notes is None else notes
        self.judge = judge  # the judge's, for a scorer's Judge: its spend is shown apart, its batches are its own
        self.last: _Call | None = None  # the call that ended last: a Judge disowns it when it is no verdict
        self.chances: list[tuple[float, float]] = []  # a Judge's verdicts with the probability it gave pass
        self.lock = threading.Lock()

    def sent(self, call: _Call) -> None:
        """A call is made: counted, and a conversation's transcript is what is sent, so a case
        that fails on this turn keeps the turns so far."""
        with self.lock:
            self.calls += 1
            if "messages" in call.request:
                self.transcript = list(call.request["messages"])

    def ended(self, call: _Call) -> None:
        """A call came back: its answer's spend and who served it, the conversation with the
        answer, and for a tracker that shows each call its times, request and answer or failure."""
        answer, request = call.answer, call.request
        with self.lock:
            self.last = call
            if answer is not None:
                raw = answer.raw if isinstance(answer.raw, dict) else {}
                # who answered: OpenRouter names the upstream (provider), the model behind an alias and the tier
                served = {k: v for k in ("provider", "model", "service_tier") if isinstance(v := raw.get(k), str) and v}
                if served and served not in self.served and call.origin != "cache":
                    self.served.append(served)
                self.hits += call.origin == "cache"
                self.saved += call.saved
                self.usage = answer.usage if self.usage is _NOTHING else self.usage + answer.usage
                self.finish_reason = answer.finish_reason
                self.empty = "" if answer.text or answer.tool_calls else _why_empty(answer)
                if "messages" in request:
                    self.transcript = [
                        *request["messages"],
                        dict(answer.message or {"role": "assistant", "content": answer.text}),
                    ]
            if self.exchanges is not None and not isinstance(call.error, _Deferred):
                failure = None if call.error is None else _describe(call.error)[0]
                self.exchanges.append(
                    {
                        "start": call.began,
                        "end": time.time(),
                        "request": request,
                        "completion": answer,
                        "error": failure,
                    }
                )

    def note_spent(self, usage: Usage, call: _Call | None = None) -> None:
        """A request that was paid for but answered with an error (a provider's in-band
        error carries its cost): the case's spend counts it, as does the ``call``'s (``model.call``)."""
        with self.lock:
            self.usage = self.usage + usage
        if call is not None:
            call.spent += usage.cost_usd

    def note_replayed(self, asked: bool) -> None:
        """A server's response cache answered (``asked``: the request let it): the same
        answer as an earlier identical request, never an independent one."""
        with self.lock:
            self.replayed[0] += 1
            self.replayed[1] += not asked

    def note_limited(self, seconds: float, again: _Call | None = None) -> None:
        """A call waited ``seconds`` on the key's rate limit; ``again``: the call, refused, that goes
        again, no retry of the case's, but its steps see it as one (a new try holds its own worst case)."""
        now = time.monotonic()
        with self.lock:
            self.waits.append((now - seconds, now))
        self._again(again)

    def note_retry(self, call: _Call | None) -> None:
        """A provider tried ``call`` (``model.call``) again: counted per case in the log, and its steps see
        it (under ``--budget`` a try that cannot hold its worst case fails the call and stops the run)."""
        with self.lock:
            self.retries += 1
        self._again(call)

    @staticmethod
    def _again(call: _Call | None) -> None:
        if call is not None:
            for step in call.model.steps:
                step.again(call)


class _Call:
    """One model call on its way through the run's steps: what is asked, what the steps noted
    on the way (the cache's ``key``, the budget's ``hold``, the batch's ``custom`` id, what
    failed tries were ``spent``) and how it ended: ``answer`` or ``error``, and ``origin``,
    who answered ("" the provider, now; "cache" or "batch", paid for before: ``saved``)."""

    __slots__ = (
        "answer",
        "began",
        "custom",
        "error",
        "hold",
        "key",
        "model",
        "origin",
        "request",
        "saved",
        "spent",
        "walked",
    )

    def __init__(self, model: Model, request: dict[str, Any]) -> None:
        self.model, self.request, self.began = model, request, time.time()
        self.key = self.custom = self.origin = ""
        self.answer: Completion | None = None
        self.error: BaseException | None = None
        self.hold: Any = None
        self.saved = self.spent = 0.0
        self.walked = 0  # the steps whose ``before`` it went through

    def walk(self) -> bool:
        """The call is counted and walks its model's steps; True when the provider is to be asked."""
        self.model.ledger.sent(self)
        try:
            for step in self.model.steps:
                step.before(self)
                self.walked += 1
                if self.answer is not None or self.error is not None:
                    break
        except BaseException as e:  # a budget that does not fit, a call put off for its batch
            self.error = e
        return self.answer is None and self.error is None

    def handle(self) -> Model:
        """The model the provider is handed: the case run's, as this call's (``model.call``), so its
        retries and paid failures reach the call's steps from any thread the provider starts."""
        m, kept = self.model, ("effort", "temperature", "max_tokens", "routing", "service_tier", "max_turns", "pace")
        handle = Model(
            m.id, m.provider, **{k: getattr(m, k) for k in kept}, stop=m.stop, steps=m.steps, ledger=m.ledger
        )
        handle.call = self
        return handle

    def end(self) -> Completion:
        """Each step walked sees how the call ended, last first, and so does the ledger; what the
        provider answered that is not a ``Completion`` is its error."""
        if self.error is None and not isinstance(self.answer, Completion):
            name, kind = self.model.provider.name, type(self.answer).__name__
            self.answer, self.error = None, ProviderError(f"provider {name} returned {kind}, not a Completion")
        for step in reversed(self.model.steps[: self.walked]):
            step.after(self)
        self.model.ledger.ended(self)
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer


class _Step:
    """A feature that acts on each model call: the response cache, ``--batch``, ``--budget``.
    A run lists its steps once per experiment, and every call walks them: ``before`` in order
    (a step that gives the call an ``answer`` or an ``error`` ends the walk, and nothing is
    sent), then ``after`` for each step walked, last first, once the call has ended;
    ``again`` when a provider tries the call once more (a retry, or a rate limit's refusal)."""

    blocks = False  # its ``before`` may wait (an async call walks the steps on a thread then)

    def before(self, call: _Call) -> None:
        pass

    def after(self, call: _Call) -> None:
        pass

    def again(self, call: _Call) -> None:
        pass

    def disown(self, call: _Call) -> None:
        """An answer its asker could not use (a judge's that is no verdict): never given again."""


class Model:
    """The handle an adapter calls: one contender's model and settings.

    ``effort``, ``temperature`` and ``max_tokens`` carry the contender's settings; None
    means "send nothing". ``usage`` and ``calls`` are what this case run spent through it.
    """

    def __init__(
        self,
        id: str,
        provider: Provider,
        *,
        effort: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        routing: str | None = None,
        service_tier: str | None = None,
        max_turns: int | None = None,
        stop: _Stop | None = None,
        steps: Sequence[_Step] = (),
        ledger: _Ledger | None = None,
        pace: _Pace | None = None,
    ) -> None:
        self.id = id
        self.provider = provider
        self.effort = None if effort in (None, "default") else effort
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.routing = routing  # OpenRouter's provider preferences (JSON), when the lineup routes it
        self.service_tier = service_tier  # OpenRouter's service tier, when the lineup names one
        self.max_turns = _SETTING["max_turns"].default if max_turns is None else max_turns  # an agent's loop's bound
        self.stop = _Stop() if stop is None else stop  # the run's: a retry waits on it, a stopped run waits no more
        self.pace = pace  # the run's keys' limiters, which its requests wait on (None: each meets a rate limit alone)
        self.steps = tuple(steps)
        self.ledger = _Ledger() if ledger is None else ledger
        self.call: _Call | None = None  # the call in flight, in the handle its provider is given (_Call.sending)

    @property
    def name(self) -> str:
        """The id without the provider's prefix: ``fake/echo`` -> ``echo``."""
        return self.provider.model_name(self.id)

    @property
    def settings(self) -> dict[str, object]:
        return {"effort": self.effort, "temperature": self.temperature, "max_tokens": self.max_tokens}

    @property
    def usage(self) -> Usage:
        return self.ledger.usage

    @property
    def calls(self) -> int:
        return self.ledger.calls

    def complete(
        self,
        system: str | None = None,
        user: str = "",
        json: bool | None = None,
        *,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        tool_choice: object = None,
    ) -> Completion:
        """Ask the contender's model, with its settings, exactly what the adapter built.

        Either ``system`` and ``user`` text, or a conversation: ``messages`` in OpenAI's
        chat shape (system, user, assistant and tool roles), with ``tools`` (JSON-schema
        function definitions) and ``tool_choice``; the completion then carries the
        assistant ``message`` and its ``tool_calls``. ``json`` asks for a JSON object
        (default: yes for system/user, no for a conversation).

        The returned ``Completion`` holds the text and its ``usage`` (tokens, dollars), which
        is also added to this model's usage for the case, over every turn. A transport or
        provider failure raises ``ProviderError``: let it propagate and the case is an error,
        not a 0. With ``--cache``, an identical earlier request is answered from disk and
        costs nothing.
        """
        call = _Call(self, self._request(system, user, json, messages, tools, tool_choice))
        if call.walk():
            try:
                call.answer = self.provider.complete(call.handle(), **call.request)
            except BaseException as e:  # how the call ended: its steps see it, then it is raised
                call.error = e
        return call.end()

    async def acomplete(
        self,
        system: str | None = None,
        user: str = "",
        json: bool | None = None,
        *,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        tool_choice: object = None,
    ) -> Completion:
        """``complete`` for async code: a step that may wait (a budget's first call) and the
        provider's request run on threads of their own, so the event loop never blocks."""
        import asyncio

        call = _Call(self, self._request(system, user, json, messages, tools, tool_choice))
        if await asyncio.to_thread(call.walk) if any(s.blocks for s in self.steps) else call.walk():
            try:
                call.answer = await self.provider.acomplete(call.handle(), **call.request)
            except BaseException as e:
                call.error = e
        return call.end()

    def _request(
        self, system: object, user: object, json: bool | None, messages: object, tools: Any, tool_choice: object
    ) -> dict[str, Any]:
        """The provider's keyword arguments: the system/user form every provider takes, or
        a conversation, which only a provider with ``conversations`` takes."""
        if messages is None and tools is None and tool_choice is None:
            return {"system": system, "user": user, "json": True if json is None else json}
        if not self.provider.conversations:
            raise ProviderError(
                f"{self.id}: provider {self.provider.name} takes no messages= or tools= (only system/user text)"
            )
        if system is not None or user:
            raise ProviderError(f"{self.id}: give messages= or system/user, not both")
        if not isinstance(messages, list | tuple) or not messages or not all(isinstance(m, Mapping) for m in messages):
            raise ProviderError(f"{self.id}: messages= must be a non-empty list of message objects")
        request: dict[str, object] = {"messages": [dict(m) for m in messages], "json": bool(json)}
        if tools is not None:
            request["tools"] = [dict(t) for t in tools]
        if tool_choice is not None:
            request["tool_choice"] = tool_choice
        return request

    def __repr__(self) -> str:
        return f"Model({self.id!r}, provider={self.provider.name!r}, settings={self.settings!r})"


def _why_empty(completion: Completion) -> str:
    """What to say of an answer with no text: that the model wrote tokens all the same
    (thinking that filled max_tokens, or a server that puts the text elsewhere)."""
    tokens = completion.usage.output_tokens
    message = completion.message or {}
    thought = message.get("reasoning_content") or message.get("reasoning")
    if not tokens and not thought:
        return ""
    where = f"; its reasoning ({len(str(thought)):,} characters) came back alone" if thought else ""
    cut = ", cut off at max_tokens" if completion.finish_reason == "length" else ""
    return f"the answer's text was empty though the model wrote {_n(tokens, 'output token')}{cut}{where}"


class Adapter:
    """Runs one case against a model and returns a ``Reply``. It never scores."""

    # an agent's adapter (messages=, tools=): a contender whose provider cannot take a
    # conversation is refused by name before anything is spent
    uses_tools: ClassVar[bool] = False

    def prepare(self, dataset: str) -> None:
        """Once per dataset, before its experiments, outside the threads."""

    def call(self, case: Case, model: Model) -> Reply:
        """Run one case: build the prompt as production does, ask ``model.complete(...)``
        (or ``await model.acomplete(...)`` in an ``async def call``), parse the answer as
        production does, and return ``Reply(output=..., raw=..., usage=...)``.

        A model that answered but whose answer cannot be used is ``Reply(error=...)``: it
        scores 0. An exception (the network, the provider, a bug) makes the case an error,
        counted and never scored. Called on many threads at once: keep no shared state.
        """
        raise NotImplementedError(f"{type(self).__name__}.call(case, model) is not written yet")

    def context(self, case: Case) -> Mapping[str, object]:
        """What the scorer needs beyond the case."""
        return {}

    def verify(self, dataset: str) -> list[str]:
        """Offline problems with a dataset, for ``agent-evals verify``."""
        return []

    def metadata(self) -> Mapping[str, object]:
        """Recorded in every log: prompt version, parser version, ..."""
        return {}


class Scorer:
    """Turns a case and a reply into a ``Score``. Pure and deterministic: it calls nothing."""

    def metrics(self) -> list[Metric]:
        """The metrics every ``Score`` reports, each with a one-line description (the
        glossary prints it). Exactly one is ``primary=True``: the leaderboard ranks by it,
        and best value and the gates read it. Called once per command."""
        return [Metric("score", "The scorer's value for the case.", primary=True)]

    def call(self, case: Case, reply: Reply, context: Mapping[str, object]) -> Score:
        """Score one reply against ``case.expected``: ``Score(value=..., metrics={...})``
        with a value from 0 to 1 for each declared metric (None: the metric does not
        apply to this case, and its mean skips it). ``context`` is ``adapter.context(case)``.

        Pure and deterministic: it calls no model, so ``rescore`` gives the same numbers.
        A reply with ``error`` set (the model failed) never reaches it: that case scores 0
        on every metric. ``outcomes`` and ``diagnostics`` go to the logs.
        """
        raise NotImplementedError(f"{type(self).__name__}.call(case, reply, context) is not written yet")

    def verify(self, case: Case, context: Mapping[str, object]) -> list[str]:
        """Offline problems with a case's expected answer."""
        return []

    def summary(self, case: Case) -> str:
        """One short line about the case, shown by ``agent-evals cases``."""
        return ""


JUDGE_MAX_TOKENS = 1024  # a judge's answer at most: a verdict and its reasons; --budget holds each call's worst case


class Judge:
    """An LLM judge a scorer asks: ``Judge(rubric)(case, reply, context)``, with the context
    the scorer was given (it carries the run's judge model, so any thread or event loop may
    ask), asks that model (``judge:`` in the config, or ``--judge MODEL``) whether ``reply`` meets ``rubric`` for
    ``case`` (its input and expected answer), and returns ``(verdict, reasons)``: 1.0 or 0.0
    (``graded=True``: a grade from 0 to 1). The call goes the contenders' way (the response
    cache, ``--budget``, the rate limiter) at temperature 0; its tokens and cost are the
    judge's, shown apart from each contender's. A refusal or an answer that is no verdict
    raises ``SuiteError``: that case's error, named, never a 0. Declare the metric it gives
    ``Metric(..., judged=True)``: people's labels then correct it (``agent-evals label``)."""

    def __init__(self, rubric: str, *, graded: bool = False) -> None:
        if not isinstance(rubric, str) or not rubric.strip():
            raise ConfigError(f"Judge(rubric={_shown(rubric)}): expected the rubric as text")
        self.rubric, self.graded = rubric, graded

    def __call__(self, case: Case, reply: Reply, context: Mapping[str, object] | None = None) -> tuple[float, str]:
        if context is None:
            raise SuiteError(
                "Judge: pass the scorer's context, judge(case, reply, context): it carries the judge model"
            )
        model = context.get("judge")
        if not isinstance(model, Model):
            raise SuiteError("Judge: this run has no judge model; name one with judge: MODEL in the config or --judge")
        form = '"score": a number from 0 to 1' if self.graded else '"verdict": "pass" or "fail"'
        system = (
            f"You grade an answer by this rubric:\n{self.rubric.strip()}\n\n"
            f'Reply with one JSON object and nothing else: {{{form}, "reasons": "why, briefly"}}'
        )
        shown = (("Input", case.input), ("Expected answer", case.expected), ("Answer to grade", reply.output))
        user = "\n\n".join(f"{name}:\n{v if isinstance(v, str) else _json_dumps(v)}" for name, v in shown)
        completion = model.complete(system, user, json=True)
        text = completion.text
        try:
            said = json.loads(text)
            value = float(said["score"]) if self.graded else {"pass": 1.0, "fail": 0.0}[str(said["verdict"]).lower()]
        except (ValueError, TypeError, KeyError, RecursionError):
            value, said = math.nan, {}
        if not 0 <= value <= 1:
            if (last := model.ledger.last) is not None:  # --cache: a retry asks it again
                for step in model.steps:
                    step.disown(last)
            raise SuiteError(
                f"judge {model.id} gave no verdict ({'a grade' if self.graded else 'pass or fail'}): {_shown(text)}"
            )
        if not self.graded and (chance := _verdict_chance(completion.raw, text)) is not None:
            with model.ledger.lock:
                model.ledger.chances.append((value, chance))
        return value, str(said.get("reasons") or "")


def _verdict_chance(raw: object, text: str) -> float | None:
    """The probability a judge gave its verdict being pass, from the token log-probabilities an
    OpenAI-style answer carries (``choices[0].logprobs.content``, asked of a judge): at the token
    where the verdict's word begins, its alternatives that begin "pass" against those that
    begin "fail". None where the answer has none, or its tokens do not spell its text.

    >>> tokens = [{"token": '{"verdict": "', "logprob": 0.0}, {"token": "pass", "logprob": -0.2,
    ...     "top_logprobs": [{"token": "pass", "logprob": -0.2}, {"token": "fail", "logprob": -1.7}]}]
    >>> round(_verdict_chance({"choices": [{"logprobs": {"content": tokens}}]}, '{"verdict": "pass'), 3)
    0.818
    """
    try:
        content = raw["choices"][0]["logprobs"]["content"]  # type: ignore[index]
        spelled = "".join(token["token"] for token in content)
    except (LookupError, TypeError):
        return None
    found = re.search(r'"verdict"\s*:\s*"', text)
    if found is None or spelled != text:
        return None
    at = 0
    for token in content:
        if at + len(token["token"]) > found.end():
            break
        at += len(token["token"])
    else:  # the text ends where the verdict would begin
        return None
    skip, mass = found.end() - at, {"p": 0.0, "f": 0.0}
    for alt in token.get("top_logprobs") or [token]:
        spelt = str(alt.get("token", "")) if isinstance(alt, dict) else ""
        same = spelt[:skip] == token["token"][:skip]  # the same quote before it: an alternative word, not form
        word = re.findall(r"^\s*([a-zA-Z]*)", spelt[skip:])[0].lower() if same else ""  # its letters: 'pass",' too
        for side in ("pass", "fail"):
            chance = alt.get("logprob") if word and side.startswith(word) else None
            if isinstance(chance, int | float) and math.isfinite(chance):
                mass[side[0]] += math.exp(min(0.0, chance))
    whole = mass["p"] + mass["f"]
    return mass["p"] / whole if whole > 0 else None


class EchoAdapter(Adapter):
    """Sends the case input as the user message and parses the first JSON object back."""

    system: str | None = None

    def call(self, case: Case, model: Model) -> Reply:
        return self._reply(model.complete(system=self.system, user=case.input, json=True))

    @staticmethod
    def _reply(completion: Completion) -> Reply:
        try:
            output = _first_json_object(completion.text)
        except ValueError as e:
            return Reply(error=str(e), raw=completion.text, usage=completion.usage)
        return Reply(output=output, raw=completion.text, usage=completion.usage)


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What ``run_tools`` did: the whole ``transcript`` (every message, tool call and
    tool result), the final ``answer`` (None when the loop hit ``max_turns`` first),
    the model calls it made (``turns``), and the tools it called, in order."""

    transcript: list[dict[str, object]]
    answer: str | None
    turns: int
    calls: list[ToolCall]

    @property
    def finished(self) -> bool:
        """The model gave an answer within ``max_turns``."""
        return self.answer is not None


def run_tools(
    model: Model,
    messages: Sequence[Mapping[str, object]],
    tools: Mapping[str, Callable[..., object]],
    *,
    definitions: Sequence[Mapping[str, object]] | None = None,
    max_turns: int | None = None,
) -> ToolRun:
    """The standard agent loop: call the model, run the tools it asks for, give it their
    results, until it answers without a tool call or ``max_turns`` calls are made
    (default: ``model.max_turns``, which ``--max-turns`` sets).

    ``tools`` maps each name to a callable taking the model's arguments as keywords;
    ``definitions`` are the JSON-schema function definitions sent to the model (default:
    built from each callable's signature and docstring). A tool that raises, a tool the
    model names that does not exist, or arguments that are not a JSON object give the
    model an ``error: ...`` tool result (an agent's recoverable failure, in the
    transcript), never an exception. A transport failure does raise: the case is an
    error, with every turn's spend counted.
    """
    definitions = list(definitions) if definitions is not None else [_tool_definition(n, f) for n, f in tools.items()]
    limit = model.max_turns if max_turns is None else max_turns
    transcript = [dict(m) for m in messages]
    calls: list[ToolCall] = []
    for turn in range(1, limit + 1):
        completion = model.complete(messages=transcript, tools=definitions)
        transcript.append(dict(completion.message or {"role": "assistant", "content": completion.text}))
        if not completion.tool_calls:
            return ToolRun(transcript, completion.text, turn, calls)
        for call in completion.tool_calls:
            calls.append(call)
            transcript.append({"role": "tool", "tool_call_id": call.id, "content": _run_tool(call, tools)})
    return ToolRun(transcript, None, limit, calls)


def _run_tool(call: ToolCall, tools: Mapping[str, Callable[..., object]]) -> str:
    """A tool's result as the model reads it: its text, or ``error: ...``."""
    if call.error:
        return f"error: {call.error}"
    tool = tools.get(call.name)
    if tool is None:
        return f"error: no tool named {call.name!r}; the tools are {', '.join(tools)}"
    try:
        result = tool(**call.arguments)
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        return f"error: {_describe(e)[0]}"
    return result if isinstance(result, str) else _json_dumps(_jsonable(result, "tool result"))


def _tool_definition(name: str, tool: Callable[..., object]) -> dict[str, object]:
    """A function definition from a callable: its parameters typed from their annotations
    (int and float: number, bool: boolean, else string), the ones without a default required."""
    kinds = {"int": "number", "float": "number", "bool": "boolean", int: "number", float: "number", bool: "boolean"}
    properties: dict[str, object] = {}
    required = []
    for parameter in inspect.signature(tool).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        properties[parameter.name] = {"type": kinds.get(parameter.annotation, "string")}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    described = (inspect.getdoc(tool) or name).strip().splitlines()[0]
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": described, "parameters": parameters}}


class Tracker:
    """Where results go besides the terminal: ``start``, ``begin``, ``record``, ``finish``, ``close``.

    ``context`` holds ``suite``, ``project``, ``project_id``, ``stamp`` and ``options``
    (the tracker's own section of the config file). ``env_key`` selects it when it is the
    only key set; ``packages`` are checked before any model is called. Beside the local
    log, a tracker's hooks (``begin`` aside) run in order on a thread of their own, each
    within ``tracker_timeout``: the cases never wait on it, and their times never include it.
    """

    name: ClassVar[str] = "tracker"
    env_key: ClassVar[str | None] = None
    packages: ClassVar[Sequence[str]] = ()
    extra: ClassVar[str | None] = None  # the agent-evals pip extra that brings ``packages``

    @classmethod
    def problems(cls) -> list[str]:
        """What stops it from running: a missing package (with how to get it) or key."""
        found = []
        missing = [p for p in cls.packages if not _importable(p)]
        if missing:
            how = f"pip install 'agent-evals[{cls.extra}]'" if cls.extra else f"pip install {' '.join(missing)}"
            found.append(f"package {', '.join(missing)} is not installed ({how})")
        if cls.env_key and not os.environ.get(cls.env_key):
            found.append(f"{cls.env_key} is not set")
        return found

    @classmethod
    def note(cls) -> str | None:
        """A ``-v`` note on how it was configured, if any."""
        return None

    def __init__(self, context: Mapping[str, Any] | None = None) -> None:
        self.context = dict(context or {})

    def enabled(self) -> bool:
        return True

    def start(self, experiment: Experiment) -> None:
        """Once, before the experiment's first case."""

    def begin(self, experiment: Experiment, case: Case, repeat: int) -> contextlib.AbstractContextManager[object]:
        """On the thread that runs the case, as it starts: the context it runs in (an
        OpenTelemetry span made current, so the app's own spans nest under it). Quick and
        local: it never waits on the network."""
        return contextlib.nullcontext()

    def record(self, result: RunResult) -> None:
        """Once per finished case, in case order."""

    def finish(self, experiment: Experiment, summary: Summary) -> Mapping[str, object]:
        """Once, with the summary; ``{"url": ...}`` names a page to open, or None."""
        return {"url": None}

    def close(self) -> None:
        """Once, after the last experiment: send what is left."""

    def abandon(self) -> None:
        """The run gives up on it (past ``tracker_timeout``, or a Ctrl-C): what is left is
        dropped, and nothing of it may hold the process at exit."""


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Configuration:
    suite: str | None = None
    root: Path | None = None
    cases: str | None = None
    adapter: object = None
    scorer: object = None
    env_files: list[str] = field(default_factory=list)
    before_run: Callable[[], object] | None = None
    providers: list[Provider] = field(default_factory=list)
    trackers: list[type[Tracker]] = field(default_factory=list)


_LISTS = ("env_files", "providers", "trackers")
_configuration = _Configuration()


def configure(**settings: Any) -> None:
    """Register the suite: ``suite``, ``root``, ``cases``, ``adapter``, ``scorer``,
    ``env_files``, ``before_run``, ``providers``, ``trackers``.

    Calls merge: lists extend and other keys replace, so a module named by ``require:``
    can add a provider or a tracker to what the helper set.
    """
    known = [f.name for f in dataclasses.fields(_Configuration)]
    for key, value in settings.items():
        if key not in known:
            raise ConfigError(f"configure(): unknown setting {key!r}{_hint(key, known)}; known: {', '.join(known)}")
        _check_configured(key, value)
        if key in _LISTS:
            items = [value] if isinstance(value, str | Provider | type) else list(value)
            getattr(_configuration, key).extend(items)
        elif key == "root":
            _configuration.root = Path(value)
        else:
            setattr(_configuration, key, value)


# what each configure() setting takes: (its kinds, how to say it)
_CONFIGURE_KINDS: dict[str, tuple[Any, str]] = {
    "suite": (str, "a name (str)"),
    "root": ((str, os.PathLike), "the folder that holds the cases (str or Path)"),
    "cases": (str, "a glob under root (str), like 'datasets/*/cases/**/input.txt'"),
    "env_files": (str, "a file name (str) or a list of them"),
    "providers": (Provider, "a Provider instance or a list of them"),
    "trackers": (type, "a Tracker subclass or a list of them"),
}


def _check_configured(key: str, value: object) -> None:
    """One ``configure()`` setting checked before it is kept: a ConfigError names it."""
    if key in ("adapter", "scorer"):
        hooks = ("call",) if key == "adapter" else ("call", "metrics")
        if isinstance(value, type) or not all(callable(getattr(value, hook, None)) for hook in hooks):
            kind = "Adapter" if key == "adapter" else "Scorer"
            raise ConfigError(
                f"configure({key}={_shown(value)}): expected an instance of a {kind} subclass, like {kind}()"
            )
        return
    if key == "before_run":
        if value is not None and not callable(value):
            raise ConfigError(f"configure(before_run={_shown(value)}): expected a function to call, or None")
        return
    kinds, what = _CONFIGURE_KINDS[key]
    items = list(value) if key in _LISTS and isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, kinds) or (key == "trackers" and not issubclass(item, Tracker)):
            raise ConfigError(f"configure({key}={_shown(value)}): expected {what}")


def _reset_configuration() -> None:
    global _configuration
    _configuration = _Configuration()


# ═══════════════════════════════════════════════════════════════════════════════
# Discovery and the config file: finding the suite, its lineup and its env files
# ═══════════════════════════════════════════════════════════════════════════════


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Defaults:
    effort: list[str] = field(default_factory=lambda: ["default"])
    temperature: list[float | None] = field(default_factory=lambda: [None])
    max_tokens: int | None = _SETTING["max_tokens"].default
    parallelism: int = _SETTING["parallelism"].default
    repeat: int = _SETTING["repeat"].default
    max_turns: int = _SETTING["max_turns"].default
    case_timeout: float = _SETTING["case_timeout"].default
    tracker_timeout: float = _SETTING["tracker_timeout"].default
    budget: float | None = None
    transport: dict[str, float] = field(default_factory=dict)  # timeout, retries, ... as Provider names them
    routing: list[str | None] = field(default_factory=lambda: [None])  # provider: preferences, as canonical JSON
    service_tier: list[str | None] = field(default_factory=lambda: [None])


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Config:
    """The parsed ``.agent-eval.config.yml``."""

    path: Path
    request_types: list[str]
    project: str | None = None
    defaults: _Defaults = field(default_factory=_Defaults)
    vendors: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    direct: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    tracker: str | None = None
    sections: dict[str, dict[str, object]] = field(default_factory=dict)
    cases: str | None = None
    cache: bool = False
    app: dict[str, str] = field(default_factory=dict)  # url and title: the app OpenRouter attributes calls to
    judge: str | None = None  # the model a Judge asks, named as a contender is (openai/gpt-4.1-mini)


_TOP_KEYS = (
    "project",
    "request_types",
    "defaults",
    "vendors",
    "direct",
    "tracker",
    "require",
    "adapter",
    "scorer",
    "cases",
    "cache",
    "app",
    "judge",
)
# Transport settings every provider takes, with the kind of number each is.
_DEFAULT_KEYS = (*(setting.key for setting in _SETTINGS if setting.key), "provider")
_ENTRY_KEYS = ("model", *(setting.key for setting in _SETTINGS if setting.entry), "provider")
# OpenRouter's provider preferences (ProviderPreferences in its OpenAPI spec): each one's kind
_ROUTING: dict[str, Any] = {"order": list, "only": list, "ignore": list, "quantizations": list, "allow_fallbacks": bool}
_ROUTING |= {"require_parameters": bool, "zdr": bool, "enforce_distillable_text": bool, "data_collection": str}
_ROUTING |= {"sort": (str, dict), "max_price": dict, "preferred_max_latency": (int, float, dict)}
_ROUTING |= {"preferred_min_throughput": (int, float, dict)}
# and the values it takes (its spec's enums; prices are USD, as numbers or the strings the spec types them)
_SORTS = ("price", "throughput", "latency", "exacto")
_QUANTIZATIONS = ("int4", "int8", "fp4", "mxfp4", "nvfp4", "fp6", "fp8", "mxfp8", "fp16", "bf16", "fp32", "unknown")


def _routing_values(name: str, item: Any) -> str | None:
    """What a routing value of the right kind must be, when it is not that (None: it is)."""

    def amount(value: Any) -> bool:  # a finite number from 0 up
        with contextlib.suppress(TypeError, ValueError):
            return not isinstance(value, bool) and 0 <= float(value) < math.inf
        return False

    def fields(value: object, keys: Iterable[str], good: Callable[[object], bool]) -> bool:
        return isinstance(value, dict) and all(k in keys and good(v) for k, v in value.items())

    sort = isinstance(item, dict) and set(item) <= {"by", "partition"} and item.get("by") in _SORTS
    if name == "sort" and not (item in _SORTS or (sort and item.get("partition") in ("model", "none", None))):
        return f"one of {', '.join(_SORTS)}, or {{by: price, partition: model or none}}"
    if name == "max_price" and not fields(item, ("prompt", "completion", "request", "image", "audio"), amount):
        return "prompt, completion, request, image or audio, each dollars from 0 up"
    if name.startswith("preferred_") and not (
        (amount(item) and not isinstance(item, str)) or fields(item, ("p50", "p75", "p90", "p99"), amount)
    ):
        return "a number from 0 up, or p50, p75, p90 or p99, each one"
    if name == "quantizations" and not set(item) <= set(_QUANTIZATIONS):
        return f"a list of {', '.join(_QUANTIZATIONS)}"
    if name == "data_collection" and item not in ("allow", "deny"):
        return "allow or deny"
    return None


def _routings(value: object, where: str, key: str) -> list[str | None]:
    """``provider:`` as canonical JSON, one per routing: a mapping, or a list of them (each
    a contender of its own, as a list of efforts is)."""
    out: list[str | None] = []
    for i, routing in enumerate(value if isinstance(value, list) and value else [value]):
        at = f"{key}[{i}]" if isinstance(value, list) and value else key
        if not isinstance(routing, dict) or not routing:
            raise ConfigError(
                f"{where}: {at}: expected provider preferences (order:, only:, zdr:, ...), got {_shown(routing)}"
            )
        _check_keys(routing, tuple(_ROUTING), where, f"{at}.")
        for name, item in routing.items():
            kind = _ROUTING[name]
            wrong = not isinstance(item, kind) or isinstance(item, bool) != (kind is bool)
            if wrong or (kind is list and not all(isinstance(x, str) for x in item)):
                raise ConfigError(f"{where}: {at}.{name}: {_shown(item)} is not of the kind OpenRouter takes there")
            if expected := _routing_values(name, item):
                raise ConfigError(f"{where}: {at}.{name}: expected {expected}, got {_shown(item)}")
        out.append(json.dumps(routing, sort_keys=True, separators=(",", ":")))
    return out


def _find_suite(helper: str | None, config: str | None) -> tuple[Path | None, Path, Path]:
    """(helper file or None, config file, the evals/ folder) from flags, env, or upward search."""
    source = "--helper"
    if not helper and os.environ.get("AGENT_EVALS_HELPER"):
        helper, source = os.environ["AGENT_EVALS_HELPER"], "AGENT_EVALS_HELPER"
    if helper:
        path = Path(helper).expanduser()
        if path.is_dir():  # the evals/ folder, or the project holding it
            for evals in (path, path / "evals"):
                if (evals / HELPER_NAME).is_file() or _config_in(evals):
                    return _suite_in(evals.resolve(), config)
            raise ConfigError(
                f"{source} {helper}: a folder with neither {HELPER_NAME} nor {CONFIG_NAME} (or {CONFIG_JSON}) "
                f"in it or in its evals/; point it at the suite's evals/ folder or one of those files"
            )
        if not path.is_file():
            raise ConfigError(
                f"{source} {helper}: no such file; point it at evals/{HELPER_NAME}, evals/{CONFIG_NAME} "
                f"or the evals/ folder"
            )
        path = path.resolve()
        evals = path.parent
        if path.suffix.lower() in (".yml", ".yaml", ".json"):
            helper_path = evals / HELPER_NAME
            return (helper_path if helper_path.is_file() else None), Path(config or path), evals
        return path, Path(config) if config else _config_in(evals) or evals / CONFIG_NAME, evals
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        evals = folder / "evals"
        if (evals / HELPER_NAME).is_file() or _config_in(evals):
            return _suite_in(evals, config)
    raise ConfigError(
        f"no suite is configured: create evals/{HELPER_NAME} (calling agent_evals.configure with an "
        f"adapter and a scorer) or evals/{CONFIG_NAME} (with adapter: and scorer: keys) in your "
        f"project, or pass --helper PATH; searched upward from {here}"
    )


def _unconfigured(conf: _Configuration, source: str, where: str) -> ConfigError:
    """A suite with no adapter or no scorer: what is missing, and the two places to name it."""
    missing = [k for k in ("adapter", "scorer") if getattr(conf, k) is None]
    them = "them" if len(missing) > 1 else "it"
    return ConfigError(
        f"no suite is configured: no {' and '.join(missing)}; register {them} in {source} with configure("
        f"{', '.join(f'{k}=...' for k in missing)}) or name {them} with {' and '.join(f'{k}:' for k in missing)} "
        f"in {where}" + " (or its .json)" * where.endswith(".yml")
    )


def _suite_in(evals: Path, config: str | None) -> tuple[Path | None, Path, Path]:
    helper_path = evals / HELPER_NAME
    config_path = Path(config) if config else _config_in(evals) or evals / CONFIG_NAME
    return (helper_path if helper_path.is_file() else None), config_path, evals


def _config_in(evals: Path) -> Path | None:
    """The suite's config file in ``evals``: the YAML one or the JSON one, never both."""
    found = [evals / name for name in (CONFIG_NAME, CONFIG_JSON) if (evals / name).is_file()]
    if len(found) > 1:
        raise ConfigError(f"{_display(evals)}: both {CONFIG_NAME} and {CONFIG_JSON}; keep one of them")
    return found[0] if found else None


def _load_helper(path: Path) -> None:
    """Run the helper as a module, with its project root (the parent of evals/) importable."""
    root = str(path.parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    import importlib.util

    spec = importlib.util.spec_from_file_location("_agent_evals_helper", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as import does: its dataclasses resolve, and a reload's classes replace the last
    try:
        spec.loader.exec_module(module)
    except EvalError:
        raise
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        raise SuiteError(f"{_display(path)}{_where(e, path)} raised {_describe(e)[0]}") from None


def _where(error: BaseException, path: Path) -> str:
    """':LINE' of the deepest frame inside ``path``, or ''."""
    line = None
    import traceback

    for frame in traceback.extract_tb(error.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return f":{line}" if line else ""


def _read_config_file(path: Path) -> dict[str, object]:
    where = _display(path)
    if path.is_dir():
        raise ConfigError(
            f"{where}: is a folder; the config file must be a file (request_types: [prompt], vendors: ...)"
        )
    if not path.is_file():
        raise ConfigError(
            f"{where}: not found; the config file names the request types and the lineup "
            f"(request_types: [prompt], vendors: ...)"
        )
    data = _read_json_config(path, where) if path.suffix.lower() == ".json" else _read_yaml_config(path, where)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a mapping of keys (request_types:, vendors:, ...), got {type(data).__name__}"
        )
    return data


def _read_json_config(path: Path, where: str) -> object:
    """The config file written as JSON: the standard library reads it, no PyYAML needed."""

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [key for key, _ in pairs]
        if twice := next((key for key in keys if keys.count(key) > 1), None):
            raise ValueError(f"the key {twice!r} is given twice")
        return dict(pairs)

    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"), object_pairs_hook=unique)  # a BOM is no error
    except OSError as e:
        raise ConfigError(f"{where}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid JSON: nested too deep") from None
    except ValueError as e:  # a key given twice, a number past Python's 4,300-digit limit
        raise ConfigError(f"{where}: invalid JSON: {str(e).split(';')[0]}") from None


def _read_yaml_config(path: Path, where: str) -> object:
    try:
        yaml = _import_optional("yaml", f"reading {where}")
    except MissingDependency:
        raise MissingDependency(
            f"reading {where} needs the PyYAML package: pip install PyYAML, or write the same keys as JSON "
            f"in {_display(path.with_name(CONFIG_JSON))} (read with the standard library alone)"
        ) from None
    try:
        text = path.read_bytes().decode("utf-8")
        data = yaml.load(text, Loader=_yaml_loader(yaml))
    except OSError as e:
        raise ConfigError(f"{where}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except _YamlProblem as e:
        raise ConfigError(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        if isinstance(position := getattr(e, "position", None), int):  # the reader's: a character no YAML takes
            before = text[:position]
            at = f"line {before.count(chr(10)) + 1}, column {position - before.rfind(chr(10))}: "
            character = getattr(e, "character", 0)
            code = ord(character) if isinstance(character, str) else int(character or 0)
            problem = f"the character U+{code:04X} is not allowed (a NUL or a control byte); remove it"
        raise ConfigError(f"{where}: {at}invalid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid YAML: nested too deep") from None
    except ValueError as e:  # a number past Python's 4,300-digit limit, and the like
        raise ConfigError(f"{where}: invalid YAML: {str(e).split(';')[0]}") from None
    return data


class _YamlProblem(Exception):
    """What the config's YAML must not do (an alias bomb, a key given twice)."""


_YAML_ALIASES = 100  # a lineup has a handful of anchors; a few hundred bytes of aliases can expand to billions
_YAML_NODES = 100_000  # nodes the document may hold once its aliases are expanded


def _yaml_loader(yaml: Any) -> type:
    """PyYAML's SafeLoader, bounded: at most ``_YAML_ALIASES`` aliases and ``_YAML_NODES``
    nodes once they are expanded (checked before anything is built), and no key twice in
    one mapping (named with both lines)."""

    class Loader(yaml.SafeLoader):  # type: ignore[misc, name-defined]
        aliases = 0

        def compose_node(self, parent: object, index: object) -> object:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > _YAML_ALIASES:
                    line = self.peek_event().start_mark.line + 1
                    raise _YamlProblem(f"line {line}: more than {_YAML_ALIASES} aliases (*name); write the values out")
            return super().compose_node(parent, index)

        def get_single_node(self) -> object:
            node = super().get_single_node()
            if node is not None:
                _yaml_size(node, {}, set())
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> object:
            lines: dict[object, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if key in lines:
                    raise _YamlProblem(f"line {line}: key {key} is given twice (first on line {lines[key]}); keep one")
                lines[key] = line
            return super().construct_mapping(node, deep)

    return Loader


def _yaml_size(node: Any, sizes: dict[int, int], path: set[int]) -> int:
    """Nodes under ``node`` with aliases expanded, each shared node counted once per use."""
    if (known := sizes.get(id(node))) is not None:
        return known
    if id(node) in path:
        raise _YamlProblem(f"line {node.start_mark.line + 1}: an anchor contains itself")
    path.add(id(node))
    total = 1
    if isinstance(node.value, list):
        for item in node.value:
            for child in item if isinstance(item, tuple) else (item,):
                total += _yaml_size(child, sizes, path)
                if total > _YAML_NODES:
                    raise _YamlProblem(
                        f"line {node.start_mark.line + 1}: more than {_YAML_NODES:,} values once its aliases "
                        "are expanded; write a smaller config"
                    )
    path.discard(id(node))
    sizes[id(node)] = total
    return total


def _as_list(value: object, where: str, key: str, kind: type | tuple[type, ...] = str) -> list[Any]:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, kind) or (isinstance(item, bool) and kind is not bool):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise ConfigError(f"{where}: {key}: expected {names} or a list of them, got {item!r}")
    return items


def _check_setting(setting: _Setting, value: object, where: str, key: str) -> Any:
    """A setting's value, checked the same way whether the config file (``defaults.`` or a
    lineup entry) or a flag (``_flag_type``) gives it."""
    try:
        return _setting_value(setting, value)
    except ValueError as e:
        raise ConfigError(f"{where}: {key}: {e}") from None


def _setting_value(setting: _Setting, value: Any) -> object:
    """``value`` checked against its setting's kind and bounds; ValueError says what is wrong."""
    if setting.kind == "choices":
        values = value if isinstance(value, list) else [value]
        for item in values:
            if not isinstance(item, str):
                raise ValueError(f"expected str or a list of them, got {item!r}")
            if item not in setting.choices:
                known = ", ".join(setting.choices)
                what = setting.key.replace("_", " ")
                raise ValueError(f"unknown {what} {item!r}{_hint(item, setting.choices)}; known: {known}")
        return values
    if setting.kind == "temperatures":
        values = value if isinstance(value, list) else [value]
        if not all(t is None or (_is_number(t) and 0 <= t <= 2) for t in values):
            bad = next(t for t in values if not (t is None or (_is_number(t) and 0 <= t <= 2)))
            raise ValueError(f"temperature must be a number from 0 to 2, got {bad!r}")
        return [None if t is None else float(t) for t in values]
    if setting.kind == "switch":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_shown(value)}")
        return value
    if setting.kind == "whole":
        # a float that is a whole number (2.0, as YAML may write it) is taken as one
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        low, high = setting.low, setting.high
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            span = f"from {low} to {high:,}" if high else f"from {low} up"
            raise ValueError(f"expected a whole number {span}, got {_shown(value)}")
        return value
    if not (_is_number(value) and 0 <= value < math.inf):  # NaN and infinities are refused too
        what = "seconds (a number from 0 up, finite)" if setting.kind == "seconds" else "a number from 0 up (finite)"
        raise ValueError(f"expected {what}, got {_shown(value)}")
    return float(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_keys(data: Mapping[str, object], known: Sequence[str], where: str, prefix: str = "") -> None:
    for key in data:
        if key not in known:
            raise ConfigError(f"{where}: unknown key {prefix}{key}{_hint(key, known)}; known: {', '.join(known)}")


def _parse_config(
    data: dict[str, Any], path: Path, request_types: Mapping[str, str], tracker_names: Sequence[str]
) -> _Config:
    where = _display(path)
    _check_keys(data, [*_TOP_KEYS, *tracker_names], where)
    types = data.get("request_types")
    if not types:
        raise ConfigError(
            f"{where}: request_types is required: name what the suite's adapter sends, "
            f"e.g. request_types: [prompt]; known: {', '.join(request_types)}"
        )
    types = _as_list(types, where, "request_types")
    for kind in types:
        if kind not in request_types:
            raise ConfigError(
                f"{where}: request_types: unknown type {kind!r}{_hint(kind, request_types)}; "
                f"known: {', '.join(request_types)}"
            )
    config = _Config(path=path, request_types=types)
    if "cache" in data:
        if not isinstance(data["cache"], bool):
            raise ConfigError(f"{where}: cache: expected true or false, got {data['cache']!r}")
        config.cache = data["cache"]
    app = data.get("app") or {}
    if not isinstance(app, dict) or not all(isinstance(v, str) and v.strip() for v in app.values()):
        raise ConfigError(f"{where}: app: expected url: and title: as text, got {_shown(app)}")
    _check_keys(app, ("url", "title"), where, "app.")
    config.app = app
    for key in ("project", "tracker", "cases", "judge"):
        if key in data and data[key] is not None:
            if not isinstance(data[key], str):
                raise ConfigError(f"{where}: {key}: expected a string, got {data[key]!r}")
            setattr(config, key, data[key])
    _parse_defaults(config.defaults, data.get("defaults") or {}, where)
    for section in ("vendors", "direct"):
        value = data.get(section) or {}
        if not isinstance(value, dict):
            raise ConfigError(
                f"{where}: {section}: expected a mapping of name to a list of models, got {type(value).__name__}"
            )
        parsed = {}
        for name, entries in value.items():
            if not isinstance(entries, list):
                raise ConfigError(
                    f"{where}: {section}.{name}: expected a list of entries (- model: NAME), got {entries!r}"
                )
            parsed[str(name)] = [_parse_entry(e, where, f"{section}.{name}[{i}]") for i, e in enumerate(entries)]
        setattr(config, section, parsed)
    for name in tracker_names:
        if name in data:
            if not isinstance(data[name], dict):
                raise ConfigError(f"{where}: {name}: expected a mapping of the tracker's options, got {data[name]!r}")
            config.sections[name] = data[name]
    return config


def _parse_defaults(config: _Defaults, defaults: object, where: str) -> None:
    """``defaults:``, each setting checked by its row of ``_SETTINGS``."""
    if not isinstance(defaults, dict):
        raise ConfigError(f"{where}: defaults: expected a mapping (effort:, temperature:, ...), got {defaults!r}")
    _check_keys(defaults, _DEFAULT_KEYS, where, "defaults.")
    if defaults.get("provider") is not None:
        config.routing = _routings(defaults["provider"], where, "defaults.provider")
    for setting in _SETTINGS:
        if setting.key not in defaults or (setting.key == "max_tokens" and defaults[setting.key] is None):
            continue  # max_tokens: null is no limit, as leaving it out is
        value = _check_setting(setting, defaults[setting.key], where, f"defaults.{setting.key}")
        if setting.transport:
            config.transport[setting.key] = value
        else:
            setattr(config, setting.key, value)


def _parse_entry(entry: object, where: str, key: str) -> dict[str, object]:
    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: {key}: expected a mapping with model:, got {entry!r}")
    _check_keys(entry, _ENTRY_KEYS, where, f"{key}.")
    model = entry.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where}: {key}.model: expected a model name, got {model!r}")
    out: dict[str, object] = {"model": model.strip()}
    for name in _ENTRY_KEYS[1:-1]:
        if name in entry and not (name == "max_tokens" and entry[name] is None):
            out[name] = _check_setting(_SETTING[name], entry[name], where, f"{key}.{name}")
    if "provider" in entry:  # null or {}: no routing, whatever defaults: says
        out["provider"] = (
            [None] if entry["provider"] in (None, {}) else _routings(entry["provider"], where, f"{key}.provider")
        )
    return out


def _resolve_object(spec: str, key: str, where: str) -> object:
    """``package.module:Name`` (or dotted ``package.module.Name``) -> the object."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{where}: {key}: expected package.module:Class, got {spec!r}")
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{where}: {key}: {spec} is not of the form package.module:Class")
    module = _import_module(module_name, key, spec, where)
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in vars(module) if not n.startswith("_")]
        raise ConfigError(f"{where}: {key}: {spec}: module {module_name} has no {attr}{_hint(attr, names)}") from None


def _forget_modules(*, under: Path | None = None, named: str | None = None) -> None:
    """Drop from ``sys.modules`` the modules a suite loaded before, so that loading it again
    (a second ``main()`` in one process: a notebook, a test runner) runs what they register
    with ``configure()`` at import again, instead of silently losing it: those whose file is
    ``under`` its project, those named like a package or module at the project's top (a
    copy of the suite elsewhere may have loaded them), or the package ``named`` and its
    submodules."""
    names = {named} if named else set()
    if under is not None:
        with contextlib.suppress(OSError):
            for entry in under.iterdir():
                if entry.suffix == ".py" or (entry / "__init__.py").is_file():
                    names.add(entry.stem if entry.suffix == ".py" else entry.name)
        names -= set(sys.stdlib_module_names)
    # the interpreter's own and installed modules are never imported twice, wherever the
    # project is (a suite in the home folder holds a pyenv, a virtualenv sits in the project)
    import sysconfig

    homes = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()}
    interpreter = [Path(home).resolve() for home in homes if home]
    for name, module in list(sys.modules.items()):
        if name == "__main__" or getattr(module, "__dict__", None) is globals():
            continue
        if name.partition(".")[0] in sys.stdlib_module_names:
            continue
        if any(name == n or name.startswith(f"{n}.") for n in names):
            del sys.modules[name]
        elif under is not None and isinstance(file := getattr(module, "__file__", None), str):
            try:
                path = Path(file).resolve()
            except (OSError, ValueError):
                continue
            installed = not path.parts or {"site-packages", "dist-packages"} & set(path.parts)
            if path.is_relative_to(under) and not installed and not any(path.is_relative_to(h) for h in interpreter):
                del sys.modules[name]


def _import_module(name: str, key: str, value: str, where: str) -> object:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        raise ConfigError(
            f"{where}: {key}: {value} could not be imported ({e}); is it installed, or its folder on PYTHONPATH?"
        ) from None
    except EvalError:
        raise
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        raise SuiteError(f"{where}: {key}: importing {name} raised {_describe(e)[0]}") from None


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Suite:
    """Everything discovery found: the suite's objects, its root and its lineup file."""

    name: str
    root: Path
    project_root: Path
    cases_glob: str
    adapter: Any
    scorer: Any
    config: _Config
    providers: list[Provider]
    trackers: dict[str, type[Tracker]]
    env_files: list[str]
    before_run: Callable[[], object] | None
    metrics: list[Metric]


def _request_types(providers: Iterable[Provider]) -> dict[str, str]:
    out: dict[str, str] = {}
    for provider in providers:
        out.setdefault(provider.request_type, provider.request_type_description)
    return out


def _configure_from(conf: _Configuration, data: Mapping[str, Any], where: str) -> None:
    """The config file's adapter: and scorer:, for what the helper left unset: resolved,
    made, and checked to be an adapter and a scorer before anything reaches the network."""
    for key in ("adapter", "scorer"):
        if getattr(conf, key) is None and data.get(key):
            cls = _resolve_object(data[key], key, where)
            try:
                setattr(conf, key, cls() if isinstance(cls, type) else cls)
            except _SUITE_EXCEPTIONS as e:
                _reraise_ctrl_c(e)
                raise SuiteError(f"{where}: {key}: {data[key]}() raised {_describe(e)[0]}") from None
            try:  # what it names is checked now, before anything reaches the network
                _check_configured(key, getattr(conf, key))
            except ConfigError:
                kind = "an Adapter" if key == "adapter" else "a Scorer"
                raise ConfigError(
                    f"{where}: {key}: {data[key]} is {_shown(getattr(conf, key))}, not {kind}; name its class as "
                    "module:Class"
                ) from None


def _load_suite(helper_flag: str | None, config_flag: str | None) -> _Suite:
    helper, config_path, evals = _find_suite(helper_flag, config_flag)
    _reset_configuration()
    project_root = evals.parent
    _forget_modules(under=project_root.resolve())
    if helper:
        _load_helper(helper)
    if str(project_root) not in sys.path:
        sys.path.insert(0, str(project_root))
    data = _read_config_file(config_path)
    where = _display(config_path)
    requires = data.get("require") or []
    for name in _as_list(requires, where, "require"):
        _forget_modules(named=name)
        _import_module(name, "require", name, where)
    conf = _configuration
    _configure_from(conf, data, where)
    if conf.adapter is None or conf.scorer is None:
        source = _display(helper) if helper else f"evals/{HELPER_NAME}"
        copies = [  # a helper that imported another file of this module configured that one
            (name, getattr(m, "__file__", "?"))
            for name, m in list(sys.modules.items())
            if getattr(getattr(m, "_configuration", None), "adapter", None) is not None and m.__dict__ is not globals()
        ]
        if copies:
            raise ConfigError(
                f"no suite is configured in this agent_evals ({_display(Path(__file__))}): {source} configured a "
                f"second copy of it, {_display(Path(copies[0][1]))} (imported as {copies[0][0]}); import the same "
                "file, or run that copy"
            )
        raise _unconfigured(conf, source, where)
    providers = [*reversed(conf.providers), *_builtin_providers()]
    trackers = {cls.name: cls for cls in [*_builtin_trackers(), *conf.trackers]}
    _SECRET_KEYS.update(key for p in providers for key in p.env_keys or ())
    _SECRET_KEYS.update(t.env_key for t in trackers.values() if t.env_key)
    _Secrets.refresh()
    config = _parse_config(data, config_path, _request_types(providers), [n for n in trackers if n != "local"])
    metrics = _scorer_metrics(conf.scorer)
    root = conf.root or evals
    if not root.is_dir():
        raise ConfigError(f"configure(root={str(root)!r}): no such folder; give the folder that holds datasets/")
    return _Suite(
        name=conf.suite or project_root.name,
        root=root,
        project_root=project_root,
        cases_glob=conf.cases or config.cases or DEFAULT_CASES,
        adapter=conf.adapter,
        scorer=conf.scorer,
        config=config,
        providers=providers,
        trackers=trackers,
        env_files=list(conf.env_files),
        before_run=conf.before_run,
        metrics=metrics,
    )


def _scorer_metrics(scorer: Any) -> list[Metric]:
    name = type(scorer).__name__
    try:
        metrics = list(scorer.metrics())
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        raise SuiteError(f"scorer {name}.metrics() raised {_describe(e)[0]}") from None
    if not metrics or not all(isinstance(m, Metric) for m in metrics):
        raise SuiteError(f"scorer {name}.metrics() must return a non-empty list of Metric")
    names = [m.name for m in metrics]
    if len(set(names)) != len(names):
        raise SuiteError(f"scorer {name}.metrics() declares a name twice: {', '.join(names)}")
    if len(primary := [m.name for m in metrics if m.primary]) > 1:
        raise SuiteError(f"scorer {name}.metrics() marks {' and '.join(primary)} primary=True: mark exactly one")
    for m in metrics:
        if m.aggregate != "mean":
            raise SuiteError(f"scorer {name}: metric {m.name}: aggregate {m.aggregate!r} is not supported; use 'mean'")
    return metrics


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def _load_env_file(path: Path) -> int:
    """Load ``KEY=value`` lines without overriding what is exported; returns how many set.
    Anything it cannot read as such (not UTF-8, a NUL byte, an unterminated quote) is one
    error naming the file and the line."""
    where = _display(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{where}: cannot be read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"{where}:{line}: not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
    count = 0
    for number, entry in enumerate(text.splitlines(), 1):
        if not entry.strip() or entry.lstrip().startswith("#"):
            continue
        if "\x00" in entry:
            raise ConfigError(f"{where}:{number}: a NUL byte; remove it")
        match = _ENV_LINE.match(entry)
        if not match:
            raise ConfigError(f"{where}:{number}: expected KEY=value")
        key, value = match.groups()
        if value[:1] in ("'", '"'):
            end = value.find(value[0], 1)
            if end == -1:
                raise ConfigError(f"{where}:{number}: {key}: the value's quote {value[0]} is never closed")
            if value[end + 1 :].strip()[:1] not in ("", "#"):
                raise ConfigError(f"{where}:{number}: {key}: text after the closing quote; quote the whole value")
            value = value[1:end]
        else:
            value = value.split(" #", 1)[0].rstrip()
        if key not in os.environ:
            os.environ[key] = value
            count += 1
    _Secrets.refresh()
    return count


# ═══════════════════════════════════════════════════════════════════════════════
# Cases: the folders under datasets/, and the selection -d and -c make
# ═══════════════════════════════════════════════════════════════════════════════


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _LoadedCases:
    cases: list[Case]
    problems: list[tuple[str, str]]  # (case key, "path: problem") for verify to report


class _CaseFolder:
    """A case as its path names it, before its files are read: what selecting by
    ``-d``/``-c`` and building the matrix need, for a fraction of a read's cost."""

    __slots__ = ("dataset", "file", "folder", "id", "key", "listing", "variant")

    def __init__(self, root: str, rel: str, file: str, listing: frozenset[str]) -> None:
        parts = rel.split("/")
        # the folder after datasets/; for another layout, the one before cases/, else the first
        if "datasets" in parts[:-1]:
            self.dataset = parts[parts.index("datasets") + 1]
        elif "cases" in parts[1:]:
            self.dataset = parts[parts.index("cases", 1) - 1]
        else:
            self.dataset = parts[0] if len(parts) > 1 else "default"
        name = parts[-1]
        if name.isdigit() and len(parts) > 1:
            self.variant, self.id = parts[-2], f"{parts[-2]}/{name}"
        else:
            self.variant, self.id = name, name
        self.key = f"{self.dataset}/{self.id}"
        self.folder = f"{root}{os.sep}{rel.replace('/', os.sep)}" if rel else root
        self.file, self.listing = file, listing


class _Cases(Sequence[Case]):
    """The cases of one dataset in order, each read from disk the first time it is
    asked for (a run reads those it will ask before its threads start, mostly: ``read``).
    Reading twice (two threads, one case) gives equal results, so no lock is needed.
    ``problems()`` says what was wrong with the files read so far."""

    def __init__(self, found: Sequence[_CaseFolder]) -> None:
        self.found = list(found)
        self._cases: list[Case | None] = [None] * len(self.found)
        self._problems: dict[int, list[str]] = {}
        self.unreadable: dict[int, str] = {}  # the cases whose input file cannot be read: each its error

    def __len__(self) -> int:
        return len(self.found)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        case = self._cases[k]
        if case is None:
            trouble: list[str] = []
            unreadable: list[str] = []
            case = _read_case(self.found[k], trouble, unreadable)
            if trouble:
                self._problems[k] = trouble
            if unreadable:
                self.unreadable[k] = unreadable[0]
            self._cases[k] = case
        return case

    def read(self, places: Iterable[int], until: float = math.inf) -> list[int]:
        """Read the cases at ``places``, in order, until ``time.monotonic()`` passes ``until``:
        those left unread."""
        places = list(places)
        for n, k in enumerate(places):
            if time.monotonic() > until:
                return places[n:]
            self[k]
        return []

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self.found]

    def peek(self, k: int) -> Case:
        """Case ``k`` if it was read, else a case with its name only: never waits on a read."""
        if (case := self._cases[k]) is not None:
            return case
        found = self.found[k]
        return Case(id=found.id, dataset=found.dataset, variant=found.variant, path=Path(found.folder))

    def problems(self) -> list[tuple[str, str]]:
        """(case key, problem) for the cases read so far, in case order."""
        found = self._problems.copy()  # one step under the GIL: a worker may still be adding
        return [(self.found[k].key, p) for k in sorted(found) for p in found[k]]


def _glob_segment(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        end = segment.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif end != -1:
            inner = segment[i + 1 : end]
            inner = "^" + inner[1:] if inner.startswith("!") else inner
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob (``*``, ``?``, ``[...]``, ``**`` for any folders) as a regex over relative paths.

    >>> bool(_glob_regex("datasets/*/cases/**/input.txt").match("datasets/a/cases/v/001/input.txt"))
    True
    >>> bool(_glob_regex("datasets/*/cases/**/input.txt").match("datasets/a/b/cases/input.txt"))
    False
    >>> [bool(_glob_regex("v[0-9]?/[!x]*.txt").match(p)) for p in ("v1a/in.txt", "v1/in.txt", "v1a/x.txt")]
    [True, False, False]
    """
    out = []
    for segment in pattern.strip("/").split("/"):
        if segment == "**":
            out.append("(?:[^/]+/)*")
            continue
        regex = _glob_segment(segment)
        out.append(regex + "/")
    return re.compile("".join(out)[:-1] + r"\Z")


def _find_cases(suite: _Suite) -> tuple[list[_CaseFolder], list[tuple[str, str]]]:
    """Every case the glob matches, in order, and the keys named twice; no file is read."""
    # os.scandir down the tree, not pathlib.glob: each folder's listing says which of
    # expected.json and metadata.json exist, so thousands of cases are found in a blink
    root = str(suite.root)
    match = _glob_regex(suite.cases_glob).match
    matched: list[tuple[str, str, str, frozenset[str]]] = []  # (sort key, file, folder, its listing)
    orphans: list[str] = []
    folders: list[str] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        prefix = f"{rel}/" if rel else ""
        files = []
        try:
            entries = os.scandir(here := f"{root}{os.sep}{rel}" if rel else root)
        except OSError as e:
            raise ConfigError(f"{_display(here)}: cannot be listed ({e.strerror}); let this user read it") from None
        with entries:
            for entry in entries:
                name = entry.name
                try:
                    folder = entry.is_dir()
                except OSError:  # a link loop: a case file that cannot be read, named when it is read
                    folder = False
                if not folder:
                    files.append(name)
                elif name[0] != "." and not entry.is_symlink():  # as os.walk: links not followed
                    pending.append(prefix + name)
                    if match(prefix + name) or name in ("expected.json", "metadata.json"):
                        folders.append(prefix + name)  # a folder where a case file should be: verify names it
        listing = None
        for name in files:
            if match(prefix + name):
                listing = listing or frozenset(files)
                # folder by folder, then the file: \x01 between folders sorts below any name
                matched.append((f"{rel.replace('/', chr(1))}\x00{name}", name, rel, listing))
        if listing is None and "expected.json" in files and rel:
            orphans.append(rel)  # an answer with no input: verify names it
    if not matched:
        raise ConfigError(
            f"no cases match {suite.cases_glob} under {_display(suite.root)}: add "
            f"datasets/<dataset>/cases/<variant>/[NNN/]input.txt, or change configure(cases=...)"
        )
    matched.sort()
    found = [_CaseFolder(root, rel, name, listing) for _, name, rel, listing in matched]
    return found, _case_problems(found, root, orphans, folders, match)


def _case_problems(
    found: list[_CaseFolder], root: str, orphans: list[str], folders: list[str], match: Callable[[str], object]
) -> list[tuple[str, str]]:
    """(case key, problem) for what ``verify`` names: a case listed twice, an expected answer
    with no input, a folder where a case file should be."""
    problems, seen = [], set()
    for case in found:
        if case.key in seen:
            where = _display(os.path.join(case.folder, case.file))
            problems.append((case.key, f"{where}: case {case.key} is listed twice; rename its folder"))
        seen.add(case.key)
    for rel in sorted(orphans):
        orphan = _CaseFolder(root, rel, "", frozenset())
        if orphan.key not in seen:
            where = _display(os.path.join(orphan.folder, "expected.json"))
            problems.append((orphan.key, f"{where}: an expected answer with no input file; add the input or remove it"))
    for rel in sorted(folders):
        parent = _CaseFolder(root, rel.rpartition("/")[0], "", frozenset())
        where = _display(os.path.join(root, rel))
        what = "input file" if match(rel) else rel.rpartition("/")[2]
        problems.append((parent.key, f"{where}: a folder where the case's {what} should be; make it a file"))
    return problems


def _load_cases(suite: _Suite) -> _LoadedCases:
    """Every case, read now: what ``cases``, ``verify`` and ``rescore`` show and check."""
    found, twice = _find_cases(suite)
    cases = _Cases(found)
    loaded = list(cases)
    problems = cases.problems() + twice
    order = {f.key: i for i, f in enumerate(found)}
    problems.sort(key=lambda p: order.get(p[0], len(order)))  # stable: a case's own problems, then "listed twice"
    return _LoadedCases(loaded, problems)


def _read_case(found: _CaseFolder, problems: list[str], unreadable: list[str] | None = None) -> Case:
    """The case ``found`` names, with what is wrong with its files added to ``problems``
    (and to ``unreadable`` when its input file cannot be read: the case cannot run)."""
    folder, listing = found.folder, found.listing
    path, expected_path, metadata_path = (
        f"{folder}{os.sep}{name}" for name in (found.file, "expected.json", "metadata.json")
    )
    text = ""
    try:
        raw = _read_bytes(path)
    except OSError as e:  # read off the main thread: a problem of the case, never a lost thread
        problems.append(f"{_display(path)}: cannot be read ({e.strerror})")
        if unreadable is not None:
            unreadable.append(problems[-1])
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(f"{_display(path)}: not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8")
            text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            problems.append(f"{_display(path)}: empty input")
    expected = metadata = None
    if "expected.json" in listing:
        expected = _read_json(expected_path, problems)
    else:
        problems.append(f"{_display(expected_path)}: missing")
    if "metadata.json" in listing:
        read = len(problems)
        metadata = _read_json(metadata_path, problems)
        if len(problems) == read and not isinstance(metadata, dict):  # null included
            problems.append(f"{_display(metadata_path)}: expected an object, got {type(metadata).__name__}")
            metadata = None
    return Case(
        id=found.id,
        dataset=found.dataset,
        variant=found.variant,
        input=text,
        expected=expected,
        path=Path(folder),
        metadata=metadata or {},
    )


_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_MAX_CASE_FILE = 256 << 20  # bytes one case file may hold


def _read_bytes(path: str) -> bytes:
    """A whole file in three system calls (a short read of a regular file is its end):
    ``open()`` adds a stat, a seek and a terminal check to each of the thousands of
    small files a suite has, and every call is a moment another thread takes the GIL."""
    # O_NONBLOCK: a named pipe where a case file should be reads as empty instead of
    # waiting forever for a writer (it changes nothing for a regular file)
    fd = os.open(path, os.O_RDONLY | _O_BINARY | _O_NONBLOCK)
    try:
        data = os.read(fd, 65536)
        if len(data) == 65536:
            parts = [data]
            size = len(data)
            while chunk := os.read(fd, 1 << 20):
                parts.append(chunk)
                size += len(chunk)
                if size > _MAX_CASE_FILE:  # /dev/zero behind a link, or a file no case needs
                    raise OSError(27, f"larger than {_MAX_CASE_FILE >> 20} MiB")
            data = b"".join(parts)
        return data
    except BlockingIOError:
        return b""
    finally:
        os.close(fd)


def _read_json(path: str, problems: list[str]) -> Any:
    try:
        return json.loads(_read_bytes(path).decode("utf-8"))
    except OSError as e:
        problems.append(f"{_display(path)}: cannot be read ({e.strerror})")
    except UnicodeDecodeError as e:
        problems.append(f"{_display(path)}: not UTF-8 text ({e.reason} at byte {e.start})")
    except json.JSONDecodeError as e:
        problems.append(f"{_display(path)}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}")
    except RecursionError:
        problems.append(f"{_display(path)}: invalid JSON: nested too deep")
    except ValueError as e:  # a number past Python's 4,300-digit limit
        problems.append(f"{_display(path)}: invalid JSON: {str(e).split(';')[0]}; write such a number as a string")
    return None


def _split(values: Sequence[str] | None) -> list[str]:
    """Flag values given repeated or comma-separated, in order, without repeats."""
    out: list[str] = []
    for value in values or ():
        for item in value.split(","):
            item = item.strip()
            if item and item not in out:
                out.append(item)
    return out


def _select_cases(cases: list[Any], datasets: list[str], selectors: list[str]) -> list[Any]:
    """The cases (read, or only found) that ``-d`` and ``-c`` select, in order."""
    known = sorted({c.dataset for c in cases})
    for name in datasets:
        if name not in known:
            raise ConfigError(f"-d {name}: no such dataset{_hint(name, known)}; known: {', '.join(known)}")
    if datasets:
        cases = [c for c in cases if c.dataset in datasets]
    if selectors:
        ids = sorted({c.id for c in cases} | {c.variant for c in cases})
        for sel in selectors:
            if not any(_matches(c, sel) for c in cases):
                raise ConfigError(
                    f"-c {sel}: no case or variant matches{_hint(sel, ids)}; use -c VARIANT or -c VARIANT/NNN"
                )
        cases = [c for c in cases if any(_matches(c, sel) for sel in selectors)]
    return cases


def _matches(case: Case | _CaseFolder, selector: str) -> bool:
    return selector in (case.id, case.variant, case.key) or case.key.startswith(f"{selector}/")


# ═══════════════════════════════════════════════════════════════════════════════
# The lineup: contenders from vendors: and direct:, what the suite refuses, and experiments
# ═══════════════════════════════════════════════════════════════════════════════


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Overrides:
    """What flags set; each beats the config file, which beats the defaults."""

    efforts: list[str] | None = None
    temperatures: list[float] | None = None
    max_tokens: int | None = None
    tiers: list[str] | None = None


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Lineup:
    contenders: list[tuple[Contender, Provider]]
    refused: list[str]


def _build_lineup(suite: _Suite, overrides: _Overrides, models: list[str]) -> _Lineup:
    config, where = suite.config, _display(suite.config.path)
    planned: list[tuple[Contender, Provider]] = []
    for vendor, entries in config.vendors.items():
        for entry in entries:
            model_id = f"{vendor}/{entry['model']}"
            provider = next(p for p in suite.providers if not p.direct and p.serves(model_id))
            if provider.prefix is None:
                _refuse_fall_through(model_id, suite.providers, where)
            planned += _expand(entry, model_id, provider, None, config.defaults, overrides)
    direct = {p.name: p for p in suite.providers if p.direct}
    for name, entries in config.direct.items():
        if name not in direct:
            raise ConfigError(
                f"{where}: direct: unknown provider {name!r}{_hint(name, direct)}; known: {', '.join(direct) or 'none'}"
            )
        for entry in entries:
            model_id = f"{name}/{entry['model']}"
            planned += _expand(entry, model_id, direct[name], name, config.defaults, overrides)
    if models:
        known = sorted({c.model for c, _ in planned})
        for model in models:
            if model not in known:
                raise ConfigError(
                    f"-m {model}: not in the lineup{_hint(model, known)}; add it under vendors: or direct: "
                    f"in {where} (the lineup has: {', '.join(known)})"
                )
        planned = [(c, p) for c, p in planned if c.model in models]
    unique: dict[Contender, Provider] = {}
    for contender, provider in planned:
        unique.setdefault(contender, provider)
    lineup = _Lineup([], [])
    tools = bool(getattr(suite.adapter, "uses_tools", False))
    for contender, provider in unique.items():
        if tools and not provider.conversations:
            lineup.refused.append(
                f"{contender.model} refused: provider {provider.name} cannot take a conversation or call tools; "
                f"this suite's adapter uses them (uses_tools = True)"
            )
        elif provider.request_type not in config.request_types:
            lineup.refused.append(
                f"{contender.model} refused: needs {provider.request_type}; "
                f"this suite produces {', '.join(config.request_types)}"
            )
        else:  # what is refused anyway is never checked further: only these efforts must be accepted
            effort = contender.effort or "default"
            if effort != "default" and provider.efforts is not None and effort not in provider.efforts:
                accepted = ", ".join(["default", *provider.efforts])
                raise ConfigError(
                    f"{contender.model}: effort {effort!r} is not accepted by provider {provider.name} (accepts: "
                    f"{accepted})"
                )
            lineup.contenders.append((contender, provider))
    return lineup


def _judge_of(suite: _Suite, model_id: str | None) -> tuple[str, Provider] | None:
    """The judge model a run names and the provider that serves it, refused by name before
    anything is spent when none does or its catalog does not list it."""
    if not model_id:
        return None
    where = f"judge {model_id}"
    provider = next((p for p in suite.providers if not p.direct and p.serves(model_id)), None)
    if provider is None:
        raise ConfigError(f"{where}: no provider of this suite serves it; name a model as in vendors:")
    if provider.prefix is None:  # a catch-all (OpenRouter) is not asked for a model a missing provider serves
        _refuse_fall_through(model_id, suite.providers, where)
    catalog = provider.catalog()
    if catalog is None and provider.unread and provider.check_models:
        raise ConfigError(f"judge {_unread(model_id, provider)}")
    listed = _catalog_id(provider, model_id, catalog) if catalog else model_id
    if listed is None:
        raise ConfigError(f"{where}: {provider.name} does not list it{_hint(model_id, catalog or ())}")
    if retired := _expiry(model_id, provider.name, getattr(provider, "expiring", {}).get(listed, "")):
        raise ConfigError(f"judge {retired[0]}")
    return model_id, provider


def _refuse_fall_through(model_id: str, providers: Sequence[Provider], where: str) -> None:
    """A model id that a provider class claims by its prefix must never go to the catch-all
    provider (OpenRouter) because that provider was not registered: refused by name."""
    registered = {type(p) for p in providers}
    stack = list(Provider.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        prefix = cls.__dict__.get("prefix")
        if getattr(sys.modules.get(cls.__module__), cls.__name__, None) is not cls:
            continue  # a class no loaded module holds (an earlier helper's, in a long-lived process)
        if isinstance(prefix, str) and prefix and model_id.startswith(prefix) and cls not in registered:
            raise ConfigError(
                f"{where}: {model_id} is served by {cls.__name__} ({prefix}...), which this suite does not "
                f"register; add it with configure(providers=[{cls.__name__}()]) instead of sending it to OpenRouter"
            )


def _expand(
    entry: dict[str, Any],
    model_id: str,
    provider: Provider,
    direct: str | None,
    defaults: _Defaults,
    overrides: _Overrides,
) -> list[tuple[Contender, Provider]]:
    """One contender per effort × temperature; flags beat the entry, which beats defaults."""
    efforts = overrides.efforts or entry.get("effort") or defaults.effort
    temperatures = overrides.temperatures or entry.get("temperature") or defaults.temperature
    max_tokens = overrides.max_tokens or entry.get("max_tokens") or defaults.max_tokens
    routings = entry.get("provider") or defaults.routing
    tiers: list[str | None] = list(overrides.tiers or entry.get("service_tier") or defaults.service_tier)
    if getattr(provider, "dialect", "") != "openrouter":  # defaults' routing is for the models OpenRouter routes
        if entry.get("provider", [None]) != [None]:
            raise ConfigError(f"{model_id}: provider: routing preferences are OpenRouter's; {provider.name} takes none")
        if tiers != [None]:
            raise ConfigError(f"{model_id}: service_tier is OpenRouter's; {provider.name} takes none (leave it out)")
        routings = [None]
    out = []
    for effort in efforts:
        for temperature in temperatures:
            for routing in routings:
                out += [
                    (Contender(model_id, effort, temperature, max_tokens, direct, routing, t), provider) for t in tiers
                ]
    return out


def _catalog_problems(lineup: _Lineup) -> list[str]:
    """Lineup ids that a provider's offline catalog does not know."""
    problems = []
    for model_id, provider in {c.model: p for c, p in lineup.contenders}.items():
        try:
            catalog = provider.catalog()
            if catalog is None and provider.unread and provider.check_models:
                problems.append(_unread(model_id, provider))
        except ProviderError as e:
            if e.stops_run:  # a server that is not there, a refused key: its own line says the fix (exit 2:
                raise ConfigError(str(e)) from None  # found before any model was called)
            problems.append(f"{model_id}: provider {provider.name}'s catalog failed: {_describe(e)[0]}")
            continue
        except _SUITE_EXCEPTIONS as e:
            _reraise_ctrl_c(e)
            problems.append(f"{model_id}: provider {provider.name}'s catalog failed: {_describe(e)[0]}")
            continue
        if catalog is not None and _catalog_id(provider, model_id, catalog) is None and provider.check_models:
            why = ""
            if getattr(provider, "dialect", "") == "openai" or not catalog:  # a server of your own
                why = (
                    f"; its server listed {_n(len(catalog), 'model')} (one that loads models on demand lists only "
                    "those it has loaded: defaults.check_models: false asks it anyway)"
                )
            problems.append(f"{model_id}: provider {provider.name} has no such model{_hint(model_id, catalog)}{why}")
        listed = _catalog_id(provider, model_id, catalog) if catalog else None
        if ends := getattr(provider, "expiring", {}).get(listed):
            problems += _expiry(model_id, provider.name, ends)
    return problems


def _unread(model_id: str, provider: Provider) -> str:
    """A model that a catalog read only in part cannot check: refused before anything is sent."""
    return (
        f"{model_id}: {provider.name}'s catalog could not be read to its end ({provider.unread}), "
        "so model ids, prices and expiry go unchecked; try again, or set defaults.check_models: false to ask unchecked"
    )


def _expiry(model_id: str, provider: str, ends: str) -> list[str]:
    """A lineup model the catalog says expires (``expiration_date``): refused once past it, a
    warning within 30 days of it (the suite breaks that day)."""
    import datetime

    try:
        days = (datetime.date.fromisoformat(ends) - datetime.date.today()).days
    except ValueError:
        return []
    if days < 0:
        return [f"{model_id}: {provider} retired it on {ends} (its expiration_date); take it out of the lineup"]
    if days <= 30:
        _warn(f"{model_id}: {provider} retires it on {ends}, in {_n(days, 'day')}: this suite breaks that day")
    return []


# OpenRouter's model variants: a suffix on any id (openai/gpt-4o:nitro) that the catalog
# lists under the base id alone, unless the variant is priced apart (":free" often is)
OPENROUTER_VARIANTS = ("free", "extended", "exacto", "thinking", "online", "nitro", "floor", "beta")


def _catalog_id(provider: Provider, model_id: str, catalog: Iterable[str]) -> str | None:
    """The catalog entry for ``model_id``: itself, or, for an OpenRouter variant, its base id."""
    known = catalog if isinstance(catalog, set | dict | frozenset) else set(catalog)
    base, _, variant = model_id.rpartition(":")
    if model_id in known:
        return model_id
    if getattr(provider, "dialect", "") == "openrouter" and variant in OPENROUTER_VARIANTS and base in known:
        return base
    return None


class Experiment:
    """One contender over one dataset's cases; results stay in case order."""

    def __init__(
        self,
        contender: Contender,
        provider: Provider,
        dataset: str,
        cases: Sequence[Case],
        parallelism: int,
        repeat: int = 1,
        *,
        order: int = 0,
        max_turns: int | None = None,
        keep_raw: bool = True,
        labels: Mapping[tuple[str, ...], float] = {},
    ) -> None:
        self.contender = contender
        self.repeat = repeat  # independent runs of every case
        self.provider = provider
        self.dataset = dataset
        self.cases = cases
        self.parallelism = parallelism
        self.results: list[RunResult] = []  # finished cases, in case order
        self.rows_json: list[str] = []  # the same as log rows, serialized once as they finish
        self.not_run: list[str] = []  # ids of cases an interrupt or a stopped run left out
        self.failure: str | None = None  # why none of its cases could run (prepare failed)
        self.keep_raw = keep_raw  # --no-raw: its log keeps each reply's output but not its raw text
        self.max_turns = max_turns  # --max-turns: what an agent's loop may make (None: the default)
        self.order = order  # its contender's place in the lineup: report and rescore keep compare's order
        self.duration = 0.0
        self.started_at = ""
        self.began = 0.0  # time.monotonic() when it started: the progress line's pace
        self.halted: str | None = None  # why its remaining cases were not asked (a model the server lacks)
        self.decided: str | None = None  # --until-decided: why its remaining cases need not be asked
        self.waits: list[tuple[float, float]] = []  # when its calls waited on the key's rate limit
        self.batches: list[dict[str, object]] = []  # --batch: the batches sent (id, round, custom id -> case run)
        self.rows: dict[tuple[object, ...], _Row] = {}  # its table rows as made (_rows)
        self.labels = labels  # people's labels (_read_labels): they correct judged metrics
        # a direct contender's provider is in its name: it never shares a file with a vendors: id
        via = f"--direct-{contender.provider}" if contender.provider else ""
        routed = f"--via-{_routing_text(contender.routing)}" if contender.routing else ""
        routed += f"--tier-{contender.tier}" if contender.tier else ""
        temp = "" if contender.temperature is None else f"--t{_fmt_temp(contender.temperature)}"  # none set: none said
        self.name = _safe_name(f"{dataset}--{contender.model}{via}{routed}--{contender.effort or 'default'}{temp}")

    def model(
        self,
        ledger: _Ledger | None = None,
        steps: Sequence[_Step] = (),
        stop: _Stop | None = None,
        pace: _Pace | None = None,
    ) -> Model:
        """The adapter's handle for one run of one case (``ledger``), its calls walking ``steps``;
        ``stop``: the run's flag, which its retries wait on; ``pace``: its keys' limiters."""
        c = self.contender
        return Model(
            c.model,
            self.provider,
            effort=c.effort,
            temperature=c.temperature,
            max_tokens=c.max_tokens,
            routing=c.routing,
            service_tier=c.tier,
            max_turns=self.max_turns,
            stop=stop,
            steps=steps,
            ledger=ledger,
            pace=pace,
        )


def _ids(cases: Sequence[Case]) -> list[str]:
    """The cases' ids, without reading the files of cases not read yet."""
    return cases.ids if isinstance(cases, _Cases) else [c.id for c in cases]


def _contender_key(contender: Contender) -> str:
    return json.dumps(contender.to_json(), sort_keys=True)


# ═══════════════════════════════════════════════════════════════════════════════
# HTTP/1.1 transport: keep-alive connections for worker threads, with retries
# ═══════════════════════════════════════════════════════════════════════════════


_USER_AGENT = f"agent-evals/{__version__}"
_LIST_TIMEOUT = 30.0  # seconds for a list of models: small, so a reasoning model's --timeout does not apply
_KEY_TIMEOUT = 5.0  # seconds for OpenRouter's GET /key, asked once before a run: it only advises

# Statuses worth another try (OpenRouter's own and its edge's), and those that end the run.
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 524, 529})
_BATCH_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")  # what a batch id may be, sent or read back
_BATCH_PAGE = 1000  # results asked a page at a time
_FATAL_STATUSES = {401: "the key was refused", 402: "the account is out of credits"}


def _request_body(body: Mapping[str, object]) -> bytes:
    """A request's JSON: ``json.dumps`` with no options uses json's shared default encoder."""
    return json.dumps(body).encode()


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: a number of seconds or an HTTP date, as
    sent (a past date is negative, ``nan`` is nan: ``_wait_of`` judges them).

    >>> _retry_after("3"), _retry_after("Mon, 01 Jan 2001 00:00:00 GMT") < 0, _retry_after("soon")
    (3.0, True, None)
    """
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    import email.utils

    try:
        return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None


def _fields(value: object) -> dict[str, object]:
    """A JSON object's fields, or none when ``value`` is no object."""
    return value if isinstance(value, dict) else {}


def _error_text(data: object, raw: bytes) -> str:
    """The error message of a body: OpenRouter's (OpenAI's) ``error``, FastAPI's ``detail``
    (a string, or a list of what failed), or the start of the body itself."""
    error = data.get("error") or data.get("detail") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error.get("code") or "no error text")
    if isinstance(error, list):
        return "; ".join(str(e.get("msg", e) if isinstance(e, dict) else e) for e in error)[:500]
    if error:
        return str(error)
    text = raw[:4096].decode("utf-8", errors="replace").strip()
    if text.startswith("<"):  # an HTML page (nginx's, a proxy's): its title, else its words, never its markup
        import re

        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        text = " ".join((title[1] if title else re.sub(r"<[^>]*>", " ", text)).split())
    return text[:200] or "empty body"


class _Retry(Exception):
    """Raised by one attempt when the failure is worth another try; ``limited``: the server
    refused it for its rate (a 429, a 529, a 503 with Retry-After), the limiter's to time.
    ``hint``: the wait the server asked for and the header that asked, when it asked for one."""

    def __init__(
        self, failure: str, hint: tuple[float, str] | None = None, *, timeout: bool = False, limited: bool = False
    ) -> None:
        super().__init__(failure)
        self.failure, self.hint, self.timeout, self.limited = failure, hint, timeout, limited
        self.retry_after = hint[0] if hint else None


# a case run that ends with one of these was not run (no row): --resume asks it
_UNSENT = "not sent: the run had stopped"  # a call held back (by the pace) when the run stopped: --resume asks it
_UNSURE = "batch not known to be sent"  # its submission got no answer: journaled so, and the run stops
_REFUSED = "refused for the key's rate limit"  # says nothing of the model: the case is not run, --resume asks it
_STUCK = "the server answers nothing"  # nor does this: timed out twice while no request was answered


class _Tries:
    """One request's retry budget: at most ``retries`` more tries and ``retry_wait``
    seconds of waiting, each wait exponential with jitter or the server's Retry-After."""

    BOUND = 600.0  # seconds one request may wait on rate limits before the run stops, saying so

    def __init__(self, provider: Provider, label: str, model: Model | None) -> None:
        self.provider, self.label, self.model = provider, label, model
        self.count, self.waited, self.failure, self.timeouts = 0, 0.0, "", 0
        self.refused, self.since = 0, 0.0  # rate-limit refusals of this request, and when the first came
        self.began = time.monotonic()  # its first failure

    def wait_after(self, e: _Retry) -> float:
        """Seconds to wait before the next try; raises when the budget is spent. A second
        timeout ends it: a third wait on the same stuck upstream is not worth its time."""
        provider, self.failure = self.provider, e.failure
        if (delay := e.retry_after) is None:
            delay = _backoff(provider.retry_backoff, self.count)
        self.timeouts += e.timeout
        if self.timeouts > 1 and getattr(provider, "answered", math.inf) < self.began:  # nothing answered meanwhile
            raise ProviderError(
                f"{_STUCK}: {self.label}: {e.failure} twice, and no request answered meanwhile: check the server "
                "(or raise --timeout), then --resume",
                stops_run=True,
            )
        if self.count >= provider.retries or self.waited + delay > provider.retry_wait or self.timeouts > 1:
            tries = f"gave up after {self.count} retries" if provider.retries else "--retries 0: no retry"
            raise ProviderError(f"{self.label}: {e.failure} ({tries})")
        self.count += 1
        self.waited += delay
        if self.model is not None:
            self.model.ledger.note_retry(self.model.call)
        return delay

    def wait_limited(self, e: _Retry, limiter: _Limiter) -> float:
        """Seconds a request refused for the rate waits before it goes again: what the server
        asked, or else a backoff with jitter; never past the bound on waiting for a rate limit
        (a wait asked beyond it ends the run at once, naming the header and the wait)."""
        now, self.failure, self.refused = time.monotonic(), e.failure, self.refused + 1
        self.since = self.since or now
        left = self.BOUND - (now - self.since)
        if e.hint is not None and e.hint[0] > left and self.refused == 1:  # nothing waited yet: the hint's
            asked = f"{e.hint[0]:.4g} s" if e.hint[0] < 1e9 else "forever"
            raise ProviderError(
                f"{_REFUSED}: {self.label}: the server asks to wait {asked} ({e.hint[1]}) before the next request, "
                f"more than the {left:.0f} s a request may wait on a rate limit ({e.failure}); try again later",
                stops_run=True,
            )
        queued = limiter.held / limiter.rate if limiter.rate else 0.0  # the turns before its own: waited too
        if (delay := self.refused_wait(e, self.refused, limiter.rate)) + queued > left:
            raise ProviderError(
                f"{_REFUSED}: {self.label}: still refused after {now - self.since:.0f} s of waiting "
                f"({e.failure}); try again later, or with a lower -p",
                stops_run=True,
            )
        return delay

    @staticmethod
    def refused_wait(e: _Retry, count: int, rate: float | None) -> float:
        """How long the ``count``-th refusal waits: the server's word, else a backoff; one turn of the pace at least."""
        return max(e.retry_after if e.retry_after is not None else _backoff(1.0, count - 1), 1 / rate if rate else 0.0)

    def stopped(self, stop: _Stop) -> ProviderError:
        """The run stopped while this request waited to go again: not run (--resume asks it)."""
        return ProviderError(f"{_UNSENT}: {stop.reason}; its last try: {self.label}: {self.failure}")


def _backoff(base: float, count: int) -> float:
    """Exponential backoff with jitter: the ``count``-th wait after ``base`` seconds, at most a minute."""
    import random

    return min(base * 2**count, 60.0) * random.uniform(0.5, 1)


def _retrying(
    provider: Provider, label: str, model: Model | None, attempt: Callable[[], object], limiter: _Limiter | None = None
) -> Any:
    """Call ``attempt`` until it returns, retrying each ``_Retry`` within the provider's
    bounds; a rate limit is the ``limiter``'s: timed by it, never one of the retries. A
    stopped run (Ctrl-C, a refused key) ends the wait at once."""
    tries = None  # made at the first failure: most requests never need it
    stop = model.stop if model is not None else _Stop()
    while True:
        try:
            return attempt()
        except _Retry as e:
            tries = tries or _Tries(provider, label, model)
            if limiter is not None and e.limited:
                delay = tries.wait_limited(e, limiter)
                if model is not None:
                    model.ledger.note_limited(delay, model.call)
            else:
                delay = tries.wait_after(e)
        if stop.wait(delay):
            raise tries.stopped(stop)


def _held_back(waits: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Seconds of the run in which at least one call waited on the rate limit, and the waits' sum."""
    held, end = 0.0, -math.inf
    for start, stop in sorted(waits):
        held += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return held, sum(stop - start for start, stop in waits)


class _Limiter:
    """How fast one run sends to one server and key, on one rule: while the key refuses, it is sent
    what it was seen to take. Rounds (a second, or one turn of a slower pace) are judged by when
    their requests went: once all are back, or at once when ``DENSE`` refusals match all it could
    still answer (Google SRE's client throttling, K = 2). Such a round, or one whose answers fell
    under half the last's as ``DENSE`` were refused, paces the key at what it answered; then each
    verdict sets the pace to the share taken, ``PROBE`` more (the AWS SDKs' adaptive mode), never
    under a pace taken whole just before (a limit with no burst answers half of a pace past it); a
    clean round goes halfway back to the pace last cut (BIC), doubles, or holds just under it. Two
    cuts that leave the refused share as it was are an upstream's: unpaced. Slow start: ``start``."""

    ROUND = 1.0  # seconds of sending judged together
    DENSE = 10  # the fewest refusals in a round that can pace a key
    PROBE = 0.02  # how much more than the key took a pace sends next
    CUT = 0.1  # the refused share over which a cut sets the pace the clean rounds go back to
    FLOOR = 0.25  # requests a second: the slowest pace, however much the key refuses

    def __init__(self, start: float = 8.0, rate: float | None = None) -> None:
        self.turn = threading.Condition(threading.Lock())
        self.rate = rate  # requests a second; None: not paced
        self.issued, self.first, self.at, self.held, self.flying = 0, 0.0, 0.0, 0, 0
        self.window, self.start = None if rate else start, start  # the slow start's most in flight; None once paced
        self.rounds: dict[int, list[int]] = {}  # [sent, back, refused] of each round not judged yet
        self.round, self.opened, self.span = 0, -math.inf, self.ROUND  # the round open now: since when, how long
        # of the last verdicts, the pace last cut (a pace given, known or documented: probed from gently), round
        self.shares, self.ceiling, self.answered = (0.0, 0.0), rate or math.inf, 0
        # the pace the server's numbers allow (_heed), no send before until, the last pace taken whole (or kept)
        self.cap, self.until, self.good = math.inf, 0.0, rate or 0.0

    def admit(self, model: Model) -> int:
        """Wait for this request's turn; the round it goes in."""
        stop, began = model.stop.event, time.monotonic()
        with self.turn:
            while self.window is not None and self.flying >= self.window and not stop.is_set():
                self.turn.wait(0.1)
            self.flying += self.window is not None  # a place of the slow start's, given back as it lands
            if self.rate is not None:
                ticket, self.held = self.ticket(began), self.held + 1
                while not stop.is_set() and (due := self.due(ticket)) > (now := time.monotonic()):
                    self.turn.wait(min(due - now, 0.1))
                self.held -= 1
                model.ledger.note_limited(time.monotonic() - began)
            return self.went(time.monotonic())

    def ticket(self, now: float) -> int:
        """A place in the pace's queue: after the last, or now if none waits (an idle key banks no turns)."""
        if self.due(self.issued) < now:
            self.first, self.at = self.issued, now
        self.issued += 1
        return self.issued - 1

    def due(self, ticket: int) -> float:
        """When a ticket goes at the pace as it is now: ticket ``first`` at ``at``, each next 1/rate later."""
        return self.at + (ticket - self.first) / self.rate if self.rate else -math.inf

    def went(self, now: float) -> int:
        """A request goes at ``now`` (under the lock): the round it is judged in."""
        if now - self.opened >= self.span:
            self.round, self.opened, self.span = self.round + 1, now, max(self.ROUND, 1 / (self.rate or 1))
        self.rounds.setdefault(self.round, [0, 0, 0])[0] += 1
        return self.round

    def landed(self, round: int, refused: bool) -> None:
        """A request of ``round`` is back, answered or ``refused`` for the rate."""
        with self.turn:
            now = time.monotonic()
            if self.window is not None:  # the slow start: one more in flight for each answer
                self.flying -= 1
                self.window = None if self.window >= 1024 else self.window + (not refused)
                self.turn.notify_all()
            tally = self.rounds.get(round, [1, 0, 0])  # a round of an earlier pace counts for nothing
            tally[1], tally[2] = tally[1] + 1, tally[2] + refused
            if tally[2] >= max(self.DENSE, tally[0] - tally[2]):
                return self._judge(tally[0], tally[2], now, whole=False)
            for number, (sent, back, refusals) in list(self.rounds.items()):
                if back == sent and (number < self.round or now - self.opened >= self.span):
                    del self.rounds[number]
                    if self.rate is not None or (refusals >= self.DENSE and 2 * (sent - refusals) < self.answered):
                        return self._judge(sent, refusals, now, whole=True)
                    self.answered = sent - refusals
            return None

    def _judge(self, sent: int, refused: int, now: float, whole: bool) -> None:
        """A round's verdict: the pace becomes the share of it the key took, ``PROBE`` more."""
        if (rate := self.rate) is None:  # a slow start's clump refused says nothing of the rate: half of it, as TCP
            clump = max(sent, min(self.window, self.start)) if self.window is not None else 0  # all sent, or to be
            return self._set(max(sent - refused, clump / 2) / self.span, now)
        (older, last), share, noisy = self.shares, refused / sent, 2 * self.PROBE  # twice a pace's own at the limit
        if whole and min(share, last, older) > noisy and share >= last / 2 and last >= older / 2 and rate > self.FLOOR:
            return self._set(None, now)
        clean = (rate + self.ceiling) / 2 if self.ceiling < math.inf else 2 * rate  # halfway back to the last cut
        step = 0.0 if rate < self.ceiling <= rate * (1 + 2 * self.PROBE) else self.PROBE  # just under it: held
        pace = rate * (1 - share) * (1 + self.PROBE) if share else max(rate * (1 + step), clean if step else rate)
        past = share < 0.6 and rate > self.good * (1 + self.PROBE / 2)  # refused just past a pace taken whole
        pace, self.good = max(pace, self.good if past else 0.0), rate if whole and not share else self.good
        if self.CUT < share < 1 < refused and max(self.FLOOR, pace) < rate:  # refused whole, or once: says nothing
            self.ceiling = rate
        return self._set(pace, now, share if whole else 0.0)

    def _set(self, rate: float | None, now: float, share: float = 0.0) -> None:
        """Pace at ``rate`` (never past ``cap``; None: unpaced) from ``now``, its due turn still due, judged afresh."""
        self.first = min(self.first + max(0.0, now - self.at) * (self.rate or 0.0), self.issued)
        self.at, self.window, unpaced = max(now, self.until), None, rate is None and self.cap == math.inf
        self.rate = None if unpaced else max(self.FLOOR, min(self.cap if rate is None else rate, self.cap))
        self.shares, self.opened, self.rounds = (self.shares[1], share), -math.inf, {}  # waiting: seen within 0.1 s


def _heed(limiter: _Limiter, cap: float, left: float | None, wait: float | None) -> None:
    """The server's own numbers (``_numbers``) on the ``limiter``: paced at its limit from then
    on, never faster (``cap``); when what remains is already on its way, nothing goes before the reset."""
    with limiter.turn:
        now, limiter.cap = time.monotonic(), cap
        if limiter.rate is None or limiter.rate > cap:
            limiter._set(cap, now)
        flying = sum(sent - back for sent, back, _ in limiter.rounds.values())
        if left is not None and wait and left <= flying and now + wait > limiter.at:
            limiter.until = now + min(wait, 60.0)
            limiter._set(limiter.rate, now)  # the pace's turns start again at the reset, spaced as before


def _numbers(fields: Mapping[str, str]) -> tuple[float, float | None, float | None] | None:
    """A server's own numbers on an answer, as OpenAI and LiteLLM's proxy send them: the pace its
    limit a minute allows (``x-ratelimit-limit-requests``), what remains of it, and the seconds
    to its reset; None without a limit."""
    limit = _retry_after(fields.get("x-ratelimit-limit-requests"))
    if not limit or not 0 < limit < 1e9:
        return None
    left, wait = (
        _retry_after(fields.get("x-ratelimit-remaining-requests")),
        _duration(fields.get("x-ratelimit-reset-requests")),
    )
    return max(_Limiter.FLOOR, limit / 60), left, wait if wait and wait > 0 else None


def _duration(value: str | None) -> float | None:
    """Seconds from a reset header: OpenAI's ``1s``, ``6m0s``, ``20ms``, or a number of seconds
    (an epoch in seconds or milliseconds counts from now); None for anything else.

    >>> _duration("6m0s"), _duration("20ms"), _duration("1.5"), _duration("soon")
    (360.0, 0.02, 1.5, None)
    """
    text = (value or "").strip()
    number = r"(\d+(?:\.\d+)?)"
    parts = re.fullmatch(rf"(?:{number}h)?(?:{number}m(?!s))?(?:{number}s)?(?:(\d+)ms)?", text)
    if parts and any(parts.groups()):
        h, m, sec, ms = (float(g or 0) for g in parts.groups())
        return h * 3600 + m * 60 + sec + ms / 1000
    seconds = _retry_after(text)
    if seconds is None or not math.isfinite(seconds):
        return None
    return (seconds / 1000 if seconds > 1e12 else seconds) - time.time() if seconds > 1e9 else seconds


def _wait_of(fields: Mapping[str, str]) -> tuple[float, str] | None:
    """The wait a server asks of a refused request, and the header that asks it:
    retry-after-ms, Retry-After, or with no requests remaining, X-RateLimit-Reset (epoch
    seconds or milliseconds, or seconds to go). One that is not a positive number (0, a
    past date, nan, a negative) asks nothing: the refusal is one with no hint."""
    for name in ("retry-after-ms", "retry-after", "x-ratelimit-reset"):
        value = fields.get(name)
        if value is None or (name == "x-ratelimit-reset" and fields.get("x-ratelimit-remaining") != "0"):
            continue
        if (seconds := _duration(value) if name == "x-ratelimit-reset" else _retry_after(value)) is None:
            continue
        if name == "retry-after-ms":
            seconds /= 1000
        if seconds > 0:  # nan is not
            return seconds, f"{name}: {_visible(value[:40])}"
    return None


class _Pace:
    """A run's limiters, one per server and key. What a key was seen to take is kept for the
    next run (``kept``, beside the response cache: as TCP keeps what it learned of a
    destination, RFC 2140), under a hash of server and key, never the key: a run on a known
    key starts at that pace, where one that knows nothing sends its first round at once."""

    FREE = 20 / 60  # OpenRouter's :free models: 20 requests a minute for the whole account

    def __init__(self, start: float = 8.0, kept: Path | None = None) -> None:
        self.start, self.made, self.kept = max(8.0, start), threading.Lock(), kept
        self.limiters: dict[tuple[str, str], _Limiter] = {}
        self.known: dict[str, float] = {}
        with contextlib.suppress(OSError, ValueError, AttributeError, RecursionError):
            found = json.loads(kept.read_text(encoding="utf-8")) if kept else {}
            self.known = {k: float(v) for k, v in found.items() if isinstance(v, int | float) and 0 < v < 1e6}

    @staticmethod
    def name(server: str, key: str) -> str:
        import hashlib

        return hashlib.sha256(f"agent-evals pace\0{server}\0{key}".encode("utf-8", "surrogatepass")).hexdigest()[:16]

    def of(self, server: str, key: str, free: bool = False) -> _Limiter:
        name = (server, key + ":free" * free)
        if (known := self.limiters.get(name)) is not None:  # a request's path: no lock
            return known
        with self.made:  # :free models are paced from the first request, at the account's documented rate
            rate = self.FREE if free else self.known.get(self.name(*name))
            return self.limiters.setdefault(name, _Limiter(self.start, rate))

    def keep(self) -> None:
        """What each key was paced at when the run ended, for the next run (a key never refused
        keeps what an earlier run learned); a file that cannot be written costs only that."""
        paced = {self.name(*name): rate for name, limiter in self.limiters.items() if (rate := _kept(limiter))}
        if self.kept is not None and paced:
            _write_text(self.kept, _json_dumps(self.known | paced), [])

    @property
    def held(self) -> int:
        return sum(limiter.held for limiter in list(self.limiters.values()))


def _kept(limiter: _Limiter) -> float | None:
    """The pace a next run on a key starts at, if it was ever refused (or started known): the last it took whole."""
    return limiter.good or None if limiter.rate and limiter.ceiling < math.inf else None


def _socket_gaierror() -> type[OSError]:
    """A name that does not resolve (socket is loaded whenever a connection was tried)."""
    import socket

    return socket.gaierror


def _transport_failure(e: Exception, label: str) -> Exception:
    """What a connection's failure means: worth a retry, except a response that cannot be
    read (too large, an encoding it cannot decode) and a certificate that is not trusted,
    which fail the same way every time (ValueError: a length or chunk size that is not a
    number). A timeout is marked: another wait on a stuck upstream is worth one try at most."""
    if isinstance(e, _Unreadable):
        return ProviderError(f"{label}: {e}", stops_run=e.stops_run)
    ssl = sys.modules.get("ssl")  # loaded whenever a connection was https
    if ssl is not None and isinstance(e, ssl.SSLCertVerificationError):
        return ProviderError(
            f"{label}: the server's TLS certificate is not trusted ({e.verify_message}); if your own CA "
            f"signs it, point SSL_CERT_FILE (or REQUESTS_CA_BUNDLE) at that CA's certificate file (trusted now: "
            f"{_trust()[1]})",
            stops_run=True,  # every request would fail alike: one message, not one error per case
        )
    return _Retry(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__, timeout=isinstance(e, TimeoutError))


class _TransportError(OSError):
    """The server broke HTTP/1.1 (a bad status line, a truncated body): worth a retry."""


def _response(
    buffer: bytes | bytearray, closed: bool
) -> tuple[int, dict[str, str], bytes | bytearray, bool, int] | None:
    """The first complete HTTP/1.1 response in ``buffer``: (status, headers, body, keep the
    connection, where it ends), or None while more is to come. ``closed``: the server has
    closed the connection, so the buffer is all there will be (never None then).

    >>> _response(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nhi", False)
    (200, {'content-length': '2'}, b'hi', True, 40)
    """
    start = 0
    while True:  # interim 1xx responses carry no body
        end = buffer.find(b"\r\n\r\n", start)
        if end == -1:
            if len(buffer) - start > 262144:
                raise _TransportError("response headers longer than 256 KiB")
            if closed:
                raise ConnectionResetError("the server closed the connection")
            return None
        status_line, *lines = buffer[start:end].decode("latin-1").split("\r\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not _is_count(parts[1]):
            raise _TransportError(f"not an HTTP response: {status_line[:80]!r}")
        status, start = int(parts[1]), end + 4
        if not 100 <= status < 200:
            break
    fields = {}
    body: bytes | bytearray
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if fields.get("transfer-encoding", "").lower() == "chunked":
        # a chunked body is complete only when the buffer ends with its blank line: reading
        # the chunks before that would read them again at every receive (quadratic time)
        if not closed and not buffer.endswith(b"\r\n\r\n"):
            return None
        if (found := _dechunk(buffer, start, closed)) is None:
            return None
        body, end = found
    elif status in (204, 304):  # no body, whatever the headers say
        body, end = b"", start
    elif "content-length" in fields:
        if (size := int(fields["content-length"])) < 0:
            raise _TransportError(f"a negative Content-Length: {size}")
        end = start + size
        if len(buffer) < end:
            if closed:
                raise _TransportError(f"the response ended after {len(buffer) - start} of {end - start} bytes")
            return None
        body = buffer[start:end]
    elif closed:  # no length: the body runs until the server closes
        body, end, fields["connection"] = buffer[start:], len(buffer), "close"
    else:
        return None
    return status, fields, body, fields.get("connection", "").lower() != "close", end


def _dechunk(buffer: bytes | bytearray, at: int, closed: bool) -> tuple[bytes, int] | None:
    """A chunked body starting at ``at``: (the body, where it ends), or None while incomplete."""
    chunks: list[bytes | bytearray] = []
    while (eol := buffer.find(b"\r\n", at)) != -1:
        size = int(buffer[at:eol].split(b";")[0].strip() or b"0", 16)
        at = eol + 2
        if not size:  # the last chunk: then trailers, up to a blank line
            if (end := buffer.find(b"\r\n\r\n", at - 2)) == -1:
                break
            return b"".join(chunks), end + 4
        if len(buffer) < at + size + 2:
            break
        chunks.append(buffer[at : at + size])
        at += size + 2
    else:
        if len(buffer) - at > 65536:
            raise _TransportError("a response line longer than 64 KiB")
    if closed:
        raise _TransportError("the response ended inside its chunked body")
    return None


_ORIGINS: dict[str, tuple[str, str, int, str]] = {}


def _origin(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of a URL, parsed once."""
    if (origin := _ORIGINS.get(url)) is None:
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        origin = _ORIGINS[url] = (parts.scheme, parts.hostname or "", port, path)
    return origin


_TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_DIR")
_TLS: list[Any] = [None, None, ""]  # (the variables it was made under, the context, where it trusts from)


def _trust() -> tuple[Any, str]:
    """The TLS context and where its CAs come from: SSL_CERT_FILE (OpenSSL reads it
    itself); failing that, the bundle requests and curl read (REQUESTS_CA_BUNDLE, then
    CURL_CA_BUNDLE), which corporate machines set for every Python tool; else OpenSSL's
    default, SSL_CERT_DIR or the system's store. Made once: loading a bundle takes tens of
    milliseconds, which per connection would cost seconds at hundreds in flight; made again
    when one of the variables changes."""
    given = tuple(os.environ.get(name) or None for name in _TRUST_VARIABLES)
    if _TLS[0] != given or _TLS[1] is None:
        import ssl

        named = [(name, value) for name, value in zip(_TRUST_VARIABLES, given, strict=True) if value]
        if not named or named[0][0].startswith("SSL_"):
            context = ssl.create_default_context()
            where = "=".join(named[0]) if named else "the system's certificates"
        else:
            name, path = named[0]
            try:
                folder = os.path.isdir(path)
                context = ssl.create_default_context(cafile=None if folder else path, capath=path if folder else None)
            except (OSError, ssl.SSLError) as e:
                raise ProviderError(
                    f"{name}={path}: no CA certificates could be read from it ({e}); point {name} at a PEM "
                    "bundle, or unset it",
                    stops_run=True,
                ) from None
            where = f"{name}={path}"
        _TLS[:] = [given, context, where]
    return _TLS[1], _TLS[2]


@dataclass(frozen=True, slots=True)
class _Proxy:
    """The proxy a server is reached through, and the variable that named it (for messages)."""

    host: str
    port: int
    variable: str
    shown: str  # its address, never its credentials
    auth: str | None  # the Proxy-Authorization header's value, from user:password@ in its URL


def _proxy_for(scheme: str, host: str, port: int) -> _Proxy | None:
    """The proxy for a server, read as the standard library reads it (``<scheme>_proxy``,
    else ``all_proxy``, either case; ``no_proxy`` bypasses it), or None to go direct."""
    if sys.platform not in ("darwin", "win32") and not any(name[-6:].lower() == "_proxy" for name in os.environ):
        return None  # what getproxies() finds there, without loading urllib.request (megabytes) to be told
    import urllib.parse
    import urllib.request

    proxies = urllib.request.getproxies()
    kind = scheme if proxies.get(scheme) else "all"
    if not (url := proxies.get(kind)) or urllib.request.proxy_bypass(f"{host}:{port}"):
        return None
    names = (f"{kind}_proxy", f"{kind.upper()}_PROXY")
    variable = next((name for name in names if os.environ.get(name) == url), f"the system's {kind} proxy")
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    try:
        address = (parts.hostname or "", parts.port or 80)
    except ValueError:  # a port that is not a number
        address = (parts.hostname or "", 0)
    if parts.scheme != "http" or not all(address):
        raise ProviderError(
            f"{variable}: {parts.scheme}://{parts.netloc.rpartition('@')[2]} is no proxy agent-evals can use; it "
            "speaks to http:// proxies (HTTPS goes through them in a CONNECT tunnel): write it as http://host:port",
            stops_run=True,
        )
    auth = None
    if parts.username is not None:
        import base64

        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        auth = f"Basic {base64.b64encode(pair.encode()).decode()}"
    return _Proxy(*address, variable, f"http://{_authority(*address)}", auth)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _route(url: str) -> str:
    """How a server is reached, for -v: through which proxy, trusting which certificates."""
    scheme, host, port, _ = _origin(url)
    proxy = _proxy_for(scheme, host, port)
    how = f"through the proxy {proxy.shown} ({proxy.variable})" if proxy else "directly"
    return f"{how}, trusting {_trust()[1]}" if scheme == "https" else how


_FAR = "; it could not open the way to the server: check what it lets through, or name the server in NO_PROXY"


class _ProxyFailure(ConnectionError):
    """The proxy could not be reached, or would not open the way to the server."""


def _proxy_refused(proxy: _Proxy, status: str, server: str | None = None) -> ProviderError:
    """A proxy's own refusal: a 407, or a 401 it sent (tinyproxy answers a wrong password so)."""
    what = "refused the credentials in" if proxy.auth else "asks for credentials: put them in"
    status = f"HTTP {status} from {server}" if server else f"HTTP {status}"
    return ProviderError(
        f"the proxy {proxy.shown} {what} {proxy.variable} ({status}), as user:password@host:port after its http://",
        stops_run=True,
    )


def _tunnel(sock: Any, proxy: _Proxy, authority: str) -> None:
    """A CONNECT tunnel through ``proxy`` to ``authority``: TLS then runs end to end, so the
    key never crosses the proxy in clear."""
    auth = f"Proxy-Authorization: {proxy.auth}\r\n" if proxy.auth else ""
    sock.sendall(
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: {_USER_AGENT}\r\n{auth}\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:  # headers alone: the server says nothing before TLS's hello
        if not (data := sock.recv(4096)) or len(head) > 65536:
            raise _ProxyFailure(f"the proxy {proxy.shown} ({proxy.variable}) hung up on CONNECT {authority}{_FAR}")
        head += data
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    status = status_line.split(None, 2)[1:2]
    if status in (["401"], ["407"]):  # at CONNECT, only the proxy answers
        raise _proxy_refused(proxy, status[0])
    if status != ["200"]:
        raise _ProxyFailure(
            f"the proxy {proxy.shown} ({proxy.variable}) answered CONNECT {authority}: {status_line}{_FAR}"
        )


class _Unreadable(Exception):
    """A response that cannot be read, and would not be on another try: that case's error,
    or the run's when every answer would be alike (an encoding it cannot decode)."""

    stops_run = False


class _TooLarge(_Unreadable):
    """A response body past the provider's ``max_response_mb``."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the response is larger than {limit / 2**20:g} MiB; raise defaults.max_response_mb if it should be read"
        )


def _decoded(body: bytes, coding: str, limit: int) -> bytes:
    """A body as it was before its Content-Encoding (gzip or deflate), never past ``limit``
    bytes however small it came (a compressed bomb is too large, not a lost process).

    >>> import gzip; _decoded(gzip.compress(b'{"a": 1}'), "gzip", 100)
    b'{"a": 1}'
    """
    import zlib

    for name in reversed([c.strip().lower() for c in coding.split(",")]):
        if name in ("identity", ""):
            continue
        if name not in ("gzip", "x-gzip", "deflate"):
            unknown = _Unreadable(
                f"the server answered in the {name} encoding, which agent-evals does not decode (it asks for gzip)"
            )
            unknown.stops_run = True  # every answer of that server would come so
            raise unknown
        # deflate is zlib's format, though some servers send it raw
        for wbits in (16 + zlib.MAX_WBITS,) if name != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS):
            try:
                inflated = zlib.decompressobj(wbits).decompress(body, limit + 1)
                break
            except zlib.error as e:
                failure = e
        else:
            raise _TransportError(f"the {name} body cannot be decoded ({failure})")
        if len(body := inflated) > limit:
            raise _TooLarge(limit)
    return body


class _Connection:
    """One blocking keep-alive HTTP/1.1 connection, for a worker thread, direct or through
    a proxy. The request line and headers are encoded once per connection (the same all
    run long)."""

    def __init__(self, scheme: str, host: str, port: int, connect: float, read: float, proxy: _Proxy | None) -> None:
        import socket

        authority = _authority(host, port)
        self.host = authority if port not in (80, 443) else authority.rpartition(":")[0]
        self.proxy = proxy
        # plain HTTP through a proxy names the whole URL; HTTPS goes through a tunnel instead
        self.prefix = f"http://{self.host}" if proxy is not None and scheme == "http" else ""
        self.head: tuple[object, ...] = ()  # (method, path, headers, their encoding) last sent
        self.buffer = bytearray()  # what has arrived and is not yet part of an answered response
        self.idle = 0.0  # since when it waits in the pool
        try:
            sock = socket.create_connection((proxy.host, proxy.port) if proxy else (host, port), timeout=connect)
        except OSError as e:
            if proxy is None:
                raise
            raise _ProxyFailure(
                f"cannot reach the proxy {proxy.shown} ({proxy.variable}: {type(e).__name__}: {e}); start it, fix "
                "that variable, or name the server in NO_PROXY"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.read = read
        # a blocking socket with the kernel's own timeouts: Python's settimeout would poll()
        # before every send and receive, two more system calls (and GIL switches) per
        # request, which at hundreds of requests in flight is most of the client's cost
        self.kernel = scheme != "https" and sys.platform != "win32"
        if scheme == "https":
            if proxy is not None:
                _tunnel(sock, proxy, authority)
            sock = _trust()[0].wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self._bound(read)  # the connect timeout was for the handshake only

    def _bound(self, seconds: float) -> None:
        """Let each send and receive wait at most ``seconds``."""
        if not self.kernel:
            self.sock.settimeout(seconds)
            return
        import socket
        import struct

        if self.sock.gettimeout() is not None:  # once: a system call each time
            self.sock.settimeout(None)
        value = struct.pack("ll", int(seconds), max(int(seconds % 1 * 1e6), 0 if seconds >= 1 else 1000))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)

    def close(self) -> None:
        self.sock.close()

    def dropped(self) -> bool:
        """Whether the server closed this idle connection (or sent what nobody asked for):
        readable while no request is out."""
        import select

        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([self.sock], [], [], 0)[0])

    def request(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]) -> bytes:
        if self.head[:3] != (method, path, headers):
            auth = [f"Proxy-Authorization: {self.proxy.auth}"] if self.prefix and self.proxy and self.proxy.auth else []
            lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}", *auth]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            self.head = (method, path, headers, "\r\n".join(lines).encode())  # UTF-8: a title "évals ✓" never fails
        body = body or b""
        return b"%s\r\nContent-Length: %d\r\n\r\n%s" % (self.head[3], len(body), body)

    def exchange(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str], limit: int, read: float
    ) -> tuple[int, dict[str, str], bytes, bool]:
        """Send one request and read its response: (status, headers, body, keep the connection).
        The whole response must arrive within ``read`` seconds (a server trickling a byte a
        second holds a case no longer), and be no larger than ``limit`` bytes."""
        deadline = None
        shortened = False  # a receive after the first waits only what is left of the deadline
        if read != self.read:  # a list of models waits less than an answer
            self.read = read
            self._bound(read)
        try:
            self.sock.sendall(self.request(method, path, body, headers))
            closed = False
            while (response := _response(self.buffer, closed)) is None:
                if len(self.buffer) > limit:
                    raise _TooLarge(limit)
                if deadline is None:  # the first receive waits the whole timeout, as set
                    deadline = time.monotonic() + self.read
                elif (left := deadline - time.monotonic()) > 0:
                    self._bound(left)
                    shortened = True
                else:
                    raise TimeoutError("timed out: the response did not arrive whole in time")
                data = self.sock.recv(65536)
                closed = not data
                self.buffer += data
        except BlockingIOError:  # SO_SNDTIMEO or SO_RCVTIMEO ran out
            raise TimeoutError("timed out") from None
        finally:  # three system calls a request when the answer came in one receive: none
            if shortened and self.sock.fileno() != -1:
                self._bound(self.read)
        status, fields, payload, keep, end = response
        del self.buffer[:end]
        return status, fields, bytes(payload), keep


_DEAD_ON_ARRIVAL = 0.5  # seconds: a reused connection reset sooner never reached the server's work
_CHECKED_IDLE = 1.0  # seconds: an idle connection kept longer is checked before it is used again


class _Client:
    """Keep-alive HTTP/1.1 over the standard library's sockets: idle connections are kept
    per origin and each request takes one (or opens one), so no more are open than
    requests were ever in flight at once, whichever threads send them. Lean on purpose:
    at hundreds of requests in flight, the client's own CPU per request is the harness's
    overhead; a proxy is looked up only when a connection is opened."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._closing: set[tuple[str, str, int]] = set()  # origins seen closing a connection they kept alive

    def request(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str],
        connect: float,
        read: float,
        limit: int = 1 << 62,
        once: bool = False,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request's (status, headers, body), the body decoded. An idle connection the
        server closed (uvicorn after 5 s; a proxy after each answer) is seen before use, as urllib3
        sees it, and left: checked when kept over ``_CHECKED_IDLE``, or always once its origin closed
        one (the check is a system call and, at 64 threads, a GIL handoff a request). One dead on
        arrival all the same (reset at once, not a byte back) goes again at once on a new
        connection: nothing was answered, no retry. Reset later, the server may have taken it: the
        retry rule's, counted. ``once`` (a batch's submission): a new connection, never sent again."""
        scheme, host, port, path = _origin(url)
        if (idle := self._idle.get(key := (scheme, host, port))) is None:
            idle = self._idle.setdefault(key, [])
        for attempt in (1, 2):
            conn = None
            while attempt == 1 and conn is None and not once:
                try:  # list.pop and list.append are atomic: no lock
                    conn = idle.pop()
                except IndexError:
                    break
                if (key in self._closing or time.monotonic() - conn.idle > _CHECKED_IDLE) and conn.dropped():
                    conn.close()
                    conn = None
            reused = conn is not None
            if conn is None:
                conn = _Connection(scheme, host, port, connect, read, _proxy_for(scheme, host, port))
            sent = time.monotonic()
            try:
                status, fields, payload, keep = conn.exchange(method, path, body, headers, limit, read)
            except BaseException as e:
                conn.close()
                stale = isinstance(e, ConnectionResetError | BrokenPipeError | ConnectionAbortedError)
                if reused and stale and not conn.buffer and time.monotonic() - sent < _DEAD_ON_ARRIVAL and not once:
                    self._closing.add(key)
                    continue
                raise
            if keep:
                conn.idle = time.monotonic()
                idle.append(conn)
            else:
                conn.close()
            # the proxy's own refusal (HTTPS meets it at CONNECT): a 407, or a 401 that is no API's JSON
            if (
                conn.prefix
                and conn.proxy
                and (status == 407 or (status == 401 and "json" not in fields.get("content-type", "")))
            ):
                raise _proxy_refused(conn.proxy, str(status), fields.get("server"))
            if coding := fields.get("content-encoding"):
                payload = _decoded(payload, coding, limit)
            return status, fields, payload
        raise AssertionError("unreachable")  # pragma: no cover


# ═══════════════════════════════════════════════════════════════════════════════
# Built-in providers: OpenRouter, TypeSafe, LiteLLM and the offline fakes
# ═══════════════════════════════════════════════════════════════════════════════


@dataclass(frozen=True, slots=True)
class _Request:
    """What ``Model.complete`` hands a provider, as keywords: system and user text, or a
    conversation (``messages``) with ``tools`` and ``tool_choice``; ``json`` asks for JSON."""

    system: str | None = None
    user: str = ""
    json: bool = True
    messages: Sequence[Mapping[str, object]] | None = None
    tools: Sequence[Mapping[str, Any]] | None = None
    tool_choice: object = None

    @property
    def chat(self) -> list[object]:
        """The chat messages it sends: the conversation as given, or system and user text."""
        if self.messages is not None:
            return list(self.messages)
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": self.user}]


def _join_url(base: str, path: str) -> str:
    """``path`` under the base URL's own path, its query kept after both.

    >>> _join_url("https://host/api/v1?key=abc", "/chat/completions")
    'https://host/api/v1/chat/completions?key=abc'
    """
    import urllib.parse

    parts = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, fragment=""))


class OpenRouter(Provider):
    """The default provider: every ``vendors:`` id, over OpenRouter's chat completions API.

    Standard library only: keep-alive connections shared by every thread (no more open than
    requests were ever in flight at once), proxies and CA bundles as the environment names
    them, bounded retries with backoff and jitter that honour Retry-After, and costs from
    the response or, failing that, from the model catalog's per-token prices. object
    OpenAI-compatible server stands in when ``OPENROUTER_BASE_URL`` points at it.
    """

    name = "openrouter"
    title = "OpenRouter"  # as the notes name it
    env_keys: Sequence[str] = ("OPENROUTER_API_KEY",)
    base_url_env = "OPENROUTER_BASE_URL"  # where the server is, when not at default_base_url
    key_env = "OPENROUTER_API_KEY"  # the bearer token; a server that needs none gets no header
    priced = True  # a model the catalog has no price for is noted (its answers count as $0)
    efforts: Sequence[str] | None = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
    default_base_url = "https://openrouter.ai/api/v1"
    dialect = "openrouter"  # the request's fields: OpenRouter's own, or "openai" for other servers
    catalog_ttl = 24 * 3600.0  # seconds a cached model list stays fresh

    def __init__(self) -> None:
        self._http = _Client()
        self._prices: dict[str, tuple[float | None, float | None, int | None]] | None = None
        self._catalog_loaded = False
        self.expiring: dict[str, str] = {}  # the catalog's expiration_date of each model that has one
        self._lock = threading.Lock()
        self.unpriced: set[str] = set()
        self.notes: list[str] = []
        self._endpoints: tuple[object, str, dict[str, str], str] = (None, "", {}, "")
        self.answered = 0.0  # when a response last came back in this run (0: none yet; none for long: stuck)

    @property
    def base_url(self) -> str:
        return (os.environ.get(self.base_url_env) or self.default_base_url).rstrip("/")

    conversations = True

    def complete(self, model: Model, **request: Any) -> Completion:
        body = self._body(model, _Request(**request))
        data, status, fields = self._request(model.id, "POST", "/chat/completions", body, model)
        return self._completion(model, data, status, fields)

    def _body(self, model: Model, request: _Request) -> bytes:
        body: dict[str, object] = {"model": model.name, "messages": request.chat}
        if request.tools is not None:
            body["tools"] = request.tools
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        if model.temperature is not None:
            body["temperature"] = model.temperature
        if model.ledger.judge:  # a judge's verdicts repeat where the provider allows: temperature 0 and a seed
            body["seed"] = 0
            if self.dialect == "openrouter":  # and how sure it is (_verdict_chance): ignored by models without them
                body |= {"logprobs": True, "top_logprobs": 5}
        # OpenRouter's own fields, as its spec names them; the OpenAI shape to other servers
        openrouter = self.dialect == "openrouter"
        if model.max_tokens is not None:  # max_tokens is deprecated in OpenRouter's spec
            body["max_completion_tokens" if openrouter else "max_tokens"] = model.max_tokens
        if model.effort is not None:
            body |= {"reasoning": {"effort": model.effort}} if openrouter else {"reasoning_effort": model.effort}
        if request.json:
            body["response_format"] = {"type": "json_object"}
        if model.routing and openrouter:
            body["provider"] = json.loads(model.routing)
        if model.service_tier:
            body["service_tier"] = model.service_tier
        return _request_body(body)

    def _endpoint(self, path: str) -> tuple[str, dict[str, str], str]:
        """The URL and headers of a request: built once a run, not once a request."""
        environ = os.environ
        given = (environ.get(self.base_url_env), environ.get(self.key_env, ""), self.app_name, path)
        if self._endpoints[0] != given:
            headers = {
                **({"Authorization": f"Bearer {given[1]}"} if given[1] else {}),
                "Content-Type": "application/json",
                "Accept-Encoding": "gzip, deflate",  # a reasoning model's long answer shrinks several-fold
                "User-Agent": _USER_AGENT,
            }
            if self.dialect == "openrouter":  # attribution: OpenRouter's own headers, sent to it alone
                headers |= {"HTTP-Referer": self.referer, "X-OpenRouter-Title": self.app_name, "X-Title": self.app_name}
                headers["X-OpenRouter-Cache"] = "false"  # its response cache (a preset may turn it on) answers no case
            self._endpoints = (given, _join_url(self.base_url, path), headers, self.base_url)
        return self._endpoints[1:]

    def credit_left(self) -> float | None:
        """What the key has left to spend (OpenRouter's ``GET /key``, ``limit_remaining``), or
        None: no limit on the key, no key, or a server that does not say (a local one)."""
        if self.dialect != "openrouter" or not os.environ.get(self.key_env):
            return None
        url, headers, _ = self._endpoint("/key")
        try:  # asked once, briefly: it only advises (a refused key still stops the run here, before any case)
            status, fields, raw = self._http.request(
                "GET", url, None, headers, self.connect_timeout, min(self.timeout, _KEY_TIMEOUT), self._limit
            )
            if status == 404:  # a server that is not OpenRouter itself: it keeps no credit
                return None
            data, _ = self._answer("the key", status, fields, raw)
        except (OSError, ValueError, _Unreadable, _Retry) as e:
            failure = e if isinstance(e, _Retry) else _transport_failure(e, f"{self.name}: GET /key")
            if isinstance(failure, ProviderError):  # an untrusted certificate (the run's stop), an unreadable answer
                raise failure from None
            raise ProviderError(f"{self.name}: GET /key: {failure}") from None
        key = data.get("data") if isinstance(data, dict) else None
        left = key.get("limit_remaining") if isinstance(key, dict) else None
        return float(left) if isinstance(left, int | float) and not isinstance(left, bool) and left >= 0 else None

    def credit_refusal(self, least: float, most: float | None) -> str | None:
        """Why the key cannot pay for the run (``least`` and ``most`` it can cost), or None."""
        try:
            left = self.credit_left()
        except ProviderError as e:
            if e.stops_run:
                return str(e)
            _warn(f"{e}; the run goes on without knowing what the key has left")
            return None
        if left is not None and most is not None and most > left:
            cost = f"can cost {_fmt_cost(most, up=True)} at most"
        elif left is not None and least > left:
            cost = f"costs at least {_fmt_cost(least, up=True)} (its inputs alone)"
        else:
            return None
        return (
            f"{self.name}: the key has {_fmt_cost(left)} left (limit_remaining); this run {cost}: add credit or "
            "raise the key's limit, ask fewer cases or contenders (-d, -c, -m), or give --budget what it has left"
        )

    def _may_send(self, model: Model) -> None:
        """Whether a model request or a batch may go: nothing is sent once the run stopped."""
        if model.stop.event.is_set():
            raise ProviderError(f"{_UNSENT}: {model.stop.reason}")

    # -- --batch: OpenRouter's Batch API (POST /batches, GET /batches/{id} and its results) --

    @property
    def batches(self) -> bool:  # type: ignore[override]
        return self.dialect == "openrouter"

    def submit(self, model: Model, requests: Sequence[tuple[str, Mapping[str, object]]]) -> str:
        # each request's body is the one a synchronous call sends; endpoint and model come
        # first, as OpenRouter stream-parses the submission and answers 400 when they do not
        bodies = [(custom, self._body(model, _Request(**request))) for custom, request in requests]  # type: ignore[arg-type]
        lines = ",".join(f'{{"custom_id":{_json_dumps(custom)},"body":{body.decode()}}}' for custom, body in bodies)
        head: dict[str, object] = {"endpoint": "/v1/chat/completions", "model": model.name}
        only = json.loads(model.routing).get("only") if model.routing else None
        if only:  # a batch runs on one upstream: OpenRouter takes provider.only alone for it
            head["provider"] = {"only": only}
        body = f'{_json_dumps(head)[:-1]},"requests":[{lines}]}}'.encode()
        self._may_send(model)
        data, _, _ = self._request(model.id, "POST", "/batches", body)
        batch_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
            raise ProviderError(f"{self.name}: {model.id}: the batch's answer has no usable id: {_shown(batch_id)}")
        return batch_id

    def collect(self, model: Model, batch_id: str) -> BatchState:
        answer, _, _ = self._request(model.id, "GET", f"/batches/{batch_id}", None)
        counts = _fields((data := _fields(answer)).get("request_counts"))
        status, error = str(data.get("status") or "unknown"), _fields(data.get("error")).get("message")
        done, total = _count(counts.get("completed")) + _count(counts.get("failed")), _count(counts.get("total"))
        state = BatchState(status, done, total, error=_visible(str(error)) if error else None)
        if status not in ("completed", "failed", "expired", "cancelled"):
            return state
        inline = data.get("results")  # the beta API answered them inline; since, a page at a time
        pages = [answer] if isinstance(inline, list) and inline else self._results_pages(model, batch_id, total, done)
        results: dict[str, object] = {}
        for page in pages:
            rows = _fields(page).get("results" if page is answer else "data")
            for item in rows if isinstance(rows, list) else ():
                if isinstance(custom := _fields(item).get("custom_id"), str):
                    results[custom] = (
                        ProviderError(f"{self.name}: {model.id}: the batch answered one request twice ({custom})")
                        if custom in results
                        else self._batch_result(model, item)
                    )
        return dataclasses.replace(state, results=results)

    def _results_pages(self, model: Model, batch_id: str, total: int, done: int) -> Iterator[object]:
        """A batch's pages of results, each naming the next; one that names a page already read,
        or none though it says there is more, or more pages than the batch holds, ends the
        collection with one line: the batch stays at the provider for --resume."""
        import urllib.parse

        cursor: object = ""
        seen: set[str] = set()
        while True:
            after = f"&cursor={urllib.parse.quote(cursor, safe='')}" if isinstance(cursor, str) and cursor else ""
            page, _, _ = self._request(model.id, "GET", f"/batches/{batch_id}/results?limit={_BATCH_PAGE}{after}", None)
            yield page
            if not _fields(page).get("has_more"):
                return
            cursor = _fields(page).get("next_cursor")
            most = min(max(total, done), self.batch_most)  # the server's counts, never past what a batch holds
            if not isinstance(cursor, str) or not cursor or cursor in seen or len(seen) > most:
                raise ProviderError(
                    f"{self.name}: {model.id}: batch {batch_id}'s results go round in circles (page {len(seen) + 2} "
                    f"names {_shown(cursor)[:60]}); it stays at the provider, and --resume --batch collects it",
                    stops_run=True,
                )
            seen.add(cursor)

    def _batch_result(self, model: Model, item: Mapping[str, object]) -> object:
        """One request's answer in a batch: its ``Completion``, or the ``ProviderError`` it got."""
        response = _fields(item.get("response"))
        status = code if isinstance(code := response.get("status_code"), int) else 200
        if isinstance(response.get("body"), dict) and status < 400:
            try:
                return self._completion(model, response["body"], status, {})
            except ProviderError as e:
                return e
        error = {"error": item["error"]} if item.get("error") else response.get("body")
        where = f"HTTP {status} in the batch" if response else "the batch's error"
        return ProviderError(f"{self.name}: {model.id}: {where}: {_error_text(error, b'no answer')}")

    def _request(
        self, model_id: str, method: str, path: str, body: bytes | None, model: Model | None = None
    ) -> tuple[object, int, Mapping[str, str]]:
        """The JSON answer to one request, its status and header fields, retrying what is
        worth retrying within the bounds: an in-band error whose code is 429 or 5xx too."""
        url, headers, base = self._endpoint(path)
        if model is not None:
            self._may_send(model)
        if model is not None and self._replays(model):  # asked for: the first repeat alone, so repeats stay independent
            headers = {**headers, "X-OpenRouter-Cache": "true"}
        wait = self.timeout if model is not None else min(self.timeout, _LIST_TIMEOUT)
        # the key's pace, shared by every contender on it (lists of models are not paced)
        limiter = None
        if model is not None and (pace := model.pace) is not None:  # :free models: the account's own pace
            limiter = pace.of(base, headers.get("Authorization", ""), free=model_id.endswith(":free"))

        def attempt() -> tuple[object, int, Mapping[str, str]]:
            sent = limiter.admit(model) if limiter is not None and model is not None else 0
            if model is not None and model.stop.event.is_set():  # stopped, maybe while it waited its turn: never sent
                if limiter is not None:
                    limiter.landed(sent, False)
                raise ProviderError(f"{_UNSENT}: {model.stop.reason}")
            refused = False
            try:
                try:
                    status, fields, raw = self._http.request(
                        method, url, body, headers, self.connect_timeout, wait, self._limit, once=path == "/batches"
                    )
                except (OSError, ValueError, _Unreadable) as e:
                    if not self.answered:
                        self._unreached(e, method, path, wait)
                    failure = _transport_failure(e, f"{self.name}: {model_id}")
                    if isinstance(failure, _Retry) and (method, path) == ("POST", "/batches"):
                        raise self._unsure(model_id, failure.failure) from None  # never a second batch sent blind
                    raise failure from None
                self.answered = time.monotonic()
                if limiter is not None and (numbers := _numbers(fields)):
                    _heed(limiter, *numbers)
                data, status = self._answer(model_id, status, fields, raw)
                error = data.get("error") if isinstance(data, dict) else None
                code = error.get("code") if isinstance(error, dict) else None
                if isinstance(code, int | str) and _is_count(str(code)) and int(code) in _RETRY_STATUSES:
                    if model is not None:
                        model.ledger.note_spent(self._usage(model, data, fields), model.call)
                    what = f"HTTP {status} carrying error {code}: {_error_text(data, raw)}"
                    raise _Retry(what, _wait_of(fields), limited=int(code) in (429, 529))
            except _Retry as e:
                refused = e.limited
                raise
            finally:
                if limiter is not None:
                    limiter.landed(sent, refused)
            return data, status, fields

        return _retrying(self, f"{self.name}: {model_id}", model, attempt, limiter)

    def _unsure(self, model_id: str, failure: str) -> ProviderError:
        """A batch's submission that got no answer: the server may have taken it, so it is
        never sent again blind; the run stops saying what to check at the provider."""
        return ProviderError(
            f"{_UNSURE}: {self.name}: {model_id}: the batch's submission got no answer ({failure}); "
            f"{_URL_PASSWORD.sub('', self.base_url)} may have taken it: look at its batches there and cancel it if "
            "it is, then --resume --batch --resend-lost sends it again (without that flag, never)",
            stops_run=True,
        )

    def _replays(self, model: Model) -> bool:
        """Whether OpenRouter's response cache may answer this model's request: when the
        config turns it on (``openrouter_cache: true``), and never for a repeat after the first."""
        return self.openrouter_cache and self.dialect == "openrouter" and model.ledger.repeat == 0

    def _unreached(self, e: Exception, method: str, path: str, wait: float) -> None:
        """A failure before the server ever answered in this run: a proxy or a server that
        is not there, or one that never answers, is one line that ends the run, not a
        storm of retries (a server that answered once and then hiccups is retried)."""
        server = _URL_PASSWORD.sub("", self.base_url)
        if isinstance(e, _ProxyFailure):
            raise ProviderError(f"{self.name}: {e}", stops_run=True) from None
        proxy = _proxy_for(*_origin(self.base_url)[:3])
        if proxy is not None and isinstance(e, ConnectionResetError):  # some ask for credentials by hanging up
            raise ProviderError(
                f"{self.name}: the proxy {proxy.shown} ({proxy.variable}) hung up on the first request to {server}; "
                f"if it wants credentials, put them in {proxy.variable} as user:password@host:port after its http://",
                stops_run=True,
            ) from None
        if isinstance(e, ConnectionRefusedError | _socket_gaierror()):
            fix = f"start the server, or point {self.base_url_env} at it"
            failure = f"{type(e).__name__}: {e}"
            raise ProviderError(f"{self.name}: cannot reach {server} ({failure}); {fix}", stops_run=True) from None
        if isinstance(e, TimeoutError) and method == "GET":  # a list of models is small: it does not take minutes
            raise ProviderError(
                f"{self.name}: no whole answer from {server} within {wait:g} s ({method} {path}); check that the "
                "server is up and not stuck, then run again",
                stops_run=True,
            ) from None

    @property
    def _limit(self) -> int:
        return int(self.max_response_mb * 2**20)

    def _answer(self, model_id: str, status: int, fields: Mapping[str, str], raw: bytes) -> tuple[Any, int]:
        """One response's JSON, or why not: ``_Retry`` when worth another try."""
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        if status in _RETRY_STATUSES:
            wait = _wait_of(fields)
            limited = status in (429, 529) or (status == 503 and wait is not None)
            raise _Retry(f"HTTP {status}: {_error_text(data, raw)}", wait, limited=limited)
        if status in _FATAL_STATUSES:
            raise ProviderError(
                f"{self.name}: HTTP {status}: {_error_text(data, raw)} ({_FATAL_STATUSES[status]}; "
                f"check {self.key_env} and the account)",
                stops_run=True,
            )
        if status == 404:  # no such model (or no such path): every case of it would fail alike
            raise ProviderError(
                f"{self.name}: {model_id}: HTTP 404: {_error_text(data, raw)} (check the model id, and that "
                f"{self.base_url_env} ends in the API's version, like /v1)",
                stops_contender=True,
            )
        if status >= 400:
            raise ProviderError(f"{self.name}: {model_id}: HTTP {status}: {_error_text(data, raw)}")
        if data is None:
            packed = " (gzip data with no Content-Encoding header)" if raw[:2] == b"\x1f\x8b" else ""
            raise ProviderError(f"{self.name}: {model_id}: HTTP {status}, the body is not JSON{packed}: {raw[:200]!r}")
        return data, status

    def _completion(self, model: Model, data: object, status: int, fields: Mapping[str, str]) -> Completion:
        if not isinstance(data, dict):
            raise ProviderError(
                f"{self.name}: {model.id}: HTTP {status}: expected a JSON object, got {type(data).__name__}"
            )
        usage = self._usage(model, data, fields)
        if fields.get("x-openrouter-cache-status", "").upper() == "HIT":  # free, and an earlier answer again
            model.ledger.note_replayed(asked=self._replays(model))
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        failed = data.get("error") or (
            isinstance(choice, dict) and (choice.get("finish_reason") == "error" or choice.get("error"))
        )
        if failed:  # an error in a 200: it may still have been paid for
            model.ledger.note_spent(usage, model.call)
            where = data if data.get("error") else choice
            raise ProviderError(f"{self.name}: {model.id}: HTTP {status}: {_error_text(where, b'finish_reason error')}")
        if not isinstance(choice, dict):
            what = "has no choices" if choice is None else f"has a choice that is {type(choice).__name__}"
            raise ProviderError(f"{self.name}: {model.id}: HTTP {status}: the response {what}")
        message: dict[str, object] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        text = message.get("content")
        if isinstance(text, list):  # content parts: the text ones, joined
            text = "".join(str(p.get("text") or "") for p in text if isinstance(p, dict) and p.get("type") == "text")
        reason = choice.get("finish_reason")
        return Completion(
            text=text if isinstance(text, str) else "" if text is None else _json_dumps(text),
            usage=usage,
            raw=data,
            message={"role": "assistant", **message} if message else None,
            tool_calls=ToolCall.of(message),
            finish_reason=reason if isinstance(reason, str) else None,
        )

    def _usage(self, model: Model, data: Mapping[str, Any], fields: Mapping[str, str]) -> Usage:
        """What an answer spent: tokens (cached and reasoning ones too) and its cost, from
        ``usage.cost``, else a LiteLLM proxy's ``x-litellm-response-cost`` header, else the
        catalog's prices."""
        usage: dict[str, object] = data["usage"] if isinstance(data.get("usage"), dict) else {}
        tokens_in, tokens_out = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
        prompt, completion = (usage.get(f"{k}_tokens_details") for k in ("prompt", "completion"))
        cached = _count(prompt.get("cached_tokens")) if isinstance(prompt, dict) else 0
        reasoning = _count(completion.get("reasoning_tokens")) if isinstance(completion, dict) else 0
        cost = _price(usage.get("cost"))
        no_price = int(cost is None and usage.get("cost") is not None)  # NaN, infinite, negative, junk: unknown
        if cost is None:
            cost = _price(fields.get("x-litellm-response-cost"))
        if cost is None:
            cost = self._cost(model.id, tokens_in, tokens_out)
        return Usage(tokens_in, tokens_out, cost, cached, reasoning, no_price)

    def price(self, model_id: str) -> tuple[float, float, float] | None:
        catalog = self._load_catalog() or {}
        prompt, completion, _ = catalog.get(_catalog_id(self, model_id, catalog) or "", (None, None, None))
        return None if prompt is None or completion is None else (prompt, completion, 0.0)

    def _cost(self, model_id: str, tokens_in: int, tokens_out: int) -> float:
        """Tokens times the catalog's prices, when the response carried no cost."""
        catalog = self._load_catalog() or {}
        known = _catalog_id(self, model_id, catalog)
        prompt, completion, _ = catalog.get(known, (None, None, None)) if known else (None, None, None)
        if prompt is None or completion is None:
            if self.priced:
                with self._lock:
                    self.unpriced.add(model_id)
            return 0.0
        return tokens_in * prompt + tokens_out * completion

    # -- the model catalog: GET /models, cached on disk --------------------------------

    def catalog(self) -> list[str] | None:
        prices = self._load_catalog()
        return None if prices is None else sorted(prices)

    def _cache_path(self) -> Path | None:
        # named after the server, never after a password in its URL
        return (
            self.cache_dir / f"{self.name}-models.{_safe_name(_URL_PASSWORD.sub('', self.base_url))}.json"
            if self.cache_dir
            else None
        )

    def _catalog_pages(self) -> Iterator[object]:
        """GET /models a page at a time, as ``links.next`` names each next one (null on the
        last): each page once, never off this server's /models, at most 100."""
        import urllib.parse

        base, path = urllib.parse.urlsplit(self.base_url), "/models"
        seen = {path}
        while True:
            data, *_ = self._request("catalog", "GET", path, None)
            yield data
            if not isinstance(link := _fields(_fields(data).get("links")).get("next"), str) or not link:
                return
            there = urllib.parse.urlsplit(urllib.parse.urljoin(self.base_url, link))
            path = there.path.removeprefix(base.path.rstrip("/")) + (f"?{there.query}" if there.query else "")
            if (there.scheme, there.netloc) != (base.scheme, base.netloc) or not path.startswith("/models"):
                raise ProviderError(f"{self.name}: GET /models: its next page is elsewhere ({_shown(link)[:80]})")
            if path in seen or len(seen) >= 100:
                raise ProviderError(f"{self.name}: GET /models: its pages go round in circles ({_shown(link)[:80]})")
            seen.add(path)

    def catalog_entries(self) -> list[tuple[str, float | None, float | None, int | None]] | None:
        models = self._load_catalog()
        return None if models is None else [(model_id, *entry) for model_id, entry in sorted(models.items())]

    def _load_catalog(self) -> dict[str, tuple[float | None, float | None, int | None]] | None:
        with self._lock:
            if not self._catalog_loaded:
                self._prices = self._read_catalog()
                self._catalog_loaded = True
            return self._prices

    def _read_catalog(self) -> dict[str, tuple[float | None, float | None, int | None]] | None:
        # fresh cache -> cache; offline (verify, -n) -> any cache; else fetch, falling back to a stale cache
        path, cached = self._cache_path(), None
        if path and path.is_file():
            try:
                cached = json.loads(path.read_text(encoding="utf-8"))
                prices = {k: (v[0], v[1], v[2] if len(v) > 2 else None) for k, v in cached["models"].items()}
                self.expiring = {k: v for k, v in _fields(cached.get("expires")).items() if isinstance(v, str)}
            except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
                cached = None
        # through a proxy it is fetched every run: what the proxy refuses is then found before any case
        proxied = not self.offline and _proxy_for(*_origin(self.base_url)[:3]) is not None
        if cached is not None:
            age = time.time() - float(cached.get("fetched_at") or 0)
            if (age < self.catalog_ttl and not proxied) or self.offline:
                return prices
        if self.offline:
            self.notes.append(f"no cached {self.title} catalog yet; run, compare or models --refresh fetches it")
            return None
        try:
            pages = list(self._catalog_pages())
        except ProviderError as e:
            if e.stops_run and (cached is None or proxied):  # a refused key, a server not there: nothing to go on
                raise
            self.unread = str(e)
            if cached is not None:  # what goes unchecked is what changed since: said, the run goes on
                _warn(f"{self.title} catalog not read to its end ({e}); the lineup is checked against the cached one")
                return prices
            return None
        # OpenAI's shape, which OpenRouter extends with pricing, context_length and expiration_date;
        # a local server's ids (llama3.2:1b) carry no vendor, so they get the provider's own prefix
        fetched = {}
        listed = [m for page in pages if isinstance(d := _fields(page).get("data"), list) for m in d]
        for m in (m for m in listed if isinstance(m, dict) and m.get("id")):
            pricing: dict[str, object] = m["pricing"] if isinstance(m.get("pricing"), dict) else {}
            context = _count(m.get("context_length")) or _count(m.get("max_input_tokens")) or None
            entry = (_price(pricing.get("prompt")), _price(pricing.get("completion")), context)
            fetched[model_id := f"{self.prefix or ''}{m['id']}"] = entry
            if isinstance(ends := m.get("expiration_date"), str) and re.fullmatch(r"\d{4}-\d\d-\d\d.*", ends):
                self.expiring[model_id] = ends[:10]
        if path:
            document = {"base_url": _redact(self.base_url), "fetched_at": time.time(), "models": fetched}
            document["expires"] = self.expiring
            failed: list[str] = []
            if not _write_text(path, _json_dumps(document), failed):
                self.notes.append(f"the catalog cache was not written: {failed[0]}")
        return fetched


class LocalServer(OpenRouter):
    """``direct: local:``: an OpenAI-compatible server of your own (Ollama, llama.cpp's
    server, vLLM, LM Studio) at ``LOCAL_BASE_URL`` (default Ollama's
    ``http://127.0.0.1:11434/v1``), with ``LOCAL_API_KEY`` sent when set. Its model ids are
    the server's own, vendor-free ones (``llama3.2:1b``); answers cost $0 unless the
    server reports a cost, and the lineup is checked against the server's ``/models``."""

    name = "local"
    title = "local server"
    direct = True
    prefix = "local/"
    env_keys = ()
    efforts = None
    base_url_env = "LOCAL_BASE_URL"
    key_env = "LOCAL_API_KEY"
    default_base_url = "http://127.0.0.1:11434/v1"
    request_type_description = "a chat completion from an OpenAI-compatible server of your own"
    priced = False
    catalog_ttl = 0.0  # a local server's models change as you pull them: asked every run
    dialect = "openai"


def _count(value: object) -> int:
    """A token count from a response: a whole number from 0, else 0 (never a crash on junk)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e15:
        return int(value)
    return 0


def _price(value: Any) -> float | None:
    """A per-token price from the catalog's decimal string; None when unknown or nonsense."""
    try:
        price = float(value)
    except (TypeError, ValueError):
        return None
    return price if price >= 0 and math.isfinite(price) else None


class TypeSafe(Provider):
    """TypeSafe's own API (``direct: typesafe:``): model list, key and pricing so far."""

    name = "typesafe"
    request_type = "typesafe"
    request_type_description = "TypeSafe's typed request: noul, choice, score"
    env_keys = ("TYPESAFE_API_KEY",)
    efforts = ("low", "medium", "high")
    direct = True
    # USD per million tokens (input, output)
    PRICES: ClassVar[dict[str, tuple[float, float]]] = {
        "typesafe/jev-latest": (0.40, 1.60),
        "typesafe/jev-mini": (0.10, 0.40),
    }

    def catalog(self) -> list[str]:
        return sorted(self.PRICES)

    def catalog_entries(self) -> list[tuple[str, float | None, float | None, int | None]]:
        return [(model_id, i / 1e6, o / 1e6, None) for model_id, (i, o) in sorted(self.PRICES.items())]

    def price(self, model_id: str) -> tuple[float, float, float] | None:
        prices = self.PRICES.get(model_id)
        return None if prices is None else (prices[0] / 1e6, prices[1] / 1e6, 0.0)

    def complete(self, model: Model, *, system: str | None = None, user: str, json: bool = True) -> Completion:
        raise ProviderError(
            "no typesafe consumer yet: the typed request shape will be defined by the first "
            "suite that declares request_types: [typesafe]"
        )


class LiteLLM(Provider):
    """object vendor's own API through LiteLLM (``direct: litellm:``; the ``litellm`` extra).

    Entries are LiteLLM model strings (``anthropic/claude-haiku-5.5``,
    ``gemini/gemini-2.5-flash``, ``ollama_chat/llama3``) and render as
    ``litellm/<model>``. Settings a vendor does not take are dropped, not fatal;
    ``LITELLM_API_BASE`` sends every request to another server. LiteLLM is imported
    only when a run or a key check needs it: it takes seconds.
    """

    name = "litellm"
    direct = True
    efforts = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
    # LiteLLM's exceptions worth another try; a refused connection arrives as InternalServerError
    RETRYABLE = (
        "APIConnectionError",
        "InternalServerError",
        "Timeout",
        "RateLimitError",
        "ServiceUnavailableError",
        "BadGatewayError",
    )

    def __init__(self) -> None:
        self.unpriced: set[str] = set()
        self._lock = threading.Lock()
        self._reached = False  # a server answered in this run: a refused connection is then a hiccup

    @staticmethod
    def _litellm() -> Any:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import
        return _import_optional("litellm", "the litellm provider (direct: litellm:)")

    def price(self, model_id: str) -> tuple[float, float, float] | None:
        entry = self._litellm().model_cost.get(self.model_name(model_id)) or {}
        p_in, p_out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
        return None if p_in is None or p_out is None else (float(p_in), float(p_out), 0.0)

    def missing_keys(self, model_id: str) -> list[str]:
        """LiteLLM's missing keys; where any one of them would do (Gemini: GEMINI_API_KEY
        or GOOGLE_API_KEY), one entry that says so."""
        check = self._litellm().validate_environment
        missing = list(check(model=self.model_name(model_id)).get("missing_keys") or [])
        enough = []
        for key in missing if len(missing) > 1 else ():  # set each alone, for the check only
            os.environ[key] = "probe"
            try:
                enough += [key] if check(model=self.model_name(model_id)).get("keys_in_environment") else []
            finally:
                del os.environ[key]
        return [" or ".join(enough)] if enough else missing

    conversations = True

    def complete(self, model: Model, **request: Any) -> Completion:
        litellm, kwargs = self._litellm(), self._arguments(model, _Request(**request))

        def attempt() -> object:
            try:
                answer = litellm.completion(**kwargs)
            except Exception as e:
                raise self._failure(litellm, model, e) from None
            self._reached = True
            return answer

        return self._completion(litellm, model, _retrying(self, f"litellm: {model.id}", model, attempt))

    def _arguments(self, model: Model, request: _Request) -> dict[str, object]:
        # our own retries, and settings a vendor does not take dropped instead of fatal
        kwargs: dict[str, object] = {"model": model.name, "messages": request.chat, "timeout": self.timeout}
        kwargs |= {"num_retries": 0, "drop_params": True}
        settings = {"temperature": model.temperature, "max_tokens": model.max_tokens, "reasoning_effort": model.effort}
        kwargs |= {key: value for key, value in settings.items() if value is not None}
        if model.ledger.judge:  # as the built-in client sends it: a judge's verdicts repeat where they can
            kwargs["seed"] = 0
        if request.json:
            kwargs["response_format"] = {"type": "json_object"}
        extra = (("tools", request.tools), ("tool_choice", request.tool_choice))
        kwargs |= {key: value for key, value in extra if value is not None}
        if os.environ.get("LITELLM_API_BASE"):
            kwargs["api_base"] = os.environ["LITELLM_API_BASE"]
        if self.drop_params:  # a LiteLLM proxy reads it from the body
            kwargs["extra_body"] = {"drop_params": True}
        return kwargs

    def _failure(self, litellm: object, model: Model, e: Exception) -> Exception:
        """What one of LiteLLM's exceptions means, by the rules of the built-in client: a
        server never reached, a refused key and no credits end the run; a model it lacks
        stops its contender; rate limits, 5xx and timeouts (once) are retried; the rest
        are the case's error (and three alike first stop the contender, as for ``local``)."""
        label, cause = f"litellm: {model.id}", e
        for _ in range(20):  # LiteLLM wraps the OpenAI SDK's error, which wraps httpx's, which wraps the socket's
            cause = cause.__cause__ or cause.__context__ or cause  # type: ignore[assignment]
        if not self._reached and isinstance(cause, ConnectionRefusedError | _socket_gaierror()):
            server = _URL_PASSWORD.sub("", os.environ.get("LITELLM_API_BASE") or "the vendor's API")
            fix = "start the server, or point LITELLM_API_BASE at it"
            return ProviderError(
                f"litellm: cannot reach {server} ({type(cause).__name__}: {cause}); {fix}", stops_run=True
            )

        def one_of(*names: str) -> bool:
            return isinstance(e, tuple(getattr(litellm, name) for name in names if hasattr(litellm, name)))

        if one_of("AuthenticationError", "PermissionDeniedError"):
            return ProviderError(f"{label}: the key was refused: {e}", stops_run=True)
        if one_of("PaymentRequiredError", "BudgetExceededError"):
            return ProviderError(f"{label}: the account is out of credits: {e}", stops_run=True)
        if one_of("NotFoundError"):
            return ProviderError(f"{label}: no such model: {e}", stops_contender=True)
        self._reached = self._reached or one_of("BadRequestError")
        status = getattr(e, "status_code", None)  # the built-in client's words, so the same rules read them
        what = f"{type(e).__name__}: {' '.join(str(e).split())}"  # one line: LiteLLM's texts span several
        what = f"HTTP {status}: {what}" if isinstance(status, int) else what
        if one_of(*self.RETRYABLE):
            headers = getattr(getattr(e, "response", None), "headers", None) or {}
            timeout = one_of("Timeout")
            retry = headers.get("retry-after")
            return _Retry(what, _wait_of({"retry-after": str(retry)}) if retry else None, timeout=timeout)
        hint = " (defaults.drop_params: true asks a LiteLLM proxy to drop it)" if "param" in str(e).lower() else ""
        return ProviderError(f"{label}: {what}{hint}")

    def _completion(self, litellm: Any, model: Model, response: object) -> Completion:
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if cost is None:
            try:
                cost = litellm.completion_cost(completion_response=response)
            except Exception:  # a model LiteLLM has no price for
                cost = None
        if cost is None:
            with self._lock:
                self.unpriced.add(model.id)
        raw = response.model_dump() if hasattr(response, "model_dump") else response
        choices = raw.get("choices") if isinstance(raw, dict) else None
        choice: dict[str, Any] = (
            choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        )
        message: dict[str, object] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        text = message.get("content") or ""
        return Completion(
            text=text if isinstance(text, str) else _json_dumps(text),
            usage=Usage(tokens_in, tokens_out, float(cost or 0.0)),
            raw=raw,
            message={k: v for k, v in message.items() if v is not None} or None,
            tool_calls=ToolCall.of(message),
            finish_reason=choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
        )


def _approx_tokens(text: str | None) -> int:
    """About four characters a token: plausible counts for fake models."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def _fake_broken(system: str | None, user: str) -> str:
    raise ProviderError("fake/broken: connection refused (a fake transport failure)")


# What each fake model answers, given (system, user).
_FAKE_MODELS: dict[str, Callable[[str | None, str], str]] = {
    "echo": lambda system, user: user,
    "parrot": lambda system, user: _json_dumps(_first_json_object(user)),
    "mute": lambda system, user: "",
    "broken": _fake_broken,
}


class FakeProvider(Provider):
    """Serves ``fake/<name>`` with no network: echo, parrot, mute, broken and tooluser.

    ``echo`` answers the user text, ``parrot`` the first JSON object in it, ``mute``
    nothing, and ``broken`` raises a transport error. In a conversation they answer the
    last user message. ``tooluser`` is a scripted agent: offered tools, it calls the first
    one with the first JSON object of the user's message as its arguments, then answers
    with what the tool returned. Each completion costs $0.001.
    """

    name = "fake"
    prefix = "fake/"
    request_type_description = "a chat completion (fake models, no network)"
    conversations = True
    COST_USD = 0.001

    def __init__(self, models: Mapping[str, Callable[[str | None, str], str]] | None = None) -> None:
        self.models = {**_FAKE_MODELS, "tooluser": _FAKE_MODELS["echo"], **(models or {})}

    def catalog(self) -> list[str]:
        return sorted(f"fake/{name}" for name in self.models)

    def price(self, model_id: str) -> tuple[float, float, float] | None:
        return (0.0, 0.0, self.COST_USD) if model_id in self.catalog() else None

    def complete(self, model: Model, **request: Any) -> Completion:
        r = _Request(**request)
        system, user, messages, tools = r.system, r.user, r.messages, r.tools
        answer = self.models.get(model.name)
        if answer is None:
            raise ProviderError(f"{model.id}: no such fake model; known: {', '.join(self.catalog())}")
        if messages is None:
            text = answer(system, user)
            usage = Usage(_approx_tokens(system) + _approx_tokens(user), _approx_tokens(text), self.COST_USD)
            return Completion(text=text, usage=usage, raw={"model": model.id, "text": text})
        sent = " ".join(str(m.get("content") or "") for m in messages)
        last = messages[-1]
        users = [m for m in messages if m.get("role") == "user"]
        system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), None)
        if model.name == "tooluser" and tools and last.get("role") == "tool":
            text, calls = str(last.get("content") or ""), []  # answer with what the tool found
        elif model.name == "tooluser" and tools:
            function: Mapping[str, object] = (
                tools[0]["function"] if isinstance(tools[0].get("function"), Mapping) else {}
            )
            arguments = _first_json_object(str(users[-1].get("content") if users else ""))
            turn = sum(m.get("role") == "assistant" for m in messages)
            calls = [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": str(function.get("name")), "arguments": _json_dumps(arguments or {})},
                }
            ]
            text = ""
        else:
            text, calls = answer(system, str(users[-1].get("content") if users else "")), []
        message: dict[str, object] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        usage = Usage(_approx_tokens(sent), _approx_tokens(text) + 8 * len(calls), self.COST_USD)
        return Completion(
            text=text,
            usage=usage,
            raw={"model": model.id, "message": message},
            message=message,
            tool_calls=ToolCall.of(message),
            finish_reason="tool_calls" if calls else "stop",
        )


class FakeModel(Model):
    """A fake model for testing an adapter alone: ``FakeModel("echo").complete(user=...)``."""

    def __init__(self, name: str = "echo", **settings: Any) -> None:
        model_id = name if name.startswith("fake/") else f"fake/{name}"
        super().__init__(model_id, FakeProvider(), **settings)


def _builtin_providers() -> list[Provider]:
    return [TypeSafe(), LiteLLM(), LocalServer(), OpenRouter()]


# ═══════════════════════════════════════════════════════════════════════════════
# Statistics: means with 95% intervals over cases, and paired tests between runs
# ═══════════════════════════════════════════════════════════════════════════════


def _summarize(results: Sequence[RunResult], metrics: Sequence[Metric], duration: float) -> Summary:
    scored = [r.score for r in results if r.score is not None]
    estimates = {m.name: _estimate(list(_case_values(results, m.name).values())) for m in metrics}
    return Summary(
        cases=len(results),
        scored=len(scored),
        errors=sum(r.error is not None for r in results),
        score=_mean([s.value for s in scored]),
        means={name: e.mean if e else None for name, e in estimates.items()},
        usage=Usage.total(r.usage for r in results),
        duration=duration,
        retries=sum(r.retries for r in results),
        intervals={name: e.to_json() if e else None for name, e in estimates.items()},
        lost=Usage.total(r.usage for r in results if r.error is not None),
        cached=sum(r.cached for r in results),
        saved=sum(r.saved for r in results),
    )


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


ALPHA = 0.05  # a difference is "significant" when its paired test gives p below this
LOOKS = 10  # --until-decided looks at most this often: a round is a tenth of the case runs
_Z95 = 1.959963984540054
_Z80 = 0.8416212335729143  # the normal quantile of 80% power


@dataclass(frozen=True, slots=True)
class _Estimate:
    """A mean over cases with its standard error and 95% interval.

    The unit is the case: with ``--repeat`` each case's repeats are averaged first, so
    the interval is clustered by case. 0/1 values get the Wilson score interval (sound
    at small n and near 0% or 100%, where mean ± t·se collapses); other values get
    Student's t over the case means, clipped to 0..1.
    """

    mean: float
    n: int
    se: float
    low: float
    high: float
    method: str

    @property
    def detectable(self) -> float | None:
        """The smallest difference from another contender, over the same cases, that a
        paired test would see 80% of the time at the 5% level, their answers independent.
        For 0/1 scores the other contender sits that far away toward 50%, where answers
        spread most, so the difference's variance is p₁q₁ + p₂q₂ (this one's p by Wilson's
        center, so that all-alike cases do not claim certainty; never less than twice this
        one's), solved for the distance, plus a continuity correction of one case, since
        McNemar's test counts whole cases. Other scores take this one's spread for both.
        Giving both contenders this one's spread promised 80% and delivered 63–71% at
        scores of 80–95%; this delivers 81–92% from 50% to 95%, 40 to 200 cases (simulated).

        >>> round(_estimate([1.0] * 20 + [0.0] * 20).detectable, 3), _estimate([1.0]).detectable
        (0.338, None)
        """
        if self.n < 2:
            return None
        z = _Z95 + _Z80
        if self.method != "wilson":
            return z * math.sqrt(2) * self.se
        p = _wilson(self.mean, self.n)[0]
        distance = z * math.sqrt(2 * p * (1 - p) / self.n)
        for _ in range(100):  # a fixed point: the distance sets the other's spread, which sets the distance
            other = min(1.0, max(0.0, p - distance if p >= 0.5 else p + distance))
            spread = p * (1 - p) + max(p * (1 - p), other * (1 - other))
            distance, before = z * math.sqrt(spread / self.n) + 1 / self.n, distance
            if abs(distance - before) < 1e-9:
                break
        return distance

    def to_json(self) -> dict[str, object]:
        fields = {k: getattr(self, k) for k in ("mean", "n", "se", "low", "high", "method")}
        return {**fields, "detectable": self.detectable}


def _wilson(mean: float, n: int) -> tuple[float, float]:
    """Wilson's score interval for a share ``mean`` of ``n``: its center and half-width.

    >>> [round(v, 3) for v in _wilson(0.75, 4)]
    [0.628, 0.327]
    """
    z2 = _Z95 * _Z95
    center = (mean + z2 / (2 * n)) / (1 + z2 / n)
    return center, _Z95 * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n)) / (1 + z2 / n)


def _estimate(values: Sequence[float]) -> _Estimate | None:
    """The mean of ``values`` with its 95% interval: Wilson's for 0/1 values, Student's t otherwise.

    >>> e = _estimate([1.0, 1.0, 0.0, 1.0])
    >>> (e.mean, e.method, round(e.low, 3), round(e.high, 3))
    (0.75, 'wilson', 0.301, 0.954)
    >>> (lambda e: (e.low, e.high))(_estimate([0.5, 0.5]))
    (0.5, 0.5)
    """
    n = len(values)
    if not n:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    if all(v in (0.0, 1.0) for v in values):
        center, half = _wilson(mean, n)
        return _Estimate(mean, n, sd / math.sqrt(n), max(0.0, center - half), min(1.0, center + half), "wilson")
    if n == 1:
        return _Estimate(mean, 1, 0.0, 0.0, 1.0, "one case")
    t = _t_quantile(0.975, n - 1)
    se = sd / math.sqrt(n)
    return _Estimate(mean, n, se, max(0.0, mean - t * se), min(1.0, mean + t * se), "t")


class _Values(Mapping[str, float]):
    """Each unit's value of a metric, by ``dataset/id`` (``_case_values``): ``by_unit``, read as a
    mapping. A judged metric's values are the judge's, and ``labels`` holds each judged unit's
    truth by people's labels (averaged as its value is), or None where the unit lies past its
    dataset's labelled sample (``_units``); a unit not in ``labels`` is exact (an error counted as
    wrong). ``answers``: each judged unit's answers, by their hashes: two runs' same answers have
    the same truth, so their difference is known without a label (``_alike``). ``plan``: by
    dataset, (its answers labelled, its planned sample) where the plan is not all labelled, so
    the figure is the judge's until ``label`` asks the rest. ``chance``: where the judge said how
    sure it was (``_verdict_chance``), a judged unit's probability of pass, the prediction its
    labels correct in place of the 0/1 verdict (``predicted``). ``later``: the truth of a unit past
    the sample each answer of which is labelled (a question of two sides asks past it: ``_alike``).
    What reads the labels takes a ``_Values`` by its type; a plain mapping of values has none to carry."""

    __slots__ = ("answers", "by_unit", "chance", "labels", "later", "plan")

    def __init__(
        self,
        values: Mapping[str, float] | None = None,
        labels: Mapping[str, float | None] = {},
        answers: Mapping[str, str] = {},
        plan: Mapping[str, tuple[int, int]] = {},
        chance: Mapping[str, float] = {},
        later: Mapping[str, float] = {},
    ) -> None:
        self.by_unit = dict(values or {})
        self.labels, self.answers, self.plan, self.chance = dict(labels), dict(answers), dict(plan), dict(chance)
        self.later = dict(later)

    def predicted(self, unit: str) -> float:
        """What the judge predicts of a unit: its probability of pass where it gave one, else its value."""
        return self.chance.get(unit, self.by_unit[unit])

    def __getitem__(self, unit: str) -> float:
        return self.by_unit[unit]

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_unit)

    def __len__(self) -> int:
        return len(self.by_unit)

    # the dict's own views and lookups, not Mapping's that go through __getitem__ (a miss raising)
    def __contains__(self, unit: object) -> bool:
        return unit in self.by_unit

    def keys(self) -> KeysView[str]:
        return self.by_unit.keys()

    def values(self) -> ValuesView[float]:
        return self.by_unit.values()

    def items(self) -> ItemsView[str, float]:
        return self.by_unit.items()

    def only(self, keys: Iterable[str]) -> _Values:
        kept = {k: self[k] for k in keys if k in self}
        answers = {k: v for k, v in self.answers.items() if k in kept}
        chance, later = ({k: v for k, v in field.items() if k in kept} for field in (self.chance, self.later))
        labels = {k: v for k, v in self.labels.items() if k in kept}
        return _Values(kept, labels, answers, self.plan, chance, later)

    def judged(self) -> _Values:
        """The judge's figure, its labels set aside."""
        return _Values(self)


LABELS_LEAST = 2  # the fewest labels a dataset's judged figure is corrected by: one has no spread to widen it by
PSEUDO = 0.3  # pseudo-disagreements the spread of a correction counts, one each way: set by simulation


def _strata(values: _Values) -> dict[str, list[str]]:
    """Units by dataset: each dataset's labelled sample is its own (``_units``), so a figure
    over several is their case-weighted sum."""
    out: dict[str, list[str]] = {}
    for unit in values:
        out.setdefault(unit.split("/", 1)[0], []).append(unit)
    return out


@dataclass(frozen=True, slots=True)
class _Figure:
    """A judged figure corrected by people's labels: ``alone`` when the labels alone gave it
    (the judge's verdicts too unlike them, or they too few, to narrow it)."""

    mean: float
    var: float
    df: int
    low: float
    high: float
    alone: bool = False


def _corrected(values: _Values) -> _Figure | None:
    """A judged figure corrected by people's labels (``_Figure``); None when a dataset with
    judged units has fewer than ``LABELS_LEAST`` labelled (the figure is then the judge's
    alone). Each dataset's part is ``_ppi``'s; over several, their
    case-weighted sum, its variance their squared weights', its degrees of freedom the fewest."""
    if not any(v is not None for v in values.labels.values()):
        return None
    parts, total = [], len(values)
    for units in _strata(values).values():
        exact = [values[u] for u in units if u not in values.labels]
        judge = [values.predicted(u) for u in units if u in values.labels]
        pairs = [(values.predicted(u), y) for u in units if (y := values.labels.get(u)) is not None]
        if judge and len(pairs) < LABELS_LEAST:
            return None
        parts.append((len(units) / total, _ppi(exact, judge, pairs)))
    if len(parts) == 1:
        return parts[0][1]
    mean = sum(w * part.mean for w, part in parts)
    var = sum(w * w * part.var for w, part in parts)
    df = min(part.df for _, part in parts)
    half = _t_quantile(0.975, df) * math.sqrt(var)
    return _Figure(mean, var, df, mean - half, mean + half, all(part.alone for _, part in parts))


def _ppi(exact: Sequence[float], judge: Sequence[float], pairs: Sequence[tuple[float, float]]) -> _Figure:
    """One dataset's mean from its exact values, its judged values and the (judged, label)
    pairs of its labelled sample (drawn at random from the judged: ``_units``), with its
    variance, degrees of freedom and 95% interval: prediction-powered inference (Angelopoulos
    et al., Science 2023) with the power-tuned λ of PPI++ (Angelopoulos, Duchi and Zrnic 2023).

    The mean is Ā + s·r̄: Ā averages the exact values and λ times each judged one, r̄ the
    labelled sample's y - λf, s the judged share. Its variance, the cases' own sampling
    included (the labelled sample lies inside the judged), is
    sa²/N + s² sr²/n + 2 s λ cov(f, r) / N, least at λ = cov(f, y) / var(f): the judge's
    slope on the labels, clipped to 0..1. Its small-sample guard: sr² counts ``PSEUDO`` of a
    disagreement each way (20 labels that all agree never claim a judge without error), the
    interval is Student's t on n - 1 degrees of freedom, and the labels alone (λ = 0, Wilson's
    interval for 0/1 labels) are taken whenever they give the narrower interval.

    >>> f = _ppi([], [1.0, 1.0, 0.0, 0.0], [(1.0, 1.0), (0.0, 0.0)])
    >>> [round(v, 3) for v in (f.mean, f.var, f.df, f.low, f.high)], f.alone
    ([0.5, 0.043, 1, 0.095, 0.905], True)
    """
    big, judged, n = len(exact) + len(judge), len(judge), len(pairs)
    labels = [y for _, y in pairs]
    if n >= judged:  # every judged unit labelled: the labels are the truth
        known = _estimate([*exact, *labels])
        assert known is not None
        return _Figure(known.mean, known.se**2, max(1, big - 1), known.low, known.high)
    share, f, y = judged / big, [f for f, _ in pairs], labels
    spread_f = _variance(judge)
    slope = _covariance(f, y) / spread_f if spread_f > 0 else 0.0
    if spread_f > 0 and (min(f) == max(f) or min(y) == max(y)):  # no slope to fit (0/0): PPI's own lam, 1
        # but a judge's probabilities beside labels all alike say nothing of the answers unlike them
        slope = 1.0 if min(f) == max(f) or all(v in (0.0, 1.0) for v in f) else 0.0
    best: _Figure | None = None
    for lam in dict.fromkeys((min(1.0, max(0.0, slope)), 0.0)):
        r = [b - lam * a for a, b in pairs]
        settled = [*exact, *(lam * v for v in judge)]
        mean = sum(settled) / big + share * sum(r) / n
        var = _variance(settled) / big + share * share * _spread(r) / n + 2 * share * lam * _covariance(f, r) / big
        var = max(var, share * share * _spread(r) * (1 / n - 1 / judged))  # the sample's own part is never less
        half = _t_quantile(0.975, n - 1) * math.sqrt(var)
        found = _Figure(mean, var, n - 1, mean - half, mean + half, not lam)
        if not lam and not exact and all(v in (0.0, 1.0) for v in labels):  # the labels alone: Wilson's
            center, half = _wilson(sum(labels) / n, n)
            found = _Figure(mean, (half / _Z95) ** 2, n - 1, center - half, center + half, True)
        if best is None or found.high - found.low < best.high - best.low:
            best = found
    assert best is not None
    return best


AIM = 60  # the labelled cases where label's confidence sequence is tightest (its rho): set by simulation
EARLIEST = 10  # label decides nothing before this many cases are labelled: a few labels' spread says little


def _sequence(
    pairs: Sequence[tuple[float, float]], judge: Sequence[float], alpha: float = ALPHA
) -> tuple[float, float, float]:
    """A mean (of one contender's truth, or of a difference between two) from people's labels in
    the one order, valid however many are looked at and whenever the looking stops: the point,
    low and high of an asymptotic confidence sequence (Waudby-Smith, Arbour, Sinha, Kennedy and
    Ramdas, "Time-uniform central limit theory and asymptotic confidence sequences", 2024) over
    the PPI++ terms  lam_t * mean(judge) + (y_t - lam_t * f_t),  ``pairs`` the labelled (f, y) in
    order, ``judge`` every unit's f. Each lam_t is fitted on the labels before t alone (clipped
    PPI++, Angelopoulos, Duchi and Zrnic 2023), so each term's mean is the truth's whatever came
    before. The spread counts ``_spread``'s pseudo-disagreements; the sequence is tightest near
    ``AIM`` labelled cases (its rho^2 = (-2 log a + log(1 - 2 log a)) / AIM).

    >>> [round(v, 3) for v in _sequence([(1.0, 1.0), (0.0, 0.0)] * 20, [1.0, 0.0] * 100)]
    [0.499, 0.416, 0.581]
    """
    terms = _terms(pairs, judge)
    mean = sum(terms) / len(terms)
    half = _half(_spread(terms), len(terms), alpha)
    return mean, mean - half, mean + half


def _terms(pairs: Sequence[tuple[float, float]], judge: Sequence[float], fixed: float | None = None) -> list[float]:
    """``_sequence``'s PPI++ terms, each lam fitted on the labels before it (or ``fixed``): the
    covariance from running sums, so a sequence of t labels costs t steps."""
    big, whole, spread, terms = len(judge), sum(judge) / len(judge), _variance(judge), []
    sf = sy = sfy = 0.0
    for t, (f, y) in enumerate(pairs):
        lam = 0.0 if fixed is None else fixed
        if fixed is None and t >= LABELS_LEAST and spread > 0:
            lam = min(1.0, max(0.0, (sfy - sf * sy / t) / (t - 1) / ((1 + t / big) * spread)))
        terms.append(lam * whole + y - lam * f)
        sf, sy, sfy = sf + f, sy + y, sfy + f * y
    return terms


def _half(spread: float, t: int, alpha: float) -> float:
    """The asymptotic confidence sequence's half-width after ``t`` terms of variance ``spread``."""
    rho2 = (-2 * math.log(alpha) + math.log(1 - 2 * math.log(alpha))) / AIM
    return math.sqrt(spread * 2 * (t * rho2 + 1) / (t * t * rho2) * math.log(math.sqrt(t * rho2 + 1) / alpha))


def _labels_needed(judge: Sequence[float], pairs: Sequence[tuple[float, float]], half: float = 0.05) -> tuple[int, int]:
    """The labels that would bring a judged figure's 95% interval to ±``half`` by ``_ppi``'s
    variance (the cases' own sampling counted), as [with the judge, by the labels alone]: the
    judge's at the λ its (judged, label) ``pairs`` give so far, the labels' own at λ = 0 (with
    fewer than ``LABELS_LEAST`` pairs, the judge's spread stands in for theirs). More than
    the judged answers: ±``half`` is out of reach even with all of them labelled (0).

    >>> _labels_needed([1.0, 0.0] * 500, [(1.0, 1.0), (0.0, 0.0)] * 10 + [(1.0, 0.0)])
    (166, 436)
    """
    big, target = len(judge), (half / _Z95) ** 2
    f, y = [a for a, _ in pairs], [b for _, b in pairs]
    alone = _spread(y) if len(pairs) >= LABELS_LEAST else _variance(judge)
    spread_f = _variance(judge)
    lam = min(1.0, max(0.0, _covariance(f, y) / spread_f)) if spread_f > 0 and len(pairs) >= LABELS_LEAST else 0.0
    r = [b - lam * a for a, b in pairs]
    fixed = lam * lam * spread_f / big + 2 * lam * _covariance(f, r) / big
    needed = []
    for floor, spread in ((fixed, _spread(r) if lam else alone), (0.0, alone)):
        n = math.ceil(max(spread / (target - floor), spread / (target + spread / big))) if target > floor else big + 1
        needed.append(n if n <= big else big if alone / big <= target else 0)
    return needed[0], needed[1]


def _bias_test(pairs: Sequence[Sequence[tuple[float, float]]]) -> list[float | None]:
    """Whether a judge errs more for one contender than for the others, on (label, judge's
    value) pairs: on the answers people find wrong (label under 0.5: how often it passes them)
    and on the right ones apart, since a contender's share of right answers alone moves its
    judge-minus-people figure. Pass/fail on each side is Fisher's exact test of the contender's
    errors against the rest's (a wrong-answer group of a contender right 95% of the time holds
    5 labels of 100: Welch's t there flagged an honest judge in 11-15% of runs with 8
    contenders); grades, Welch's t on ``_spread``'s spreads. The two sides by Bonferroni, the
    contenders by Holm. None: too few labels on a side."""
    found: list[float | None] = []
    for i, own in enumerate(pairs):
        rest = [pair for j, other in enumerate(pairs) if j != i for pair in other]
        sides = []
        for wrong in (True, False):
            a = [v - y for y, v in own if (y < 0.5) == wrong]
            b = [v - y for y, v in rest if (y < 0.5) == wrong]
            if len(a) < LABELS_LEAST or len(b) < LABELS_LEAST:
                continue
            if all(d in (-1.0, 0.0, 1.0) for d in (*a, *b)):
                sides.append(2 * _fisher(sum(map(abs, a)), len(a), sum(map(abs, b)), len(b)))
                continue
            t = (sum(a) / len(a) - sum(b) / len(b)) / math.sqrt(_spread(a) / len(a) + _spread(b) / len(b))
            sides.append(4 * _t_cdf(-abs(t), min(len(a), len(b)) - 1))
        found.append(min(1.0, *sides) if sides else None)
    return _holm(found)


def _fisher(a: float, n: int, b: float, m: int) -> float:
    """Fisher's exact two-sided p-value for ``a`` of ``n`` against ``b`` of ``m``: the chance,
    given the ``a + b`` in all, of a split no likelier than this one.

    >>> round(_fisher(7, 10, 2, 10), 4), _fisher(3, 10, 3, 10)
    (0.0698, 1.0)
    """
    k = round(a + b)
    chance = [math.comb(n, x) * math.comb(m, k - x) for x in range(max(0, k - m), min(n, k) + 1)]
    seen = math.comb(n, round(a)) * math.comb(m, k - round(a))
    return min(1.0, sum(c for c in chance if c <= seen * (1 + 1e-9)) / math.comb(n + m, k))


def _variance(values: Sequence[float]) -> float:
    return _covariance(values, values)


def _covariance(a: Sequence[float], b: Sequence[float]) -> float:
    import statistics

    return statistics.covariance(a, b) if len(a) > 1 else 0.0


def _spread(gaps: Sequence[float]) -> float:
    """The variance of people's disagreements with a judge, with ``PSEUDO`` of a disagreement
    each way besides: 20 labels that all happen to agree never claim a judge without error."""
    n, gap = len(gaps), sum(gaps) / len(gaps)
    return (sum((d - gap) ** 2 for d in gaps) + 2 * PSEUDO) / (n + 2 * PSEUDO - 1)


def _point(values: _Values) -> float | None:
    """The figure a metric's values give, from 0 to 1: corrected by labels where they correct it."""
    if (corrected := _corrected(values)) is not None:
        return min(1.0, max(0.0, corrected.mean))
    return min(1.0, max(0.0, sum(values.values()) / len(values))) if values else None


def _estimate_of(values: _Values) -> _Estimate | None:
    """``_estimate``, or the corrected figure with its interval where labels correct it."""
    if (corrected := _corrected(values)) is None:
        return _estimate(list(values.values()))
    mean, var, low, high = corrected.mean, corrected.var, corrected.low, corrected.high
    return _Estimate(min(1.0, max(0.0, mean)), len(values), math.sqrt(var), max(0.0, low), min(1.0, high), "corrected")


def _alike(first: _Values, second: _Values) -> tuple[_Figure | None, str, int]:
    """Two sets of values made one thing to compare: their differences over the units both
    hold, corrected by labels (``_corrected``'s figure) only when both sides are (a unit's
    difference is labelled when each side's value is exact or labelled), else None: the
    judge's on both, corrected is never compared with judged. Also how (``corrected``, or why
    not: ``labels in the first only``, ``... second only``, ``too few labels shared``; "" with
    no labels) and how many units the side without labels lacks where the other has them:
    those ``label`` would ask first. The differences' sample is the units whose answers differ,
    in their one order, up to the first a side has no label for: each side's own sample, then
    on where ``label`` asked a question of the two (``later``: the shared answers left unasked)."""
    keys = first.keys() & second.keys()
    a, b = first.only(keys), second.only(keys)
    # the same answers on both sides: their difference is 0, known without a label (exact)
    same = {k for k in keys if a.answers.get(k) is not None and a.answers.get(k) == b.answers.get(k)}
    diff = {k: 0.0 if k in same else a[k] - b[k] for k in keys}
    truth = [side for side in (a, b) if any(v is not None for v in side.labels.values())]
    labels: dict[str, float | None] = {}
    ended = set[str]()
    for k in sorted(keys - same, key=_order):
        if k in a.labels or k in b.labels:
            ya, yb = (side.later.get(k) if (y := side.labels.get(k, side[k])) is None else y for side in (a, b))
            dataset = k.split("/", 1)[0]
            labels[k] = None if ya is None or yb is None or dataset in ended else ya - yb
            if labels[k] is None:
                ended.add(dataset)
    if len(truth) == 2 or any(v is not None for v in labels.values()):
        if labels:
            chance = {k: a.predicted(k) - b.predicted(k) for k in labels if k in a.chance or k in b.chance}
            figure = _corrected(_Values(diff, labels, chance=chance))
        else:  # no judged difference left (the same answers on both sides): each one known
            d = list(diff.values())
            mean, var = sum(d) / len(d), _variance(d) / len(d)
            half = _t_quantile(0.975, max(1, len(d) - 1)) * math.sqrt(var)
            figure = _Figure(mean, var, max(1, len(d) - 1), mean - half, mean + half)
        return figure, "corrected" if figure else "too few labels shared", 0
    if not truth:
        return None, "", 0
    other = b if truth[0] is a else a
    lacking = sum(1 for k, y in truth[0].labels.items() if y is not None and other.labels.get(k, 0.0) is None)
    return None, f"labels in the {'first' if truth[0] is a else 'second'} only", lacking


def _rates(pairs: Sequence[tuple[float, float]]) -> str:
    """A pass/fail judge's sensitivity (the right answers it passes) and specificity (the
    wrong ones it fails) on (label, judge's value) pairs; "" for a grade."""
    if not all(v in (0.0, 1.0) for pair in pairs for v in pair):
        return ""
    right = [value for label, value in pairs if label == 1.0]
    wrong = [value for label, value in pairs if label == 0.0]
    sensitivity = f"{sum(right) / len(right):.0%}" if right else "-"
    return f"sensitivity {sensitivity}, specificity {f'{1 - sum(wrong) / len(wrong):.0%}' if wrong else '-'}"


def _agreement(pairs: Sequence[tuple[float, float]]) -> str:
    """How a judge agrees with people on (label, judge's value) pairs: sensitivity and
    specificity for pass/fail, the correlation for a grade."""
    if rates := _rates(pairs):
        return f"agrees on {sum(label == value for label, value in pairs)} of {len(pairs)} labels ({rates})"
    import statistics

    try:
        return f"correlates {statistics.correlation(*zip(*pairs, strict=True)):.2f} with {len(pairs)} labels"
    except statistics.StatisticsError:  # fewer than two, or one of them constant
        return f"has {_n(len(pairs), 'label')}, too alike for a correlation"


@dataclass(frozen=True, slots=True)
class _Paired:
    """A paired comparison over the cases two runs share: ``delta`` is first minus second,
    ``low``..``high`` its 95% interval, ``p`` the test's p-value (None: too few pairs, or
    pairs that all differ alike, which no test can judge) and ``adjusted`` the p-value
    after Holm's correction over the family it was judged in."""

    delta: float
    p: float | None
    n: int
    method: str
    low: float | None = None
    high: float | None = None
    adjusted: float | None = None
    sd: float = 0.0  # of the paired differences: what the cases needed to tell ``delta`` apart rests on
    how: str = ""  # a judged metric's: corrected on both sides, or why compared as judged (``_alike``)
    lacking: int = 0  # compared as judged: the labels the side without them lacks where the other has them

    @property
    def significant(self) -> bool:
        p = self.adjusted if self.adjusted is not None else self.p
        return p is not None and p < ALPHA


def _paired(first: _Values, second: _Values) -> _Paired | None:
    """McNemar's mid-p test for 0/1 values, the paired t-test otherwise, the interval Student's
    t over the paired differences. A judged metric's values are compared corrected on both
    sides or on neither (``_alike``): corrected, the differences are corrected as one figure
    (``_corrected``) and tested by t on its degrees of freedom.

    >>> same = _Values({str(i): float(i % 2) for i in range(100)})
    >>> _paired(same, same).p
    1.0
    >>> worse = _Values({k: 0.0 if int(k) < 30 else 1.0 for k in same})
    >>> right = _Values(dict.fromkeys(same, 1.0))
    >>> _paired(worse, right).significant
    True
    >>> _paired(_Values({"a": 0.5, "b": 0.7}), _Values({"a": 0.4, "b": 0.6})).p  # all differ alike: sign-flip
    0.5
    """
    keys = sorted(first.keys() & second.keys())
    n = len(keys)
    if not n:
        return None
    figure, how, lacking = _alike(first, second)
    if figure is not None:
        delta, var, df = figure.mean, figure.var, figure.df
        se, half = math.sqrt(var), _t_quantile(0.975, df) * math.sqrt(var)
        p = 2 * (1 - _t_cdf(abs(delta) / se, df)) if se > 0 else 1.0 if delta == 0 else 2.0 ** (1 - n)
        low, high = max(-1.0, delta - half), min(1.0, delta + half)
        return _Paired(delta, p, n, "corrected t", low, high, sd=se * math.sqrt(n), how=how)
    return dataclasses.replace(
        _paired_test([first[k] for k in keys], [second[k] for k in keys]), how=how, lacking=lacking
    )


def _paired_test(a: Sequence[float], b: Sequence[float]) -> _Paired:
    n = len(a)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    delta = sum(diffs) / n
    sd = math.sqrt(sum((d - delta) ** 2 for d in diffs) / (n - 1)) if n > 1 else 0.0
    low = high = None
    if sd > 1e-12 and n > 1:
        half = _t_quantile(0.975, n - 1) * sd / math.sqrt(n)
        low, high = max(-1.0, delta - half), min(1.0, delta + half)
    if all(v in (0.0, 1.0) for v in (*a, *b)):
        if n < 2:  # one shared case: no test can judge it
            return _Paired(delta, None, n, "McNemar mid-p", low, high, sd=sd)
        only_first = sum(1 for d in diffs if d > 0)
        m = only_first + sum(1 for d in diffs if d < 0)
        return _Paired(delta, _mcnemar_mid_p(only_first, m), n, "McNemar mid-p", low, high, sd=sd)
    if n < 2:  # one pair: no test can judge it
        return _Paired(delta, None, n, "paired t", low, high, sd=sd)
    # the exact sign-flip test's least p, 2^(1-n) (every pair one way): no test of n pairs can say
    # more, so n pairs that all differ alike (no variance for t) get it, and near-alike ones no less
    least = 2.0 ** (1 - n) if abs(delta) > 1e-12 else 1.0
    if sd <= 1e-12:
        return _Paired(delta, least, n, "sign-flip", low, high, sd=sd)
    t = delta / (sd / math.sqrt(n))
    return _Paired(delta, max(least, 2 * (1 - _t_cdf(abs(t), n - 1))), n, "paired t", low, high, sd=sd)


def _fmt_p(p: float) -> str:
    """A p-value as shown: never ``0`` where a t test underflowed.

    >>> _fmt_p(0.0123), _fmt_p(0.0)
    ('0.012', '< 1e-16')
    """
    return "< 1e-16" if p < 1e-16 else f"{p:.2g}"


def _mcnemar_mid_p(only_first: int, discordant: int) -> float:
    """McNemar's mid-p value: the exact binomial test on the discordant pairs, with half
    the probability of the observed count. The exact test is conservative: over 100
    cases, 4,000 simulated pairs, mid-p raised 4.9% false alarms to its 3.5% and found a
    10-point drop 35.9% of the time to its 30.3%.

    >>> _mcnemar_mid_p(0, 0), round(_mcnemar_mid_p(1, 10), 4), round(_mcnemar_mid_p(5, 10), 4)
    (1.0, 0.0117, 1.0)
    """
    if discordant == 0:
        return 1.0
    k = min(only_first, discordant - only_first)
    below = sum(math.comb(discordant, i) for i in range(k))
    return min(1.0, (2 * below + math.comb(discordant, k)) / 2**discordant)


def _holm(values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None stays None): the family
    as a whole then raises a false alarm at most ``ALPHA`` of the time.

    >>> _holm([0.01, 0.04, None, 0.03])
    [0.03, 0.06, None, 0.06]
    """
    order = sorted((p, i) for i, p in enumerate(values) if p is not None)
    out: list[float | None] = [None] * len(values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        out[i] = round(running, 12)
    return out


def _cases_needed(delta: float, sd: float) -> int | None:
    """Cases a paired test needs to tell ``delta`` apart at 80% power and the 5% level.

    >>> _cases_needed(0.03, 0.3), _cases_needed(0.0, 0.3)
    (785, None)
    """
    if not delta or not sd:
        return None
    return math.ceil(((_Z95 + _Z80) * sd / abs(delta)) ** 2)


def _t_cdf(t: float, df: int) -> float:
    """Student's t distribution function, through the regularized incomplete beta."""
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


_QUANTILES: dict[tuple[float, int], float] = {}


def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile (remembered: each one costs a hundred distribution evaluations).

    >>> round(_t_quantile(0.975, 1), 3), round(_t_quantile(0.975, 10), 3), round(_t_quantile(0.975, 1000), 3)
    (12.706, 2.228, 1.962)
    >>> _t_quantile(0.975, 0)
    Traceback (most recent call last):
    ValueError: a t quantile needs at least 1 degree of freedom, got 0
    """
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {df}")
    if (known := _QUANTILES.get((p, df))) is not None:
        return known
    low, high = 0.0, 1000.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
    _QUANTILES[(p, df)] = (low + high) / 2
    return _QUANTILES[(p, df)]


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by Lentz's continued fraction."""
    if x <= 0 or x >= 1:
        return max(0.0, min(1.0, x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _betainc(b, a, 1 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1) < 1e-12:
            break
    return front * result


def _boundaries(fractions: Sequence[float], alpha: float, spend: Callable[[float], float] | None = None) -> list[float]:
    """Two-sided group-sequential boundaries (z) at the looks' information ``fractions`` (rising
    to 1), spending ``alpha`` as ``spend`` says: by default Lan and DeMets' O'Brien-Fleming type,
    2 - 2 Phi(z_(alpha/2) / sqrt t), little at the early looks and nearly all of it at the
    last. Each look's boundary is the one that, with no difference, is first crossed there with
    the chance spent since the look before: the density of the running sum over the region not
    yet crossed is carried from look to look on a grid (Armitage, McPherson and Rowe's recursion,
    Simpson's rule, as in Jennison and Turnbull ch. 19).

    >>> pocock = lambda t: 0.05 * math.log(1 + (math.e - 1) * t)
    >>> [round(b, 3) for b in _boundaries([0.2, 0.4, 0.6, 0.8, 1], 0.05, pocock)]  # gsDesign's sfLDPocock
    [2.438, 2.427, 2.41, 2.397, 2.386]
    """
    from statistics import NormalDist

    unit, edge = NormalDist(), NormalDist().inv_cdf(1 - alpha / 2)
    spend = spend or (lambda t: 2 - 2 * unit.cdf(edge / math.sqrt(t)))
    points, bounds, spent, before = 101, [], 0.0, 0.0
    grid, mass = [0.0], [1.0]  # the running sum at no information: all of it at 0

    def crossing(b: float, sd: float) -> float:  # the chance the running sum ends past -b or b
        return sum(m * (unit.cdf((-b - u) / sd) + unit.cdf((u - b) / sd)) for m, u in zip(mass, grid, strict=True))

    for t in fractions:
        sd, target = math.sqrt(t - before), spend(t) - spent
        low, high = 0.0, 40.0
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (mid, high) if crossing(mid * math.sqrt(t), sd) > target else (low, mid)
        bounds.append(high)
        spent += crossing(high * math.sqrt(t), sd)
        h = 2 * high * math.sqrt(t) / (points - 1)
        new = [h * (i - (points - 1) / 2) for i in range(points)]
        simpson = [h / 3 * (1 if i in (0, points - 1) else 2 + 2 * (i % 2)) for i in range(points)]
        mass = [
            w * sum(m * unit.pdf((s - u) / sd) / sd for m, u in zip(mass, grid, strict=True))
            for w, s in zip(simpson, new, strict=True)
        ]
        grid, before = new, t
    return bounds


def _decide(values: Mapping[str, Mapping[str, float]], z: float, least: int = 10) -> tuple[str, dict[str, Any]]:
    """The top contender by mean, and each other one shown below it: label -> (difference,
    low, high, cases), from the paired differences over the cases both answered, each a t
    interval at the level of the normal quantile ``z`` (a z interval on the sample's own
    spread decides too often at ten cases a look), widened by half a case (0/1 scores move
    the mean by whole cases: without it, 5.6% of 20,000 runs of 100 cases at 80% with no
    difference were decided), clipped to the 100 points scores span.
    Fewer than ``least`` shared cases decide nothing."""
    from statistics import NormalDist

    level = NormalDist().cdf(z)
    means = {label: sum(v.values()) / len(v) for label, v in values.items() if v}
    top = max(means, key=lambda label: means[label])
    settled = {}
    for label, own in values.items():
        shared = values[top].keys() & own.keys()
        if label == top or len(shared) < least:
            continue
        d = [values[top][k] - own[k] for k in shared]
        n, mean = len(d), sum(d) / len(d)
        half = _t_quantile(level, n - 1) * math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) + 0.5 / n
        if mean - half > 0:
            settled[label] = (mean, mean - half, min(mean + half, 1.0), n)
    return top, settled


def _case_values(
    results: Iterable[RunResult],
    metric: str,
    errors_as: float | None = None,
    flaky: str = "mean",
    labels: Mapping[tuple[str, ...], float] | None = None,
) -> _Values:
    """Each case's mean of ``metric`` over its repeats, by ``dataset/id``; None (does not
    apply) left out, and errors too unless ``errors_as`` gives them a value. Cases that
    share a ``cluster`` in their metadata.json (a source document, a user) are one unit:
    their runs are averaged together, so intervals and paired tests count sources, not
    the cases drawn from them. ``flaky`` (a case whose repeats disagree): ``mean`` takes
    its mean, ``wrong`` its worst repeat (all k right, pass^k, for 0/1 scores), ``exclude`` none.
    ``labels``: people's, by ``_label_key``, given for a judged metric (``_units``)."""
    entries, planned, marked = [], _planned(labels, metric), set[str]()
    for r in results:
        value = r.score.metrics.get(metric) if r.score is not None else None
        judged = labels is not None and value is not None and r.reply is not None
        if value is None and r.error is not None:  # judging repeats (wrong, exclude), an error is a wrong one
            value = errors_as if errors_as is not None or flaky == "mean" else 0.0
        if value is not None:
            key = _label_key(r, metric) if judged else None
            label = labels.get(key) if key and labels else None
            unit = _unit(r.case.dataset, r.case.id, r.case.metadata.get(CLUSTER))
            if key and key[:2] in planned:
                marked.add(unit)
            chance = r.chances.get(metric) if key else None
            later = labels.get(key, labels.get((*key, _PAIRED))) if key and labels else None
            entries.append(((unit, r.case.id), float(value), label, key[3] if key else None, chance, later))
    return _units(entries, flaky, marked)


# a label given outside the queue (the report's, where "label next" did not point): its key ends
# with this, so it counts for the judge's agreement (_labelled) and never for the correction
_CHOSEN = "chosen"
# a label ``label`` asked for a question of two sides past every sample's end, where it asks only
# the answers the sides do not share: its key ends with this, so it corrects the difference
# (``_alike``) and never extends a side's own sample, which would then end where answers agree
_PAIRED = "paired"


def _any_label(labels: Mapping[tuple[str, ...], float], key: tuple[str, ...]) -> float | None:
    """An answer's label wherever people gave it: in turn, for a question of two sides, or chosen."""
    return next((labels[k] for k in (key, (*key, _PAIRED), (*key, _CHOSEN)) if k in labels), None)


def _planned(labels: Mapping[tuple[str, ...], float] | None, metric: str) -> set[tuple[str, ...]]:
    """The cases (dataset, id) some answer of which people labelled in turn for ``metric``:
    whichever contender's or run's answer it was, and whatever the case said then, the case was
    drawn into its dataset's planned sample (``_units``)."""
    return {key[:2] for key in labels or () if key[4:] == (metric,)}  # a chosen one's key ends past it


def _units(
    entries: Iterable[tuple[tuple[str, str], float, float | None, str | None, float | None, float | None]],
    flaky: str,
    marked: Collection[str] = (),
) -> _Values:
    """Each unit's mean over its cases, each case's repeats taken as ``flaky`` says, from
    ``entries``: (unit and case, value, label, the answer's hash where a judge gave the value).
    A judged unit's truth (its labels in place of the judge's values) is kept for the units of
    its dataset's planned sample: the longest run of units, in one random order of each
    dataset's units (the same for every contender and every run, ``_order``), that people
    labelled in turn, for this answer or another's (``marked``). The plan is fixed by where the
    labelling reached, never by this contender's answers: a new run reusing its baseline's
    labels has the baseline's plan, and where one of its answers in it (a changed one) lacks a
    label, the whole dataset is the judge's until ``label`` asks it. A sample that ended where
    a run's answers changed would be chosen by them (changed answers are where a model is
    unsure): measured +3.3 to +10.6 points off. So the sample is a random draw whoever labelled
    what, and when, and a label given out of that order waits until the gap before it is filled
    (it counts for the judge's agreement at once). A unit past the sample: None. The last of an
    entry: the judge's probability of pass where it gave one (a unit's mean, its value standing
    in where one of its answers has none); then its label wherever given (in turn or for a
    question of two sides: ``_PAIRED``), each unit's ``later`` truth where each answer has one."""
    repeats: dict[tuple[str, str], list[float]] = {}
    answers: dict[str, list[str]] = {}
    sure: dict[str, list[float]] = {}
    gaps, entries, told, ungiven = set[str](), list(entries), set[str](), set[str]()
    for (unit, case), value, label, answer, chance, later in entries:
        repeats.setdefault((unit, case), []).append(value)
        if answer is not None:
            answers.setdefault(unit, []).append(f"{case}\0{answer}")
            sure.setdefault(unit, []).append(value if chance is None else chance)
            if chance is not None:
                told.add(unit)
            if label is None:
                gaps.add(unit)
            if later is None:
                ungiven.add(unit)
    values = _means(repeats, flaky)
    labels = dict[str, float | None].fromkeys(set(answers) & values.keys())
    plans: dict[str, list[str]] = {}
    ended = set[str]()
    for unit in sorted(labels, key=_order):
        dataset = unit.split("/", 1)[0]
        if unit not in marked and unit in gaps:  # nobody labelled it in turn: the plan ends here
            ended.add(dataset)
        elif dataset not in ended:
            plans.setdefault(dataset, []).append(unit)
    short = {
        d: (held, len(plan)) for d, plan in plans.items() if (held := sum(u not in gaps for u in plan)) < len(plan)
    }
    truths: dict[tuple[str, str], list[float]] = {}  # labels for values (an answer in the sample: in turn)
    for key, value, *_, later in entries if labels else ():  # a metric no judge gave has none
        truths.setdefault(key, []).append(value if later is None else later)
    truth = _means(truths, flaky)
    labels |= {u: truth[u] for d, plan in plans.items() if d not in short for u in plan}
    ungiven |= {u for plan in plans.values() for u in plan}  # past the sample only
    beyond = {u: truth[u] for u, y in labels.items() if y is None and u not in ungiven and u in truth}
    chances = {u: sum(sure[u]) / len(sure[u]) for u in told}
    found = {unit: "\0".join(sorted(found)) for unit, found in answers.items()}
    return _Values(values, labels, found, short, chances, beyond)


def _order(unit: str) -> tuple[str, str]:
    """A unit's place in its dataset's one random order: a hash of its dataset and id, so the
    same for every contender, run and machine, and unrelated to anything an answer says."""
    import hashlib

    dataset = unit.split("/", 1)[0]
    return dataset, hashlib.sha256(f"agent-evals order\0{unit}".encode("utf-8", "surrogatepass")).hexdigest()


def _in_order(units: Mapping[str, Sequence[_T]], labelled: Callable[[_T], bool]) -> tuple[list[_T], int]:
    """A contender's judged answers, by unit, in their dataset's one order (``_order``), and
    how many its labelled sample holds: the longest start of them all labelled (``_units``)."""
    todo = [item for unit in sorted(units, key=_order) for item in units[unit]]
    return todo, next((i for i, item in enumerate(todo) if not labelled(item)), len(todo))


def _means(repeats: Mapping[tuple[str, str], list[float]], flaky: str) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for (unit, _), values in repeats.items():
        if flaky == "mean" or len(values) == 1 or min(values) == max(values):
            sums.setdefault(unit, []).extend(values)
        elif flaky == "wrong":
            sums.setdefault(unit, []).extend([min(values)] * len(values))
    return {key: sum(v) / len(v) for key, v in sums.items()}


def _flaky(repeats: Iterable[tuple[str, Sequence[float]]]) -> list[str]:
    """The cases whose repeats disagree."""
    return sorted(case for case, values in repeats if len(values) > 1 and min(values) != max(values))


def _unit(dataset: str, case_id: str, cluster: object) -> str:
    """The key a case's values are averaged under: the case, or its cluster."""
    return f"{dataset}/{case_id}" if cluster is None else f"{dataset}/{CLUSTER}={cluster}"


# ═══════════════════════════════════════════════════════════════════════════════
# The response cache: completions kept on disk, so a rerun spends nothing
# ═══════════════════════════════════════════════════════════════════════════════


class _Cache(_Step):
    """Completions already paid for, in SQLite (``--cache``): keyed by provider, model,
    settings, prompt, JSON mode and repeat, so a repeat never reuses another repeat's
    answer. Only successful completions are stored. One connection per thread, WAL and a
    busy timeout: safe under the thread pool and across processes sharing the file."""

    def __init__(self, path: Path) -> None:
        import sqlite3

        self.path = path
        self._local = threading.local()
        where = _display(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._db() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, model TEXT, text TEXT, "
                    "usage TEXT, raw TEXT, created REAL)"
                )
                db.execute("SELECT key, text, usage, raw FROM completions LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            raise ConfigError(
                f"{where}: the response cache is damaged ({e}); agent-evals cache clear repairs it"
            ) from None
        except OSError as e:
            raise ConfigError(f"{where}: the response cache cannot be opened ({e.strerror or e})") from None

    @staticmethod
    def repair(path: Path) -> bool:
        """Remove a damaged cache file (and its WAL); True when it was damaged."""
        try:
            _Cache(path)
            return False
        except ConfigError:
            pass
        for extra in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{extra}")
        return True

    def _db(self) -> Any:
        db = getattr(self._local, "db", None)
        if db is None:
            import sqlite3

            db = sqlite3.connect(self.path, timeout=30.0)
            # switching a new file to WAL takes a lock SQLite will not wait for: two processes
            # opening the cache at once (shards on one machine) retry instead of failing
            deadline = time.monotonic() + 30.0
            while True:
                try:
                    db.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            self._local.db = db
        return db

    def before(self, call: _Call) -> None:
        """An identical request answered before is answered from here, costing nothing now."""
        call.key = self.key(call.model, call.request)
        if (hit := self.get(call.key)) is not None:
            call.origin, call.saved = "cache", hit.usage.cost_usd
            call.answer = dataclasses.replace(hit, usage=dataclasses.replace(hit.usage, cost_usd=0.0))

    def after(self, call: _Call) -> None:
        if call.answer is not None and call.origin != "cache":
            self.put(call.key, call.answer, call.model.id)

    @staticmethod
    def key(model: Model, request: Mapping[str, Any]) -> str:
        """The request's identity: the contender, its settings and everything sent; a
        conversation keys on its whole message list, tool definitions and tool choice."""
        import hashlib

        head = [model.provider.name, model.id, model.effort, model.temperature, model.max_tokens]
        head += [model.routing] if model.routing else []  # routed elsewhere, answered elsewhere
        head += [f"tier={model.service_tier}"] if model.service_tier else []
        if "messages" in request:
            sent: list[object] = ["conversation", request["messages"], request.get("tools"), request.get("tool_choice")]
            parts = [*head, *sent, request["json"], model.ledger.repeat]
        else:  # the system/user form keeps the keys of caches written before conversations
            parts = [*head, request["system"], request["user"], request["json"], model.ledger.repeat]
        return hashlib.sha256(_json_dumps(parts).encode()).hexdigest()

    def get(self, key: str) -> Completion | None:
        row = self._db().execute("SELECT text, usage, raw FROM completions WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            raw = json.loads(row[2])
            usage = Usage.coerce(json.loads(row[1])) or Usage()
            if isinstance(raw, dict) and raw.get(self.TURN) == 1:  # a conversation's answer, tool calls and all
                message = raw.get("message") if isinstance(raw.get("message"), dict) else None
                return Completion(
                    str(row[0]),
                    usage,
                    raw.get("raw"),
                    message,
                    ToolCall.of(message),
                    raw.get("finish_reason"),
                )
            choices = raw.get("choices") if isinstance(raw, dict) else None
            first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
            reason = first.get("finish_reason")  # a cut-off answer is still one when it comes from the cache
            return Completion(str(row[0]), usage, raw, finish_reason=reason if isinstance(reason, str) else None)
        except (ValueError, TypeError, AttributeError):
            return None  # an entry that no longer reads is no answer: the model is asked again

    TURN = "agent_evals_turn"  # marks a stored conversation answer: its message and finish reason too

    def put(self, key: str, completion: Completion, model: str = "") -> None:
        raw = completion.raw
        if completion.message is not None:
            raw = {self.TURN: 1, "raw": raw, "message": completion.message, "finish_reason": completion.finish_reason}
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model,
                    _redact(str(completion.text)),
                    _json_dumps(completion.usage.to_json()),
                    _redact_json(_json_dumps(raw), raw),
                    time.time(),
                ),
            )

    def stats(self) -> list[tuple[str, int, float]]:
        """(model, answers, what they cost when first paid) per model id ("" for entries older than the column)."""
        cost = "COALESCE(SUM(json_extract(usage, '$.cost_usd')), 0)"
        return list(
            self._db().execute(f"SELECT model, COUNT(*), {cost} FROM completions GROUP BY model ORDER BY model")
        )

    def mean_cost(self, model: str) -> float | None:
        """What one of ``model``'s stored answers cost when it was first paid for, on average."""
        (mean,) = (
            self._db()
            .execute("SELECT AVG(json_extract(usage, '$.cost_usd')) FROM completions WHERE model = ?", (model,))
            .fetchone()
        )
        return None if mean is None else float(mean)

    def clear(self) -> int:
        with self._db() as db:
            return db.execute("DELETE FROM completions").rowcount

    def disown(self, call: _Call) -> None:
        if call.key:
            with self._db() as db:
                db.execute("DELETE FROM completions WHERE key = ?", (call.key,))


# ═══════════════════════════════════════════════════════════════════════════════
# Spend: prices, worst cases, --budget's holds (a step of every model call) and the forecast
# ═══════════════════════════════════════════════════════════════════════════════
#
# One worst case for both: a call costs at most each byte it sends as a token in, the full
# max_tokens out, and the provider's price per request (_worst). The forecast sums it over
# an experiment's cases, said before a run spends, and refuses a run --budget cannot pay
# (_within_budget); the budget holds it per call before the call is sent.


def _price_of(provider: Provider, model_id: str) -> tuple[float, float, float] | None:
    """The provider's price, or None when it cannot say: its catalog unreachable, its code
    raising, or an answer that is no three finite dollar amounts from 0 up."""
    try:
        price: Any = provider.price(model_id)
        ok = len(price) == 3 and all(not isinstance(p, bool) and 0 <= float(p) < math.inf for p in price)
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        return None
    return (float(price[0]), float(price[1]), float(price[2])) if ok else None


def _worst(price: tuple[float, float, float], sent: float, calls: int, max_tokens: int) -> float:
    """The most ``calls`` model calls sending ``sent`` bytes between them can cost.

    >>> round(_worst((1e-6, 2e-6, 0.001), 1000, 2, 100), 6)  # 1000 in, then 2 x (100 out + a request)
    0.0034
    """
    p_in, p_out, p_request = price
    return sent * p_in + calls * (max_tokens * p_out + p_request)


def _worst_call(model: Model, request: Mapping[str, object], seen: tuple[float, float] | None = None) -> float:
    """The most one call of ``model`` sending ``request`` can cost (a token is at least a
    byte, and a little more for the roles), at the dearer of the catalog's prices and what
    its answers were seen to cost (``_Budget.observe``)."""
    p_in, p_out, p_request = _price_of(model.provider, model.id) or (0.0, 0.0, 0.0)
    factor, rate = seen or (1.0, 0.0)
    price = (max(p_in * factor, rate), max(p_out * factor, rate), p_request * factor)
    sent = {k: v for k, v in request.items() if k != "json"}
    return _worst(price, len(_json_dumps(sent).encode()) + 16, 1, model.max_tokens or 0)


_BUDGET = "budget reached"  # a case the budget stopped before its call: --resume asks it again
# the errors of a case run that asked nothing it paid for: not run (no row), and --resume asks it
_NOT_RUN = tuple(f"ProviderError: {why}" for why in (_BUDGET, _UNSENT, _REFUSED, _STUCK))


class _Hold:
    """One model call's share of ``--budget``: what it holds, and its worst case per try."""

    __slots__ = ("held", "key", "worst")

    def __init__(self, held: float, worst: float, key: tuple[str | None, ...]) -> None:
        self.held, self.worst, self.key = held, worst, key


class _Budget(_Step):
    """``--budget``: what one run may spend. Every model call holds its worst case before it
    is sent (``before``) and settles at what it spent when it returns (``after``), so what
    was spent and what is held never passes the limit: with concurrency, retries (each try
    holds again: ``again``), repeats and agents' turns. A call that does not fit stops the run.

    A catalog's price is not trusted (a stale catalog, ``:online`` search fees, a proxy that
    adds its own, a tier dearer than listed): a contender's first call is asked alone, and
    every hold after it is at the dearer of the catalog's price and what its calls cost, so
    a call that costs more than it held tightens that contender's holds at once. What
    remains: the calls already in flight when a price rises may pass what they held."""

    def __init__(self, limit: float) -> None:
        self.limit, self.spent, self.held = limit, 0.0, 0.0
        self.lock = threading.Lock()
        self.answered = threading.Condition(self.lock)  # a contender's first call came back
        self.seen: dict[tuple[str | None, ...], tuple[float, float]] = {}  # by (model id, routing, tier): observe's
        self.asking: set[tuple[str | None, ...]] = set()  # contenders whose first call is in flight

    blocks = True  # a contender's first call is asked alone: the next ones wait for it

    def before(self, call: _Call) -> None:
        self.first_alone(call.model)
        call.hold = self.begin(call.model, call.request)

    def after(self, call: _Call) -> None:
        self.end(call.hold, call.model, None if call.answer is None else call.answer.usage, call.spent)

    def again(self, call: _Call) -> None:
        """A provider tries the call in flight again: the new try holds its own worst case."""
        if isinstance(hold := call.hold, _Hold):
            hold.held += self.hold(hold.worst, call.model.stop)

    @staticmethod
    def key(model: Model) -> tuple[str | None, ...]:
        """A contender as its calls are priced: its model, routing and tier."""
        return (model.id, model.routing, model.service_tier)

    def first_alone(self, model: Model) -> None:
        """Wait while the contender's first call is in flight: the next ones hold what it
        really cost. With none answered yet, this call is its first."""
        key = self.key(model)
        with self.answered:
            while key not in self.seen and key in self.asking and not model.stop.event.is_set():
                self.answered.wait(0.5)
            if key not in self.seen:
                self.asking.add(key)

    def begin(self, model: Model, request: Mapping[str, object]) -> _Hold:
        key = self.key(model)
        with self.lock:
            seen = self.seen.get(key)
        worst = _worst_call(model, request, seen)
        return _Hold(self.hold(worst, model.stop), worst, key)

    def end(self, hold: _Hold, model: Model, usage: Usage | None, spent: float = 0.0) -> None:
        """The call came back (``usage``: what its answer said it spent, None when it failed;
        ``spent``: what its failed tries cost, an in-band error carrying its price)."""
        with self.answered:
            self.held -= hold.held
            self.spent += spent + (usage.cost_usd if usage is not None else 0.0)
            self.asking.discard(hold.key)
            if usage is not None:  # nothing learned from a call that failed: the next one asks alone
                self.seen[hold.key] = self.observe(self.seen.get(hold.key), model, usage)
            self.answered.notify_all()

    @staticmethod
    def observe(seen: tuple[float, float] | None, model: Model, usage: Usage) -> tuple[float, float]:
        """What a contender's answers showed, with this one's: (the most they cost over the
        catalog's price for their tokens; where that price came to $0, the most per token)."""
        factor, rate = seen or (1.0, 0.0)
        p_in, p_out, p_request = _price_of(model.provider, model.id) or (0.0, 0.0, 0.0)
        tokens = usage.input_tokens + usage.output_tokens
        if (listed := usage.input_tokens * p_in + usage.output_tokens * p_out + p_request) > 0:
            return max(factor, usage.cost_usd / listed), rate
        return factor, max(rate, usage.cost_usd / max(tokens, 1))

    def hold(self, amount: float, stop: _Stop) -> float:
        with self.lock:
            if self.spent + self.held + amount > self.limit * (1 + 1e-12):  # 100 x $0.001 fit in $0.10
                reason = f"{_BUDGET}: {_fmt_cost(self.spent)} of {_fmt_cost(self.limit)}"
                stop.set(reason)
                raise ProviderError(f"{reason}; this call could cost {_fmt_cost(amount)}", stops_run=True)
            self.held += amount
        return amount

    def stopped(self, finished: int, total: int) -> str:
        """The line a run this budget stopped ends with."""
        spent = f"{_fmt_cost(self.spent)} of {_fmt_cost(self.limit)}"
        return f"{_BUDGET}: {spent}; {finished} of {total} cases asked; --resume with a higher --budget continues"


@dataclass(frozen=True, slots=True)
class _Forecast:
    """What one experiment should cost (``expected``: None until an earlier run or the cache
    has answered it), at least (``least``: its inputs alone) and at most (``worst``), and from what."""

    experiment: Experiment
    basis: str  # earlier runs | the cache | input size | no price | no max_tokens
    expected: float | None = None
    worst: float | None = None
    least: float | None = None
    done: int = 0  # case runs --resume found finished: not asked again, not counted

    @property
    def counted(self) -> bool:
        """It has a figure to count with (an expected cost, or the least it can cost)."""
        return self.expected is not None or self.least is not None

    @property
    def likely(self) -> float:
        """The figure a budget refuses a run by: what it is expected to cost, else the least it can."""
        return self.expected if self.expected is not None else self.least or 0.0


def _forecast(experiment: Experiment, log_dir: Path, cache: _Cache | None, turns: int) -> _Forecast:
    """From this suite's earlier logs of the experiment (each case's own cost, its costliest
    for the worst case), else the cache's mean answer for the model, else the inputs' size
    with the full ``max_tokens`` out, which is what it can cost at most and no expectation (a
    model seldom writes all it may): always at the provider's prices, never $0 for none."""
    runs, repeat = len(experiment.cases) * experiment.repeat, experiment.repeat
    ratios = _batch_ratios(experiment.provider, experiment.contender.model)
    history = _cost_history(log_dir, experiment.name, share=max(ratios) if ratios and max(ratios) > 0 else 0.5)
    if history:
        every = [cost for costs in history.values() for cost in costs]
        mean, top = sum(every) / len(every), max(every)
        seen = [history.get(case_id) for case_id in _ids(experiment.cases)]
        expected = sum(sum(c) / len(c) if c else mean for c in seen) * repeat
        return _Forecast(experiment, "earlier runs", expected, sum(max(c) if c else top for c in seen) * repeat)
    c = experiment.contender
    price = _price_of(experiment.provider, c.model)
    if price is None:
        return _Forecast(experiment, "no price")
    folders = experiment.cases.found if isinstance(experiment.cases, _Cases) else []
    size = sum(_file_size(f"{f.folder}{os.sep}{f.file}") for f in folders) or sum(
        len(x.input) for x in experiment.cases
    )
    out = c.max_tokens if c.max_tokens is not None or price[1] else 0  # no max_tokens: the output has no bound
    cases = len(experiment.cases)
    cheapest, dearest, tier = TIERS["priority" if c.model.endswith(":nitro") else c.tier or "default"]
    worst = None if out is None or dearest is None else _worst(price, size, cases, out) * repeat * turns * dearest
    if cache is not None and (mean_cost := cache.mean_cost(c.model)) is not None:
        return _Forecast(experiment, "the cache", mean_cost * runs, worst)
    least = _worst(price, size / 4, cases, 0) * repeat * cheapest  # the inputs alone, at 4 bytes a token
    return _Forecast(experiment, "no max_tokens" if out is None else f"input size{tier}", None, worst, least)


def _resumed(f: _Forecast, previous: Mapping[tuple[str, str], Mapping[tuple[str, int], RunResult]]) -> _Forecast:
    """The forecast of what is left once --resume skips the finished case runs."""
    experiment = f.experiment
    done = len(previous.get((_contender_key(experiment.contender), experiment.dataset), {}))
    left = 1 - done / max(len(experiment.cases) * experiment.repeat, 1)
    return dataclasses.replace(
        f, done=done, **{k: v * left for k in ("expected", "worst", "least") if (v := getattr(f, k)) is not None}
    )


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _cost_history(log_dir: Path, name: str, spent: str = "usage", share: float = 0.5) -> dict[str, list[float]]:
    """Each case's cost at list price (a cached answer's first price; one a --batch run's
    batch answered, at ``share`` of the list price, brought back to it) in the newest three
    logs of experiment ``name`` (a safe name: no glob characters); error rows, which spent
    part of one, and rows whose cost nobody knows (no price, or not a number from 0 up: never
    $0, never below it) left out. ``spent``: ``judge_usage`` for what the judge's calls cost."""
    costs: dict[str, list[float]] = {}
    for path in sorted(log_dir.glob(f"{name}.*.json"), reverse=True)[:3]:
        try:
            data = json.loads(path.read_bytes())
            rows, batches = data.get("rows") or [], data.get("batches") or []
            # the batches of the calls counted here (the contender's, or the judge's for judge_usage)
            mine = [_fields(b).get("requests") for b in batches if bool(_fields(b).get("judge")) == (spent != "usage")]
            batched = {str(case).partition("#")[0] for requests in mine for case in _fields(requests).values()}
        except (OSError, ValueError, AttributeError, RecursionError, TypeError):
            continue
        for row in rows if isinstance(rows, list) else ():
            with contextlib.suppress(AttributeError, TypeError, ValueError, KeyError):
                if row.get("error"):
                    continue
                saved = float(row.get("saved_usd") or 0) if spent == "usage" else 0.0
                cost = float(row[spent].get("cost_usd") or 0) / (share if str(row["case"]) in batched else 1) + saved
                if 0 <= cost < math.inf and not row[spent].get("no_price"):
                    costs.setdefault(str(row["case"]), []).append(cost)
    return costs


def _judge_forecast(forecasts: Sequence[_Forecast], log_dir: Path, judge: str) -> str:
    """What the judge may cost besides, from what its calls cost per case run in earlier runs."""
    expected = 0.0
    for f in forecasts:
        history = _cost_history(log_dir, f.experiment.name, "judge_usage")
        every = [cost for costs in history.values() for cost in costs]
        if not every:
            return f"judge {judge}: not forecast until a run has asked it; --budget holds each of its calls as it goes"
        expected += sum(every) / len(every) * len(f.experiment.cases) * f.experiment.repeat
    return f"judge {judge}: about {_fmt_cost(expected)} besides, from earlier runs' judge cost per case run"


def _check_credit(
    forecasts: Sequence[_Forecast],
    budget: float | None,
    previous: Mapping[tuple[str, str], Mapping[tuple[str, int], RunResult]] = {},
    cached: bool = False,
) -> _Credit | None:
    """Refuse, before any call, a run its key cannot pay for: the least it costs (its inputs
    alone), or its worst case (or --budget, when less), past what the key has left. A key
    the run will send nothing to (--resume of a finished run) is not asked; with the response
    cache (``cached``) it is asked at the first request the cache does not answer (``_Credit``)."""
    spend: dict[OpenRouter, tuple[float, float | None]] = {}
    for f in forecasts:
        e = f.experiment
        if isinstance(provider := f.experiment.provider, OpenRouter):
            if len(previous.get((_contender_key(e.contender), e.dataset), {})) >= len(e.cases) * e.repeat:
                continue  # every case run finished: nothing is sent
            least, most = spend.get(provider, (0.0, 0.0))
            spend[provider] = (least + (f.least or 0.0), None if most is None or f.worst is None else most + f.worst)
    owed = {
        p: (least, most if budget is None or most is None else min(most, budget)) for p, (least, most) in spend.items()
    }
    if cached:
        return _Credit(owed) if owed else None
    for provider, (least, most) in owed.items():
        if refusal := provider.credit_refusal(least, most):
            raise ConfigError(refusal)
    return None


class _Credit(_Step):
    """--cache: what each OpenRouter key has left is asked at the first call the cache did not
    answer (a run the cache answers whole asks nothing); a key that cannot pay for the run
    (``owed``: the least and most it costs, by provider) stops the run there."""

    blocks = True  # the first call asks the key: the others wait for its answer

    def __init__(self, owed: Mapping[OpenRouter, tuple[float, float | None]]) -> None:
        self.owed, self.lock = dict(owed), threading.Lock()

    def before(self, call: _Call) -> None:
        provider = call.model.provider
        if provider in self.owed:
            with self.lock:  # the others wait for the answer: none is sent before it
                owed = self.owed.pop(provider, None)
                if owed and isinstance(provider, OpenRouter) and (refusal := provider.credit_refusal(*owed)):
                    call.model.stop.set(refusal)
                    call.error = ProviderError(f"{_UNSENT}: {refusal}")


def _forecast_line(forecasts: Sequence[_Forecast], decided: bool = False) -> str:
    """One line: the expected and worst cost of the experiments that have a forecast, and
    how many have none (never counted as $0); ``decided`` (--until-decided): what its first
    round costs, and that the rest is asked only while nothing is decided."""
    import collections

    known = [f for f in forecasts if f.counted]
    runs = sum(len(f.experiment.cases) * f.experiment.repeat - f.done for f in forecasts)
    bases = ", ".join(f"{n} from {b}" for b, n in collections.Counter(f.basis for f in forecasts).items())
    if not known:
        return f"forecast: none: no experiment has a price to count with ({bases})"
    most = _fmt_cost(sum(f.worst or 0 for f in known), up=True) if all(f.worst is not None for f in known) else None
    if all(f.expected is not None for f in known):
        text = f"forecast: {_fmt_cost(sum(f.likely for f in known))} expected" + (f", {most} at most" if most else "")
    else:  # before an answer, the full max_tokens out is a bound, never an expectation
        text = f"forecast: {_fmt_cost(sum(f.likely for f in known))} " + (f"to {most}" if most else "at least")
        text += " (from the inputs alone to the full max_tokens out: no expected figure before a run has answered)"
    done = sum(f.done for f in forecasts)
    text += f", over {_n(runs, 'case run')}{f' left ({done} done)' if done else ''} ({bases})"
    if decided:
        text += (
            f"; --until-decided asks them all only if nothing is decided, from {_fmt_cost(_first_round(known))} a round"
        )
    return text + (f"; {_n(missing, 'experiment')} not counted" if (missing := len(forecasts) - len(known)) else "")


def _batch_forecast(forecasts: Sequence[_Forecast]) -> str:
    """``--batch``: the forecast at each model's batch price, its catalog's ``:batch`` variant
    (the inputs alone at its input price; an expected cost at the dearer of its two ratios),
    beside the one above; where the catalog lists none, at half, said so."""
    total, unlisted = 0.0, []
    for f in forecasts:
        if not f.counted:
            continue
        c = f.experiment.contender
        if (ratios := _batch_ratios(f.experiment.provider, c.model)) is None:
            unlisted.append(c.label)
            total += f.likely / 2
            continue
        total += f.likely * (ratios[0] if f.expected is None else max(ratios))
    if not total and not unlisted:
        return ""
    half = f"; {', '.join(unlisted)} at half its price, its batch price not listed" if unlisted else ""
    return f"as a batch: about {_fmt_cost(total)} of that, at each model's batch price{half}"


def _batch_ratios(provider: Provider, model_id: str) -> list[float] | None:
    """A model's batch prices as shares of its list prices (input, output), from its
    catalog's ``:batch`` variant; None where the catalog lists none."""
    price, batch = _price_of(provider, model_id), _price_of(provider, f"{model_id}:batch")
    if price is None or batch is None:
        return None
    return [b / p if p else 1.0 for p, b in zip(price[:2], batch[:2], strict=True)]


def _first_round(forecasts: Iterable[_Forecast]) -> float:
    """What a round of --until-decided is forecast to cost: a tenth of each experiment's case
    runs, rounded up (the least that can decide anything)."""
    rounds = ((f, len(f.experiment.cases) * f.experiment.repeat) for f in forecasts)
    return sum(f.likely * math.ceil(n / LOOKS) / n for f, n in rounds if n)


def _decider_reach(experiments: Sequence[Experiment]) -> str:
    """--until-decided, said before a run: the gap from which it stops early on average, for each
    dataset the one a paired test over all its cases finds 9 times in 10 at the widest spread of
    0/1 scores (both at 50%); there it asked 68-72% of the cases in simulation
    (``tests/benchmark_decide.py``), at narrower spreads fewer; at smaller gaps, nearly all."""
    from statistics import NormalDist

    contenders: dict[str, list[Experiment]] = {}
    for e in experiments:
        contenders.setdefault(e.dataset, []).append(e)
    gaps = []
    for dataset, group in contenders.items():
        z = NormalDist().inv_cdf(1 - ALPHA / (2 * max(len(group) - 1, 1))) + NormalDist().inv_cdf(0.9)
        gaps.append(f"[{dataset}] {z * math.sqrt(0.5 / max(len(group[0].cases), 1)) * 100:.0f} points")
    return (
        f"--until-decided stops early on gaps of about {', '.join(gaps)} or more between contenders (what one "
        "test over every case finds 9 times in 10), asking about 70% of the cases or fewer; on smaller gaps it "
        "asks nearly every case"
    )


def _within_budget(
    forecasts: list[_Forecast], limit: float, refused: list[str], decided: bool = False
) -> tuple[list[_Forecast], _Budget]:
    """``--budget``: a contender whose cost cannot be counted (no price, no max_tokens) is
    refused by name (added to ``refused``); a run whose forecast passes the limit is refused
    before any call (``decided``, --until-decided: one whose first round does; the budget
    stops it where it reaches the limit, and --resume continues its rounds). The forecasts
    kept, and the budget their experiments share."""
    keep = []
    for f in forecasts:
        c, provider = f.experiment.contender, f.experiment.provider
        price = _price_of(provider, c.model)
        why = "no price" if price is None else "no max_tokens" if c.max_tokens is None and price[1] else ""
        if why:
            refusal = (
                f"{c.label} refused: --budget cannot count what it spends ({why}; set max_tokens, or leave it out)"
            )
            if refusal not in refused:
                refused.append(refusal)
                _warn(refusal)
            continue
        keep.append(f)
        if price == (0.0, 0.0, 0.0):  # free, or a catalog that does not know: what it costs is learned
            _warn(
                f"{c.label}: its catalog price is $0, so the forecast cannot count it; under --budget its first "
                "call is asked alone and the calls after it hold what that one cost per token"
            )
    if not keep:
        raise ConfigError("nothing to run: --budget refused every contender (see the warnings above)")
    if (_first_round(keep) if decided else sum(f.likely for f in keep)) > limit:
        raise ConfigError(
            f"--budget {_fmt_cost(limit)}: the {_forecast_line(keep, decided)}; raise --budget, or ask fewer "
            "cases or contenders (-d, -c, -m)"
        )
    return keep, _Budget(limit)


# ═══════════════════════════════════════════════════════════════════════════════
# The runner: one experiment per contender × dataset, on the tool's own threads
# ═══════════════════════════════════════════════════════════════════════════════


def _run_case(
    suite: _Suite,
    experiment: Experiment,
    place: int,
    metric_names: frozenset[str],
    model: Model,
    started: float,
    judge: Model | None = None,
) -> RunResult:
    """Read, run and score one case. An exception is an error; a ``Reply.error`` is a 0.
    ``judge``: the model a scorer's ``Judge`` asks, with a ledger of its own."""
    case = experiment.cases[place]
    reply = score = error = trace = None
    try:
        if isinstance(experiment.cases, _Cases) and (unreadable := experiment.cases.unreadable.get(place)):
            raise SuiteError(unreadable)  # never sent with an empty input
        answer = suite.adapter.call(case, model)
        if not isinstance(answer, Reply) and inspect.isawaitable(answer):  # isawaitable: ABC checks, slow
            answer = _awaited(answer)
        reply = _check_reply(suite.adapter, answer, model)
        score = _score(suite, case, reply, metric_names, judge)
    except _Deferred:  # --batch: it runs again once its batch has answered
        pass
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        error, trace = _describe(e)
        _stop_if_fatal(e, model.stop, experiment)
    result = _result(experiment, case, model, time.perf_counter() - started, reply, score, error, trace)
    if judge is None:
        return result
    # a tracker's judge spans, named with the judge's own provider
    judged = tuple(
        {**call, "judge": judge.id, "provider": judge.provider.name} for call in judge.ledger.exchanges or ()
    )
    chances = {}
    if score is not None and len(judge.ledger.chances) == 1:  # one verdict: the judged metrics that report it
        ((verdict, chance),) = judge.ledger.chances
        chances = {m.name: chance for m in suite.metrics if m.judged and score.metrics.get(m.name) == verdict}
    return dataclasses.replace(
        result, judge_usage=judge.ledger.usage, exchanges=result.exchanges + judged, chances=chances
    )


def _result(
    experiment: Experiment,
    case: Case,
    model: Model,
    duration: float,
    reply: Reply | None = None,
    score: Score | None = None,
    error: str | None = None,
    trace: str | None = None,
) -> RunResult:
    """A finished case: its spend is what went through ``model``, else what the reply reports."""
    ledger = model.ledger
    usage = (
        ledger.usage if ledger.calls or ledger.usage.cost_usd else (reply.usage if reply and reply.usage else _NOTHING)
    )
    transcript = reply.transcript if reply is not None and reply.transcript is not None else ledger.transcript
    return RunResult(
        experiment,
        case,
        reply,
        score,
        duration,
        error,
        usage,
        trace,
        ledger.retries,
        ledger.repeat,
        ledger.hits,
        ledger.saved,
        ledger.calls,
        ledger.finish_reason,
        transcript,
        time.time(),
        tuple(ledger.exchanges or ()),
        tuple(ledger.served),
        (ledger.replayed[0], ledger.replayed[1]),
    )


def _stop_if_fatal(error: BaseException, stop: _Stop, experiment: Experiment | None = None) -> None:
    """A failure that every case would share stops the run (a refused key, a server that is
    not there) or its contender (a model the server does not have)."""
    if getattr(error, "stops_run", False):
        stop.set(_redact(str(error)))
    elif getattr(error, "stops_contender", False) and experiment is not None and not experiment.halted:
        experiment.halted = _redact(str(error))


def _check_reply(adapter: object, answer: object, model: Model) -> Reply:
    if not isinstance(answer, Reply):
        raise SuiteError(f"adapter {type(adapter).__name__}.call returned {type(answer).__name__}, not a Reply")
    transcript = answer.transcript
    if transcript is not None and (
        not isinstance(transcript, list | tuple) or not all(isinstance(m, Mapping) for m in transcript)
    ):
        raise SuiteError(
            f"adapter {type(adapter).__name__}.call returned a Reply whose transcript is "
            f"{type(transcript).__name__}, not a list of messages (dicts with a role)"
        )
    ledger = model.ledger
    if answer.error is not None and ledger.empty:  # why the adapter found nothing in it
        answer = dataclasses.replace(answer, error=f"{answer.error} ({ledger.empty})")
    if answer.transcript is None and ledger.transcript is not None:
        # a conversation the adapter did not return: the last one sent, with its answer
        return dataclasses.replace(answer, transcript=ledger.transcript)
    return answer


def _score(suite: _Suite, case: Case, reply: Reply, metric_names: frozenset[str], judge: Model | None = None) -> Score:
    """The scorer's verdict on a reply; the model's own failure (``Reply.error``) is a 0. The
    run's ``judge`` model reaches the scorer in its context (``context["judge"]``), as the
    adapter's model reaches the adapter: a ``Judge`` called from any thread or loop finds it."""
    if reply.error is not None:
        return Score(value=0.0, metrics={name: 0.0 for name in metric_names})
    context = suite.adapter.context(case)
    if not isinstance(context, dict | Mapping):
        raise SuiteError(f"adapter {type(suite.adapter).__name__}.context() returned {_shown(context)}, not a dict")
    score = suite.scorer.call(case, reply, {**context, "judge": judge} if judge is not None else context)
    if not isinstance(score, Score) and inspect.isawaitable(score):  # an async def call, as an adapter's may be
        score = _awaited(score)
    _check_score(suite.scorer, case, score, metric_names)
    return score


def _check_score(scorer: object, case: Case, score: object, metric_names: frozenset[str]) -> None:
    name = type(scorer).__name__
    if not isinstance(score, Score):
        raise SuiteError(f"scorer {name} returned {type(score).__name__} for {case.key}, not a Score")
    if not isinstance(score.value, int | float) or not 0.0 <= score.value <= 1.0:
        raise SuiteError(f"scorer {name} gave {case.key} the value {score.value!r}, outside 0..1")
    undeclared = set(score.metrics) - metric_names
    if undeclared:
        raise SuiteError(f"scorer {name} reported undeclared metric {', '.join(sorted(undeclared))} for {case.key}")
    for metric, value in score.metrics.items():
        if value is not None and (not isinstance(value, int | float) or not 0.0 <= value <= 1.0):
            raise SuiteError(f"scorer {name} gave {case.key} {metric}={value!r}, outside 0..1")


_THREAD = threading.local()  # a worker thread's own event loop, made for its first async case


def _awaited(answer: Any) -> object:
    """What an ``async def call`` answers, awaited on an event loop its worker thread owns:
    a suite that blocks that loop holds one worker, never the run."""
    if (loop := getattr(_THREAD, "loop", None)) is None:
        import asyncio

        loop = _THREAD.loop = asyncio.new_event_loop()
    return loop.run_until_complete(answer)


class _Owner:
    """A worker thread that runs cases. When a case it runs outlives ``--case-timeout`` it
    is orphaned (it takes no further case and its late answer is dropped) and a new one
    takes its place, so a hung suite never holds a run."""

    __slots__ = ("orphaned",)

    def __init__(self) -> None:
        self.orphaned = False


# A server's answer that may be the same for every case (a status other than a rate limit, or none in time)
_REPEATS = re.compile(r": (HTTP (?!429)[45]\d\d\b|TimeoutError: |Timeout: )")


class _Batching:
    """``--batch``, for one run of one case: the calls it put off for the next batch
    (``asked``: custom id, request, its budget hold, the model asked: the contender's, or the
    judge's), the batch answers it took (``used``), and how often it asked each request so far."""

    __slots__ = ("asked", "counts", "used")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.asked: list[tuple[str, dict[str, object], _Hold | None, Model]] = []
        self.used: set[str] = set()


# a case run put off for the next batch: its model and the calls it put off (custom id, request, hold, model)
_Waiting = tuple[Model, list[tuple[str, dict[str, object], _Hold | None, Model]]]


@dataclass(frozen=True, slots=True)
class _Round:
    """What one batch round decided, for the runner to apply: the case runs to run again, each
    with the custom ids its batch answered, whether it collected --resume's batches (then the
    cases left are asked), why its contender is asked no more, and why the run stops. The
    batches it sent reach the runner as each goes (``_Batch.logs``): a run abandoned meanwhile
    still logs them."""

    replay: Mapping[int, frozenset[str]] = field(default_factory=dict)
    earlier: bool = False
    halted: str = ""
    stop: str = ""


class _Batch(_Step):
    """``--batch`` for one experiment: the answers its batches gave (by custom id), what each
    request's batches left unanswered, and --resume's batches to collect. A round goes once
    no case of the experiment is in flight: the runner hands it the case runs put off with
    what each asked, their requests are one batch (one model), the batch's id goes to the
    journal, the thread waits for it, and the case runs run again, finding their answers; an
    agent's next turn is the next round's. It never sees the runner: it answers what the
    runner asks (``put_off``, ``due``, ``go``) with decisions the runner applies, and never
    stops the run itself (a round says why it should)."""

    GATHER = 0.1  # seconds a call put off waits before its case steps aside, for the calls made beside it

    def __init__(
        self,
        fallback: str | None,
        earlier: Sequence[Mapping[str, object]],
        budget: _Budget | None,
        uses: tuple[_Stop, Callable[[str], None], Callable[[], int], Callable[[str], None], Callable[[dict], None]],
        where: tuple[str, str],
    ) -> None:
        self.budget = budget
        # what asks again what a batch left unanswered: "batch" or "sync"; None: no --batch, and this
        # batch, never a step of a call, never holds a case
        self.fallback = fallback
        # the run's stop (watched while a batch runs), what says a line on the progress, the next batch's
        # number, what writes its journal, and what logs each batch sent as it goes
        self.stop, self.say, self.number, self.write, self.logs = uses
        self.dataset, self.label = where  # whose batches: the dataset and the contender's label
        self.answers: dict[str, object] = {}
        self.sync: set[str] = set()  # custom ids asked now, one by one (--batch-fallback sync)
        self.tries: dict[str, int] = {}  # custom id -> the batches that left it unanswered
        self.earlier = earlier  # --resume: the batches to collect first (each has an id and its requests)
        self.rounds = 0

    def takes(self, provider: Provider) -> bool:
        """A judge's calls join the case run's batches where its provider batches (else they go at once)."""
        return self.fallback is not None and provider.batches

    def before(self, call: _Call) -> None:
        """The answer a batch gave this call (paid for, and settled with the budget, when the
        batch was collected). Else, unless it is asked now (--batch-fallback sync), it holds
        its worst case and waits for the next batch, and its case is put off (``_Deferred``).
        A custom id hashes the case run, the request and how often the case run asked the
        same before, so the case's next run and --resume find each answer again."""
        import hashlib

        ledger = call.model.ledger
        mine = ledger.notes.setdefault(self, _Batching())
        text = _json_dumps(call.request)
        seen = mine.counts[text] = mine.counts.get(text, -1) + 1
        custom = call.custom = hashlib.sha256(f"{ledger.case}\n{seen}\n{text}".encode()).hexdigest()[:32]
        if (found := self.answers.get(custom)) is None:
            if custom not in self.sync and self.fallback is not None:  # without --batch: asked now
                hold = None if self.budget is None else self.budget.begin(call.model, call.request)
                mine.asked.append((custom, call.request, hold, call.model))
                call.model.stop.wait(self.GATHER)  # the calls made beside it (threads, gather) join its round
                raise _Deferred(custom)
            return
        mine.used.add(custom)
        call.origin = "batch"
        if isinstance(found, Completion):
            call.answer = found
        else:
            call.error = ProviderError(str(found))

    def due(self) -> bool:
        """A round is wanted for its own sake: --resume's batches to collect."""
        return bool(self.earlier)

    def put_off(self, model: Model, result: RunResult, fresh: Collection[str]) -> RunResult | _Waiting:
        """A case run that asked for the next batch waits for it: its model and the calls it put
        off, for the runner to hand back with the round. One that ran again with its last batch's
        answers (``fresh``) and took none of them, asking something else instead, ends as that
        error: its requests differ from run to run, which --batch cannot answer."""
        if (mine := model.ledger.notes.get(self)) is None or not mine.asked:
            return result
        if not fresh or not mine.used.isdisjoint(fresh):
            return model, mine.asked
        for custom in fresh:  # paid for all the same
            if isinstance(answer := self.answers.get(custom), Completion):
                model.ledger.note_spent(answer.usage)
        for _, _, hold, asked in mine.asked:
            if hold is not None and self.budget is not None:
                self.budget.end(hold, asked, None)
        error = (
            "SuiteError: the case asked the model something else when it ran again with its batch's answer "
            "(a time, an id or a random choice in the prompt?): --batch runs a case once per round of calls "
            "and needs the same requests each time; run it without --batch"
        )
        return dataclasses.replace(result, error=error, usage=model.usage, reply=None, score=None, traceback=None)

    def go(self, waiting: Mapping[int, _Waiting], contender: Model, judge: Model | None) -> _Round:
        """The round the runner found due (on a thread of its own): --resume's batches collected,
        or the case runs ``waiting`` sent as the next batch, waited for and taken; what came of it.
        A failure of the harness's own stops the run (and --resume collects the batch)."""
        earlier = bool(self.earlier)
        try:
            return self.collect_earlier(contender, judge) if earlier else self.send(waiting)
        except BaseException as e:
            return _Round(earlier=earlier, stop=f"batch [{self.dataset}] {self.label}: {_describe(e)[0]}")

    def send(self, waiting: Mapping[int, _Waiting]) -> _Round:
        """One round: send, wait, take the answers; the case runs to run again (none when the
        run stopped meanwhile: the batch goes on at the provider, and --resume collects it)."""
        # in case order, whichever thread put each case off first: the same batch for the same run
        waiting = dict(sorted(waiting.items()))
        asked = {c: (model, request, hold) for _, calls in waiting.values() for c, request, hold, model in calls}
        cases = {custom: model.ledger.case for model, calls in waiting.values() for custom, *_ in calls}
        self.rounds += 1
        sent: list[tuple[list[str], str | BatchState | None, Model]] = []
        stop = halted = ""
        for part in self.pieces(asked):  # one model each, within its provider's limits, journaled before it goes
            requests, model = {custom: cases[custom] for custom in part}, asked[part[0]][0]
            # a judge's batch says so: --resume collects it from the judge's provider
            head = {"round": self.rounds, "requests": requests} | ({"judge": model.id} if model.ledger.judge else {})
            self.write(_json_dumps({"batch": head}) + "\n")
            try:
                sent.append((part, model.provider.submit(model, [(c, asked[c][1]) for c in part]), model))
            except ProviderError as e:  # refused: said in the journal, so --resume knows nothing is running
                why = _redact(str(e))
                stop = stop or (why if e.stops_run else "")  # a refused key: the run stops with this round
                unsure = str(e).startswith((_UNSURE, _UNSENT))  # maybe taken, or not sent: its cases are not run
                failed = head | {"failed": why}
                sent.append((part, None if unsure else BatchState("failed", error=why), model))
                self.write(_json_dumps({"batch": failed}) + "\n")
                self.logs(failed)  # logged: --resume names what was lost
                continue
            record: dict[str, object] = {"id": sent[-1][1], **head}
            self.write(_json_dumps({"batch": record}) + "\n")
            self.logs(record)
        stopped = bool(stop)
        for part, batch, model in sent:  # the run stops: the holds of every part are let go, the batches run on
            state = (
                None
                if stopped or batch is None
                else batch
                if isinstance(batch, BatchState)
                else self.wait(model, batch, len(part))
            )
            stop, state = (state, None) if isinstance(state, str) else (stop, state)
            halted = self.settle(state, {custom: asked[custom] for custom in part}) or halted
            stopped = stopped or state is None
        if stopped:
            return _Round(halted=halted, stop=stop)
        replay = {unit: frozenset(c for c, *_ in calls if c in self.answers) for unit, (_, calls) in waiting.items()}
        return _Round(replay, halted=halted)

    @staticmethod
    def pieces(asked: Mapping[str, tuple[Model, dict[str, object], _Hold | None]]) -> list[list[str]]:
        """A round's requests in batches: one model each (the contender's, the judge's), at most
        its provider's ``batch_most`` requests and ``batch_bytes`` bytes (OpenRouter's 5,000 and 200 MB)."""
        by_model: dict[tuple[str, bool], list[str]] = {}
        for custom, (model, _, _) in asked.items():
            by_model.setdefault((model.id, model.ledger.judge), []).append(custom)
        batches: list[list[str]] = []
        for group in by_model.values():
            size, provider = 0, asked[group[0]][0].provider
            batches.append([])
            for custom in group:
                # the body as sent, in UTF-8 bytes, with its model, settings and custom id
                weight = len(_json_dumps(asked[custom][1]).encode("utf-8", "surrogatepass")) + 256
                if batches[-1] and (len(batches[-1]) >= provider.batch_most or size + weight > provider.batch_bytes):
                    batches.append([])
                    size = 0
                batches[-1].append(custom)
                size += weight
        return batches

    def collect_earlier(self, contender: Model, judge: Model | None) -> _Round:
        """--resume: the batches the run it continues sent, collected (never sent again); a
        judge's from the judge's provider."""
        earlier, self.earlier, halted = self.earlier, (), ""
        for record in earlier:
            self.write(_json_dumps({"batch": record}) + "\n")
            self.logs(dict(record))
            requests = _fields(record.get("requests"))
            model = judge if record.get("judge") else contender
            if model is None or model.id != record.get("judge", model.id):
                why = f"batch {record['id']} asked judge {record['judge']}; name it with --judge to collect it"
                return _Round(earlier=True, halted=halted, stop=f"--resume: {why}")
            state = self.wait(model, str(record["id"]), len(requests))
            if not isinstance(state, BatchState):
                return _Round(earlier=True, halted=halted, stop=state or "")
            halted = self.settle(state, {custom: (model, {}, None) for custom in requests}) or halted
        return _Round(earlier=True, halted=halted)

    def wait(self, model: Model, batch_id: str, size: int) -> BatchState | str | None:
        """Look at the batch until it ends, saying how it stands as it changes; None when the run
        stops, why it should when the provider keeps failing to say."""
        first = _seconds_env("AGENT_EVALS_BATCH_POLL", 10.0)
        whose = f"judge {model.id} of {self.label}" if model.ledger.judge else self.label
        label = f"batch {self.number()} [{self.dataset}] {whose} ({batch_id}, {_n(size, 'request')})"
        interval, failures, shown = first, 0, ""
        while not self.stop.event.wait(interval):
            interval = min(interval * 1.5, max(first, 60.0))
            try:
                state = model.provider.collect(model, batch_id)
            except ProviderError as e:
                failures += 1
                if e.stops_run or failures >= 5:
                    return f"{label}: {_redact(str(e))}; it goes on at the provider: --resume collects it"
                continue
            failures = 0
            if (
                line := f"{label}: {state.status.replace('_', ' ')}, {state.done:,} of {state.total or size:,} done"
            ) != shown:
                self.say(shown := line)
            if state.results is not None:
                return state
        self.say(f"{label}: it goes on at the provider; --resume --batch collects it, sending nothing twice")
        return None

    def settle(self, state: BatchState | None, asked: Mapping[str, tuple[Model, object, _Hold | None]]) -> str:
        """Take a batch's answers; what it left unanswered is asked again (the next batch, or
        now with --batch-fallback sync); a batch refused as a whole stops its contender (why,
        returned). None: the run stopped while it waited, and only the holds are let go."""
        results, budget, gone = (state.results or {}) if state else {}, self.budget, []
        failed = state is not None and state.status == "failed" and not results  # refused as a whole
        refused = f"the batch was refused: {state.error or 'failed'}" if state and failed else ""
        for custom, (model, _, hold) in asked.items():
            answer = results.get(custom)
            if answer is None and refused and self.fallback == "batch":
                answer = ProviderError(f"{model.id}: {refused}")
            if answer is not None:
                self.answers[custom] = answer
            else:
                gone.append(custom)
            if hold is not None and budget is not None:
                budget.end(hold, model, answer.usage if isinstance(answer, Completion) else None)
        if state is None:
            return ""
        for custom in gone:
            self.tries[custom] = self.tries.get(custom, 0) + 1
            if self.fallback != "batch":
                self.sync.add(custom)
            elif self.tries[custom] >= 2:
                self.answers[custom] = ProviderError(f"two batches ended without answering it ({state.status})")
        if gone:
            then = {"batch": "in the next batch, once", "sync": "now, one by one (--batch-fallback sync)"}.get(
                str(self.fallback), "now, one by one"
            )
            why = f": {state.error}" if state.error else ""
            self.say(
                f"batch [{self.dataset}] {self.label}: {state.status}{why}; "
                f"{_n(len(gone), 'request')} of {len(asked)} unanswered are asked again {then}"
            )
        return (
            f"{refused} (ask it without --batch, or --batch-fallback sync)"
            if refused and self.fallback == "batch"
            else ""
        )


# A case run's states in its experiment's table (_ExperimentRun.state), which _move alone changes:
# waiting to be asked, running on a thread, put off for the next batch round, replaying with its
# round's answers, done (a row), and at the end, never asked: decided (--until-decided) or stopped.
_WAITING, _RUNNING, _PUT_OFF, _REPLAYING, _DONE = "waiting", "running", "put off", "replaying", "done"
_DECIDED, _STOPPED = "decided", "stopped"
# a case run's legal moves: a thread takes it (waiting, or replaying its round's answers); it ends, is put off
# for a batch round, or is handed back not run (the budget stopped it before it spent); at the run's end what
# is not done is decided or stopped
_MOVES = frozenset(
    {(_WAITING, _RUNNING), (_REPLAYING, _RUNNING), (_RUNNING, _DONE), (_RUNNING, _PUT_OFF), (_RUNNING, _WAITING)}
    | {(_PUT_OFF, _REPLAYING)}
    | {(state, end) for state in (_WAITING, _RUNNING, _PUT_OFF, _REPLAYING) for end in (_DECIDED, _STOPPED)}
)


class _ExperimentRun:
    """One experiment in flight: ``parallelism`` daemon threads take the next case until
    none is left or the run stops. Each finished case goes to the journal at once (so a
    kill loses nothing that finished), and whoever finishes a case records, in case
    order, every finished case not yet recorded; no futures, no queue, no idle consumer.
    The run's main thread watches the cases in flight (``watch``): one past the case
    timeout becomes that case's error row, and its thread is replaced.

    Each case run is in one state of its table (``state``), moved on by ``_move``; what
    the experiment needs of the main thread next is read off that table (a running case
    run's flight is in ``inflight``) and its threads in one place (``next_step``).
    """

    def __init__(
        self, run: _Session, experiment: Experiment, decider: _Decider | None = None, rivals: Sequence[Experiment] = ()
    ) -> None:
        import itertools

        self.run, self.experiment = run, experiment
        # a run of a case is a unit, in case order: unit i is case i // repeat, repeat i % repeat;
        # the case itself is read when a worker takes it
        self.repeat = experiment.repeat
        ids = _ids(experiment.cases)
        self.ids = ids
        size = len(ids) * self.repeat
        self.results: list[RunResult | None] = [None] * size
        # the finished cases of an earlier run that --resume keeps
        key = (_contender_key(experiment.contender), experiment.dataset)
        if previous := run.previous.get(key):
            for i in range(size):
                if (p := previous.get((ids[i // self.repeat], i % self.repeat))) is not None:
                    self.results[i] = dataclasses.replace(p, experiment=experiment)
        self.todo = [i for i, result in enumerate(self.results) if result is None]
        self.state = [_WAITING if result is None else _DONE for result in self.results]
        # --until-decided: its dataset's decider releases its cases round by round, and its verdicts
        # on the contenders (``rivals``, the dataset's experiments, this one at ``seat``) are applied here
        self.decider, self.rivals, self.seat = decider, rivals, rivals.index(experiment) if decider else 0
        if decider is not None:
            self.todo, verdicts = decider.join(self.seat, self.results)
            self._apply(verdicts)
        self.answered = False  # a case of it got an answer: its 400s are the cases', not the contender's
        self.refused: dict[str, int] = {}
        self.claim = itertools.count().__next__  # atomic under the GIL
        self.recorded = 0
        self.closed = False
        self.active = 0  # threads taking its cases
        self.wanted = 0  # threads to start (resume): for its cases, or for what its batch answered
        self.queued = False  # handed to the main thread, which does what it needs next (advance)
        self.started = time.perf_counter()
        # a running case run -> (when it started, its model, the owner running it, the case's place)
        self.inflight: dict[int, tuple[float, Model, _Owner, int]] = {}
        # each finished run's row as JSON: appended to the journal, then reused by the log
        self.lines: list[str | None] = [None if r is None else _log_line(r)[1] for r in self.results]
        self.journal = run.open_journal(experiment)
        run.journal_write(self.journal, "".join(f"{line}\n" for line in self.lines if line))
        self.blocked = 0  # threads waiting for --until-decided's next round: idle, as far as a batch goes
        earlier = run.earlier_batches.get(key, ())  # --resume collects the batches a run sent, --batch or not
        from functools import partial

        uses = (run.stop, run.progress.say, run.number, partial(run.journal_write, self.journal), self._sent)
        # without --batch or batches to collect: one that is never a step, and never holds a case
        self.batch = _Batch(run.batch, earlier, run.budget, uses, (experiment.dataset, experiment.contender.label))
        self.sending = False  # a batch round is at the provider, on a thread of its own
        self.waiting: dict[int, _Waiting] = {}  # the case runs put off, with what each asked of the next round
        self.fresh: dict[int, frozenset[str]] = {}  # a replaying case run's answers, from its round
        self.replays: list[int] = []  # the replaying case runs, to run first: they hold their round's answers
        # what each model call walks: the response cache, the key's credit, the batch, the budget
        steps = (run.cache, run.credit, (run.batch or earlier) and self.batch, run.budget)
        self.steps = tuple(s for s in steps if s)

    def start(self) -> None:
        # the cases it will ask, read before its threads start (among -p threads, each file's system calls
        # hand the GIL round: a quarter of the run's CPU at 2,000 cases and -p 64), for READ_FIRST s at
        # most: a slow disk's rest is read on a thread while the first cases are asked
        if isinstance(cases := self.experiment.cases, _Cases):
            places = dict.fromkeys(i // self.repeat for i in self.todo)
            if rest := cases.read(places, time.monotonic() + READ_FIRST):
                threading.Thread(target=cases.read, args=(rest,), name="cases", daemon=True).start()
        self.experiment.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.experiment.began = time.monotonic()
        for tracker in self.run.trackers:
            with self.run.lock:
                self.run.call(tracker, "start", self.experiment)
        if not self.batch.due():  # --resume: first, the batches it sent, collected
            self.wanted = min(self.experiment.parallelism, len(self.todo))
        self.resume()

    def _spawn(self, owner: _Owner, gate: threading.Event | None = None) -> None:
        """Start a thread for ``owner``. A system that refuses one more thread (-p and -j
        past its limit) stops the run with that said; the threads already running finish."""
        try:
            threading.Thread(target=self._work, args=(owner, gate), name="case", daemon=True).start()
        except RuntimeError as e:  # "can't start new thread"
            self.run.stop.set(f"the system refused another thread ({e}); lower -p or -j")
            self._done(owner)

    def _next(self, owner: _Owner) -> int | None:
        """The next unit to run, or None when none is left for this owner."""
        if owner.orphaned or self.closed or self.run.stop.event.is_set():
            return None
        if self.replays:
            with contextlib.suppress(IndexError):  # another thread took the last
                return self.replays.pop()
        if self.experiment.halted:
            return None
        k = self.claim()
        if k >= len(self.todo) or (self.decider is not None and not self._admitted(self.decider, self.todo[k])):
            return None
        return self.todo[k]

    def _admitted(self, decider: _Decider, unit: int) -> bool:
        with self.run.lock:  # a thread waiting for the next round is idle: the batch need not wait for it
            self.blocked += 1
            self._settle()
        try:
            return decider.admits(self.seat, unit)
        finally:
            with self.run.lock:
                self.blocked -= 1

    def _move(self, unit: int, to: str, *since: str) -> bool:
        """The one place a case run changes state, a compare-and-set: to ``to`` if it is in one
        of the states ``since`` (any, when none is named), whether it moved. A move not in
        ``_MOVES`` is a bug, and raises. The lock is held but where its own thread starts it
        running (a running one's flight is in ``inflight``, put there after)."""
        if since and self.state[unit] not in since:
            return False  # another got there first: a timeout before the answer, the run's end
        if (self.state[unit], to) not in _MOVES:
            raise AssertionError(f"case run {unit}: no move from {self.state[unit]} to {to}")
        self.state[unit] = to
        return True

    def _apply(self, verdicts: Iterable[tuple[int, str]]) -> None:
        """--until-decided's verdicts: the contenders shown below the top, and the top, are decided."""
        for seat, why in verdicts:
            self.rivals[seat].decided = why

    def judge_model(self, case: _Ledger) -> Model | None:
        """The run's judge model for one case run: a ledger of its own (its spend is shown
        apart) and every step of the contenders' calls. With --batch its calls join the case
        run's (the judge's batches are its own) where its provider batches, else go at once."""
        if self.run.judge is None:
            return None
        model_id, provider = self.run.judge
        steps = tuple(s for s in self.steps if s is not self.batch or self.batch.takes(provider))
        # its spend apart, its batch notes the case run's: its calls join the case run's rounds
        ledger = _Ledger(case.case, case.repeat, case.exchanges is not None, judge=True, notes=case.notes)
        return Model(
            model_id,
            provider,
            temperature=0.0,
            max_tokens=JUDGE_MAX_TOKENS,
            stop=self.run.stop,
            steps=steps,
            ledger=ledger,
            pace=self.run.pace,
        )

    def _begin(self, i: int, owner: _Owner) -> tuple[int, Model, float]:
        """The case's place, its model and its start; the case is in flight from here."""
        # a tracker that shows each model call gets them from the ledger
        ledger = _Ledger(f"{self.ids[i // self.repeat]}#{i % self.repeat}", i % self.repeat, bool(self.run.couriers))
        model = self.experiment.model(ledger, self.steps, self.run.stop, self.run.pace)
        self._move(i, _RUNNING, _WAITING, _REPLAYING)
        self.inflight[i] = (time.monotonic(), model, owner, i // self.repeat)
        return i // self.repeat, model, time.perf_counter()

    def _work(self, owner: _Owner, gate: threading.Event | None) -> None:
        if gate is not None:
            gate.wait()
        run = self.run
        try:
            while (i := self._next(owner)) is not None:
                place, model, started = self._begin(i, owner)
                try:
                    with self._within(place, model.ledger.repeat) if run.live else contextlib.nullcontext():
                        judge = self.judge_model(model.ledger)
                        result = _run_case(run.suite, self.experiment, place, run.metric_names, model, started, judge)
                except BaseException as e:  # the harness's own failure: still that case's row
                    took = time.perf_counter() - started
                    result = _result(self.experiment, self._case(place), model, took, None, None, *_describe(e))
                fresh = self.fresh.pop(i, frozenset()) if self.fresh else frozenset()  # a replay's answers (atomic)
                if not isinstance(ended := self.batch.put_off(model, result, fresh), RunResult):
                    with run.lock:  # a case run that timed out meanwhile goes too: its holds end with the round
                        self.inflight.pop(i, None)
                        self.waiting[i] = ended
                        self._move(i, _PUT_OFF, _RUNNING)
                    continue  # it waits for the next batch
                result = ended
                if model.ledger.waits:
                    with run.lock:
                        self.experiment.waits += model.ledger.waits
                line = self._store(i, result)
                if line is None:
                    return  # closed, or the case timed out and another thread took this one's place
                run.journal_write(self.journal, f"{line}\n")
        finally:  # whatever happens, the experiment learns that this thread is done
            if (loop := _THREAD.__dict__.pop("loop", None)) is not None:
                loop.close()
            self._done(owner)

    def _within(self, place: int, repeat: int) -> contextlib.ExitStack:
        """The trackers' contexts a case runs in (``Tracker.begin``); one that fails is switched off."""
        stack = contextlib.ExitStack()
        for tracker in self.run.live:
            try:
                if tracker not in self.run.failed:
                    stack.enter_context(tracker.begin(self.experiment, self.experiment.cases[place], repeat))
            except _SUITE_EXCEPTIONS as e:
                _reraise_ctrl_c(e)
                self.run.failed.setdefault(tracker, f"tracker {tracker.name}: begin raised {_describe(e)[0]}")
        return stack

    def _case(self, place: int) -> Case:
        """The case at ``place`` if it was read, else its name alone (never waits on a read)."""
        cases = self.experiment.cases
        if isinstance(cases, _Cases):
            return cases.peek(place)
        return cases[place]

    def _store(self, i: int, result: RunResult) -> str | None:
        """Store and record a finished case; its log row, or None when it is no longer
        wanted (the experiment is closed, or the case was given up on as timed out)."""
        run = self.run
        # a case the budget stopped before it spent anything was not asked: never an error, never in a
        # ranking; it is left out (as not run) and --resume asks it
        unasked = str(result.error).startswith(_NOT_RUN) and not result.usage.cost_usd
        result, line = _log_line(result)  # outside the lock: other threads go on
        with run.lock:
            self.inflight.pop(i, None)
            kept = not unasked and self._keep(i, result, line)
            if unasked:
                self._move(i, _WAITING, _RUNNING)  # not run: --resume asks it
            self._settle()
        return line if kept else None

    def _keep(self, i: int, result: RunResult, line: str) -> bool:
        """A finished case run's row, counted and recorded (the caller holds the lock); False
        when it is no longer running (it timed out and its row is kept, or the run was written). A
        contender whose first three cases fail with the same provider error and none answered
        is stopped, not asked the same way for every case: a 400 for what it sends (an effort
        its server does not take), a server that answers 500 to all (a model that cannot
        load) or never answers (timeouts). A rate limit is the key's, not the contender's."""
        if not self._move(i, _DONE, _RUNNING):
            return False
        self.results[i], self.lines[i] = result, line
        self.run.progress.add(result)
        self._record()
        error = result.error
        if error is None:
            self.answered = True
        elif not self.answered and error.startswith("ProviderError: ") and _REPEATS.search(error):
            seen = self.refused[error] = self.refused.get(error, 0) + 1
            if seen >= 3 and not self.experiment.halted:
                fix = "check what it sends" if ": HTTP 400: " in error else "check the server and its log"
                self.experiment.halted = f"{_redact(error)} (its first {seen} cases alike: {fix})"
        if self.decider is not None:
            self._apply(self.decider.update(self.seat, i, result, bool(self.experiment.halted)))
        return True

    def watch(self, now: float) -> None:
        """Give up on every case in flight past the case timeout: it becomes an error row
        with what it spent so far, and a new thread takes the place of the one it held."""
        with self.run.lock:
            self._settle()  # a run stopped meanwhile no longer waits on a case a stuck thread holds
        limit = self.run.case_timeout
        if not limit or self.closed:
            return
        for i, (began, model, owner, place) in list(self.inflight.items()):
            if now - began <= limit:
                continue
            error = f"CaseTimeout: timed out after {limit:g} s (--case-timeout); the adapter or scorer never returned"
            result, line = _log_line(_result(self.experiment, self._case(place), model, now - began, error=error))
            with self.run.lock:
                flight = self.inflight.get(i)
                if flight is None or flight[2] is not owner or self.closed:
                    continue
                del self.inflight[i]
                replace, owner.orphaned = not owner.orphaned, True
                self._keep(i, result, line)
                self._settle()
            self.run.journal_write(self.journal, f"{line}\n")
            if replace:
                self._spawn(_Owner())

    def _done(self, owner: _Owner) -> None:
        with self.run.lock:
            if owner.orphaned:
                return  # its replacement finishes in its place
            self.active -= 1
            self._settle()

    def next_step(self) -> str:
        """What the experiment needs of the main thread now, read off its table and threads
        (the caller holds the lock): "cases" (threads to start for the case runs its batch
        answered), "round" (its batch's round: no case run is running and every thread that
        takes them waits for --until-decided's next round, or none is left), "finish" (no
        thread and no round left), or "" (its threads go on). A case still running, held by a
        stuck thread or loop, ends first, as its answer or as its timeout, unless the run was
        stopped (then it is written as abandoned, which --resume asks again)."""
        stopped = self.run.stop.event.is_set()
        if self.closed or (self.inflight and not stopped):
            return ""
        if self.wanted and not stopped:
            return "cases"
        if self.active == self.blocked and self._due():
            return "round"
        return "finish" if self.active == 0 and not self.sending else ""

    def _settle(self) -> None:
        """Hand the experiment to the main thread (``advance``) once it needs it (the caller holds the lock)."""
        if not self.queued and self.next_step():
            self.queued = True
            self.run.ready.put(self)

    def advance(self) -> str:
        """On the main thread: its batch's round sent off on a thread of its own, else what
        ``next_step`` says now ("cases", "finish", or "": it moved on meanwhile)."""
        with self.run.lock:
            self.queued = False
            if (step := self.next_step()) != "round":
                return step
            self.sending, waiting, self.waiting = True, self.waiting, {}
        threading.Thread(target=self._round, args=(waiting,), name="batch", daemon=True).start()
        return ""

    def _due(self) -> bool:
        """A batch round is wanted and may go: none is at the provider and the run goes on."""
        return not self.sending and bool(self.waiting or self.batch.due()) and not self.run.stop.event.is_set()

    def _sent(self, record: dict[str, object]) -> None:
        """A batch its round sent (or collected), logged as it goes: a run abandoned meanwhile has it."""
        with self.run.lock:
            self.experiment.batches.append(record)

    def _round(self, waiting: Mapping[int, _Waiting]) -> None:
        """The round ``advance`` found due, on a thread of its own, sent with the case runs put
        off; what it decided is applied: its contender halted or the run stopped, then the case
        runs it answered (after --resume's batches: the cases to ask) go back to the runner,
        which starts threads for them once their dataset's turn comes."""
        contender = self.experiment.model(stop=self.run.stop, pace=self.run.pace)
        decision = self.batch.go(waiting, contender, self.judge_model(contender.ledger))
        if decision.stop:
            self.run.stop.set(decision.stop)
        with self.run.lock:
            self.experiment.halted = self.experiment.halted or decision.halted or None
            self.sending = False
            for unit, fresh in decision.replay.items():
                if self._move(unit, _REPLAYING, _PUT_OFF):  # not given up on (timed out) meanwhile
                    self.fresh[unit] = fresh
                    self.replays.append(unit)
        threads = len(self.todo) if decision.earlier else len(decision.replay)
        self.wake(min(self.experiment.parallelism, threads))

    def wake(self, threads: int) -> None:
        """Its batch's round came back: ``threads`` to start for what it answered."""
        with self.run.lock:
            self.wanted += threads
            self._settle()

    def resume(self, failure: str | None = None) -> None:
        """Start the threads its batch asked for: none once the run stops, or when its dataset's
        prepare raised (``failure``: the cases its batch answered are not run)."""
        if failure:
            self.experiment.failure = self.experiment.halted = failure
        with self.run.lock:
            threads, self.wanted = (0 if self.run.stop.event.is_set() or failure else self.wanted), 0
            self.active += threads
            self._settle()
        # every thread waits at the gate until all have started: a start() waits for its thread
        # to run, which under hundreds of busy threads would take seconds
        gate = threading.Event()
        for _ in range(threads):
            self._spawn(_Owner(), gate)
        gate.set()

    def working(self) -> bool:
        """A thread of it is alive: the adapter stays prepared for its dataset. One waiting for
        --until-decided's next round counts: the round may open at any moment."""
        return self.active > 0

    def _record(self) -> None:
        """Record the finished prefix in case order (the caller holds the lock)."""
        while self.recorded < len(self.results) and (done := self.results[self.recorded]) is not None:
            for tracker in self.run.trackers:
                self.run.call(tracker, "record", done)
            self.recorded += 1

    def finish(self) -> None:
        """Write the experiment with what finished (on the main thread, once). A case still
        in flight (abandoned after a Ctrl-C) is a row of its own, which --resume asks again."""
        run, experiment = self.run, self.experiment
        now = time.monotonic()
        abandoned = []
        for i, (began, model, _, place) in list(self.inflight.items()):
            error = f"{_ABANDONED}: still in flight after {now - began:.1f} s when the run stopped"
            abandoned.append((i, _log_line(_result(experiment, self._case(place), model, now - began, error=error))))
        with run.lock:
            if self.closed:
                return
            self.closed = True
            for i, (result, line) in abandoned:
                if self._move(i, _DONE, _RUNNING):
                    self.results[i], self.lines[i] = result, line
                    run.journal_write(self.journal, f"{line}\n")
            never = [i for i, state in enumerate(self.state) if state != _DONE]
            for i in never:  # never asked, or put off when the run stopped: --resume asks them
                self._move(i, _DECIDED if experiment.decided else _STOPPED)
            experiment.results = [r for r in self.results if r is not None]
            experiment.rows_json = [line for line in self.lines if line is not None]
            experiment.not_run = [
                f"{self.ids[i // self.repeat]}#{i % self.repeat}" if self.repeat > 1 else self.ids[i // self.repeat]
                for i in never
            ]
            for late in self.results[self.recorded :]:  # what finished after a gap
                if late is not None:
                    for tracker in run.trackers:
                        run.call(tracker, "record", late)
            run.close_journal(self.journal)
        experiment.duration = time.perf_counter() - self.started
        summary = _summarize(experiment.results, run.suite.metrics, experiment.duration)
        summary = dataclasses.replace(summary, rate_limited=_held_back(experiment.waits))
        for tracker in run.trackers:
            with run.lock:
                run.call(tracker, "finish", experiment, summary)


class _Decider:
    """``--until-decided`` for one dataset. Its contenders' case runs are asked in one seeded
    random order (the same for each), a tenth at a time; after each round, the last one too,
    the top contender (the primary metric, errors counted as wrong) is tested against each
    other one, paired over the cases both answered. One shown below the top is asked no more;
    once only the top is left, the dataset is decided. The looks spend alpha / comparisons
    (Bonferroni over the comparisons) as an O'Brien-Fleming-type function says (``_boundaries``):
    almost nothing at the first rounds, so that the last look tests at nearly the level of one
    test over every case, and the chance of ever declaring a wrong order stays under alpha.
    Simulated against Pocock-type spending, an anytime-valid mixture test (mSPRT) and the
    Bonferroni over looks it replaces (``tests/benchmark_decide.py``), it loses the least power
    to a single test at the end and asks the fewest cases at the gaps that test would find.

    It knows each contender by its seat (its place among the dataset's experiments) and keeps
    its own copy of what they stored; the runner asks it what to run and applies its verdicts."""

    def __init__(
        self,
        dataset: str,
        labels: Sequence[str],
        primary: str,
        lock: threading.Lock,
        stop: _Stop,
        say: Callable[[str], None],
    ) -> None:
        self.dataset, self.labels, self.primary = dataset, labels, primary
        # on the run's lock (the runner holds it as it stores a case run), its stop, and what says its decisions
        self.cond, self.stop, self.say = threading.Condition(lock), stop, say
        self.results: dict[int, list[RunResult | None]] = {}  # by seat: its case runs, in case order
        self.missing: dict[int, int] = {}  # by seat: its case runs of the rounds so far not yet stored
        self.out: dict[int, str] = {}  # by seat: why it is asked no more (its verdict, or "" when it halted)
        self.order: list[int] = []  # the case runs in the seeded order, and each one's place in it
        self.place: list[int] = []
        self.step = self.limit = self.tested = 0
        self.bounds: dict[int, float] = {}  # each look's z boundary, by the case runs it has opened

    def join(self, seat: int, results: Sequence[RunResult | None]) -> tuple[list[int], list[tuple[int, str]]]:
        """Take the contender at ``seat`` in, with what a resumed run already stored: the case runs
        it is to ask, in their order, and the verdicts the looks at the stored rounds give once the
        last contender is in (the same data, the same looks as the run that stored them)."""
        import random

        if not self.order:  # a dataset's contenders ask the same cases, as often
            self.order = list(range(len(results)))
            random.Random(self.dataset).shuffle(self.order)  # seeded: every contender, every rerun, one order
            self.place = [0] * len(self.order)
            for at, unit in enumerate(self.order):
                self.place[unit] = at
            self.step = self.limit = max(1, math.ceil(len(self.order) / LOOKS))
            looks = [min(n, len(self.order)) for n in range(self.step, len(self.order) + self.step, self.step)]
            alpha = ALPHA / max(len(self.labels) - 1, 1)
            self.bounds = dict(zip(looks, _boundaries([n / len(self.order) for n in looks], alpha), strict=True))
        self.results[seat] = list(results)
        self.missing[seat] = sum(results[unit] is None for unit in self.order[: self.limit])
        with self.cond:
            return [unit for unit in self.order if results[unit] is None], self._look()

    def admits(self, seat: int, unit: int) -> bool:
        """Whether ``unit`` may run: it waits for its round, unless the contender is out or the run stopped."""
        at = self.place[unit]
        with self.cond:
            while at >= self.limit and seat not in self.out and not self.stop.event.is_set():
                self.cond.wait(0.5)
            return at < self.limit and seat not in self.out

    def update(self, seat: int, unit: int, result: RunResult, halted: bool) -> list[tuple[int, str]]:
        """A case run of ``seat`` was stored (the caller holds the lock the condition is built on);
        ``halted``: its contender is asked no more. The verdicts the looks it completes give."""
        self.results[seat][unit] = result
        self.missing[seat] -= self.place[unit] < self.limit
        if halted:
            self.out.setdefault(seat, "")
        return self._look()

    def _look(self) -> list[tuple[int, str]]:
        """Test once every active contender has stored each case run its round admits (a claim
        past it waits), and open the next round; again while the next is stored already."""
        verdicts: list[tuple[int, str]] = []
        while len(self.results) == len(self.labels) and self.tested < self.limit:
            active = [seat for seat in sorted(self.results) if seat not in self.out]
            if not active or any(self.missing[seat] > 0 for seat in active):
                break
            verdicts += self._test(active)
            self.tested = self.limit
            if self.limit == len(self.order):
                break
            opened = self.order[self.limit : self.limit + self.step]
            self.limit = min(self.limit + self.step, len(self.order))
            for seat, results in self.results.items():
                self.missing[seat] += sum(results[unit] is None for unit in opened)
            self.cond.notify_all()
        if verdicts:
            self.cond.notify_all()
        return verdicts

    def _test(self, active: list[int]) -> list[tuple[int, str]]:
        """The look at the rounds so far: the contenders shown below the top, each with why."""
        values = {
            str(seat): _case_values(
                filter(None, (self.results[seat][u] for u in self.order[: self.limit])), self.primary, 0.0
            )
            for seat in active
        }
        top, settled = _decide(values, self.bounds[self.limit])
        best = self.labels[int(top)]
        verdicts = [
            (int(seat), f"below {best} by {mean * 100:.1f} points [{low * 100:.1f}, {high * 100:.1f}]", n)
            for seat, (mean, low, high, n) in settled.items()
        ]
        if len(settled) == len(active) - 1 and len(active) > 1:
            verdicts.append((int(top), "the top: every other contender is below it", 0))
        for seat, why, n in verdicts:
            self.out[seat] = why
            after = f" after {_n(n, 'case')}" if n else ""
            self.say(f"decided [{self.dataset}] {self.labels[seat]}: {why}{after}")
        return [(seat, why) for seat, why, _ in verdicts]


class _Courier:
    """A tracker's hooks, run in order on a thread of its own, so that the cases never wait
    on the network of a tracker and a tracker that hangs holds nothing but this thread.
    One call past the run's ``tracker_timeout`` switches the tracker off (``overdue``)."""

    def __init__(self, tracker: Tracker, run: _Session) -> None:
        import queue

        self.tracker, self.run = tracker, run
        self.queue: queue.SimpleQueue[tuple[str, tuple[object, ...]]] = queue.SimpleQueue()
        self.pending = 0  # hooks sent and not yet returned
        self.busy: tuple[str, float] | None = None  # the hook being called, and since when
        self.spent = 0.0  # seconds its hooks took
        self.done = threading.Condition()
        threading.Thread(target=self._serve, name=f"tracker-{tracker.name}", daemon=True).start()

    def send(self, hook: str, args: tuple[object, ...]) -> None:
        with self.done:
            self.pending += 1
        self.queue.put((hook, args))

    def _serve(self) -> None:
        while True:
            hook, args = self.queue.get()
            self.busy = (hook, time.monotonic())
            self.run.invoke(self.tracker, hook, *args)
            self.spent += time.monotonic() - self.busy[1]
            self.busy = None
            with self.done:
                self.pending -= 1
                self.done.notify_all()

    def overdue(self, now: float) -> bool:
        """Switch the tracker off when its current call has taken longer than the timeout."""
        busy, limit = self.busy, self.run.tracker_timeout
        if busy is None or not limit or now - busy[1] <= limit or self.tracker in self.run.failed:
            return False
        tracker = self.tracker
        self.run.failed[tracker] = f"tracker {tracker.name}: {busy[0]} took over {limit:g} s (tracker_timeout)"
        return True

    def wait(self, deadline: float) -> None:
        """Until every hook sent has returned, the tracker is switched off, or ``deadline``."""
        with self.done:
            while self.pending and self.tracker not in self.run.failed and not self.overdue(time.monotonic()):
                if (left := deadline - time.monotonic()) <= 0:
                    break
                self.done.wait(min(left, 0.1))


GRACE_SECONDS = 10.0  # after a first Ctrl-C, how long cases in flight may finish
READ_FIRST = 1.0  # seconds an experiment reads its cases before its threads start (_ExperimentRun.start)
STALL_SAID = 60.0  # off a terminal, a run with nothing answered for this long says so (then at 2x, 4x...)
_ABANDONED = "Abandoned"  # a case still in flight when the run ended: --resume asks it again


class _Journal:
    """An experiment's journal: its header, then one JSON line per finished case, each one
    ``write`` in append mode, in the OS's hands the moment it is written: a killed process
    loses none, and the file only ever holds whole rows (``tail -f`` shows rows). A short
    write (a disk filling up) is continued, then fails loudly."""

    def __init__(self, path: Path) -> None:
        self.path, self.lock, self.closed = path, threading.Lock(), False
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)

    def write(self, data: bytes) -> None:
        with self.lock:
            while data and not self.closed:
                data = data[os.write(self.fd, data) :]

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                os.close(self.fd)

    @staticmethod
    def read(text: str, path: Path) -> Any:
        """A journal as its experiment's log record: the header, with the rows and the batches
        --batch sent between them. A line cut short by a kill is left out, said once."""
        lines, cut = [], 0
        for line in text.rstrip("\0").splitlines():  # a journal an older version wrote may end in zeros
            try:
                lines.append(json.loads(line))
            except ValueError:
                if line.startswith('{"batch"'):  # its batch may be running: asked again, it is paid for twice
                    raise ConfigError(
                        f"{_display(path)}: line {len(lines) + cut + 1}, a --batch record, was cut short (a killed "
                        "run?): its batch may be running at the provider. Find it there (GET /api/v1/batches), or "
                        "delete that line to ask its cases again (paying for them twice if it ran)"
                    ) from None
                cut += 1
        if cut:
            _warn(f"{_display(path)}: {cut} line{'s' if cut > 1 else ''} cut short (a killed run?) left out")
        if not lines:
            raise ValueError("an empty journal")
        if not isinstance(lines[0], dict):
            return lines[0]  # not a header: the log's check names what it is
        batches = [line["batch"] for line in lines[1:] if isinstance(line, dict) and "batch" in line]
        rows = [line for line in lines[1:] if not (isinstance(line, dict) and "batch" in line)]
        return {**lines[0], "rows": rows, "batches": batches}


class _Session:
    """What every experiment of one invocation shares: suite, trackers, lock, journal
    folder, progress, the queue on which finished experiments report, and what could
    not be written (a full disk stops the run; the tables still print)."""

    def __init__(
        self,
        suite: _Suite,
        trackers: list[Tracker],
        *,
        journal_dir: Path | None = None,
        progress: _Progress | None = None,
        stamp: str = "",
        case_timeout: float = 0.0,
        tracker_timeout: float = 0.0,
        previous: Mapping[tuple[str, str], Mapping[tuple[str, int], RunResult]] | None = None,
        pace: _Pace | None = None,
        tags: Mapping[str, object] | None = None,
        until_decided: str | None = None,
        batch: str | None = None,
        earlier_batches: Mapping[tuple[str, str], Sequence[Mapping[str, object]]] | None = None,
        cache: _Cache | None = None,
        budget: _Budget | None = None,
        judge: tuple[str, Provider] | None = None,
        credit: _Credit | None = None,
    ) -> None:
        import itertools
        import queue

        self.suite, self.trackers, self.journal_dir = suite, trackers, journal_dir
        self.progress = progress or _Progress(None, 0)
        self.stamp = stamp
        self.case_timeout = case_timeout  # seconds a case may take (0: no limit)
        # (contender key, dataset) -> the finished cases of an earlier run that --resume keeps
        self.previous = previous or {}
        self.metric_names = frozenset(m.name for m in suite.metrics)
        self.lock = threading.Lock()
        self.ready: queue.SimpleQueue[_ExperimentRun] = queue.SimpleQueue()  # experiments that need the main thread
        self.failed: dict[Tracker, str] = {}
        self.pages: list[tuple[str, str]] = []  # (tracker, url) of the pages finish returned
        self.unwritten: list[str] = []  # "path (why)" of every file the run could not write
        self.unwritten_lock = threading.Lock()
        self.stop = _Stop()  # this run's: Ctrl-C, a refused key or a full disk set it
        self.pace = pace  # its keys' limiters, handed to each model the run makes
        self.tracker_timeout = tracker_timeout
        self.tags = tags or {}  # a shard's "shard" and "run_id", in each journal's header
        self.until_decided = until_decided  # --until-decided: the primary metric each dataset's _Decider tests
        self.decisions: list[str] = []  # what --until-decided settled, in order
        self.batch = batch  # --batch: what asks again what a batch left unanswered ("batch", "sync")
        # (contender key, dataset) -> the batches of the run --resume continues, collected before any case
        self.earlier_batches = earlier_batches or {}
        self.cache, self.budget, self.credit = cache, budget, credit  # steps of every model call
        self.judge = judge  # the model a Judge asks, and its provider (judge: or --judge)
        self.number = itertools.count(1).__next__  # the next batch sent or collected: its number
        self.couriers = {t: _Courier(t, self) for t in trackers if not isinstance(t, LocalTracker)}
        # the trackers whose begin() does something, entered around each case on its thread
        self.live = [t for t in self.couriers if type(t).begin is not Tracker.begin]

    def open_journal(self, experiment: Experiment) -> _Journal | None:
        """Its journal, created exclusively: two runs never share one."""
        if self.journal_dir is None:
            return None
        path = self.journal_dir / f"{experiment.name}.{self.stamp}.jsonl"
        try:
            journal = _Journal(path)
        except OSError as e:
            self.cannot_write(path, e)
            return None
        header = {"journal": 1, "experiment": experiment.name, "dataset": experiment.dataset, **self.tags}
        self.journal_write(journal, _json_dumps({**header, "contender": experiment.contender.to_json()}) + "\n")
        return journal

    def close_journal(self, journal: _Journal | None) -> None:
        if journal is not None:
            try:
                journal.close()
            except OSError as e:
                self.cannot_write(journal.path, e)

    def cannot_write(self, path: Path, error: OSError) -> None:
        """A file the run could not write: named at the end, and no new case starts."""
        what = f"{_display(path)} ({error.strerror or error})"
        with self.unwritten_lock:  # not the run's lock: a hook that holds it may be what failed
            if what not in self.unwritten:
                self.unwritten.append(what)
        self.stop.set(f"{what} could not be written")

    def call(self, tracker: Tracker, hook: str, *args: object) -> None:
        """A tracker's hook: the local log's now, any other's on its courier."""
        courier = self.couriers.get(tracker)
        if courier is None:
            self.invoke(tracker, hook, *args)
        elif tracker not in self.failed:
            courier.send(hook, args)

    def invoke(self, tracker: Tracker, hook: str, *args: object) -> None:
        """A tracker's hook, isolated: one that raises is switched off for the rest of the
        run and named once at the end; the local log and the tables stay complete. The
        local log's own failure (a full disk) is never hidden: it stops the run."""
        if tracker in self.failed:
            return
        try:
            answer = getattr(tracker, hook)(*args)
        except _SUITE_EXCEPTIONS as e:
            _reraise_ctrl_c(e)
            if isinstance(tracker, LocalTracker) and isinstance(e, OSError):
                self.cannot_write(Path(e.filename or "log"), e)
                return
            self.failed[tracker] = f"tracker {tracker.name}: {hook} raised {_describe(e)[0]}"
            return
        if hook == "finish" and isinstance(answer, Mapping) and answer.get("url"):
            self.pages.append((tracker.name, str(answer["url"])))

    def next_ready(self) -> _ExperimentRun | None:
        """The next experiment that needs the main thread, or None after a tenth of a second.

        The wait sits in this helper, not in a loop's ``except`` clause: a Ctrl-C that
        lands on a ``continue`` inside an ``except`` escapes the enclosing ``try`` on
        CPython 3.11.
        """
        import queue

        try:
            return self.ready.get(timeout=0.1)
        except queue.Empty:
            return None

    def journal_write(self, journal: _Journal | None, text: str) -> None:
        if journal is None or not text:
            return
        try:
            journal.write(text.encode("utf-8", errors="backslashreplace"))  # a lone surrogate stays valid JSON
        except OSError as e:
            self.cannot_write(journal.path, e)


def _run_experiments(run: _Session, experiments: list[Experiment], concurrency: int) -> bool:
    """Run every experiment of a ready session; True when a Ctrl-C cut the run short.

    A first Ctrl-C starts no new case and gives those in flight ``GRACE_SECONDS``; a
    second one abandons them. Either way every experiment that started is written.
    A case past the session's case timeout (0: none) is given up on as that case's error.
    """
    running: list[_ExperimentRun] = []  # shared with the handler below: what a Ctrl-C finds in flight
    try:
        _schedule(run, experiments, concurrency, running)
    except KeyboardInterrupt:
        name, by, _ = _interruption()
        run.stop.set(f"interrupted ({name})")
        run.progress.clear()
        if any(r.inflight for r in running):  # none yet while an experiment reads its cases
            print(
                f"interrupted{by}: the cases in flight may finish for up to {GRACE_SECONDS:.0f}s "
                f"({name} again abandons them)",
                file=run.progress.err,
            )
        _drain(run, running, time.monotonic() + GRACE_SECONDS)
        for remaining in running:
            remaining.finish()
        _report_trackers(run)
        return True
    _report_trackers(run)
    return False


def _schedule(run: _Session, experiments: list[Experiment], concurrency: int, running: list[_ExperimentRun]) -> None:
    """The experiments, ``concurrency`` at a time (0: all), watched while they go (case
    timeouts, trackers past their deadline, the progress line) until each has finished.

    The adapter is prepared for one dataset at a time (``adapter.prepare``, outside the
    threads), and only that dataset's cases run. An experiment whose batch waits at the
    provider holds neither a slot nor the adapter: the next experiment, or the next dataset,
    starts meanwhile, so every batch goes as soon as its cases are put off. A batch that
    comes back runs its cases once no other dataset's do (the adapter prepared again for
    its dataset if another's was prepared since).
    """
    order = [e.dataset for e in experiments]
    pending = sorted(experiments, key=lambda e: order.index(e.dataset))
    # --until-decided asks a dataset's contenders side by side: all at once
    rivals = {d: [e for e in pending if e.dataset == d] for d in order}  # each dataset's contenders, in order
    deciders = {
        d: _Decider(d, [e.contender.label for e in es], primary, run.lock, run.stop, run.decisions.append)
        for d, es in rivals.items()
        if (primary := run.until_decided)
    }
    waiting: list[_ExperimentRun] = []  # a batch answered their cases: they wait for their dataset's turn
    held: str | None = None  # the dataset the adapter was last prepared for
    failed: dict[str, str] = {}  # datasets whose prepare raised: none of their cases runs after it

    def room() -> bool:  # a -j slot free: an experiment waiting for its batch holds none
        return concurrency == 0 or bool(deciders) or sum(not r.sending for r in running) < concurrency

    while pending or running:
        stopped = run.stop.event.is_set()
        if not stopped and not any(r.working() for r in running):  # the adapter is free: the next dataset's turn
            turn = pending[0].dataset if pending and room() else waiting[0].experiment.dataset if waiting else held
            if turn is not None and turn != held:
                held = turn
                if failure := failed.get(turn) or _prepare_dataset(run.suite, turn):
                    held, failed[turn] = None, failure
                    gone = [e.dataset for e in pending] + [r.experiment.dataset for r in waiting]
                    print(f"warning: {failure}: {_n(gone.count(turn), 'experiment')} not run", file=run.progress.err)
        for experiment in [e for e in pending if stopped or e.dataset in failed]:
            pending.remove(experiment)
            experiment.not_run, experiment.failure = _ids(experiment.cases), failed.get(experiment.dataset)
        for r in [r for r in waiting if stopped or r.experiment.dataset in (held, *failed)]:
            waiting.remove(r)
            r.resume(failed.get(r.experiment.dataset))
        while pending and pending[0].dataset == held and room():
            dataset = pending[0].dataset
            running.append(started := _ExperimentRun(run, pending.pop(0), deciders.get(dataset), rivals[dataset]))
            started.start()
        if (due := run.next_ready()) is not None:
            if (step := due.advance()) == "cases" and due not in waiting:
                waiting.append(due)
            elif step == "finish":
                due.finish()
                running.remove(due)
            continue
        now = time.monotonic()
        for watched in running:
            watched.watch(now)
        for courier in run.couriers.values():
            courier.overdue(now)
        run.progress.draw([began for r in running for began, *_ in list(r.inflight.values())])


def _report_trackers(run: _Session) -> None:
    run.progress.clear()
    for tracker, courier in run.couriers.items():
        _deliver(run, tracker, courier)
    complete = "the local log is complete" if not run.unwritten else "the local log is NOT complete (see below)"
    for message in run.failed.values():
        print(f"warning: {_redact(message)}; it was switched off, {complete}", file=run.progress.err)


def _deliver(run: _Session, tracker: Tracker, courier: _Courier) -> None:
    """Once the cases end and the local log is complete: what is left for a tracker is sent
    within ``tracker_timeout``, said on STDERR while it takes; the first Ctrl-C skips it."""
    run.call(tracker, "close")
    limit, began = run.tracker_timeout, time.monotonic()
    deadline = began + (limit or math.inf)
    try:
        courier.wait(min(deadline, began + 0.5))
        if courier.pending and tracker not in run.failed:
            wait = f"up to {limit:g} s; " if limit else ""
            print(f"sending to {tracker.name}... ({wait}Ctrl-C skips)", file=run.progress.err)
            courier.wait(deadline)
    except KeyboardInterrupt:
        run.failed.setdefault(tracker, f"tracker {tracker.name}: skipped by Ctrl-C before it had sent everything")
    if courier.pending and tracker not in run.failed:
        run.failed[tracker] = f"tracker {tracker.name}: not done after {limit:g} s (tracker_timeout)"
    if tracker in run.failed:  # given up on: nothing of it may hold the process at exit
        with contextlib.suppress(Exception):
            tracker.abandon()
    else:
        print(f"{tracker.name}: sent in {courier.spent:.1f} s, off the experiments' clocks", file=run.progress.err)


def _drain(run: _Session, running: list[_ExperimentRun], deadline: float) -> None:
    """Wait for the experiments in flight until ``deadline`` or a second Ctrl-C."""
    for r in running:  # the run stopped: one whose batch came back starts nothing, and ends
        r.resume()
    try:
        while running and time.monotonic() < deadline:
            if (done := run.next_ready()) is not None and done.advance() == "finish":
                done.finish()
                running.remove(done)
    except KeyboardInterrupt:
        print("abandoning the cases still in flight", file=run.progress.err)


def _progress_line(
    done: int, total: int, errors: int, elapsed: float, cost: float, eta: float | None = None, width: int = 100
) -> str:
    """The progress line (pure, for tests): a bar that takes what ``width`` leaves, then
    the counts; at a narrow width the least needed parts go first (the bar, the elapsed
    time, the errors), never the count, the ETA or the spend.

    >>> _progress_line(50, 200, 2, 30.0, 0.25, 90.0, 72)
    '[####-------------] 50/200 cases · 2 errors · 0:30 · ETA 1:30 · $0.2500'
    >>> _progress_line(50, 200, 2, 30.0, 0.25, 90.0, 40)
    '50/200 cases · ETA 1:30 · $0.2500'
    """
    if eta is None and done:
        eta = elapsed / done * (total - done)
    parts = [
        f"{done}/{total} cases",
        f"{errors} error{'s' if errors != 1 else ''}",
        _clock(elapsed),
        f"ETA {_clock(eta) if eta is not None else '-'}",
        _fmt_cost(cost),
    ]
    for drop in (None, 2, 1):  # the elapsed time, then the errors, go when the line is too long
        if drop is not None:
            parts[drop] = ""
        text = " · ".join(p for p in parts if p)
        room = width - 1 - len(text) - 3
        if room >= 10:
            filled = round(room * done / total) if total else room
            return f"[{'#' * filled}{'-' * (room - filled)}] {text}"
        if len(text) < width:
            return text
    return text[: width - 1]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class _Progress:
    """One throttled, self-overwriting STDERR line while a run goes; drawn only on a
    terminal (``stream`` None elsewhere) and erased at the end. Its ETA is the latest of
    each running experiment's own (its cases left at its own pace) and the run's as a
    whole: a slow experiment that outlasts fast ones is not hidden by their pace."""

    def __init__(self, stream: Any, total: int, err: Any = None, limiters: _Pace | None = None) -> None:
        self.stream, self.total, self.err, self.limiters = stream, total, err or sys.stderr, limiters
        self.done = self.errors = 0
        self.cost = 0.0
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = False
        self.pace: dict[int, list[float]] = {}  # id(experiment) -> [done, total, first seen]
        self.waiting = ""  # the servers asked: until a case ends, the line says it waits on them
        self.answered = self.started  # when a case run last ended: a long silence is said
        self.told = STALL_SAID  # off a terminal, the silence (s) that is said next; doubled each time
        self.lock = threading.Lock()  # a batch's thread says how it stands while the main thread draws

    def add(self, result: RunResult) -> None:
        self.done += 1
        self.answered, self.told = time.monotonic(), STALL_SAID
        self.errors += result.error is not None
        self.cost += result.usage.cost_usd
        experiment = result.experiment
        if experiment is not None:
            pace = self.pace.get(id(experiment))
            if pace is None:
                size = len(experiment.cases) * experiment.repeat
                pace = self.pace[id(experiment)] = [0, size, getattr(experiment, "began", 0.0) or time.monotonic()]
            pace[0] += 1

    def eta(self, now: float) -> float | None:
        if not self.done:
            return None
        whole = (now - self.started) / self.done * (self.total - self.done)
        own = [(total - done) * (now - began) / done for done, total, began in self.pace.values() if done < total]
        return max([whole, *own])

    def stalled(self, now: float, flights: Sequence[float]) -> str | None:
        """What a silence says: nothing answered yet, or nothing for a while, with how many
        case runs wait and the oldest's age (``flights``: when each began). A hung server is
        not a quiet one."""
        silent, count = now - self.answered, f"{self.done}/{self.total} cases"
        waits = f" · {len(flights)} in flight, the oldest {now - min(flights):.0f} s" if flights else ""
        if self.answered == self.started and silent >= 3:
            return f"{count} · waiting for the first answer{self.waiting} ({silent:.0f} s){waits}"
        return f"{count} · no case ended for {silent:.0f} s{waits}" if silent >= 30 else None

    def draw(self, flights: Sequence[float] = ()) -> None:
        """The line, on a terminal; elsewhere, a silence said as a line of its own after
        ``STALL_SAID`` seconds, then after twice as long each time."""
        now = time.monotonic()
        if self.stream is None:
            if now - self.answered >= self.told and flights and (line := self.stalled(now, flights)):
                self.told *= 2
                self.say(line)
            return
        if now - self.last < 0.1:
            return
        self.last = now
        width = _terminal_width(self.stream)
        line = _progress_line(self.done, self.total, self.errors, now - self.started, self.cost, self.eta(now), width)
        if self.limiters is not None and (held := self.limiters.held):
            line += f" · rate-limited: {held} held back"
        line = self.stalled(now, flights) or line
        with self.lock:
            self.stream.write(f"\r{line[: width - 1]}\x1b[K")
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

    def say(self, line: str) -> None:
        """A line of its own above the progress line (from any thread): how a batch stands."""
        with self.lock:
            self.clear()
            print(line, file=self.err, flush=True)


def _width_of(stream: Any) -> int:
    """The terminal's width when ``stream`` is one (tables fit it; never under 20, where
    nothing can be folded), else 0: a file or a pipe gets every column."""
    try:
        return max(20, _terminal_width(stream)) if stream.isatty() else 0
    except (AttributeError, ValueError):
        return 0


def _terminal_width(stream: TextIO) -> int:
    """COLUMNS when set (as ``shutil`` reads it), else the width of the terminal ``stream``
    is drawn on, measured now, so a resized window is followed; 100 when it says none. Never
    STDOUT's: during a run it is a pipe to the warnings file."""
    if (columns := os.environ.get("COLUMNS", "")).isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or 100
    except (AttributeError, ValueError, OSError):
        return 100


class _Capture:
    """Where stray output goes while a run draws: print, warnings and logging from suite
    code, and bytes a C extension or a subprocess writes to file descriptors 1 and 2,
    land in ``log/<command>.warnings.<stamp>.log`` instead of in the tables (or the JSON
    document). The harness's own progress and messages go to ``terminal``, a copy of
    the real standard error."""

    encoding = "utf-8"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: Any = None
        self.lock = threading.Lock()
        self.pending: dict[int, str] = {}  # each thread's unfinished line: lines never interleave
        self.failure: str | None = None  # why the file could not be written (a full disk)
        self.terminal: Any = None
        self.saved: list[int] = []

    def write(self, text: str) -> int:
        me = threading.get_ident()
        with self.lock:
            complete, _, self.pending[me] = (self.pending.get(me, "") + str(text)).rpartition("\n")
            if complete:
                self._keep(complete)
        return len(text)

    def _keep(self, lines: str) -> None:
        """Append whole lines, masked (the caller holds the lock)."""
        if self.failure is None:
            try:
                if self.file is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self.file = self.path.open("a", encoding="utf-8", errors="backslashreplace")
                self.file.write(_redact(lines) + "\n")
                self.file.flush()
            except OSError as e:  # the suite's print never fails for it; the run names it
                self.failure = f"{_display(self.path)} ({e.strerror or e})"

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def _drain(self, pipe: int) -> None:
        """What reached descriptors 1 and 2, line by line, until the run restores them."""
        with os.fdopen(pipe, "rb") as stream:
            while chunk := stream.read1(65536):
                self.write(chunk.decode("utf-8", errors="backslashreplace"))

    def __enter__(self) -> _Capture:
        self.originals = [sys.stdout, sys.stderr]
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptors to take: Python's alone
            for stream in self.originals:
                stream.flush()
            self.saved = [os.dup(1), os.dup(2)]
            read, write = os.pipe()
            os.dup2(write, 1)
            os.dup2(write, 2)
            os.close(write)
            self.reader = threading.Thread(target=self._drain, args=(read,), name="capture", daemon=True)
            self.reader.start()
            err = self.originals[1]
            # the harness speaks on a copy of the real standard error (line-buffered, so a message is on
            # the screen as it is printed), or on the stream Python's stderr is when it is no descriptor
            self.terminal = os.fdopen(os.dup(self.saved[1]), "w", 1, err.encoding, "replace")
            if _fileno(err) != 2:
                self.terminal.close()
                self.terminal = err
        sys.stdout = sys.stderr = self  # type: ignore[assignment]
        self.handlers = []
        if "logging" in sys.modules:  # handlers made earlier hold the real streams
            import logging

            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream in self.originals:
                    self.handlers.append((handler, handler.setStream(self)))
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self.originals
        for handler, stream in self.handlers:
            handler.setStream(stream)
        if len(self.saved) == 2:
            os.dup2(self.saved[0], 1)
            os.dup2(self.saved[1], 2)  # the pipe's last writer is gone: the reader sees its end
            for fd in self.saved:
                os.close(fd)
            self.reader.join(5)
            if self.terminal is not self.originals[1]:
                self.terminal.close()
        with self.lock:  # what was printed without a final newline is kept too
            rest = "\n".join(text for text in self.pending.values() if text)
            if rest:
                self._keep(rest)
            self.pending.clear()
        if self.file is not None:
            try:
                self.file.close()
            except OSError as e:
                self.failure = self.failure or f"{_display(self.path)} ({e.strerror or e})"


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def _prepare_dataset(suite: _Suite, dataset: str) -> str | None:
    try:
        suite.adapter.prepare(dataset)
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        return f"adapter {type(suite.adapter).__name__}.prepare({dataset!r}) raised {type(e).__name__}: {e}"
    return None


def _log_line(result: RunResult) -> tuple[RunResult, str]:
    """A finished case and its log row as one line of JSON, secrets masked. What no log
    can hold (a reply that contains itself) makes the case an error naming the field:
    the row is always written and the log stays valid JSON."""
    row = _log_row(result)
    try:
        return result, _redact_json(_ENCODER.encode(row), row)
    except (ValueError, TypeError, RecursionError, OverflowError):
        pass
    try:
        plain = _jsonable(row, "row")
    except _Unwritable as e:
        field = str(e)
        for name in ("output", "raw", "diagnostics", "outcomes"):
            field = field.replace(f"row[{name!r}]", name, 1)
        result = dataclasses.replace(
            result,
            score=None,
            reply=None,
            error=f"SuiteError: the case's {field}: no log can hold it; return plain data (dict, list, str, numbers)",
            traceback=None,
        )
        plain = _jsonable(_log_row(result), "row")
    return result, _redact_json(json.dumps(plain, ensure_ascii=False, allow_nan=False), plain)


def _log_row(result: RunResult) -> dict[str, object]:
    score, reply, case = result.score, result.reply, result.case
    return {
        "case": case.id,
        "case_hash": _case_hash(case),
        "repeat": result.repeat,
        "dataset": case.dataset,
        "variant": case.variant,
        "score": score.value if score else None,
        "metrics": dict(score.metrics) if score else {},
        "outcomes": dict(score.outcomes) if score else {},
        "diagnostics": dict(score.diagnostics) if score else {},
        "error": result.error,
        "traceback": result.traceback,
        "reply_error": reply.error if reply else None,
        "output": reply.output if reply else None,
        "raw": reply.raw if reply and getattr(result.experiment, "keep_raw", True) else None,
        "usage": result.usage.to_json(),
        "retries": result.retries,
        "cached": result.cached,
        "saved_usd": result.saved,
        "turns": result.turns,
        **({"finish_reason": result.finish_reason} if result.finish_reason else {}),
        **({"transcript": list(result.transcript)} if result.transcript is not None else {}),
        "duration": round(result.duration, 6),
        **({CLUSTER: cluster} if (cluster := case.metadata.get(CLUSTER)) is not None else {}),
        **({"served": list(result.served)} if result.served else {}),
        **({"replayed": list(result.replayed)} if result.replayed[0] else {}),
        **({"judge_usage": result.judge_usage.to_json()} if result.judge_usage != _NOTHING else {}),
        **({"judge_chance": dict(result.chances)} if result.chances else {}),
    }


# -- shards: one slice of the matrix per machine, the same slices on every machine ----


def _shard_spec(spec: str, env: Mapping[str, str]) -> str:
    """``--shard``'s K/N; ``auto`` (or ``auto/N``) reads it from the engine running this
    process: AGENT_EVALS_SHARD=K/N (a CI matrix), a Kubernetes Indexed Job's
    JOB_COMPLETION_INDEX (0-based; N from auto/N or AGENT_EVALS_SHARDS), or a Slurm job
    array's SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT (or _MIN and _MAX)."""
    head, _, count = spec.partition("/")
    if head != "auto":
        k, n = head, count
    else:
        engines = [v for v in ("AGENT_EVALS_SHARD", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID") if env.get(v)]
        if len(engines) != 1:
            raise ConfigError(
                f"--shard {spec}: "
                + (
                    f"{' and '.join(engines)} are all set; give --shard K/N"
                    if engines
                    else "no shard in the environment: set AGENT_EVALS_SHARD=K/N, or run as a Kubernetes Indexed Job "
                    "(JOB_COMPLETION_INDEX) or a Slurm job array (SLURM_ARRAY_TASK_ID)"
                )
            )
        if engines[0] == "AGENT_EVALS_SHARD":
            if not re.fullmatch(r"\d+/\d+", value := env["AGENT_EVALS_SHARD"]):
                raise ConfigError(f"--shard {spec}: AGENT_EVALS_SHARD={value!r} is not K/N, like 2/3")
            k, _, n = value.partition("/")
        elif engines[0] == "JOB_COMPLETION_INDEX":
            k = str(int(env["JOB_COMPLETION_INDEX"]) + 1) if _is_count(env["JOB_COMPLETION_INDEX"]) else "?"
            n = env.get("AGENT_EVALS_SHARDS") or count
        else:
            low, step = (env.get(f"SLURM_ARRAY_TASK_{v}", d) for v, d in (("MIN", "0"), ("STEP", "1")))
            task, top = env["SLURM_ARRAY_TASK_ID"], env.get("SLURM_ARRAY_TASK_MAX", "")
            if not all(map(_is_count, (task, low, step))) or step == "0":
                raise ConfigError(f"--shard {spec}: SLURM_ARRAY_TASK_ID {task!r}, _MIN or _STEP is not a count")
            k = str((int(task) - int(low)) // int(step) + 1)
            n = env.get("SLURM_ARRAY_TASK_COUNT") or (
                str((int(top) - int(low)) // int(step) + 1) if _is_count(top) else ""
            )
        if count and n != count:
            raise ConfigError(f"--shard {spec}: {engines[0]} says {k}/{n or '?'}, not one of {count}")
        if not n:
            raise ConfigError(
                f"--shard {spec}: {engines[0]} gives the index but not the count: give --shard auto/N "
                "or set AGENT_EVALS_SHARDS=N" + (" (or SLURM_ARRAY_TASK_COUNT)" if engines[0][0] == "S" else "")
            )
    if not (_is_count(k) and _is_count(n) and 1 <= int(k) <= int(n)):
        given = f"the environment gives {k}/{n}; " if head == "auto" else ""
        raise ConfigError(f"--shard {spec}: {given}expected K/N with 1 <= K <= N, like 2/3")
    return f"{int(k)}/{int(n)}"


def _run_id(env: Mapping[str, str]) -> str | None:
    """What the shards of one run share, from AGENT_EVALS_RUN_ID or the engine: a Slurm
    array's job id, a GitHub Actions run (and attempt), a Kubernetes Indexed Job's name."""
    if env.get("AGENT_EVALS_RUN_ID"):
        return env["AGENT_EVALS_RUN_ID"]
    if env.get("SLURM_ARRAY_JOB_ID"):
        return f"slurm-{env['SLURM_ARRAY_JOB_ID']}"
    if env.get("GITHUB_RUN_ID"):
        return f"github-{env['GITHUB_RUN_ID']}-{env.get('GITHUB_RUN_ATTEMPT', '1')}"
    index, pod = env.get("JOB_COMPLETION_INDEX"), env.get("HOSTNAME", "")
    if index and (job := re.fullmatch(rf"(.+)-{re.escape(index)}-[a-z0-9]{{5}}", pod)):
        return f"k8s-{job[1]}"  # an Indexed Job's pods are named <job>-<index>-<5 characters>
    return None


def _shard(experiments: list[Experiment], spec: str) -> list[Experiment]:
    """The K-th of N slices of the matrix: round robin over experiments in a stable
    order (dataset, then name), so every machine cuts the same slices."""
    k, _, n = spec.partition("/")
    ordered = sorted(experiments, key=lambda experiment: (experiment.dataset, experiment.name))
    chosen = {id(experiment) for i, experiment in enumerate(ordered) if i % int(n) == int(k) - 1}
    if not chosen:
        _warn(f"--shard {spec}: this slice holds none of the {_n(len(experiments), 'experiment')}; nothing to run")
    return [experiment for experiment in experiments if id(experiment) in chosen]


# ═══════════════════════════════════════════════════════════════════════════════
# Trackers: the local JSON log always; others chosen by flag, config or environment
# ═══════════════════════════════════════════════════════════════════════════════


class LocalTracker(Tracker):
    """Always on: writes ``log/agent-evals/<experiment>.<stamp>.json`` per experiment."""

    name = "local"

    def _document(self, experiment: Experiment, summary: Summary) -> dict[str, object]:
        """The log's header: everything but its rows and cases."""
        c = experiment.contender
        return {
            "agent_evals": __version__,
            "suite": self.context.get("suite"),
            "project": self.context.get("project"),
            "command": self.context.get("command"),
            "stamp": self.context.get("stamp"),
            "tracker": self.context.get("tracker"),  # the one beside this log, if any
            "experiment": experiment.name,
            "dataset": experiment.dataset,
            "contender": c.to_json(),
            "provider": experiment.provider.name,
            "settings": {
                "effort": c.effort,
                "temperature": c.temperature,
                "max_tokens": c.max_tokens,
                "parallelism": experiment.parallelism,
            },
            "adapter": self.context.get("adapter_metadata") or {},
            "started_at": experiment.started_at,
            "summary": summary.to_json(),
            "not_run": experiment.not_run,
            **({"decided": experiment.decided} if experiment.decided else {}),  # its not_run were never needed
            **({"batches": experiment.batches} if experiment.batches else {}),  # --resume collects them
            "resumed_from": self.context.get("resumed_from"),
            "repeat": experiment.repeat,
            "order": experiment.order,
            "shard": self.context.get("shard"),
            "run_id": self.context.get("run_id"),  # what the shards of one run share
            "planned": self.context.get("planned"),  # the case runs of the whole run (its shard's)
            "plan": self.context.get("plan"),  # and its experiments
            "rescored_from": self.context.get("rescored_from"),
            "baseline": self.context.get("baseline"),
            # where people's labels of this suite are, from the log's folder: diff, report and runs read them
            "labels": os.path.relpath(self.context["labels"], self.context["log_dir"])
            if "labels" in self.context
            else None,
            "metrics": [
                {"name": m.name, "description": m.description, "primary": m.primary, "judged": m.judged}
                for m in self.context.get("metrics", ())
            ],
        }

    def finish(self, experiment: Experiment, summary: Summary) -> Mapping[str, object]:
        folder = Path(self.context["log_dir"])
        folder.mkdir(parents=True, exist_ok=True)
        document = self._document(experiment, summary)
        # indent the header for people; one compact line a row, which json writes in C
        head = _json_dumps(_mask_strings(_jsonable(document)), indent=2)[:-2]
        lines = getattr(experiment, "rows_json", None) or [_json_dumps(_log_row(r)) for r in experiment.results]
        path = folder / f"{experiment.name}.{self.context.get('stamp')}.json"
        tmp = path.with_suffix(".json.tmp")
        # written a piece at a time: a log of many thousand rows is never copied whole in memory
        try:
            with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as file:
                file.write(f'{head},\n  "rows": [')
                for n, line in enumerate(lines):
                    file.write(f"{',' if n else ''}\n    {line}")
                # each case's input and expected once (not per row or repeat): the HTML report's drill-down
                file.write('\n  ],\n  "cases": {')
                for n, case in enumerate({r.case.id: r.case for r in experiment.results}.values()):
                    entry = {case.id: {"input": case.input, "expected": case.expected}}
                    file.write(f"{',' if n else ''}\n    {_redact_json(_json_dumps(entry), entry)[1:-1]}")
                file.write("\n  }\n}\n")
            os.replace(tmp, path)
        except OSError as e:  # a full disk: no half-written log, and the run names the file
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise OSError(e.errno, e.strerror, str(path)) from None
        return {"url": None, "path": str(path)}


class Braintrust(Tracker):
    """One Braintrust experiment per experiment (the ``braintrust`` extra), named with the
    run's stamp and compared with the same contender's experiment of the last run that sent
    one; one eval span per case, from its real start to its end, holding input, expected,
    output (or ``{"_error": ...}``), the scorer's metrics as scores (None left out), and
    diagnostics, outcomes, usage and an agent's transcript as metadata; each model call is a
    child llm span. The project is ``--project``, ``project:`` or ``BRAINTRUST_PROJECT_ID``.
    A self-hosted Braintrust is reached through ``BRAINTRUST_APP_URL``, where the SDK logs
    in (``BRAINTRUST_API_URL`` alone leaves the login at braintrust.dev).
    """

    name = "braintrust"
    env_key = "BRAINTRUST_API_KEY"
    packages = ("braintrust",)
    extra = "braintrust"

    def __init__(self, context: Mapping[str, object] | None = None) -> None:
        super().__init__(context)
        if not (self.context.get("project") or self.context.get("project_id")):
            raise ConfigError(
                "tracker braintrust: no project; name it with --project, project: in the config, or "
                "BRAINTRUST_PROJECT_ID"
            )
        self.experiments: dict[int, Any] = {}
        self.state: Any = None  # its own login and background logger: the app's own use of the SDK is left alone
        # imported now, before any experiment's clock: a third of a second beside the first cases slowed them
        self.sdk = _import_optional("braintrust", "the braintrust tracker")

    def start(self, experiment: Experiment) -> None:
        braintrust = self.sdk
        if self.state is None:
            self.state = braintrust.logger.BraintrustState()
        context = self.context
        metadata = {"suite": context.get("suite"), "dataset": experiment.dataset, **experiment.contender.to_json()}
        base = _sent_before(experiment.name, context, self.name)
        self.experiments[id(experiment)] = braintrust.init(
            project=context.get("project"),
            project_id=context.get("project_id"),
            experiment=f"{experiment.name}.{context.get('stamp')}",
            base_experiment=base and f"{experiment.name}.{base}",
            metadata={k: v for k, v in metadata.items() if v is not None},
            open=False,
            set_current=False,
            state=self.state,
        )

    def abandon(self) -> None:
        if self.state is not None:  # the SDK flushes at exit, which would wait on the server again
            atexit.unregister(self.state.global_bg_logger()._finalize)

    def record(self, result: RunResult) -> None:
        score, reply, usage = result.score, result.reply, result.usage
        output: object = reply.output if reply is not None and result.error is None else None
        if output is None:
            output = {"_error": result.error or (reply.error if reply else None)}
        metadata = {
            "case": result.case.key,
            "repeat": result.repeat,
            "diagnostics": dict(score.diagnostics) if score else {},
            "outcomes": dict(score.outcomes) if score else {},
            "usage": usage.to_json(),
            "retries": result.retries,
            "turns": result.turns,
            **({"transcript": list(result.transcript)} if result.transcript is not None else {}),
        }
        # what leaves the machine is plain JSON with every secret masked, like the local log
        safe = _mask_strings(
            _jsonable({"input": result.case.input, "expected": result.case.expected, "output": output})
        )
        tokens = {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens}
        end = result.ended or time.time()
        span = _opened(
            self.experiments[id(result.experiment)].start_span,
            name=f"case {result.label}",
            type="eval",
            start_time=end - result.duration,
            set_current=False,
            **safe,
            error=result.error,
            scores={k: float(v) for k, v in (score.metrics if score else {}).items() if v is not None},
            metadata=_mask_strings(_jsonable(metadata, "row", mend=True)),
            metrics={} if _asked(result) else tokens,  # else the calls' spans hold them
        )
        for call in result.exchanges:
            sent, answer, spent, finish = _exchange(call)
            model, judge = call.get("judge") or result.experiment.contender.model, bool(call.get("judge"))
            turn = _opened(
                span.start_span,
                name=f"{'judge' if judge else 'chat'} {model}",
                type="score" if judge else "llm",  # a judge's call scores the answer: never the contender's spend
                start_time=call["start"],
                set_current=False,
                input=_mask_strings(_jsonable(sent, mend=True)),
                output=_mask_strings(_jsonable(answer, mend=True)),
                error=call["error"],
                metadata={"model": model, "finish_reason": finish},
                metrics={"prompt_tokens": spent.input_tokens, "completion_tokens": spent.output_tokens},
            )
            turn.end(end_time=call["end"])
        span.end(end_time=end)

    def finish(self, experiment: Experiment, summary: Summary) -> Mapping[str, object]:
        # summarize() flushes, and raises when the service cannot be reached: the run reports it
        done = self.experiments.pop(id(experiment)).summarize()
        return {"url": getattr(done, "experiment_url", None)}


def _opened(start: Callable[..., _T], **fields: object) -> _T:
    """A Braintrust span, opened from code whose file is named bare: the SDK names the file of
    the code that opens each span in every row it sends (caller_filename, off the stack),
    which would be this module's full local path."""
    return start(**fields)


_opened.__code__ = _opened.__code__.replace(co_filename=os.path.basename(_opened.__code__.co_filename))


def _sent_before(name: str, context: Mapping[str, Any], tracker: str) -> str | None:
    """The stamp of the latest earlier run whose log of experiment ``name`` says it was sent to
    ``tracker`` in this project: the one a tracker compares this run's experiment with."""
    folder, stamp = Path(context.get("log_dir") or "."), str(context.get("stamp"))
    wanted = {"tracker": tracker, "project": context.get("project")}
    for path in sorted(folder.glob(f"{name}.*.json"), reverse=True):  # a safe name: no glob characters
        earlier = path.name[len(name) + 1 : -len(".json")]
        if earlier < stamp and "." not in earlier and _header_fields(path, *wanted) == wanted:
            return earlier
    return None


def _asked(result: RunResult) -> bool:
    """Whether a tracker has the contender's calls of a case run to show (a judge's are apart)."""
    return any(not call.get("judge") for call in result.exchanges)


def _exchange(call: Mapping[str, Any]) -> tuple[object, Any, Usage, str | None]:
    """A model call as a tracker shows it: the messages sent, the answer, what it spent, why it ended."""
    request, completion = call["request"], call["completion"]
    sent = request.get("messages") or [
        {"role": role, "content": request[role]} for role in ("system", "user") if request.get(role) is not None
    ]
    if completion is None:
        return sent, None, Usage(), None
    answer = completion.message or {"role": "assistant", "content": completion.text}
    return sent, answer, completion.usage, completion.finish_reason


class Logfire(Tracker):
    """OTLP traces over the OpenTelemetry SDK (the ``logfire`` extra): one trace per run, run
    → experiment → case → each model call, with OpenTelemetry's GenAI attributes and
    OpenInference's span kinds, so that Logfire, Phoenix and any OTLP viewer show each
    span's kind, model, input, output, tokens and cost. A case's span is current on the
    thread that runs it: the app's own spans nest under their case. Its own tracer
    provider; the global one is left alone. As the logfire SDK does, spans go to Logfire
    with ``LOGFIRE_TOKEN``, and also to ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` when one
    is set. Subclass it, overriding ``exporter``, for another backend.
    """

    name = "logfire"
    env_key = "LOGFIRE_TOKEN"
    packages = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
    extra = "logfire"
    OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    DIAGNOSTICS_LIMIT = 4096
    TEXT_LIMIT = 65536  # an input or output longer than this is cut

    def __init__(self, context: Mapping[str, object] | None = None) -> None:
        super().__init__(context)
        self.provider: Any = None
        self.spans: dict[object, Any] = {}  # "run", id(experiment), (id(experiment), case id, repeat) -> span
        self.failures: list[tuple[int, str]] = []  # (spans, where) of each export refused
        self.lock = threading.RLock()
        self.spent, self.errors = Usage(), 0  # the run's, for its root span
        self.claimed = False  # a span of the run was sent as it started
        self.board: dict[str, dict[str, object]] = {}  # each experiment's score, errors and cost: the run's output
        # imported now, before any experiment's clock, not by the first case's span beside the cases
        for module in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"):
            importlib.import_module(module)

    @classmethod
    def problems(cls) -> list[str]:
        found = super().problems()
        if any(os.environ.get(v) for v in cls.OTEL_VARIABLES):  # they stand in for the token
            found = [p for p in found if str(cls.env_key) not in p]
        return found

    @classmethod
    def note(cls) -> str | None:
        chosen = [v for v in cls.OTEL_VARIABLES if os.environ.get(v)]
        beside = " and to Logfire (LOGFIRE_TOKEN), as the logfire SDK sends them" if os.environ.get(cls.env_key) else ""
        return f"logfire: spans go to {', '.join(chosen)}{beside}" if chosen else None

    def exporter(self) -> object:
        """Logfire's own span exporter (OTLP/HTTP, the region read from the token); None without a token."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        token = os.environ.get("LOGFIRE_TOKEN", "")
        if not token:
            return None
        region = re.match(r"pylf_v\d+_([a-z]+)_", token)
        base = os.environ.get("LOGFIRE_BASE_URL") or (
            "https://logfire-eu.pydantic.dev" if region and region[1] == "eu" else "https://logfire-us.pydantic.dev"
        )
        return OTLPSpanExporter(endpoint=f"{base.rstrip('/')}/v1/traces", headers={"Authorization": token})

    def _span(
        self, key: object, name: str, parent: Any, attributes: Mapping[str, object], start: float | None = None
    ) -> Any:
        """A span under ``parent`` (None: the run's root), kept under ``key``."""
        from opentelemetry import context, trace

        with self.lock:
            if self.provider is None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor

                project = self.context.get("project") or self.context.get("suite") or "agent-evals"
                resource = Resource.create(  # Phoenix files the spans under the project
                    {
                        "service.name": "agent-evals",
                        "service.version": __version__,
                        "openinference.project.name": project,
                    }
                )
                self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
                exporters = [self.exporter()]
                if any(os.environ.get(v) for v in self.OTEL_VARIABLES) and os.environ.get(
                    "OTEL_TRACES_EXPORTER", "otlp"
                ).lower() in ("otlp", ""):
                    exporters.append(OTLPSpanExporter())
                for inner in filter(None, exporters):
                    proxy: Any = _ExportProxy(inner, self.failures)
                    self.provider.add_span_processor(BatchSpanProcessor(proxy))
            within = context.Context() if parent is None else trace.set_span_in_context(parent)
            start_ns = None if start is None else int(start * 1e9)
            tracer = self.provider.get_tracer("agent_evals", __version__)
            span = tracer.start_span(name, within, attributes=attributes, start_time=start_ns)
            if key is not None:
                self.spans[key] = span
        return span

    def _experiment_span(self, experiment: Experiment) -> Any:
        with self.lock:  # made by whichever thread comes first: its start, or the first case's begin
            return self.spans.get(id(experiment)) or self._new_experiment_span(experiment)

    def _new_experiment_span(self, experiment: Experiment) -> object:
        if (root := self.spans.get("run")) is None:
            run = {k: str(self.context.get(k)) for k in ("stamp", "command", "log_dir")}
            # relative to the suite: no local path leaves the machine
            run["log_dir"] = os.path.relpath(run["log_dir"], str(self.context.get("root") or "."))
            attributes = {f"agent_evals.{k}": v for k, v in run.items()} | {"suite": self.context.get("suite") or ""}
            attributes["input.value"] = f"agent-evals {run['command']} of suite {attributes['suite']}"
            root = self._span("run", f"agent-evals {run['command']} {run['stamp']}", None, _CHAIN | attributes)
        c = experiment.contender
        attributes = {
            "suite": self.context.get("suite") or "",
            "project": self.context.get("project") or "",
            "model": c.model,
            "gen_ai.request.model": c.model,
            "provider": experiment.provider.name,
            "effort": c.effort or "default",
            "dataset": experiment.dataset,
            "cases": len(experiment.cases),
            "repeat": experiment.repeat,
        }
        attributes |= {k: v for k, v in (("temperature", c.temperature), ("max_tokens", c.max_tokens)) if v is not None}
        return self._span(id(experiment), f"experiment {experiment.name}", root, _CHAIN | attributes)

    def start(self, experiment: Experiment) -> None:
        self._experiment_span(experiment)
        if not self.claimed and (root := self.spans.get("run")) is not None:  # on the tracker's thread
            # Phoenix files a trace under the project of its first span to arrive: the app's own
            # spans (their provider's resource names no project) would take the whole run to
            # "default". A span sent at once, before any case ends, claims it for the suite's.
            self.claimed = True
            self._span(None, "agent-evals run started", root, _CHAIN).end()
            self.provider.force_flush()

    @contextlib.contextmanager
    def begin(self, experiment: Experiment, case: Case, repeat: int) -> Iterator[None]:
        from opentelemetry import trace

        label = f"{case.id}#{repeat}" if repeat or experiment.repeat > 1 else case.id
        key = (id(experiment), case.id, repeat)
        # --batch runs a case once per round: every round goes in the span its first opened, ended once
        span = self.spans.get(key) or self._span(
            key, f"case {label}", self._experiment_span(experiment), {}, time.time()
        )
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            yield

    def record(self, result: RunResult) -> None:
        experiment, c, usage = result.experiment, result.experiment.contender, result.usage
        end = result.ended or time.time()
        span = self.spans.pop((id(experiment), result.case.id, result.repeat), None)
        if span is None:  # finished in an earlier run (--resume)
            span = self._span(
                None, f"case {result.label}", self._experiment_span(experiment), {}, end - result.duration
            )
        output = result.reply.output if result.reply is not None else None
        attributes: dict[str, object] = {
            "openinference.span.kind": "CHAIN",
            "input.value": _redact(result.case.input)[: self.TEXT_LIMIT],
            "output.value": _redact(_json_dumps(_jsonable(output, mend=True)))[: self.TEXT_LIMIT],
            **_JSON_OUTPUT,
            "gen_ai.request.model": c.model,
            "case.id": result.case.id,
            "case.dataset": result.case.dataset,
            "case.variant": result.case.variant,
            "case.repeat": result.repeat,
            "duration_s": result.duration,
            "tokens.input": usage.input_tokens,
            "tokens.output": usage.output_tokens,
            "cost_usd": usage.cost_usd,
            "retries": result.retries,
            "turns": result.turns,
        }
        if not _asked(result):  # no call went through the model: the case is the one LLM span viewers sum
            attributes |= self._genai(experiment, usage) | {"openinference.span.kind": "LLM"}
        if result.score is not None:
            attributes["score"] = float(result.score.value)
            attributes |= {f"metric.{k}": float(v) for k, v in result.score.metrics.items() if v is not None}
            attributes |= {f"outcome.{k}": v for k, v in result.score.outcomes.items() if isinstance(v, int | float)}
            if result.score.diagnostics:
                diagnostics = _redact(_json_dumps(dict(result.score.diagnostics)))
                attributes["diagnostics"] = diagnostics[: self.DIAGNOSTICS_LIMIT]
        if result.reply is not None and self.context.get("options", {}).get("include_replies"):
            attributes["reply.raw"] = _redact(_json_dumps(result.reply.raw))[: self.DIAGNOSTICS_LIMIT]
        span.set_attributes(attributes)
        for call in result.exchanges:
            self._call_span(span, experiment, call)
        _failed_span(span, result.error, result.traceback)
        span.end(end_time=int(end * 1e9))
        self.spent, self.errors = self.spent + usage, self.errors + (result.error is not None)

    def _genai(
        self, experiment: Experiment, usage: Usage, finish: str | None = None, judge: Mapping[str, object] | None = None
    ) -> dict[str, object]:
        """A model call in OpenTelemetry's GenAI terms and OpenInference's, cost included
        (``judge``: the judge model's call, at temperature 0, with its provider)."""
        c, provider = experiment.contender, experiment.provider.name
        if judge:
            c, provider = Contender(str(judge["judge"]), temperature=0.0), str(judge.get("provider") or provider)
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": provider,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": c.model,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            # Phoenix prices a call from its own table by the bare model name, and only when no
            # llm.provider narrows it to models of that provider (its built-in ones have none)
            "llm.model_name": c.model.rpartition("/")[2],
            "llm.system": c.model.partition("/")[0] if "/" in c.model else provider,
            "llm.token_count.prompt": usage.input_tokens,
            "llm.token_count.completion": usage.output_tokens,
            "llm.token_count.total": usage.input_tokens + usage.output_tokens,
            "llm.cost.total": usage.cost_usd,
            "operation.cost": usage.cost_usd,  # Logfire's
        }
        settings = (("temperature", c.temperature), ("max_tokens", c.max_tokens))
        attributes |= {f"gen_ai.request.{k}": v for k, v in settings if v is not None}
        return attributes | ({"gen_ai.response.finish_reasons": [finish]} if finish else {})

    def _call_span(self, parent: object, experiment: Experiment, call: Mapping[str, Any]) -> None:
        """A model call's span; a judge's is an EVALUATOR span, never an LLM span summed as the case's."""
        sent, answer, spent, finish = _exchange(call)
        judge = call.get("judge")
        attributes = self._genai(experiment, spent, finish, call if judge else None) | {
            "openinference.span.kind": "EVALUATOR" if judge else "LLM",
            "input.value": _redact(_json_dumps(_jsonable(sent, mend=True)))[: self.TEXT_LIMIT],
            "input.mime_type": "application/json",
        }
        if answer is not None:
            text = answer.get("content") if isinstance(answer.get("content"), str) else _json_dumps(answer)
            attributes["output.value"] = _redact(text)[: self.TEXT_LIMIT]
        name = f"judge {judge}" if judge else f"chat {experiment.contender.model}"
        span = self._span(None, name, parent, attributes, call["start"])
        _failed_span(span, call["error"])
        span.end(end_time=int(call["end"] * 1e9))

    def finish(self, experiment: Experiment, summary: Summary) -> Mapping[str, object]:
        from opentelemetry import trace

        span = self._experiment_span(experiment)
        del self.spans[id(experiment)]
        totals = {
            "cases.finished": summary.cases,
            "errors": summary.errors,
            "cost_usd": summary.usage.cost_usd,
            "tokens.input": summary.usage.input_tokens,
            "tokens.output": summary.usage.output_tokens,
        }
        span.set_attributes(totals | {f"mean.{k}": v for k, v in summary.means.items() if v is not None})
        # the figure the tables rank by: every case that raised counted as wrong, never a 1 beside 6 errors
        judged = summary.scored + summary.errors
        ranked = (summary.score or 0.0) * summary.scored / judged if judged else None
        scores: dict[str, object] = {"score": ranked, "score_of_answered": summary.score}
        span.set_attributes({"output.value": _json_dumps(totals | scores), **_JSON_OUTPUT})
        self.board[experiment.name] = scores | {"errors": summary.errors, "cost_usd": totals["cost_usd"]}
        if summary.errors:  # an experiment some of whose cases raised is an error in a trace, as they are
            span.set_status(trace.Status(trace.StatusCode.ERROR, f"{_n(summary.errors, 'case')} raised"))
        span.end()
        return {"url": None}

    def close(self) -> None:
        """End the run's trace and send what is left; an export that was refused is raised."""
        if (root := self.spans.pop("run", None)) is not None:
            from opentelemetry import trace

            usage = self.spent
            root.set_attributes({"cost_usd": usage.cost_usd, "tokens.input": usage.input_tokens, "errors": self.errors})
            root.set_attributes({"tokens.output": usage.output_tokens, "output.value": _json_dumps(self.board)})
            root.set_attributes(_JSON_OUTPUT)
            if self.errors:
                root.set_status(trace.Status(trace.StatusCode.ERROR, f"{_n(self.errors, 'case')} raised"))
            root.end()
        if self.provider is not None:
            self.provider.force_flush()
        if self.failures:
            refused = sum(n for n, _ in self.failures)
            raise RuntimeError(f"export failed: {refused} spans were not accepted by {self.failures[0][1]}")


_JSON_OUTPUT = {"output.mime_type": "application/json"}  # OpenInference: viewers show the output as JSON
_CHAIN = {"openinference.span.kind": "CHAIN"}  # a span that holds others (run, experiment, case)


def _failed_span(span: Any, error: str | None, trace_text: str | None = None) -> None:
    """A failed case or call, as OpenTelemetry records an exception: an event and an error status."""
    if error:
        from opentelemetry import trace

        kind, _, message = error.partition(": ")
        event = {"exception.type": kind, "exception.message": message, "exception.stacktrace": trace_text or ""}
        span.add_event("exception", event)
        span.set_status(trace.Status(trace.StatusCode.ERROR, error))


class _ExportProxy:
    """An exporter that delegates to another and notes each export it was refused: the
    SDK's ``force_flush`` says success even when exports fail."""

    def __init__(self, inner: Any, failures: list[tuple[int, str]]) -> None:
        self._inner, self.failures = inner, failures

    def export(self, spans: Any) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self._inner.export(spans)
        if result != SpanExportResult.SUCCESS:
            where = getattr(self._inner, "_endpoint", "the endpoint")
            self.failures.append((len(spans), str(where)))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._inner.force_flush(timeout_millis))


def _builtin_trackers() -> list[type[Tracker]]:
    return [LocalTracker, Braintrust, Logfire]


def _choose_tracker(suite: _Suite, flag: str | None, local: bool, notes: list[str]) -> type[Tracker] | None:
    """The one remote tracker: --tracker, then tracker:, then the only key set."""
    remotes = {n: t for n, t in suite.trackers.items() if n != "local"}
    names = ", ".join(["none", *remotes]) if remotes else "none"
    where = _display(suite.config.path)
    if local or flag == "none":
        notes.append("tracker: none beside the local log (--local or --tracker none)")
        return None
    for source, name in (("--tracker", flag), (f"{where}: tracker:", suite.config.tracker)):
        if name:
            if name == "none":
                notes.append(f"tracker: none ({source} none)")
                return None
            if name not in remotes:
                raise ConfigError(f"{source} {name}: unknown tracker{_hint(name, remotes)}; known: {names}")
            notes.append(f"tracker: {name} (chosen by {source})")
            notes += filter(None, [remotes[name].note()])
            return _check_tracker(remotes[name])
    keyed = [t for t in remotes.values() if t.env_key and os.environ.get(t.env_key)]
    if len(keyed) > 1:
        keys = " and ".join(t.env_key or "" for t in keyed)
        raise ConfigError(f"{keys} are both set: choose a tracker with --tracker NAME or tracker: in {where}")
    if keyed:
        notes.append(f"tracker: {keyed[0].name} (its key {keyed[0].env_key} is the only one set)")
        notes += filter(None, [keyed[0].note()])
        return _check_tracker(keyed[0])
    notes.append("tracker: none beside the local log (no tracker key is set)")
    return None


def _check_tracker(tracker: type[Tracker]) -> type[Tracker]:
    problems = tracker.problems()
    if problems:
        raise ConfigError(f"tracker {tracker.name}: {'; '.join(problems)}")
    return tracker


# ═══════════════════════════════════════════════════════════════════════════════
# Logs and journals: the files a run writes, and reading them back
# ═══════════════════════════════════════════════════════════════════════════════


_STAMP = re.compile(r"\.(\d{8}-\d{6}-\d{3}(?:-\d+)?(?:-shard\d+of\d+)?)\.jsonl?$")
LABELS = Path("labels") / "labels.jsonl"  # people's labels of judged answers, under the suite's evals/
# (the report's downloads, labels-*.jsonl, are read from the same folder)
_LABEL_KEYS = ("dataset", "case", "case_hash", "answer_hash", "metric")


def _read_labels(folder: Path) -> dict[tuple[str, ...], float]:
    """People's labels in ``folder``'s ``*.jsonl`` (``label``'s, and the report's downloads),
    by dataset, case, the case's and the answer's hashes and metric (a later line for the
    same answer wins). Only regular files are read (a FIFO would hang the command, a link
    loop fail it): anything else is one line; lines that are not labels are counted in one."""
    labels: dict[tuple[str, ...], float] = {}
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        try:
            if not path.is_file():  # a FIFO, a device, a link loop or to nothing
                _warn(f"{_display(path)}: not a regular file: left out (labels are read from files only)")
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            _warn(f"{_display(path)}: {e.strerror or e}: left out")
            continue
        labels |= _labels_in(path, text)
    return labels


def _labels_in(path: Path, text: str) -> dict[tuple[str, ...], float]:
    labels: dict[tuple[str, ...], float] = {}
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(line)
            key, value = tuple(row[k] for k in _LABEL_KEYS), float(row["label"])
        except (ValueError, RecursionError, TypeError, KeyError, OverflowError):
            key, value = (), math.nan
        if key and all(isinstance(k, str) for k in key) and 0 <= value <= 1:
            mark = _CHOSEN if row.get("chosen") is True else _PAIRED if row.get(_PAIRED) is True else None
            labels[(*key, mark) if mark else key] = value
        elif line.strip():
            bad.append(number)
    if bad:
        keys, lines = ", ".join(_LABEL_KEYS), ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        _warn(
            f"{_display(path)}: {_n(len(bad), 'line')} not a label ({lines}): each is a JSON object with {keys} "
            "and a label from 0 to 1"
        )
    return labels


def _suite_labels(logs: Iterable[tuple[Path, object]], flag: str = "") -> dict[tuple[str, ...], float]:
    """People's labels of the suite these ``logs`` came from, for the commands that read logs
    (``diff``, ``report``, ``runs``), from whatever folder they run in. ``logs``: each log's
    path and the labels folder its header names (relative to the log's folder; None before
    logs said). Tried in turn: those folders, a log's suite by the layout (``evals/`` beside
    ``log/agent-evals``), the suite found from here (or AGENT_EVALS_HELPER). None found: with
    a ``flag``, one line saying the judged figures are compared as judged."""
    folders: dict[Path, None] = {}
    for log, named in logs:
        if isinstance(named, str):
            folders[log.parent / named] = None
        if log.parent.parts[-2:] == LOG_DIR.parts:
            folders[log.parent.parent.parent / "evals" / LABELS.parent] = None
    with contextlib.suppress(ConfigError):
        folders[_find_suite(None, None)[2] / LABELS.parent] = None
    for folder in folders:
        if folder.is_dir():
            return _read_labels(folder)
    if flag:
        looked = ", ".join(map(_display, folders)) or "no suite found from here"
        _warn(f"{flag}: no labels found for these logs' suite ({looked}): judged figures are compared as judged")
    return {}


def _add_label(path: Path, key: Sequence[str], value: float) -> None:
    """One label, appended as one line and flushed: a Ctrl-C between labels loses none. A key
    ending ``_PAIRED`` is written with ``"paired": true``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    row: dict[str, object] = dict(zip(_LABEL_KEYS, key, strict=False)) | {"label": value}
    with path.open("a", encoding="utf-8") as file:
        file.write(_json_dumps(row | ({_PAIRED: True} if key[len(_LABEL_KEYS) :] == (_PAIRED,) else {})) + "\n")


def _log_folder(helper: str | None) -> Path:
    """The log folder of the suite found from here (or named by ``--helper``), else ./log/agent-evals."""
    try:
        return _find_suite(helper, None)[2].parent / LOG_DIR
    except ConfigError:
        if helper:  # a suite named by flag that is not there is an error, not a fallback
            raise
        return LOG_DIR


def _resume_files(
    arg: str | bool, log_dir: Path, flag: str = "--resume", shard: str | None = None
) -> tuple[str, list[Path]]:
    """The stamp of the run ``flag`` names and its logs and journals: the newest run's,
    LOG's, or a stamp's as ``agent-evals runs`` lists it (an unambiguous prefix, or ``latest``).
    A ``shard`` (K/N) looks at that shard's runs alone: a sibling's are never its own."""
    path = log_dir if arg is True else Path(str(arg))
    named = flag if arg is True else f"{flag} {arg}"
    mine = "-shard{}of{}".format(*shard.split("/")) if shard else ""

    def stamps_in(folder: Path) -> list[str]:
        found = {m[1] for p in folder.iterdir() if (m := _STAMP.search(p.name))} if folder.is_dir() else set()
        return sorted(s for s in found if s.endswith(mine))

    if isinstance(arg, str) and not path.exists() and (arg == "latest" or re.fullmatch(r"\d{8}(-[\d-]*)?", arg)):
        folder = log_dir if log_dir.is_dir() else _log_folder(None)
        stamps = stamps_in(folder)
        chosen = stamps[-1:] if arg == "latest" else [s for s in stamps if s.startswith(arg)]
        if len(chosen) != 1:
            found = "no run" if not chosen else f"{len(chosen)} runs ({', '.join(chosen[:3])}...)"
            raise ConfigError(f"{named}: {found} with that stamp in {_display(folder)}; agent-evals runs lists them")
        return chosen[0], sorted(p for p in folder.iterdir() if f".{chosen[0]}." in p.name and _STAMP.search(p.name))
    if path.is_file():
        match = _STAMP.search(path.name)
        if not match:
            raise ConfigError(f"{named}: not an agent-evals log or journal (NAME.STAMP.json or .jsonl)")
        stamp, folder = match[1], path.parent
        if not stamp.endswith(mine):
            raise ConfigError(f"{named}: that is not a run of shard {shard}; give one of its own, or the folder")
    elif path.is_dir() or arg is True:  # the default folder: absent before the first run
        if not (stamps := stamps_in(path)):
            why = {
                "--resume": f"nothing to resume{f' for shard {shard}' * bool(mine)}",
                "label": "no run's answers to label; run agent-evals compare first",
            }.get(flag, "no earlier run to compare with; run once without --baseline first, or name a log")
            raise ConfigError(f"{named}: no logs or journals in {_display(path)}; {why}")
        stamp, folder = stamps[-1], path
    else:
        raise ConfigError(f"{named}: no such file or folder")
    return stamp, sorted(p for p in folder.iterdir() if _STAMP.search(p.name) and f".{stamp}." in p.name)


def _load_previous(
    records: Mapping[tuple[str, str], Mapping[str, Any]], cases: Sequence[Case], retry_errors: bool, edited: set[str]
) -> dict[tuple[str, str], dict[tuple[str, int], RunResult]]:
    """Finished case runs of an earlier run, by (contender, dataset) and (case id, repeat);
    a case edited since that run (its input, expected or metadata) is asked again, its key in ``edited``."""
    known = {(c.dataset, c.id): c for c in cases}
    hashes: dict[str, str] = {}
    out: dict[tuple[str, str], dict[tuple[str, int], RunResult]] = {}
    for key, record in records.items():
        for row in record.get("rows", ()):
            case = known.get((record["dataset"], row.get("case")))
            error = row.get("error")
            if case is None or (error and (retry_errors or str(error).startswith(_ABANDONED) or _BUDGET in str(error))):
                continue
            if row.get("case_hash") and row["case_hash"] != hashes.setdefault(case.key, _case_hash(case)):
                edited.add(case.key)
                continue
            out.setdefault(key, {})[(case.id, int(row.get("repeat") or 0))] = _result_from_row(row, case)
    return out


def _unfinished_batches(
    records: Mapping[tuple[str, str], Mapping[str, object]],
    previous: Mapping[tuple[str, str], Mapping[tuple[str, int], RunResult]],
    resend: bool = False,
) -> dict[tuple[str, str], list[dict[str, object]]]:
    """The batches (``--batch``) an earlier run sent for case runs it did not finish, by
    experiment. A record that cannot be read, or a batch being sent when the run ended (its
    id never written), stops the resume naming it: its batch may be running, and sending its
    requests again would pay for them twice. So do the batches whose submission got no answer
    (each named, all in one line), unless ``resend`` (--resend-lost) says none is held."""
    out: dict[tuple[str, str], list[dict[str, object]]] = {}
    lost = [
        _lost(record, batch)
        for record in records.values()
        for batch in _batch_records(record)
        if str(batch.get("failed", "")).startswith(_UNSURE)
    ]
    if lost and not resend:
        raise ConfigError(
            f"--resume: {_n(len(lost), 'batch submission')} of that run got no answer, so the provider may hold "
            f"{'them' if len(lost) > 1 else 'it'}: {'; '.join(lost)}. Look at your batches there and cancel any it "
            "holds, then add --resend-lost to send them again (never sent blind: each would be paid twice)"
        )
    for key, record in records.items():
        done, sending, settled = previous.get(key, {}), [], set()
        batches, where = record.get("batches"), f"--resume: {record.get('read_from', record.get('experiment'))}"
        for n, batch in enumerate(batches if isinstance(batches, list) else (), 1):
            runs = _batch_runs(batch, f"{where}: batch record {n}")
            requests = json.dumps(batch["requests"], sort_keys=True)
            if "id" in batch:
                settled.add(requests)
                if any(run not in done for run in runs):
                    out.setdefault(key, []).append(batch)
            elif "failed" in batch:
                settled.add(requests)
            else:
                sending.append((n, batch, requests, len(runs)))
        for n, batch, requests, size in sending:
            if requests not in settled:
                raise ConfigError(
                    f"{where}: batch record {n} (round "
                    f"{_shown(batch.get('round'))}, {_n(size, 'request')}) was being sent when the run ended, and "
                    "its id was never written: it may be running at the provider. Find it there (GET /api/v1/batches), "
                    "or delete that line of the journal to ask its cases again, paying for them twice if it ran"
                )
    return out


def _batch_records(record: Mapping[str, object]) -> list[dict[str, object]]:
    """A logged experiment's batch records that are records (the rest are named where read)."""
    batches = record.get("batches")
    return [b for b in batches if isinstance(b, dict)] if isinstance(batches, list) else []


def _lost(record: Mapping[str, object], batch: Mapping[str, object]) -> str:
    """A batch whose submission got no answer, as the stop and --resume name it."""
    model = _fields(record.get("contender")).get("model")
    size = _n(len(_fields(batch.get("requests"))), "request")
    return f"[{record.get('dataset')}] {batch.get('judge') or model} round {_shown(batch.get('round'))} ({size})"


def _batch_runs(batch: object, where: str) -> set[tuple[str, int]]:
    """The case runs (case id, repeat) a journal's batch record asked for, checked: a record
    that cannot be read is named, never dropped (its batch may be running, and paid for)."""
    requests = batch.get("requests") if isinstance(batch, dict) else None
    runs = [str(run).rpartition("#") for run in requests.values()] if isinstance(requests, dict) else []
    problem = "no requests" if not runs else ""
    if (
        isinstance(batch, dict)
        and "id" in batch
        and not (isinstance(batch["id"], str) and _BATCH_ID.fullmatch(batch["id"]))
    ):
        problem = f"an id that is no batch's: {_shown(batch['id'])[:80]}"
    if any(not case or not _is_count(n) for case, _, n in runs):
        problem = "a case run that is not case#repeat"
    if problem:
        raise ConfigError(
            f"{where} cannot be read ({problem}): its batch may be running at the provider. Mend the record, or "
            "delete it to ask its cases again (paying for them twice if it ran)"
        )
    return {(case, int(n)) for case, _, n in runs}


def _replayed(value: object) -> tuple[int, int]:
    """A row's ``replayed`` back: [answers a response cache gave, those not asked of it]."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(n, int) and n >= 0 for n in value):
        return value[0], value[1]
    return 0, 0


def _result_from_row(row: Mapping[str, Any], case: Case) -> RunResult:
    """A logged row back into a ``RunResult`` (the experiment is attached when it runs)."""
    reply = None
    transcript = row.get("transcript") if isinstance(row.get("transcript"), list) else None
    if row.get("error") is None or row.get("output") is not None or row.get("reply_error"):
        reply = Reply(output=row.get("output"), raw=row.get("raw"), error=row.get("reply_error"), transcript=transcript)
    score = None
    if row.get("score") is not None:
        score = Score(row["score"], row.get("metrics") or {}, row.get("outcomes") or {}, row.get("diagnostics") or {})
    return RunResult(
        None,
        case,
        reply,
        score,
        float(row.get("duration") or 0.0),
        row.get("error"),
        Usage.coerce(row.get("usage")) or Usage(),
        row.get("traceback"),
        int(row.get("retries") or 0),
        int(row.get("repeat") or 0),
        int(row.get("cached") or 0),
        float(row.get("saved_usd") or 0.0),
        int(row.get("turns") or 0),
        row.get("finish_reason") if isinstance(row.get("finish_reason"), str) else None,
        transcript,
        served=tuple(s for s in row.get("served") or () if isinstance(s, dict)),
        replayed=_replayed(row.get("replayed")),
        case_hash=row.get("case_hash") if isinstance(row.get("case_hash"), str) else None,
        judge_usage=Usage.coerce(row.get("judge_usage")) or Usage(),
        chances=_chances(row),
    )


def _chances(row: Mapping[str, object]) -> dict[str, float]:
    """A row's ``judge_chance``: each judged metric's probability of pass the judge gave, from 0 to 1."""
    given = row.get("judge_chance")
    return {
        str(k): float(v)
        for k, v in (given.items() if isinstance(given, dict) else ())
        if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1
    }


def _experiment_record(experiment: Experiment) -> dict[str, object]:
    """An experiment in the shape of its log: contender, dataset and rows."""
    rows = [_log_row(r) for r in experiment.results]
    return {"contender": experiment.contender.to_json(), "dataset": experiment.dataset, "rows": rows}


def _read_run(arg: str | bool, log_dir: Path, flag: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every experiment of the logged run that ``arg`` names (see ``_resume_files``)."""
    _, files = _resume_files(arg, log_dir, flag)
    return _read_records(files, flag)


def _read_records(
    files: Iterable[Path], flag: str, skipped: list[str] | None = None
) -> dict[tuple[str, str], dict[str, object]]:
    """A run's experiments by (contender, dataset): each one's JSON log, or its journal
    when the run never wrote the log (killed). A file that is not an agent-evals log of
    the expected shape is one error naming it (given ``skipped``, its message goes there
    and the file is left out); a journal's last line cut short by a kill is left out with
    one warning (that case is asked again)."""
    run: dict[tuple[str, str], dict[str, object]] = {}
    for path in sorted(files, key=lambda p: p.suffix == ".json"):  # a JSON log wins over its journal
        where = f"{flag}: {_display(path)}"
        try:
            key, record = _read_record(path, where)
        except ConfigError as e:
            if skipped is None:
                raise
            skipped.append(str(e))
            continue
        run[key] = record
    for record in run.values():
        if skipped is not None and record.get("journal"):
            _warn(f"{flag}: {record['experiment']} ended before writing its log: its journal is shown")
    return run


def _read_record(path: Path, where: str) -> tuple[tuple[str, str], dict[str, object]]:
    """One log or journal as (its key, its record); a ConfigError naming it when it cannot be."""
    try:
        text = path.read_bytes().decode("utf-8")
        record = _Journal.read(text, path) if path.suffix == ".jsonl" else json.loads(text)
        _check_record(record)
        if stamp := _STAMP.search(path.name):  # a journal's header has none
            record.setdefault("stamp", stamp[1])
        record["read_from"] = _display(path)
        return (json.dumps(record["contender"], sort_keys=True), record["dataset"]), record
    except OSError as e:
        raise ConfigError(f"{where}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as e:
        raise ConfigError(f"{where}: not an agent-evals log of this version ({_visible(str(e), True)})") from None


_CONTENDER_TYPES = {"model": (str,), "effort": (str, type(None)), "temperature": (int, float, type(None))}
_CONTENDER_TYPES |= {"max_tokens": (int, type(None)), "provider": (str, type(None)), "routing": (str, type(None))}
_CONTENDER_TYPES |= {"tier": (str, type(None))}
_NUMBER = (int, float)
_ROW_TYPES: dict[str, tuple[type, ...]] = {
    "case": (str,),
    "case_hash": (str, type(None)),
    "judge_usage": (dict, type(None)),
    "judge_chance": (dict, type(None)),
    "repeat": (int, type(None)),
    "score": (*_NUMBER, type(None)),
    "metrics": (dict, type(None)),
    "error": (str, type(None)),
    "reply_error": (str, type(None)),
    "usage": (dict, type(None)),
    "retries": (int, type(None)),
    "cached": (int, type(None)),
    "saved_usd": (*_NUMBER, type(None)),
    "duration": (*_NUMBER, type(None)),
    "outcomes": (dict, type(None)),
    "diagnostics": (dict, type(None)),
    "turns": (int, type(None)),
    "transcript": (list, type(None)),
    "served": (list, type(None)),
    "replayed": (list, type(None)),
}


def _check_record(record: Any) -> None:
    """Raise ValueError naming the first field a logged experiment has of the wrong shape
    (a number that is NaN or infinite among them; a cost nobody knows is taken as no price)."""

    def check(value: object, kinds: tuple[type, ...], name: str) -> None:
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"{name} is {_shown(value)}")
        if isinstance(value, float) and not math.isfinite(value) and not name.endswith("cost_usd"):
            raise ValueError(f"{name} is {value}")

    check(record, (dict,), "the document")
    check(record.get("contender"), (dict,), "contender")
    for key, value in record["contender"].items():
        check(value, _CONTENDER_TYPES.get(key, ()), f"contender.{key}")
    check(record["contender"].get("model"), (str,), "contender.model")
    check(record.get("dataset"), (str,), "dataset")
    check(record.get("rows", []), (list,), "rows")
    check(record.get("metrics", []), (list, type(None)), "metrics")
    for n, metric in enumerate(record.get("metrics") or ()):
        check(metric, (dict,), f"metrics[{n}]")
        check(metric.get("name"), (str,), f"metrics[{n}].name")
    check(record.get("cases", {}), (dict, type(None)), "cases")
    for case_id, logged in (record.get("cases") or {}).items():
        check(logged, (dict,), f"cases.{case_id}")
    check(record.get("summary", {}), (dict, type(None)), "summary")
    check((record.get("summary") or {}).get("duration"), (*_NUMBER, type(None)), "summary.duration")
    for key in ("order", "repeat"):
        check(record.get(key), (int, type(None)), key)
    for key in ("not_run", "plan"):  # what report and runs read of an experiment cut short
        check(record.get(key), (list, type(None)), key)
    check(record.get("decided"), (str, type(None)), "decided")
    for n, row in enumerate(record.get("rows", ())):
        check(row, (dict,), f"rows[{n}]")
        for key, kinds in _ROW_TYPES.items():
            if key in row or key == "case":
                check(row.get(key), kinds, f"rows[{n}].{key}")
        for name, value in (row.get("metrics") or {}).items():
            check(value, (*_NUMBER, type(None)), f"rows[{n}].metrics.{name}")
        for spent in ("usage", "judge_usage"):  # the contender's spend, and its judge's
            for name, value in (row.get(spent) or {}).items():
                check(value, _NUMBER, f"rows[{n}].{spent}.{name}")


def _row_values(
    record: Mapping[str, Any],
    metric: str,
    labels: Mapping[tuple[str, ...], float] = {},
    errors_as: float | None = None,
    flaky: str = "mean",
) -> _Values:
    """A logged experiment's per-case (or per-cluster) means of ``metric`` (repeats taken as
    ``flaky`` says: see ``_case_values``; errors out unless ``errors_as`` gives them a value);
    a judged metric's (one its record declares so, or any once people's ``labels`` are given)
    with the labels of its answers (``_units``)."""
    entries, planned, marked = [], _planned(labels, metric), set[str]()
    judged = any(
        isinstance(m, dict) and m.get("name") == metric and m.get("judged") for m in record.get("metrics") or ()
    )
    for row in record.get("rows", ()):
        wrong = errors_as if errors_as is not None or flaky == "mean" else 0.0  # judging repeats: an error is wrong
        value = (row.get("metrics") or {}).get(metric) if not row.get("error") else wrong
        if value is not None:
            unit, known = _unit(record["dataset"], row["case"], row.get(CLUSTER)), row.get("case_hash")
            answer = None
            if (judged or (labels and isinstance(known, str))) and not row.get("error"):
                answer = _answer_hash(row.get("output"))
            key = (record["dataset"], str(row["case"]), str(known), answer or "", metric)
            label, later = (labels.get(key), labels.get(key, labels.get((*key, _PAIRED)))) if answer else (None, None)
            if answer and (record["dataset"], str(row["case"])) in planned:
                marked.add(unit)
            chance = _chances(row).get(metric) if answer else None
            entries.append(((unit, row["case"]), float(value), label, answer, chance, later))
    return _units(entries, flaky, marked)


def _row_errors(record: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(cases with a run that raised, cases with a run that answered) of a logged experiment."""
    raised: set[str] = set()
    answered: set[str] = set()
    for row in record.get("rows", ()):
        (raised if row.get("error") else answered).add(str(row["case"]))
    return raised, answered


def _stamp() -> str:
    """A run's stamp: sortable, and distinct for runs a millisecond apart."""
    now = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}"


def _reserve_stamp(log_dir: Path, shard: str | None = None) -> str:
    """A stamp no other run holds: claimed by creating ``.run.<stamp>`` exclusively (two
    runs started in the same millisecond get ``-1``, ``-2`` ... after the second one), and
    never one whose files already exist. A shard's ends ``-shardKofN``: the shards of one
    run, started at once on many machines, never collide in the folder their logs meet in."""
    base, n = _stamp(), 0
    tail = "-shard{}of{}".format(*shard.split("/")) if shard else ""
    while True:
        stamp = (base if n == 0 else f"{base}-{n}") + tail
        try:
            os.mkdir(log_dir / f".run.{stamp}")
        except FileExistsError:
            n += 1
            continue
        except OSError as e:
            raise ConfigError(f"{_display(log_dir)}: cannot write the logs there ({e.strerror or e})") from None
        if not any(log_dir.glob(f"*.{stamp}.json*")):
            return stamp
        _release_stamp(log_dir, stamp)
        n += 1


def _release_stamp(log_dir: Path, stamp: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(log_dir / f".run.{stamp}")


def _check_target(value: str, flag: str) -> None:
    """Fail before any call when an output file named by a flag could not be written."""
    path = Path(value)
    where = f"{flag} {value}"
    if path.is_dir():
        raise ConfigError(f"{where}: is a folder; name a file")
    if not path.parent.is_dir():
        raise ConfigError(f"{where}: the folder {_display(path.parent)} does not exist; create it first")
    if path.exists() and not path.is_file():  # /dev/stdout, a pipe: written in place
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{where}: cannot be written (permission denied)")
        return
    probe = path.parent / f".agent-evals-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise ConfigError(
            f"{where}: cannot be written ({e.strerror or e}); name a file in a folder you can write"
        ) from None


def _check_writable(folder: Path) -> None:
    """Fail before any call when the logs could not be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"{_display(folder)}: cannot write the logs there ({e.strerror or e}); make it writable, "
            "or run from a project whose log/ folder you can write"
        ) from None


def _records_of(
    paths: Sequence[str], flag: str, partial: list[str] | None = None
) -> dict[tuple[str, str], dict[str, object]]:
    """The experiments of every run the paths name, refusing ones that do not belong
    together. The shards of one run (one ``run_id`` and count) are checked: a shard missing,
    or given twice (a retried job: the newer is kept), is said in ``partial`` and warned."""
    merged: dict[tuple[str, str], dict[str, object]] = {}
    suites: set[object] = set()
    declared: set[str] = set()
    runs: set[tuple[Path, ...]] = set()
    notes = [] if partial is None else partial
    skipped: list[str] | None = None if partial is None else []  # report shows what it can read
    for path in paths:
        try:
            stamp, files = _resume_files(path, Path(path))
        except ConfigError as e:
            raise ConfigError(str(e).replace("--resume", flag)) from None
        if Path(path).is_dir() or path == "latest":  # the newest run: all of its shards
            files = [*files, *_shard_siblings(files[0].parent, stamp)]
        if tuple(files) in runs:
            continue  # another file of a run already read: each run counts once
        runs.add(tuple(files))
        for key, record in _read_records(files, flag, skipped).items():
            if key in merged:
                old = merged[key]
                if not record.get("shard") or (old.get("shard"), old.get("run_id")) != (
                    record.get("shard"),
                    record.get("run_id"),
                ):
                    raise ConfigError(
                        f"{flag}: {record.get('experiment', key[1])} is in two of the logs given; "
                        "give each shard's run once"
                    )
                twice = f"shard {record['shard']}{_of_run(record.get('run_id'))} is given twice"
                older, newer = sorted((str(old["stamp"]), str(record["stamp"])))
                note = f"{twice} ({older} and {newer}): the newer, {newer}, is shown"
                notes += [] if note in notes else [note]
                record = max(old, record, key=lambda r: str(r["stamp"]))
            merged[key] = record
            suites.add(record.get("suite"))
            if record.get("metrics"):  # a journal declares none: it goes with any
                declared.add(json.dumps(record["metrics"], sort_keys=True))
    if skipped and not merged:
        raise ConfigError(skipped[0])
    for message in skipped or ():
        _warn(f"{message}; left out, the other files are shown")
    if len(suites - {None}) > 1:
        raise ConfigError(
            f"{flag}: the logs come from different suites ({', '.join(sorted(map(str, suites - {None})))})"
        )
    if len(declared) > 1:
        raise ConfigError(f"{flag}: the logs declare different metrics; report runs of one scorer together")
    notes += _missing_shards(merged.values())
    for note in notes:
        _warn(f"{flag}: {note}")
    return merged


def _missing_shards(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """A note for each run whose shards are not all among ``records``."""
    shards: dict[tuple[object, str], set[int]] = {}
    for record in records:
        if re.fullmatch(r"\d{1,6}/\d{1,5}", str(record.get("shard"))):  # no engine runs 100,000 shards
            k, n = record["shard"].split("/")
            shards.setdefault((record.get("run_id"), n), set()).add(int(k))
    notes = []
    for (run_id, n), present in shards.items():
        if missing := [f"{k}/{n}" for k in range(1, int(n) + 1) if k not in present]:
            notes.append(f"shard{'s' * (len(missing) > 1)} {', '.join(missing)}{_of_run(run_id)} missing: partial")
    return notes


def _of_run(run_id: object) -> str:
    return f" of run {run_id}" if run_id else ""


def _shard_siblings(folder: Path, stamp: str) -> list[Path]:
    """The files of the other shards of ``stamp``'s run in ``folder``: the stamps that end in
    the same shard count and whose headers name the same run id."""
    if not (count := re.search(r"-shard\d+(of\d+)$", stamp)):
        return []
    found: dict[str, list[Path]] = {}
    for path in folder.iterdir():
        if (m := _STAMP.search(path.name)) and m[1].endswith(count[1]):
            found.setdefault(m[1], []).append(path)

    mine = _header_fields(min(found.pop(stamp)), "run_id")["run_id"]  # a header that cannot be read: no sibling
    return [
        p for paths in found.values() if mine and _header_fields(min(paths), "run_id")["run_id"] == mine for p in paths
    ]


def _logged_metrics(records: Iterable[Mapping[str, Any]]) -> list[Metric]:
    for record in records:
        if record.get("metrics"):
            return [
                Metric(
                    m["name"], m.get("description", ""), primary=bool(m.get("primary")), judged=bool(m.get("judged"))
                )
                for m in record["metrics"]
            ]
    names = dict.fromkeys(n for r in records for row in r.get("rows", ()) for n in (row.get("metrics") or {}))
    if not names:
        raise ConfigError("the logs hold no scored case: nothing to report")
    return [Metric(name, primary=i == 0) for i, name in enumerate(names)]


def _logged_experiment(
    record: Mapping[str, Any],
    cases: Mapping[tuple[str, str], Case] | None = None,
    labels: Mapping[tuple[str, ...], float] = {},
) -> Experiment:
    """A logged experiment back as an ``Experiment`` with its results (for tables), and ``labels``."""
    provider = Provider()
    provider.name = str(record.get("provider") or "logged")
    dataset = record["dataset"]
    repeat, order = int(record.get("repeat") or 1), int(record.get("order") or 0)
    rows: list[tuple[Mapping[str, object], Case]] = []
    for row in record.get("rows", ()):
        if (case := (cases or {}).get((dataset, row["case"]))) is None:  # as the log keeps it
            logged = (record.get("cases") or {}).get(row["case"]) or {}
            metadata = {CLUSTER: row[CLUSTER]} if row.get(CLUSTER) is not None else {}
            variant, text = row.get("variant") or "", logged.get("input") or ""
            case = Case(row["case"], dataset, variant, text, logged.get("expected"), metadata=metadata)
        rows.append((row, case))
    every = list({case.id: case for _, case in rows}.values())
    experiment = Experiment(
        Contender(**record["contender"]), provider, dataset, every, 1, repeat, order=order, labels=labels
    )
    experiment.results = [dataclasses.replace(_result_from_row(row, case), experiment=experiment) for row, case in rows]
    experiment.duration = float((record.get("summary") or {}).get("duration") or 0.0)
    experiment.not_run, experiment.decided = list(record.get("not_run") or ()), record.get("decided")
    return experiment


def _label_of(experiment: Experiment) -> str:
    """How lines name an experiment: ``[dataset] contender``."""
    return f"[{experiment.dataset}] {experiment.contender.label}"


# ═══════════════════════════════════════════════════════════════════════════════
# Rendering: pure functions from results to text
# ═══════════════════════════════════════════════════════════════════════════════


# Table styles: (top, header rule, bottom) as (left, fill, joint, right), and the bar.
_STYLES = {
    "box": (("┌", "─", "┬", "┐"), ("├", "─", "┼", "┤"), ("└", "─", "┴", "┘"), "│"),
    "ascii": (("+", "-", "+", "+"), ("+", "-", "+", "+"), ("+", "-", "+", "+"), "|"),
}


def _cells(text: str) -> int:
    """The terminal cells ``text`` takes: East Asian wide and fullwidth characters (CJK, most
    emoji) two, combining marks and joiners none, every other character one."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(
        0 if unicodedata.category(c) in ("Mn", "Me", "Cf") else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], style: str = "box") -> str:
    """A bordered table; ``right`` marks the columns aligned right (numbers). Widths are in
    terminal cells (``_cells``): a CJK name or an emoji keeps the borders in line."""
    top, rule, bottom, bar = _STYLES[style]
    headers = [_visible(str(h), newlines=True) for h in headers]
    rows = [[_visible(str(v), newlines=True) for v in r] for r in rows]
    widths = [max(_cells(h), *(_cells(r[i]) for r in rows)) if rows else _cells(h) for i, h in enumerate(headers)]

    def line(edge: tuple[str, str, str, str]) -> str:
        left, fill, joint, end = edge
        return left + joint.join(fill * (w + 2) for w in widths) + end

    def cells(values: Sequence[str]) -> str:
        gaps = (" " * (w - _cells(v)) for v, w in zip(values, widths, strict=True))
        padded = (gap + v if r else v + gap for v, gap, r in zip(values, gaps, right, strict=True))
        return bar + bar.join(f" {p} " for p in padded) + bar

    return "\n".join([line(top), cells(headers), line(rule), *(cells(r) for r in rows), line(bottom)])


def _wrap(lines: Iterable[str], width: int) -> list[str]:
    """Lines folded at spaces to fit ``width`` (0: as they are), never inside a word; a folded
    line goes on under its text (a glossary entry's), or two spaces in."""
    import textwrap

    out = []
    for line in lines:
        if not width or len(line) < width:
            out.append(line)
            continue
        hang = re.match(r"\s*\S+\s{2,}", line)
        indent = " " * min(width // 2, hang.end() if hang else len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(line, width - 1, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    return out


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _fmt_time(seconds: float) -> str:
    return f"{seconds:.2f}s" if seconds < 100 else f"{seconds:.0f}s"


@dataclass(frozen=True, slots=True)
class _Row:
    """One line of a leaderboard: an experiment, or a contender across datasets."""

    dataset: str
    contender: Contender
    values: Mapping[str, _Values]  # metric -> dataset/id -> the case's mean over repeats
    errors: int
    runs: int  # case runs that finished, repeats included
    duration: float
    usage: Usage  # what this run spent
    lost: Usage  # what the runs that ended in an error spent
    strict: Mapping[str, _Values] = field(default_factory=dict)  # as ``values``, errors counted as 0
    saved: float = 0.0  # what the answers the cache gave cost when first paid for
    reasons: tuple[tuple[int, str], ...] = ()  # (count, masked message) of its errors, most common first
    repeat: int = 1  # --repeat: each case asked this often
    flaky: tuple[str, ...] = ()  # cases whose repeats disagree on the primary metric (errors as wrong)
    pass_k: float | None = None  # with repeats: the primary metric with each case at its worst repeat
    graded: bool = False  # the primary metric's scores are not all 0 or 1 (pass^k is then a worst repeat's)
    latency: tuple[float, float] | None = None  # p50 and p95 of its case runs' durations, seconds
    planned: int = 0  # the case runs it was to ask, when an interrupt or a killed shard left some out
    pass_ks: tuple[_Estimate, ...] = ()  # 0/1 scores with repeats: pass^1 .. pass^repeat, each with its interval

    def mean(self, metric: str) -> float | None:
        """Over its units, from 0 to 1 (a judged metric's corrected by labels: ``_point``)."""
        return _point(self.values.get(metric) or _Values())

    def strict_mean(self, metric: str) -> float | None:
        """The mean with every run that ended in an error counted as wrong: what the
        contender delivers per case attempted (the means themselves leave errors out)."""
        return _point(self.strict.get(metric) or self.values.get(metric) or _Values())

    def estimate(self, metric: str, ranked: bool = False) -> _Estimate | None:
        """The metric's mean with its interval; ``ranked``: with errors counted as wrong."""
        return _estimate_of((self.strict.get(metric) if ranked else None) or self.values.get(metric) or _Values())

    @property
    def cost(self) -> float:
        """What the answers cost: this run's spend and, for cached answers, their first price."""
        return self.usage.cost_usd + self.saved

    @property
    def cost_per_answer(self) -> float:
        """What one scored run costs: errors do not make a contender look cheap."""
        return self.cost / max(self.runs - self.errors, 1)


def _rows(experiments: Sequence[Experiment], metrics: Sequence[Metric], flaky: str = "mean") -> list[_Row]:
    """One row per experiment: datasets in their first order, each ranked (``_rank_key``);
    ``flaky`` says how a case whose repeats disagree counts (see ``_case_values``)."""
    out = []
    primary = _primary(metrics)
    for experiment in experiments:
        # each table, gate and summary of a report asks again: the row is made once
        made = (id(experiment.results), len(experiment.results), experiment.duration, tuple(metrics), flaky)
        key = (*made, id(experiment.labels), len(experiment.labels))
        if (row := experiment.rows.get(key)) is None:
            row = experiment.rows[key] = _row(experiment, metrics, primary, flaky)
        out.append(row)
    datasets = list(dict.fromkeys(r.dataset for r in out))
    return sorted(out, key=lambda r: (datasets.index(r.dataset), *_rank_key(r, primary)))


def _row(experiment: Experiment, metrics: Sequence[Metric], primary: Metric, flaky: str) -> _Row:
    """One experiment's row of the tables."""
    results = experiment.results
    labels = {m.name: experiment.labels if m.judged else None for m in metrics}  # only a judged metric has labels
    errored = [r for r in results if r.error is not None]
    repeated = experiment.repeat > 1
    repeats = _repeats(results, primary.name) if repeated else {}
    return _Row(
        experiment.dataset,
        experiment.contender,
        {m.name: _case_values(results, m.name, None, flaky, labels[m.name]) for m in metrics},
        len(errored),
        len(results),
        experiment.duration,
        Usage.total(r.usage for r in results),
        Usage.total(r.usage for r in errored),
        {m.name: _case_values(results, m.name, 0.0, flaky, labels[m.name]) for m in metrics} if errored else {},
        sum(r.saved for r in results),
        _reasons(r.error or "" for r in errored),
        experiment.repeat,
        tuple(_flaky(repeats.items())),
        _mean(_case_values(results, primary.name, 0.0, "wrong").values()) if repeated else None,
        any(v not in (0.0, 1.0) for values in repeats.values() for v in values),
        _latency([r.duration for r in results]),
        0 if experiment.decided else len(results) + len(experiment.not_run),
        _pass_ks(results, primary.name, experiment.repeat) if repeated else (),
    )


def _pass_ks(results: Sequence[RunResult], metric: str, repeat: int) -> tuple[_Estimate, ...]:
    """pass^k for k = 1 .. ``repeat`` over 0/1 scores (an error a wrong run): the chance that k
    runs of a case are all right. A case with c of its m runs right gives C(c, k) / C(m, k), the
    chance k of them drawn without replacement all are, unbiased for p^k as Chen et al.'s
    pass@k estimator is for pass@k (the share right on all m runs is biased low as pass^k for
    k < m; the share right on its first k wastes the rest); the mean is over units (a cluster's
    cases averaged first), with its 95% interval over them. None for graded scores, where
    "right" is not defined (100 cases of 5 repeats, 300 runs: means within 0.01 of the truth
    at every k, intervals covering it 93.3-94.7% of the time)."""
    units = {r.case.id: _unit(r.case.dataset, r.case.id, r.case.metadata.get(CLUSTER)) for r in results}
    repeats = _repeats(results, metric)
    if any(v not in (0.0, 1.0) for values in repeats.values() for v in values):
        return ()
    estimates = []
    for k in range(1, repeat + 1):
        per_unit: dict[str, list[float]] = {}
        for case, values in repeats.items():
            if len(values) >= k:
                chance = math.comb(int(sum(values)), k) / math.comb(len(values), k)
                per_unit.setdefault(units[case], []).append(chance)
        if (estimate := _estimate([sum(v) / len(v) for v in per_unit.values()])) is not None:
            estimates.append(estimate)
    return tuple(estimates)


def _run_lines(experiments: Sequence[Experiment], verbose: bool = False) -> list[tuple[str, bool]]:
    """What a run's STDERR says of each experiment after its tables, each line with whether
    it is a warning: retries, answers cut off at max_tokens, waits on the key's rate limit,
    who served it, answers replayed, costs that are not prices; with -v, its case times as
    users quote them."""
    lines = []
    for experiment in experiments:
        results, label = experiment.results, _label_of(experiment)
        if verbose and (latency := _latency([r.duration for r in results])):
            lines.append((f"latency {label}: p50 {latency[0]:.2f} s, p95 {latency[1]:.2f} s a case run", False))
        if retries := sum(r.retries for r in results):
            lines.append((f"retries {label}: {retries}", False))
        if cut := sum(r.finish_reason == "length" for r in results):
            limit = experiment.contender.max_tokens
            lines.append(
                (
                    f"truncated {label}: {cut} of {len(results)} answers stopped at the output limit "
                    f"(finish_reason: length; max_tokens {limit or 'the model default'}); they were scored as they "
                    "are: raise --max-tokens (or max_tokens:) if that is not meant",
                    True,
                )
            )
        if experiment.waits:
            held, summed = _held_back(experiment.waits)
            lines.append(
                (
                    f"rate-limited {label}: the key's rate limit held its calls back for {held:.1f} s of the run "
                    f"({summed:.1f} s summed over calls waiting side by side; paced with the run's other contenders "
                    "on that key; never retries, never errors)",
                    False,
                )
            )
        lines += [
            (line, True)
            for line in _served_lines(label, results, experiment.contender.tier, experiment.contender.model)
        ]
        lines += _replayed_lines(label, results)
        if odd := sum(r.usage.no_price for r in results):
            lines.append(
                (
                    f"{label}: {_n(odd, 'answer')} reported a cost that is not a price (NaN, infinite or below 0); "
                    "taken as unknown (the catalog's price, else $0)",
                    True,
                )
            )
    return lines


def _replayed_lines(label: str, results: Sequence[RunResult]) -> list[tuple[str, bool]]:
    """Answers OpenRouter's response cache gave: counted when the config let it, a warning
    when it answered requests sent with it off (a preset that turns it on)."""
    if not (hits := sum(r.replayed[0] for r in results)):
        return []
    runs = sum(r.replayed[0] > 0 for r in results)
    lines = [
        (
            f"replayed {label}: {_n(hits, 'answer')} in {runs} of {_n(len(results), 'case run')} came from "
            "OpenRouter's response cache (free, the answer an earlier identical request had)",
            False,
        )
    ]
    if unasked := sum(r.replayed[1] for r in results):
        lines.append(
            (
                f"replayed {label}: {_n(unasked, 'answer')} came from the response cache though agent-evals sent "
                "X-OpenRouter-Cache: false (a preset with cache_enabled?); a replayed answer is not an independent "
                "one, so repeats and intervals overstate agreement: turn the preset's cache off",
                True,
            )
        )
    return lines


def _served_lines(label: str, results: Iterable[RunResult], tier: str | None = None, asked: str = "") -> list[str]:
    """A line when one contender's cases were answered by more than one upstream, or more
    than one model (an alias that moved): scores can differ between them; when every answer
    came from one model other than ``asked`` (a dated snapshot of it, ``-2024-07-18``, is
    the same; a batch's answers say theirs too); and when a tier asked for (flex, priority,
    scale) was not the one that answered."""
    import collections

    results = list(results)
    lines = []
    served = collections.Counter(s["service_tier"] for r in results for s in r.served[-1:] if s.get("service_tier"))
    if tier in ("flex", "priority", "scale") and (
        other := {t: n for t, n in served.items() if t != tier and (t, tier) != ("fast", "priority")}
    ):
        each = ", ".join(f"{name} ({_n(n, 'case')})" for name, n in other.items())
        lines.append(f"tier {label}: asked for {tier}, answered on {each}; each is priced as billed (usage.cost)")
    for key, what, fix in (
        ("provider", "upstreams", "pin one with provider: {only: [NAME]}"),
        ("model", "models", "name the model itself, not an alias"),
    ):
        counts = collections.Counter(s[key] for r in results for s in r.served[-1:] if s.get(key))
        if len(counts) > 1:
            each = ", ".join(f"{name} ({_n(n, 'case')})" for name, n in counts.most_common())
            lines.append(
                f"{what} {label}: answered by {len(counts)} {what}, {each}; scores can differ between them: {fix}"
            )
        elif key == "model" and asked and len(counts) == 1:
            (model, n), own = counts.most_common()[0], re.escape(asked.rsplit("/", 1)[-1].split(":")[0].lower())
            if not re.fullmatch(rf"{own}(-\d{{4}}-?\d\d-?\d\d|-\d{{3,4}})?", model.rsplit("/", 1)[-1].lower()):
                lines.append(f"model {label}: asked for {asked}, every answer ({_n(n, 'case')}) came from {model}")
    return lines


def _cache_lines(experiments: Sequence[Experiment]) -> list[str]:
    """For each experiment the cache served: how many answers, and the spend not repeated."""
    lines = []
    for experiment in experiments:
        hits, runs = sum(r.cached for r in experiment.results), len(experiment.results)
        if hits:
            saved = sum(r.saved for r in experiment.results)
            lines.append(
                f"cache [{experiment.dataset}] {experiment.contender.label}: {hits} answers of {runs} runs from "
                "the cache; "
                f"{_fmt_cost(saved)} not spent again (the cost column counts what the answers cost; "
                f"this run spent {_fmt_cost(sum(r.usage.cost_usd for r in experiment.results))})"
            )
    return lines


def _latency(durations: list[float]) -> tuple[float, float] | None:
    """The median and the 95th percentile (nearest rank) of case runs' durations, to the
    microsecond a log keeps (so that ``report`` gives what the run gave)."""
    if not durations:
        return None
    durations.sort()
    n = len(durations)
    return round(durations[math.ceil(0.5 * n) - 1], 6), round(durations[math.ceil(0.95 * n) - 1], 6)


def _repeats(results: Iterable[RunResult], metric: str) -> dict[str, list[float]]:
    """Each case's values of ``metric``, one a repeat (an error as 0; None, does not apply, left out)."""
    out: dict[str, list[float]] = {}
    for r in results:
        value = r.score.metrics.get(metric) if r.score is not None else None
        if value is not None or r.error is not None:
            out.setdefault(r.case.id, []).append(0.0 if value is None else float(value))
    return out


def _reasons(errors: Iterable[str], *, counted: Iterable[tuple[int, str]] = ()) -> tuple[tuple[int, str], ...]:
    """Error messages grouped and counted, masked, most common first (then by text).

    >>> _reasons(["HTTP 500: busy", "timed out", "HTTP 500: busy"])
    ((2, 'HTTP 500: busy'), (1, 'timed out'))
    """
    import collections

    counts: collections.Counter[str] = collections.Counter()
    for error in errors:
        text = " ".join(_redact(error).split())
        counts[text if len(text) <= 200 else text[:199] + "…"] += 1
    for count, text in counted:
        counts[text] += count
    return tuple(sorted(((n, text) for text, n in counts.items()), key=lambda item: (-item[0], item[1])))


def _fmt_estimate(row: _Row, metric: str, style: str = "box", ranked: bool = False) -> str:
    """The primary metric's cell: the mean and its 95% interval as it is, ``97.5% [87.1–99.6]``
    (near 0% or 100% the interval is not symmetric about the mean), when the cases
    disagree; all alike: the plain mean. ``ranked``: with errors counted as wrong."""
    estimate = row.estimate(metric, ranked)
    if estimate is None:
        return "-"
    return _fmt_pct(estimate.mean) + (_fmt_interval(estimate.low, estimate.high, style) if estimate.se > 0 else "")


def _fmt_interval(low: float, high: float, style: str = "box", signed: bool = False) -> str:
    """`` [87.1–99.6]``: an interval in points (``signed``: of a difference, ``[-3.0, +1.2]``).

    >>> _fmt_interval(0.871, 0.996), _fmt_interval(-0.03, 0.012, signed=True)
    (' [87.1–99.6]', ' [-3.0, +1.2]')
    """
    if signed:
        return f" [{low * 100:+.1f}, {high * 100:+.1f}]"
    return f" [{low * 100:.1f}{'–' if style == 'box' else '-'}{high * 100:.1f}]"


def _row_cells(row: _Row, metrics: Sequence[Metric], style: str = "box", ranked: bool = False) -> list[str]:
    c = row.contender
    primary = _primary(metrics)
    return [
        c.shown,
        c.effort or "default",
        _fmt_temp(c.temperature),
        *(_fmt_estimate(row, m.name, style) if m is primary else _fmt_pct(row.mean(m.name)) for m in metrics),
        str(row.errors),
        *([_fmt_pct(row.strict_mean(primary.name))] if ranked else []),
        _fmt_time(row.duration),
        str(row.usage.input_tokens),
        str(row.usage.output_tokens),
        _fmt_cost(row.cost),
    ]


def _primary(metrics: Sequence[Metric]) -> Metric:
    return next((m for m in metrics if m.primary), metrics[0])


def _leaderboard_columns(lead: str, metrics: Sequence[Metric], ranked: bool = False) -> tuple[list[str], list[bool]]:
    """Every leaderboard's headers after a first column ``lead``, and which are numbers;
    ``ranked`` (some row has errors): the primary metric with errors counted as wrong."""
    ranking = ["ranked"] if ranked else []
    headers = [lead, "model", "effort", "temp", *(m.name for m in metrics), "errors", *ranking]
    headers += ["time", "tok_in", "tok_out", "cost"]
    return headers, [lead == "#", False, False, True, *(True for _ in headers[4:])]


def _metric_table(
    lead: str, leads: Sequence[str], rows: Sequence[_Row], metrics: Sequence[Metric], style: str, width: int = 0
) -> str:
    """The columns every leaderboard shares, after a first column ``lead``. Given a
    terminal's ``width``, secondary columns go until the table fits, and a line says which."""
    ranked = any(r.errors for r in rows)
    headers, right = _leaderboard_columns(lead, metrics, ranked)
    cells = [[first, *_row_cells(r, metrics, style, ranked)] for first, r in zip(leads, rows, strict=True)]
    secondary = [m.name for m in reversed(metrics) if m is not _primary(metrics)]
    return _fit(headers, cells, right, style, width, ("tok_in", "tok_out", "time", *secondary, "temp", "effort"))


def _fit(
    headers: list[str], cells: list[list[str]], right: list[bool], style: str, width: int, order: Sequence[str]
) -> str:
    """A table made to fit a terminal's ``width`` (0: whole). Columns equal on every row go
    into one line above it; then the columns ``order`` names go, in order, until it fits,
    never one that tells two rows apart (they would read the same), and a line under it says
    which; then the columns of text are cut in the middle, the widest first, as far as the
    rows still read apart. A table whose rows need more than the window is wider than it."""
    table = _table(headers, cells, right, style)
    if not width or len(table.split("\n", 1)[0]) <= width:
        return table
    same = [i for i, h in enumerate(headers) if len(cells) > 1 and h != "#" and len({r[i] for r in cells}) == 1]
    keep, dropped = [i for i in range(len(headers)) if i not in same], list[str]()

    def excess(rows: list[list[str]], columns: list[int]) -> int:
        nonlocal table
        shown = [[row[i] for i in columns] for row in rows]
        table = _table([headers[i] for i in columns], shown, [right[i] for i in columns], style)
        return len(table.split("\n", 1)[0]) - width

    def apart(rows: list[list[str]], columns: list[int]) -> int:
        return len({tuple(row[i] for i in columns) for row in rows})

    for name in order:
        rest = [i for i in keep if headers[i] != name]
        if rest != keep and excess(cells, keep) > 0 and apart(cells, rest) == apart(cells, keep):
            keep, dropped = rest, [*dropped, name]
    for column in sorted(
        (i for i in keep if not right[i]), key=lambda i: -max(_cells(r[i]) for r in [headers, *cells])
    ):
        if excess(cells, keep) <= 0:
            break
        values = [r[column] for r in cells]
        common = os.path.commonprefix(values)  # noqa: RUF071 (names, not paths: the characters all share)
        shared = re.match(r".*[/:_-]", common) if len(set(values)) > 1 else None
        if shared and len(shared[0]) > 2:  # what rows share goes first (acme/thrifty, acme/sloppy: …thrifty, …sloppy)
            cells = [[f"…{v[len(shared[0]) :]}" if i == column else v for i, v in enumerate(r)] for r in cells]
        longest = max(_cells(r[column]) for r in [headers, *cells])
        for most in range(max(8, longest - excess(cells, keep)), longest):  # 8: a name still read
            cut = [[_middle(v, most) if i == column else v for i, v in enumerate(r)] for r in [headers, *cells]]
            if len({r[column] for r in cut[1:]}) == len({r[column] for r in cells}):  # its values still read apart
                headers, *cells = cut
                break
    over = excess(cells, keep) > 0  # the table as last cut: built here, its last cut may have made it fit
    wider = [f"(wider than {width} columns: its rows would read alike cut any further; | less -S scrolls it)"]
    above = ["every row: " + " · ".join(f"{headers[i]}\u00a0{cells[0][i]}" for i in same)] if same else []
    under = [f"(hidden to fit {width} columns: {', '.join(dropped)}; | cat shows all)"] if dropped else []
    return "\n".join([*_wrap(above, width), table, *_wrap(under + wider * over, width)])


def _middle(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters in its middle, where ids differ least
    (``openai/gpt…-mini``)."""
    return text if len(text) <= most else text[: most // 2] + "…" + text[len(text) - (most - most // 2 - 1) :]


def _results_table(rows: Sequence[_Row], metrics: Sequence[Metric], style: str, width: int = 0) -> str:
    """The table of experiments; a partial one says how many of its case runs it holds."""
    leads = [f"{r.dataset} ({r.runs} of {r.planned})" if r.runs < r.planned else r.dataset for r in rows]
    return _metric_table("dataset", leads, rows, metrics, style, width)


def _best_value(rows: Sequence[_Row], primary: Metric) -> _Row | None:
    """The cheapest row shown to be at most two points worse than the top, never one that
    looks good because it failed: scores count its errors as wrong (the means leave them
    out), and cost is per scored run (a run that raised before spending is not a saving),
    cached answers at what they first cost. Ties: the higher score, fewer errors, the label.

    Eligible is a non-inferiority test, not a point estimate: the 95% interval of the
    contender's paired difference to the top (over the cases both ran) lies above −2
    points. Two points on the point estimates picked a contender truly 2 points worse in
    58 of 100 runs of 1,000 cases, and its own line called it significantly worse in 38.

    | contender             | errors as wrong | difference to a 100% top | eligible |
    | --------------------- | --------------- | ------------------------ | -------- |
    | answers all, 99%      | 99%             | −1.0 [−1.6, −0.4]        | yes      |
    | 30% raise, rest 100%  | 70%             | −30 [−39, −21]           | no       |
    | 99%, 40 cases         | 99%             | −1.0 [−8.6, +6.6]        | no: too few cases to show it |
    """
    name = primary.name
    # a contender that answered nothing is no value at any price
    scored = [r for r in rows if r.strict_mean(name) is not None and r.runs > r.errors]
    if not scored:
        return None
    top = min(scored, key=lambda r: _rank_key(r, primary))
    near = [r for r in scored if _no_worse(r, top, name)[0]]
    # costs compared to a trillionth of a dollar: $0.38 over 38 runs ties $0.40 over 40 exactly
    return min(
        near, key=lambda r: (round(r.cost_per_answer, 12), -(r.strict_mean(name) or 0.0), r.errors, r.contender.label)
    )


def _no_worse(row: _Row, top: _Row, name: str) -> tuple[bool, _Paired | None]:
    """Whether ``row`` is shown to be at most ``BEST_VALUE_MARGIN`` below ``top`` (errors
    counted as wrong), and the paired comparison that says so."""
    if row is top:
        return True, None
    paired = _paired(
        row.strict.get(name) or row.values.get(name) or _Values(),
        top.strict.get(name) or top.values.get(name) or _Values(),
    )
    if paired is None:  # no case in common: nothing shows it
        return False, None
    return _bounds(paired)[0] >= -BEST_VALUE_MARGIN - 1e-12, paired


def _bounds(paired: _Paired) -> tuple[float, float]:
    """A paired difference's 95% interval; with no spread (every case differs alike), the difference itself."""
    low, high = paired.low, paired.high
    return (paired.delta, paired.delta) if low is None or high is None else (low, high)


def _best_value_lines(rows: Sequence[_Row], primary: Metric, style: str = "box") -> list[str]:
    """``best value [dataset] (...)``, its interval, and, when it is not the top itself,
    whether its gap to the top is significant by a paired test over the cases both
    answered. When errors weighed on the pick, the line says how."""
    lines = []
    name = primary.name
    for dataset in dict.fromkeys(r.dataset for r in rows):
        group = [r for r in rows if r.dataset == dataset]
        best = _best_value(group, primary)
        if best is None:
            answered = any(r.runs > r.errors for r in group)
            lines.append(
                f"best value [{dataset}]: none ({name} was not scored)"
                if answered
                else f"no best value [{dataset}]: no contender answered (see the errors)"
            )
            continue
        # the figure the pick used leads: with the contender's own errors counted as wrong
        ranked = bool(best.errors and best.strict.get(name))
        shown = _fmt_estimate(best, name, style, ranked) if best.estimate(name) else _fmt_pct(best.mean(name))
        if ranked:
            wrong = f"{best.errors} error{'s' if best.errors != 1 else ''}"
            shown += f" ranked, its {wrong} as wrong ({_fmt_pct(best.mean(name))} of those answered)"
        line = f"best value [{dataset}] ({_short_label(best, group)}): {shown} at {_fmt_cost(best.cost)}"
        top = min(group, key=lambda r: _rank_key(r, primary))
        if top is not best and (top.strict_mean(name) or 0.0) > (best.strict_mean(name) or 0.0):
            paired = _paired(best.strict.get(name) or best.values[name], top.strict.get(name) or top.values[name])
            if paired is not None:
                verdict = (
                    "not enough data"
                    if paired.p is None
                    else ("significant" if paired.significant else "not significant")
                )
                p_value = "" if paired.p is None else f", p={_fmt_p(paired.p)}"
                line += (
                    f"; {paired.delta * 100:+.1f} points vs the top ({_short_label(top, group)}): {verdict} "
                    f"({paired.method}{p_value}, {paired.n} cases)"
                )
        near = [
            (r, _no_worse(r, top, name))
            for r in group
            if r.cost_per_answer < best.cost_per_answer
            and (r.strict_mean(name) or 0.0) >= (top.strict_mean(name) or 0.0) - BEST_VALUE_MARGIN - 1e-12
        ]
        ungap = [(r, gap) for r, (eligible, gap) in near if not eligible and gap is not None]
        for r, gap in ungap[:1]:  # cheaper and near the top, but not gap to be: say so plainly
            line += (
                f"; {_short_label(r, group)} is cheaper and within 2 points on these cases, but {gap.n} cases "
                f"cannot show it is at most 2 points worse ({gap.delta * 100:+.1f}"
                f"{_fmt_interval(*_bounds(gap), style, signed=True)})"
            )
        if any(r.errors for r in group):
            flaky = [f"{_short_label(r, group)}: {r.errors} of {r.runs} raised" for r in group if r.errors]
            line += f"; errors count as wrong for the pick ({', '.join(flaky)})"
        lines.append(line)
    return lines


def _power_lines(rows: Sequence[_Row], primary: Metric) -> list[str]:
    """Per dataset: how large a difference between two contenders its cases can show."""
    lines = []
    for dataset in dict.fromkeys(r.dataset for r in rows):
        estimates = [e for r in rows if r.dataset == dataset and (e := r.estimate(primary.name)) is not None]
        detectable = [e.detectable for e in estimates if e.detectable is not None]
        if detectable:
            worst, cases = max(detectable), max(e.n for e in estimates)
            what = (
                f"a difference in {primary.name} under {worst * 100:.1f} points"
                if worst < 1
                else f"any difference in {primary.name}, however large,"
            )
            lines.append(
                f"power [{dataset}]: with {_n(cases, 'case')}, {what} between two contenders is likely to go unseen "
                "(80% power, 5% level)"
            )
    return lines


def _repeat_lines(rows: Sequence[_Row], primary: Metric) -> list[str]:
    """With --repeat: each contender's cases whose repeats disagree, and its primary metric
    with each case at its worst repeat (pass^k: every repeat right, for 0/1 scores)."""
    lines = []
    for r in rows:
        if r.pass_k is None:
            continue
        kind = f"worst of {r.repeat} repeats {_fmt_pct(r.pass_k)}"
        if r.pass_ks:
            kind = ", ".join(
                f"pass^{k} {_fmt_pct(e.mean)}{_fmt_interval(e.low, e.high)}" for k, e in enumerate(r.pass_ks, 1)
            )
        flaky = f"{len(r.flaky)} flaky ({_some(list(r.flaky))})" if r.flaky else "none flaky"
        lines.append(f"repeats [{r.dataset}] {_short_label(r, rows)}: {kind}, {flaky}")
    return lines


# Under this many cases, an interval of graded scores is said to be rough: the fewest at which
# Student's t covered 94% or more of Beta(50, 1) scores (a mass near 1.0 with a tail below) in
# 8,000 simulated runs a size: 92.9% at 30, 93.5% at 50, 94.4% at 60, 94.5% at 90.
ROUGH = 60


def _few_cases_lines(rows: Sequence[_Row], primary: Metric) -> list[str]:
    """A line when an interval of graded scores rests on too few cases for Student's t to hold."""
    few = {r.dataset for r in rows if (e := r.estimate(primary.name)) is not None and e.method == "t" and e.n < ROUGH}
    if not few:
        return []
    return [
        f"intervals [{', '.join(sorted(few))}]: under {ROUGH} cases of graded {primary.name} scores, Student's t can "
        "run narrow (skewed scores: 87-93.5% coverage where 95% is meant, simulated); read those intervals as rough"
    ]


def _short_label(row: _Row, group: Sequence[_Row]) -> str:
    """``model effort=e``, with ``temp=t`` when the group has that model at several."""
    c = row.contender
    temps = {r.contender.temperature for r in group if r.contender.model == c.model}
    temp = f" temp={_fmt_temp(c.temperature)}" if len(temps) > 1 else ""
    return f"{c.shown} effort={c.effort or 'default'}{temp}"


def _error_lines(rows: Sequence[_Row]) -> list[str]:
    """For each experiment with errors: how many, the rate, and the spend they cost."""
    return [
        f"errors [{r.dataset}] {_short_label(r, rows)}: {r.errors} of {r.runs} runs ({r.errors / r.runs:.1%}) "
        f"raised and are left out of the means; {_fmt_cost(r.lost.cost_usd)} was spent on them"
        for r in rows
        if r.errors
    ]


def _reasoning_lines(rows: Sequence[_Row]) -> list[str]:
    """What thinking cost, per experiment that reported reasoning tokens: the point of
    comparing efforts is what a higher one spends."""
    return [
        f"reasoning [{r.dataset}] {_short_label(r, rows)}: {r.usage.reasoning_tokens:,} of "
        f"{r.usage.output_tokens:,} output tokens"
        + (f"; {r.usage.cached_tokens:,} input tokens cached" if r.usage.cached_tokens else "")
        for r in rows
        if r.usage.reasoning_tokens
    ]


def _reason_lines(rows: Sequence[_Row], most: int = 3) -> list[str]:
    """Why cases failed: each experiment's most common error messages, counted (STDERR)."""
    lines = []
    for r in rows:
        for count, text in r.reasons[:most]:
            lines.append(f"errors [{r.dataset}] {_short_label(r, rows)}: {count} × {text}")
        if len(r.reasons) > most:
            others = sum(n for n, _ in r.reasons[most:])
            lines.append(f"errors [{r.dataset}] {_short_label(r, rows)}: {others} × other reasons (the log has each)")
    return lines


def _glossary(
    metrics: Sequence[Metric],
    intervals: bool = False,
    ranked: bool = False,
    corrected: Collection[str] = (),
    full: bool = True,
) -> str:
    """``corrected``: the judged metrics people's labels correct here (``_corrected_metrics``).
    Not ``full``: the metrics alone (what the scorer says each is), and that -v explains the rest."""
    primary = _primary(metrics)

    def judged(m: Metric) -> str:
        return "" if not m.judged else "(judged, corrected by labels) " if m.name in corrected else "(judged) "

    entries = [
        ("dataset", "the folder under datasets/"),
        ("model", "the contender's model id; (direct) ones use the vendor's own API"),
        ("effort", "reasoning effort sent; default sends none"),
        ("temp", "temperature sent; - sends none"),
        *(
            (m.name, ("(primary) " if m is primary else "") + judged(m) + (m.description or "declared by the scorer"))
            for m in metrics
        ),
        ("errors", "cases that raised (network, provider or suite code): not scored, left out of the means"),
        *([("ranked", f"{primary.name} with every error counted as wrong: what the tables rank by")] if ranked else []),
        ("time", "wall-clock time of the experiment"),
        ("tok_in", "input tokens spent"),
        ("tok_out", "output tokens spent"),
        ("cost", "dollars the answers cost (cached ones at their first price; a cache line says what this run spent)"),
    ]
    if not full:
        entries = [(name, text) for name, text in entries if name in {m.name for m in metrics}]
    width = max(len(name) for name, _ in entries)
    lines = ["glossary:", *(f"  {name.ljust(width)}  {text}" for name, text in entries)]
    if full:
        lines.append("  metrics are means over scored cases; a metric of None (does not apply) is skipped")
        lines.append(
            f"  rank: by {primary.name} with errors counted as wrong, then fewer errors, then cost (errors never "
            "win); 1= marks a tie"
        )
        lines.append(
            "  best value: the cheapest per scored run of those shown (95% interval) to be at most 2 points below "
            "the top, errors counted as wrong"
        )
    if intervals and full:
        lines.append(
            f"  [low–high] after {primary.name}: its 95% interval, in percent, over cases (Wilson for "
            "0/1 scores, Student's t over case means otherwise; repeats are averaged per case first)"
        )
    if corrected:
        lines.append(
            "  corrected: a judged metric's figures, ranks, best value and gates are the judge's mean plus the "
            "labelled answers' mean disagreement with people (prediction-powered inference); its interval counts "
            "the labels' sampling too (agent-evals label adds labels)"
        )
    if not full:
        lines.append("  -v explains the other columns, the rank, best value and the intervals")
    return "\n".join(lines)


def _corrected_metrics(experiments: Sequence[Experiment], metrics: Sequence[Metric]) -> set[str]:
    """The judged metrics that people's labels correct in these experiments."""
    return {m.name for m in metrics if m.judged} & {key[-1] for e in experiments for key in e.labels}


def _overall(rows: Sequence[_Row], metrics: Sequence[Metric], primary: Metric) -> list[_Row]:
    """One row per contender across datasets: means over all their cases, summed totals."""
    groups: dict[Contender, list[_Row]] = {}
    for row in rows:
        groups.setdefault(row.contender, []).append(row)
    out = [
        _Row(
            "all",
            contender,
            {m.name: _merged([r.values[m.name] for r in group]) for m in metrics},
            sum(r.errors for r in group),
            sum(r.runs for r in group),
            sum(r.duration for r in group),
            Usage.total(r.usage for r in group),
            Usage.total(r.lost for r in group),
            {m.name: _merged([r.strict.get(m.name) or r.values[m.name] for r in group]) for m in metrics},
            sum(r.saved for r in group),
            _reasons((), counted=(reason for r in group for reason in r.reasons)),
            planned=sum(max(r.planned, r.runs) for r in group),
        )
        for contender, group in groups.items()
    ]
    out.sort(key=lambda r: _rank_key(r, primary))
    return out


def _merged(parts: Sequence[_Values]) -> _Values:
    """Datasets' values as one, with their labels (``_corrected`` weighs each dataset's part)."""
    labels = {k: v for part in parts for k, v in part.labels.items()}
    answers = {k: v for part in parts for k, v in part.answers.items()}
    plan = {k: v for part in parts for k, v in part.plan.items()}
    return _Values({k: v for part in parts for k, v in part.items()}, labels, answers, plan)


def _unlike(rows: Sequence[_Row]) -> list[str]:
    """What keeps contenders from being ranked across datasets: they ran different cases (a
    partial experiment, a dataset one of them has no log of), each named; none when alike."""
    held: dict[Contender, set[str]] = {}
    for row in rows:
        held.setdefault(row.contender, set()).add(row.dataset)
    unlike = [f"[{r.dataset}] {r.contender.label}: {r.runs} of {r.planned}" for r in rows if r.runs < r.planned]
    datasets = dict.fromkeys(r.dataset for r in rows)
    return unlike + [f"[{d}] {c.label}: none" for c, have in held.items() for d in datasets if d not in have]


def _leaderboard_head(unlike: Sequence[str], primary: Metric) -> str:
    if unlike:
        return f"leaderboard: all datasets, not ranked: the contenders ran different cases ({'; '.join(unlike)})"
    return f"leaderboard: all datasets, case-weighted, ranked by {primary.name} (errors counted as wrong) then cost"


def _leaderboard_table(
    rows: Sequence[_Row], metrics: Sequence[Metric], style: str, width: int = 0, ranked: bool = True
) -> str:
    return _metric_table("#", _places(rows, _primary(metrics), ranked), rows, metrics, style, width)


def _labelled(
    results: Sequence[RunResult], metric: str, labels: Mapping[tuple[str, ...], float]
) -> tuple[list[tuple[float, float]], list[tuple[str, ...]]]:
    """A judged metric's (label, value) of the answers people labelled, and every judged answer's label key."""
    pairs, keys = [], []
    for r in results:
        value = r.score.metrics.get(metric) if r.score is not None and r.reply is not None else None
        if value is None:
            continue
        keys.append(key := _label_key(r, metric))
        if (label := _any_label(labels, key)) is not None:  # a chosen or paired label counts here
            pairs.append((label, float(value)))
    return pairs, keys


def _corrected_said(
    experiment: Experiment, values: _Values, pairs: Sequence[tuple[float, float]], raw: float | None
) -> tuple[str, dict[str, object]] | None:
    """A contender's corrected figure as the judged line says it, and as the JSON document
    holds it: the labels that corrected it (the rest counted for agreement only), or, where the
    labels alone gave it, that the judge's figure was left uncorrected and what would correct it."""
    estimate = _estimate_of(values)
    if estimate is None or estimate.method != "corrected":
        return None
    used = _in_sample(experiment.results, values)
    figures = {**estimate.to_json(), "labels": used, "agreement_only": len(pairs) - used, "judged": raw}
    rates = f"; judge {rates}" if (rates := _rates(pairs)) else ""
    more = f" ({len(pairs) - used} more for agreement only)" if len(pairs) > used else ""
    how = f"judged {_fmt_pct(raw)}, corrected from {_n(used, 'label')}{more}{rates}"
    if (figure := _corrected(values)) and figure.alone:
        figures["method"] = "labels alone"
        need = _labels_needed(
            [values.predicted(u) for u in values.labels],
            [(values.predicted(u), y) for u, y in values.labels.items() if y is not None],
        )
        reach = f"about {_n(need[0] or need[1], 'label')} give ±5 points" if any(need) else "±5 points needs more cases"
        how = (
            f"by its {_n(used, 'label')} alone: the judge's {_fmt_pct(raw)} left uncorrected, its verdicts too unlike "
            f"the labels or the labels too few to narrow it; {reach}{rates}"
        )
    return (
        f"{experiment.contender.label} {_fmt_pct(estimate.mean)}{_fmt_interval(estimate.low, estimate.high)} ({how})",
        figures,
    )


def _in_sample(results: Sequence[RunResult], values: _Values) -> int:
    """How many of these answers lie in the labelled sample that corrects ``values``."""
    sample = {unit for unit, label in values.labels.items() if label is not None}
    return sum(_unit(r.case.dataset, r.case.id, r.case.metadata.get(CLUSTER)) in sample for r in results if r.reply)


def _judge_spend(experiments: Sequence[Experiment]) -> Usage:
    return Usage.total(r.judge_usage for e in experiments for r in e.results)


def _judged_lines(
    experiments: Sequence[Experiment], metrics: Sequence[Metric], judge: str | None = None
) -> tuple[list[str], dict[int, dict[str, dict[str, object]]]]:
    """What the run's ``judge`` model spent, apart from the contenders'; then each judged
    metric's word on people: how its judge agrees with their labels, and each contender's
    mean corrected by them (as the tables rank it: ``_rectify``) beside the judged one;
    without labels, that the judged figure is uncorrected. Also each experiment's corrected
    estimates (by ``id``) with their labels and judged means, for the JSON document. A label
    of a case edited since (none of its labels is of the case as it is) is left out and counted."""
    lines, corrected = [], dict[int, dict[str, dict[str, object]]]()
    if judge:  # a judge's spend is the judge's: never a contender's cost
        spent, runs = _judge_spend(experiments), sum(r.judge_usage != Usage() for e in experiments for r in e.results)
        lines.append(
            f"judge {judge}: {_fmt_cost(spent.cost_usd)} over {_n(runs, 'case run')} ({spent.input_tokens:,} tokens "
            f"in, {spent.output_tokens:,} out), apart from the contenders' cost; held by --budget"
        )
    hashes: dict[tuple[str, str], set[str]] = {}  # each labelled case's hashes: the case as each label saw it
    for d, c, h, *_ in {key for e in experiments for key in e.labels}:
        hashes.setdefault((d, c), set()).add(h)
    for metric in (m for m in metrics if m.judged):
        for dataset in dict.fromkeys(e.dataset for e in experiments):
            shown, every, edited, each = [], [], set[str](), dict[str, list[tuple[float, float]]]()
            for e in (e for e in experiments if e.dataset == dataset):
                pairs, keys = _labelled(e.results, metric.name, e.labels)
                edited |= {key[1] for key in keys if key[2] not in hashes.get((key[0], key[1]), {key[2]})}
                row = _rows([e], metrics)[0]
                raw = _mean(_case_values(e.results, metric.name).values())
                if pairs and (said := _corrected_said(e, row.values[metric.name], pairs, raw)):
                    corrected.setdefault(id(e), {})[metric.name] = said[1]
                    shown.append(said[0])
                elif short := row.values[metric.name].plan.get(dataset):
                    held, planned = short
                    shown.append(
                        f"{e.contender.label} judged {_fmt_pct(raw)}, uncorrected: {held} of its planned {planned} "
                        f"labelled (agent-evals label asks the other {planned - held})"
                    )
                every += pairs
                each[e.contender.label] = pairs
            where = f"[{dataset}] {metric.name}"
            if not every:
                lines.append(f"judged {where}: no labels yet, so the judged figure is uncorrected (agent-evals label)")
                continue
            lines.append(f"judged {where}: the judge {_agreement(every)}; corrected: {' · '.join(shown)}")
            lines += _bias_lines(where, each)
            if edited:
                lines.append(f"labels {where}: {_n(len(edited), 'case')} edited since labelled: their labels left out")
    return lines, corrected


def _bias_lines(where: str, each: Mapping[str, Sequence[tuple[float, float]]]) -> list[str]:
    """A line when the judge errs on one contender's answers unlike the others' beyond
    chance (``_bias_test``), naming the contender it errs on most unlike them."""
    found = dict(zip(each, _bias_test(list(each.values())), strict=True))
    erred = {name: sum(abs(v - y) for y, v in pairs) / max(1, len(pairs)) for name, pairs in each.items()}
    # of two alike (two contenders always are), the one the judge errs on more
    far = min((n for n, p in found.items() if p is not None), key=lambda n: (found[n], -erred[n]), default=None)
    if far is None or (found[far] or 0.0) >= ALPHA:
        return []
    return [
        f"judge bias {where}: the judge errs on {far}'s answers unlike the others' (p {found[far]:.2g}; its "
        "sensitivity and specificity above): answers written to please a judge (long, confident, formatted) do "
        "this; rank by the corrected figures, never the judged"
    ]


def _render_report(
    experiments: Sequence[Experiment],
    metrics: Sequence[Metric],
    style: str,
    width: int = 0,
    quiet: bool = False,
    full: bool = True,
) -> str:
    """Everything ``compare`` prints: the table, best values, errors, glossary, leaderboard;
    ``width`` (a terminal's): the tables fit it. ``quiet``: no notes on power and no glossary;
    not ``full``: the glossary of the metrics alone (-v gives every column's)."""
    primary = _primary(metrics)
    rows = _rows(experiments, metrics)
    overall = _overall(rows, metrics, primary)
    spread = any((e := r.estimate(primary.name)) is not None and e.se > 0 for r in [*rows, *overall])
    notes = [*_power_lines(rows, primary), *_repeat_lines(rows, primary), *_few_cases_lines(rows, primary), ""]
    corrected = _corrected_metrics(experiments, metrics)
    glossary = _glossary(metrics, spread, any(r.errors for r in rows), corrected, full).split("\n")
    lines = [*_best_value_lines(rows, primary, style), *_error_lines(rows), *_reasoning_lines(rows)]
    lines += [""] if quiet else [*notes, *glossary, ""]
    unlike = _unlike(rows)
    head, board = _leaderboard_head(unlike, primary), [_leaderboard_table(overall, metrics, style, width, not unlike)]
    if len({r.dataset for r in rows}) == 1 and not unlike:  # its leaderboard is the table again: its places alone
        places = zip(_places(overall, primary), overall, strict=True)
        head, board = (
            f"leaderboard: {head.split(', ')[-1]}: {', '.join(f'{a} {r.contender.label}' for a, r in places)}",
            [],
        )
    return "\n".join([_results_table(rows, metrics, style, width), *_wrap([*lines, head], width), *board])


RESULTS_SCHEMA = 1  # the version of --format json's document; a change that breaks a reader bumps it


def _results_document(
    experiments: Sequence[Experiment], metrics: Sequence[Metric], context: Mapping[str, object]
) -> dict[str, object]:
    """What ``--format json`` prints: the leaderboards, best values and intervals the
    tables show, as one document (README, "Machine-readable results", holds its schema).
    ``context``: the suite, command, stamp, whether the run was interrupted, and changes."""
    primary = _primary(metrics)
    rows = _rows(experiments, metrics)
    datasets = []
    for dataset in dict.fromkeys(row.dataset for row in rows):
        group = sorted((r for r in rows if r.dataset == dataset), key=lambda r: _rank_key(r, primary))
        best = _best_value(group, primary)
        answered = any(r.runs > r.errors for r in group)
        datasets.append(
            {
                "dataset": dataset,
                "leaderboard": [_row_document(r, metrics) for r in group],
                "best_value": None if best is None else _row_document(best, metrics),
                **({} if best or answered else {"no_best_value": "no contender answered"}),
            }
        )
    return {
        "schema": "agent-evals/results",
        "version": RESULTS_SCHEMA,
        **context,
        "primary": primary.name,
        "metrics": [
            {"name": m.name, "description": m.description, "primary": m.primary, "judged": m.judged} for m in metrics
        ],
        "best_value_rule": (
            f"the cheapest per scored run of those shown (the 95% interval of the paired difference) to be at "
            f"most {BEST_VALUE_MARGIN * 100:g} points below the top, errors counted as wrong"
        ),
        "rank_rule": f"{primary.name} with errors counted as wrong, then fewer errors, then cost, then the label",
        "datasets": datasets,
        "overall": [_row_document(r, metrics) for r in _overall(rows, metrics, primary)],
        "overall_not_ranked": _unlike(rows),  # why the overall list is no ranking: contenders ran different cases
    }


def _rank_key(row: _Row, primary: Metric) -> tuple[float, int, float, str]:
    """Every ranking's order: the primary metric with errors counted as wrong (a contender
    never climbs by failing), then fewer errors, then cost, then the label (never the
    order rows arrived in).

    | contender              | mean over answers | errors | ranked by |
    | ---------------------- | ----------------- | ------ | --------- |
    | answers all, 100%      | 100%              | 0      | 100%      |
    | 20% raise, rest 100%   | 100%              | 20%    | 80%       |
    """
    strict = row.strict_mean(primary.name)
    return (-(strict if strict is not None else -1.0), row.errors, row.cost, row.contender.label)


def _places(ranked: Sequence[_Row], primary: Metric, placed: bool = True) -> list[str]:
    """Each ranked row's place: rows that tie on all but the label share theirs, marked
    (``1=``, ``1=``, ``3``: the label orders them, not their figures); not ``placed``
    (they ran unlike cases): ``-``."""
    keys = [(round(a, 12), errors, round(cost, 10)) for a, errors, cost, _ in (_rank_key(r, primary) for r in ranked)]
    places = [str(keys.index(key) + 1) + "=" * (keys.count(key) > 1) for key in keys]
    return places if placed else ["-"] * len(ranked)


def _answer_document(result: RunResult) -> dict[str, object]:
    """``run --format json``: one case run whole, as its log row holds it, with what was expected."""
    experiment = result.experiment
    where = {"dataset": experiment.dataset, "contender": experiment.contender.to_json()} if experiment else {}
    return where | _log_row(result) | {"expected": result.case.expected}


def _row_document(row: _Row, metrics: Sequence[Metric]) -> dict[str, object]:
    """One leaderboard line as JSON: means over the scored cases with their 95% interval,
    the same means with errors counted as wrong, and what the run spent."""
    scores = {}
    for metric in metrics:
        estimate = row.estimate(metric.name)
        scores[metric.name] = {
            "mean": None if estimate is None else estimate.mean,
            "low": None if estimate is None else estimate.low,
            "high": None if estimate is None else estimate.high,
            "cases": 0 if estimate is None else estimate.n,
            "interval": None if estimate is None else estimate.method,
            "mean_errors_as_wrong": row.strict_mean(metric.name),
        }
    return {
        "model": row.contender.shown,
        "contender": row.contender.to_json(),
        "runs": row.runs,
        **({"planned": row.planned} if row.runs < row.planned else {}),  # a partial one: what it was to ask
        "errors": row.errors,
        "error_reasons": [{"count": n, "reason": text} for n, text in row.reasons],
        "metrics": scores,
        "duration_s": round(row.duration, 6),
        **({"latency_p50_s": row.latency[0], "latency_p95_s": row.latency[1]} if row.latency else {}),
        "tokens_in": row.usage.input_tokens,
        "tokens_out": row.usage.output_tokens,
        "tokens_cached": row.usage.cached_tokens,
        "tokens_reasoning": row.usage.reasoning_tokens,
        "cost_usd": row.cost,
        "spent_usd": row.usage.cost_usd,
        "cost_per_scored_run_usd": row.cost_per_answer,
        **({"repeat": row.repeat, "pass_k": row.pass_k, "flaky": list(row.flaky)} if row.repeat > 1 else {}),
        **(
            {
                "pass_ks": [
                    {"k": k, "mean": e.mean, "low": e.low, "high": e.high, "cases": e.n}
                    for k, e in enumerate(row.pass_ks, 1)
                ]
            }
            if row.pass_ks
            else {}
        ),
    }


def _clip(text: str, width: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _render_breakdown(experiment: Experiment, metrics: Sequence[Metric], style: str, width: int = 0) -> str:
    """``run``'s per-case table for one experiment, made to fit a terminal's ``width``."""
    c = experiment.contender
    # an agent's cases: how many model calls each made (of --max-turns) and the tools it called
    agents = any(r.turns > 1 or r.transcript is not None for r in experiment.results)
    headers = ["case", "score", *(m.name for m in metrics), *(["turns", "tools"] if agents else []), "time", "cost"]
    headers.append("note")
    right = [False, True, *(True for _ in metrics), *([True, False] if agents else []), True, True, False]
    rows = []
    for r in experiment.results:
        if r.error:
            note = f"error: {r.error}"
        elif r.reply and r.reply.error:
            note = f"model failed: {r.reply.error}"
        elif r.score and r.score.diagnostics:
            note = _json_dumps(dict(r.score.diagnostics))
        else:
            note = ""
        rows.append(
            [
                r.label,
                "-" if r.score is None else _fmt_pct(r.score.value),
                *("-" if r.score is None else _fmt_pct(r.score.metrics.get(m.name)) for m in metrics),
                *([str(r.turns), _clip(", ".join(_tools_called(r.reply)) or "-", 30)] if agents else []),
                _fmt_time(r.duration),
                _fmt_cost(r.usage.cost_usd),
                _clip(note),
            ]
        )
    order = [
        "note",
        "tools",
        "turns",
        "time",
        "cost",
        *(m.name for m in reversed(metrics) if m is not _primary(metrics)),
    ]
    title = _wrap([f"{experiment.dataset} · {c.label}"], width)
    return "\n".join([*title, _fit(headers, rows, right, style, width, order)])


def _answer_lines(experiment: Experiment, width: int) -> list[str]:
    """``run`` of one case (or ``-v``): under the table, each case's answer as the scorer
    saw it, the model's text when it is other, what was expected and the scorer's
    diagnostics; on a terminal each cut to its width and 12 lines (``--format json``: whole)."""
    lines = []
    for r in experiment.results:
        reply, score = r.reply, r.score
        text = reply.raw if reply is not None and isinstance(reply.raw, str) else None
        if text is not None and reply is not None:  # the answer parsed from the text, and nothing else: said once
            with contextlib.suppress(ValueError, RecursionError):
                text = None if text == reply.output or json.loads(text) == reply.output else text
        shown = {
            "answer": reply.output if reply is not None else None,
            "model's text": text,
            "expected": r.case.expected,
            "diagnostics": dict(score.diagnostics) if score and score.diagnostics else None,
        }
        lines.append(r.label)
        for name, value in shown.items():
            if value is not None or name == "answer":
                written = value if isinstance(value, str) else _json_dumps(value)
                lines += _cut(f"  {name}: " + written.rstrip().replace("\n", "\n    "), width)
    return lines


def _cut(text: str, width: int, most: int = 12) -> list[str]:
    """``text`` as lines folded to ``width`` columns (0: whole), ``most`` lines in all."""
    import textwrap

    lines = [line.rstrip() for line in text.splitlines()] or [""]
    if not width:
        return lines
    lines = [part for line in lines for part in textwrap.wrap(line, width - 1, subsequent_indent="    ") or [""]]
    return lines[:most] + (
        [f"    … {len(lines) - most} more lines (--format json shows it whole)"] if len(lines) > most else []
    )


def _tools_called(reply: Reply | None) -> list[str]:
    """The tool names an agent's transcript calls, in order."""
    names = []
    for message in (reply.transcript if reply is not None else None) or ():
        for call in (message.get("tool_calls") if isinstance(message, Mapping) else None) or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            names.append(str(function.get("name")) if isinstance(function, Mapping) else "?")
    return names


_CASE_COLUMNS = ("dataset", "id", "difficulty", "summary", "words")


def _case_rows(cases: Sequence[Case], scorer: Any) -> list[list[Any]]:
    rows = []
    for case in cases:
        try:
            summary = str(scorer.summary(case) or "")
        except _SUITE_EXCEPTIONS as e:
            _reraise_ctrl_c(e)
            summary = f"summary raised {_describe(e)[0]}"
        difficulty = str(case.metadata.get("difficulty", case.variant))
        rows.append([case.dataset, case.id, difficulty, summary, len(case.input.split())])
    return rows


def _render_cases(cases: Sequence[Case], scorer: object, style: str) -> str:
    rows = [[*row[:3], _clip(row[3], 60), str(row[4])] for row in _case_rows(cases, scorer)]
    return _table(list(_CASE_COLUMNS), rows, [False, False, False, False, True], style)


def _render_matrix(experiments: Sequence[Experiment], style: str) -> str:
    headers = ["dataset", "model", "provider", "effort", "temp", "max_tokens", "cases", "parallelism"]
    rows = [
        [
            experiment.dataset,
            experiment.contender.shown,
            experiment.provider.name,
            experiment.contender.effort or "default",
            _fmt_temp(experiment.contender.temperature),
            str(experiment.contender.max_tokens or "-"),
            str(len(experiment.cases)),
            str(experiment.parallelism),
        ]
        for experiment in experiments
    ]
    right = [False, False, False, False, True, True, True, True]
    if any(experiment.repeat > 1 for experiment in experiments):
        headers.append("repeat")
        right.append(True)
        for row, experiment in zip(rows, experiments, strict=True):
            row.append(str(experiment.repeat))
    calls = sum(len(experiment.cases) * experiment.repeat for experiment in experiments)
    table = _table(headers, rows, right, style)
    return f"{table}\n{_n(len(experiments), 'experiment')}, {_n(calls, 'case run')}; nothing was called (dry run)"


def _render_forecast(forecasts: Sequence[_Forecast], style: str, decided: bool = False) -> str:
    """The forecast per contender (its datasets together), and the run's total."""
    rows: dict[str, list[Any]] = {}
    for f in forecasts:
        c = f.experiment.contender
        row = rows.setdefault(c.label, [c.shown, c.effort or "default", _fmt_temp(c.temperature), [], 0, 0.0, 0.0])
        row[3].append(f.basis)
        row[4] += len(f.experiment.cases) * f.experiment.repeat
        row[5] = None if f.expected is None or row[5] is None else row[5] + f.expected
        row[6] = None if f.worst is None or row[6] is None else row[6] + f.worst
    cells = [
        [
            *r[:3],
            ", ".join(dict.fromkeys(r[3])),
            str(r[4]),
            *("-" if v is None else _fmt_cost(v, up=i == 1) for i, v in enumerate(r[5:])),
        ]
        for r in rows.values()
    ]
    headers = ["model", "effort", "temp", "basis", "case runs", "expected", "at most"]
    return (
        _table(headers, cells, [False, False, True, False, True, True, True], style)
        + "\n"
        + _forecast_line(forecasts, decided)
    )


# ═══════════════════════════════════════════════════════════════════════════════
# Baselines, gates and JUnit: what CI acts on, and the summary a pull request shows
# ═══════════════════════════════════════════════════════════════════════════════


ERRORS = "errors"  # the line of a comparison that counts the cases that raise
_CHANGE_HEADERS = ["dataset", "model", "effort", "temp", "metric", "n", "old", "new", "delta [95%]", "p", "verdict"]
_CHANGE_NUMBERS = [False, False, False, True, False, True, True, True, True, True, False]  # the baseline table's


@dataclass(frozen=True, slots=True)
class _Flip:
    """A case whose value of a metric moved between two runs (its mean over repeats), with each
    run's answer (its first repeat's)."""

    case: str
    old: float
    new: float
    old_output: object
    new_output: object

    def text(self, style: str) -> str:
        """``country/004  Rabat → Casablanca  right → wrong``: the answers cut short, the values as marks."""
        arrow = " → " if style == "box" else " -> "
        answers = arrow.join(_answer_text(v) for v in (self.old_output, self.new_output))
        return f"{self.case}  {answers}  {_mark(self.old)}{arrow}{_mark(self.new)}"


def _answer_text(output: object, most: int = 24) -> str:
    """An answer in a line: a one-field object by its value, anything else as JSON, on one line, cut."""
    if isinstance(output, dict) and len(output) == 1:
        output = next(iter(output.values()))
    text = _visible(output if isinstance(output, str) else _json_dumps(output), newlines=True)
    return text if len(text) <= most else text[: most - 1] + "…"


def _mark(value: float) -> str:
    return "right" if value == 1 else "wrong" if value == 0 else f"{value:.2f}"


@dataclass(frozen=True, slots=True)
class _Change:
    """One metric of one experiment, before and after, over one population: the cases
    both runs answered (``paired``), or each run's own when they share none. The
    ``errors`` line counts cases instead: ``old``/``new`` are error rates, ``raised`` the
    cases that raise now and answered before, ``fixed`` the reverse, and ``paired`` the
    McNemar test of the two counts."""

    dataset: str
    contender: Mapping[str, Any]
    metric: str
    old: float | None
    new: float | None
    paired: _Paired | None
    raised: int = 0
    fixed: int = 0
    edited: tuple[str, ...] = ()  # the experiment's cases edited between the runs: left out, named
    left_out: int = 0  # cases --flaky exclude left out, when it left none of one run to judge
    flipped: tuple[_Flip, ...] = ()  # the cases whose value moved: those that fell first

    @property
    def verdict(self) -> str:
        if self.left_out:
            return "nothing to judge"
        if self.old is None or self.new is None:
            return "only in new" if self.old is None else "only in old"
        if self.paired is None or self.paired.p is None:
            return "not enough data" if self.paired is not None else ""
        if not self.paired.significant:
            return ""
        return "regressed" if self.paired.delta < 0 else "improved"


def _compare_runs(
    old: Mapping[tuple[str, str], Mapping[str, Any]],
    new: Mapping[tuple[str, str], Mapping[str, Any]],
    metrics: Sequence[str],
    flaky: str = "mean",
    labels: Mapping[tuple[str, ...], float] = {},
) -> list[_Change]:
    """Experiments matched by contender, settings and dataset; cases by id (a judged metric
    corrected by people's ``labels`` on either side where they label it). Each metric's
    verdict comes from its paired test, Holm-adjusted over the experiments compared on
    that metric, so that a table of many experiments does not cry wolf."""
    changes = []
    for key in [*new, *(k for k in old if k not in new)]:
        before, after = old.get(key), new.get(key)
        record = after or before or {}
        edited = _edited(before, after) if before and after else ()
        if before and after and edited:  # not the same question: never paired, never a verdict
            before, after = (
                {**r, "rows": [w for w in r["rows"] if w.get("case") not in edited]} for r in (before, after)
            )
        found = _experiment_changes(before, after, record, metrics, flaky, labels)
        if edited:  # named on each line of the experiment (on a line of its own when no case is left)
            found = found or [_Change(record["dataset"], record["contender"], metrics[0], None, None, None)]
            found = [dataclasses.replace(c, edited=edited) for c in found]
        changes += found
    for metric in [*metrics, ERRORS]:  # Holm over each metric's family of experiments
        family = [(i, pair) for i, c in enumerate(changes) if c.metric == metric and (pair := c.paired) is not None]
        for (i, paired), holm_p in zip(family, _holm([paired.p for _, paired in family]), strict=True):
            changes[i] = dataclasses.replace(changes[i], paired=dataclasses.replace(paired, adjusted=holm_p))
    return changes


def _edited(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """The cases of two logged runs of one experiment whose content (input, expected,
    metadata) differs; a row logged before the hash was (no ``case_hash``) is taken as is."""
    old = {row.get("case"): row.get("case_hash") for row in before.get("rows", ())}
    rows = after.get("rows", ())
    return tuple(
        sorted({c for row in rows if (h := row.get("case_hash")) and old.get(c := row["case"]) not in (None, h)})
    )


def _experiment_changes(
    before: Mapping[str, object] | None,
    after: Mapping[str, object] | None,
    record: Mapping[str, Any],
    metrics: Sequence[str],
    flaky: str,
    labels: Mapping[tuple[str, ...], float],
) -> list[_Change]:
    """One experiment's lines: each metric over the cases both runs answered (a case whose
    repeats disagree taken as ``flaky`` says; a judged one corrected by people's ``labels``),
    and its errors."""
    changes = []
    for metric in metrics:
        a = _row_values(before, metric, labels, flaky=flaky) if before else _Values()
        b = _row_values(after, metric, labels, flaky=flaky) if after else _Values()
        if before and after and not (a and b) and flaky != "mean":  # every case of a run left out: said, never passed
            every = {**_row_values(before, metric), **_row_values(after, metric)}
            if left := len(every.keys() - (a.keys() & b.keys())):
                changes.append(_Change(record["dataset"], record["contender"], metric, None, None, None, left_out=left))
                continue
        if not a and not b:
            continue
        shared = a.keys() & b.keys()
        if shared:  # one population on the line: the cases both runs answered
            a, b = a.only(shared), b.only(shared)
        paired = _paired(b, a) if shared else None
        if paired is not None and paired.how not in ("", "corrected"):  # corrected is never compared with judged
            a, b = a.judged(), b.judged()
        mean_a, mean_b = _point(a), _point(b)
        flipped = _flips(before, after, metric) if before and after else ()
        changes.append(_Change(record["dataset"], record["contender"], metric, mean_a, mean_b, paired, flipped=flipped))
    if before and after:
        (raised_a, answered_a), (raised_b, answered_b) = _row_errors(before), _row_errors(after)
        cases = len(answered_a | raised_a | answered_b | raised_b) or 1
        raised, fixed = len(raised_b & answered_a - raised_a), len(raised_a & answered_b - raised_b)
        if raised_a or raised_b:
            # a case that raises now and answered before against the reverse, by McNemar:
            # one transient network error does not fail a gate, half the cases raising does
            both = len((raised_a | answered_a) & (raised_b | answered_b)) or 1
            p = _mcnemar_mid_p(fixed, raised + fixed)
            test = _Paired((fixed - raised) / both, p, both, "McNemar mid-p")
            rates = len(raised_a) / cases, len(raised_b) / cases
            changes.append(_Change(record["dataset"], record["contender"], ERRORS, *rates, test, raised, fixed))
    return changes


def _flips(before: _Logged, after: _Logged, metric: str) -> tuple[_Flip, ...]:
    """The cases whose value of ``metric`` moved between two logged runs of one experiment (its
    mean over a case's scored repeats): those that fell first, then those that rose, by case."""

    def by_case(record: _Logged) -> dict[str, tuple[float, object]]:
        found: dict[str, tuple[list[float], object]] = {}
        for row in record.get("rows", ()):
            if not row.get("error") and isinstance(value := (row.get("metrics") or {}).get(metric), int | float):
                found.setdefault(str(row["case"]), ([], row.get("output")))[0].append(float(value))
        return {case: (sum(values) / len(values), output) for case, (values, output) in found.items()}

    old, new = by_case(before), by_case(after)
    moved = [
        _Flip(c, old[c][0], new[c][0], old[c][1], new[c][1]) for c in old.keys() & new.keys() if old[c][0] != new[c][0]
    ]
    return tuple(sorted(moved, key=lambda f: (f.new > f.old, f.case)))


FLIPS_SHOWN = 3  # the cases that flipped a terminal line or a summary shows under a line; the rest: JSON, the report
_ALL_FLIPS = "--format json and the report list all"


def _flip_lines(changes: Sequence[_Change], primary: str | None, style: str, rest: str = _ALL_FLIPS) -> list[str]:
    """Under the table, the cases that flipped on each line of the primary metric that moved
    (or, with none moved, the largest few): a handful each, and where the rest are."""
    lines = [c for c in changes if c.flipped and c.metric == (primary or c.metric)]
    moved = [c for c in lines if c.verdict in ("regressed", "improved")]
    out = []
    for c in moved or sorted(lines, key=lambda c: -abs((c.new or 0) - (c.old or 0)))[:FLIPS_SHOWN]:
        more = len(c.flipped) > FLIPS_SHOWN
        out.append(_flip_head(c) + f" (the first {FLIPS_SHOWN}; {rest})" * more)
        out += [f"  {f.text(style)}" for f in c.flipped[:FLIPS_SHOWN]]
    return out


def _flip_head(c: _Change) -> str:
    fell = sum(f.new < f.old for f in c.flipped)
    who = f"[{c.dataset}] {_shown_model(c.contender.get('model'), c.contender.get('provider'))} {c.metric}"
    return f"flipped {who}: {_n(len(c.flipped), 'case')}, {fell} down and {len(c.flipped) - fell} up"


def _render_changes(
    changes: Sequence[_Change],
    style: str,
    primary: str | None = None,
    effect: float | None = None,
    width: int = 0,
    rest: str = _ALL_FLIPS,
    full: bool = True,
) -> str:
    """The baseline table; under it, for each primary line whose difference was not shown,
    what its cases can show: the difference they would see 80% of the time, or, given an
    ``effect`` (a fraction) to look for, the cases that takes. Never the cases the noise
    just observed would take: that is observed power, which asks for 1.7x too many cases
    on a real drop that was missed and for thousands to chase noise on unchanged runs."""
    rows = [_change_row(c, style) for c in changes]
    regressed = sum(c.verdict == "regressed" for c in changes)
    # p explains a verdict: the last to go, and then the line under the table says it went
    table = _fit(_CHANGE_HEADERS, rows, _CHANGE_NUMBERS, style, width, ("n", "temp", "effort", "old", "p"))
    head = f"{regressed} regression{'s' if regressed != 1 else ''}: old and new are means over the n cases both runs "
    lines = [
        f"{head}answered; paired tests, p < {ALPHA} after Holm (-v says more)"
        if not full
        else f"{head}"
        f"answered; paired tests (McNemar mid-p for 0/1 scores, t otherwise), p (Holm-adjusted over the experiments "
        f"compared on each metric) < {ALPHA}; errors regress when significantly more cases raise now than "
        "before (McNemar mid-p over the cases that changed). Each metric is its own family: with several "
        "metrics, an unchanged run shows a 'regressed' row somewhere more often than 5% (12.5% with five); "
        "--fail-on-regression judges the primary metric and errors as one family and stays under 5%",
    ]
    power = [line for c in changes if c.metric == (primary or c.metric) and (line := _power_line(c, effect))]
    lines += [
        *power,
        *["power: --effect PTS says the cases a change of PTS points needs"] * (bool(power) and not effect),
    ]
    lines += [line for c in changes if (line := _alike_line(c))]
    edited: dict[str, set[str]] = {}
    for c in changes:
        edited.setdefault(c.dataset, set()).update(c.edited)
    lines += [
        f"edited [{dataset}]: {_n(len(ids), 'case')} changed since the earlier run (input, expected or metadata: "
        f"{_some(sorted(ids))}): not the same question, left out of every line above"
        for dataset, ids in edited.items()
        if ids
    ]
    return "\n".join([table, *_wrap([*_flip_lines(changes, primary, style, rest), *lines], width)])


def _change_row(c: _Change, style: str) -> list[str]:
    p = c.paired
    if c.metric == ERRORS:
        delta = f"{c.raised} now raise, {c.fixed} no longer"
    elif p is None:
        delta = "-"
    else:
        delta = f"{p.delta * 100:+.1f}"
        delta += "" if p.low is None or p.high is None else _fmt_interval(p.low, p.high, style, signed=True)
    p_text = "-" if p is None or p.p is None else _fmt_p(p.p)
    if p is not None and p.adjusted is not None:  # raw, then corrected: each says which it is
        p_text += f" (Holm {_fmt_p(p.adjusted)})"
    model = _shown_model(c.contender.get("model", "?"), c.contender.get("provider"))
    settings = [c.contender.get("effort") or "default", _fmt_temp(c.contender.get("temperature"))]
    n = "-" if p is None else str(p.n)
    verdict = c.verdict or ("not significant" if p is not None else "")
    return [c.dataset, model, *settings, c.metric, n, _fmt_pct(c.old), _fmt_pct(c.new), delta, p_text, verdict]


def _alike_line(c: _Change) -> str | None:
    """Why a judged line compares the judge's figures: people's labels on one side only (the
    new run's answers are new; its labels carry over only for unchanged answers)."""
    how, where = c.paired.how if c.paired else "", f"labels [{c.dataset}] {c.contender.get('model')} {c.metric}"
    if how == "too few labels shared":
        return f"{where}: too few labelled answers in both runs: compared as judged on both sides (agent-evals label)"
    if how.startswith("labels in the"):
        side = "the new run" if "first" in how else "the baseline"
        ask = (
            f"; agent-evals label asks the changed answers among {c.paired.lacking} first"
            if c.paired and c.paired.lacking
            else ""
        )
        return f"{where}: labels in {side} only: compared as judged on both sides{ask}"
    return None


def _power_line(c: _Change, effect: float | None) -> str | None:
    """What a primary line whose difference was not shown can show, if anything."""
    p = c.paired
    if c.metric == ERRORS or p is None or p.significant or p.n < 2:
        return None
    where = f"power [{c.dataset}] {c.contender.get('model')} {c.metric}"
    if effect:
        if (needed := _cases_needed(effect, p.sd)) is None:
            return None
        enough = "enough" if needed <= p.n else "too few"
        return (
            f"{where}: to tell {effect * 100:g} points apart at 80% power you need ~{needed:,} cases; "
            f"you have {p.n} ({enough})"
        )
    if not p.sd:
        return None
    seen = (_Z95 + _Z80) * p.sd / math.sqrt(p.n)
    return f"{where}: with {p.n} cases, a change under {seen * 100:.1f} points is likely to go unseen (80% power)"


@dataclass(eq=False)  # internal records are never compared: no __eq__ to build at import
class _Gates:
    """The CI gates a run was given; each failure is one line naming the gate and the figures."""

    under: list[tuple[str, float]] = field(default_factory=list)  # (metric, fraction)
    max_errors: tuple[float, bool] | None = None  # (limit, is a rate in percent)
    on_regression: bool = False
    primary: str = ""  # the metric --fail-on-regression judges (besides errors)
    flaky: str = "mean"  # --flaky: how a case whose repeats disagree counts

    @classmethod
    def parse(cls, args: argparse.Namespace, metrics: Sequence[Metric]) -> _Gates:
        names = [m.name for m in metrics]
        gates = cls(on_regression=args.fail_on_regression, primary=_primary(metrics).name, flaky=args.flaky)
        for spec in args.fail_under or ():
            metric, _, value = spec.rpartition("=")
            metric = metric or _primary(metrics).name
            if metric not in names:
                raise ConfigError(
                    f"--fail-under {spec}: the scorer declares no metric {metric!r}{_hint(metric, names)}; "
                    f"known: {', '.join(names)}"
                )
            gates.under.append((metric, _percent(value, f"--fail-under {spec}") / 100))
        if args.max_errors is not None:
            if args.max_errors.endswith("%"):
                gates.max_errors = (_percent(args.max_errors, f"--max-errors {args.max_errors}"), True)
            elif _is_count(args.max_errors):
                gates.max_errors = (float(args.max_errors), False)
            else:
                raise ConfigError(f"--max-errors {args.max_errors}: expected a count (3) or a rate (5%)")
        if gates.on_regression and not args.baseline:
            raise ConfigError("--fail-on-regression needs --baseline LOG: a regression is against an earlier run")
        return gates

    def check(self, rows: Sequence[_Row], changes: Sequence[_Change] | None) -> list[str]:
        failed = []
        for metric, floor in self.under:
            for r in rows:
                mean = r.mean(metric)
                if mean is None or mean < floor:
                    failed.append(
                        f"--fail-under {metric}={floor * 100:g}%: [{r.dataset}] {_short_label(r, rows)} "
                        f"scored {_fmt_pct(mean)}"
                    )
                elif r.errors and (strict := r.strict_mean(metric)) is not None and strict < floor:
                    # passed on the cases it answered: say what the errors hide (--max-errors gates them)
                    _warn(
                        f"--fail-under {metric}={floor * 100:g}% passed for [{r.dataset}] {_short_label(r, rows)} "
                        f"on the cases it answered; with its {r.errors} errors counted as wrong it scores "
                        f"{_fmt_pct(strict)} (--max-errors gates errors)"
                    )
        if self.max_errors is not None:
            limit, rate = self.max_errors
            for r in rows:
                if (r.errors / max(r.runs, 1) * 100 if rate else r.errors) > limit:
                    failed.append(
                        f"--max-errors {limit:g}{'%' if rate else ''}: [{r.dataset}] {_short_label(r, rows)} "
                        f"had {r.errors} of {r.runs} runs end in an error"
                    )
        if self.on_regression:
            failed += [f"--fail-on-regression: {_change_text(c)}" for c in _regressions(changes or (), self.primary)]
            failed += [  # a rule that left the gate nothing to judge fails it, saying why
                f"--fail-on-regression: {_change_text(c)}"
                for c in changes or ()
                if c.metric == self.primary and c.verdict == "nothing to judge"
            ]
        return failed


def _regressions(changes: Iterable[_Change], primary: str) -> list[_Change]:
    """What ``--fail-on-regression`` fails on: the primary metric and the cases that now
    raise, Holm-adjusted as one family over both and every experiment compared, so the
    gate's false alarm stays under 5% with errors too (two families each at 5%, OR-ed,
    spent it twice: 5.0% of unchanged runs with 2% transient errors failed, 3.0% without)."""
    gated = [c for c in changes if c.metric in (primary, ERRORS) and c.paired is not None]
    adjusted = _holm([c.paired.p for c in gated if c.paired is not None])
    judged = [
        dataclasses.replace(c, paired=dataclasses.replace(c.paired, adjusted=p))
        for c, p in zip(gated, adjusted, strict=True)
        if c.paired is not None
    ]
    return [c for c in judged if c.verdict == "regressed"]


def _check_exclude(flaky: str, records: Mapping[tuple[str, str], Mapping[str, Any]], metric: str, flag: str) -> None:
    """``--flaky exclude`` is refused, before anything is asked, for a primary metric a run
    already logged graded: a graded case's repeats nearly always differ, so it would leave
    the gates no case to judge (``mean`` and ``wrong`` judge graded scores)."""
    if flaky != "exclude":
        return
    for record in records.values():
        for row in record.get("rows", ()):
            value = (row.get("metrics") or {}).get(metric)
            if isinstance(value, int | float) and value not in (0, 1):
                raise ConfigError(
                    f"--flaky exclude: {metric} is graded in the run {flag} reads (a case scored {value:.3g}), and "
                    "a graded case's repeats nearly always differ: exclude would leave no case to judge; use --flaky "
                    "mean or wrong"
                )


def _upstream_lines(old: Mapping[tuple[str, str], Mapping[str, Any]], new: Mapping[tuple[str, str], Any]) -> list[str]:
    """A line for each experiment whose answers came from other upstreams than the earlier
    run's: a change of scores may be the upstream's, not the prompt's."""

    def upstreams(record: Mapping[str, Any]) -> list[str]:
        rows = record.get("rows", ())
        return sorted({str(s["provider"]) for row in rows for s in (row.get("served") or [])[-1:] if s.get("provider")})

    lines = []
    for key in new.keys() & old.keys():
        before, after = upstreams(old[key]), upstreams(new[key])
        if before and after and before != after:
            who = _shown_model(new[key]["contender"].get("model"), new[key]["contender"].get("provider"))
            lines.append(
                f"upstream [{new[key]['dataset']}] {who}: answered by {', '.join(before)} before and by "
                f"{', '.join(after)} now: a change may be the upstream's (pin one with provider: {{only: [...]}})"
            )
    return lines


def _flaky_lines(rows: Sequence[_Row], flaky: str) -> list[str]:
    """What --flaky did, when not the tables' mean: each contender's flaky cases, left out or wrong."""
    how = {"exclude": "left out", "wrong": "wrong unless every repeat is right"}.get(flaky)
    return [
        f"flaky [{r.dataset}] {_short_label(r, rows)}: {_n(len(r.flaky), 'case')} whose repeats disagree are {how} "
        f"(--flaky {flaky})"
        for r in rows
        if how and r.flaky
    ]


def _change_document(change: _Change) -> dict[str, object]:
    paired = change.paired
    return {
        "dataset": change.dataset,
        "model": _shown_model(change.contender.get("model"), change.contender.get("provider")),
        "contender": dict(change.contender),
        "metric": change.metric,
        "old": change.old,
        "new": change.new,
        "delta": None if paired is None else paired.delta,
        "low": None if paired is None else paired.low,
        "high": None if paired is None else paired.high,
        "cases": None if paired is None else paired.n,
        "test": None if paired is None else paired.method,
        "p": None if paired is None else paired.p,
        "p_holm": None if paired is None else paired.adjusted,
        "verdict": change.verdict or "no significant change",
        "edited": list(change.edited),  # cases changed between the runs: left out
        "flipped": [
            {"case": f.case, "old": f.old, "new": f.new, "old_output": f.old_output, "new_output": f.new_output}
            for f in change.flipped
        ],
    }


def _change_text(c: _Change) -> str:
    who = (
        f"{_shown_model(c.contender.get('model'), c.contender.get('provider'))} "
        f"effort={c.contender.get('effort') or 'default'}"
    )
    if c.metric == ERRORS:
        return (
            f"[{c.dataset}] {who}: {c.raised} cases raise now that answered before ({c.fixed} no longer raise); "
            f"errors {_fmt_pct(c.old)} -> {_fmt_pct(c.new)}"
        )
    if c.left_out:
        return (
            f"[{c.dataset}] {who} {c.metric}: --flaky exclude left no case to judge ({_n(c.left_out, 'case')} whose "
            "repeats disagree, as graded scores' mostly do); judge them with --flaky mean or wrong"
        )
    p = c.paired
    moved = "fell" if p is not None and p.delta < 0 else "rose"
    test = (
        ""
        if p is None or p.p is None
        else f" ({p.method}, p={_fmt_p(p.p)}, Holm {_fmt_p(p.adjusted or p.p)}, {p.n} cases)"
    )
    return f"[{c.dataset}] {who} {c.metric} {moved} {_fmt_pct(c.old)} -> {_fmt_pct(c.new)}{test}"


def _percent(value: str, where: str) -> float:
    """A percentage as a flag gives it: ``85`` or ``85%``. A bare number from 0 to 1 is
    refused as ambiguous: ``--fail-under 0.99`` meant as 99% would be a gate that cannot fail.

    >>> _percent("85%", "x"), _percent("85", "x"), _percent("0.5%", "x"), _percent("0", "x")
    (85.0, 85.0, 0.5, 0.0)
    """
    text = value.strip()
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        number = -1.0
    if not 0 <= number <= 100:
        raise ConfigError(f"{where}: expected a percentage from 0 to 100, like 85 or 85%")
    if 0 < number <= 1 and not text.endswith("%"):
        raise ConfigError(
            f"{where}: {text} is a percentage here, so it means {text}%, not {number * 100:g}%: write "
            f"{number * 100:g} for {number * 100:g} percent, or {text}% if you do mean {text} percent"
        )
    return number


def _junit_xml(experiments: Sequence[Experiment]) -> str:
    """JUnit XML for CI: a testsuite per experiment, a testcase per case run; errors as
    ``<error>``, wrong answers (a score below 100%, or the model's failure) as ``<failure>``."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="agent-evals")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for experiment in experiments:
        suite = ET.SubElement(root, "testsuite", name=f"{experiment.dataset} · {experiment.contender.label}")
        counts = {"tests": 0, "failures": 0, "errors": 0}
        for r in experiment.results:
            counts["tests"] += 1
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{experiment.dataset}.{experiment.contender.model}",
                name=r.label,
                time=f"{r.duration:.3f}",
            )
            if r.error is not None:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=r.error, type=r.error.split(":")[0]).text = r.traceback or r.error
            elif r.score is not None and r.score.value < 1.0:
                counts["failures"] += 1
                why = (
                    f"model failed: {r.reply.error}"
                    if r.reply and r.reply.error
                    else f"score {_fmt_pct(r.score.value)}"
                )
                ET.SubElement(case, "failure", message=why).text = _json_dumps(dict(r.score.diagnostics))
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{experiment.duration:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    text = ET.tostring(root, encoding="unicode")
    # characters XML 1.0 cannot hold at all (a model's or a server's control bytes): shown as escapes
    text = re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]", lambda m: f"\\x{ord(m[0]):02x}", text)
    return "<?xml version='1.0' encoding='utf-8'?>\n" + text + "\n"


def _markdown(
    title: str,
    experiments: Sequence[Experiment],
    metrics: Sequence[Metric],
    problems: Sequence[str],
    changes: Sequence[_Change] | None,
    partial: str | None = None,
) -> str:
    """The summary a workflow run's page shows (``GITHUB_STEP_SUMMARY``, ``--format markdown``),
    read at a glance: how the run ended and what failed it; one narrow table (place, contender,
    the primary metric ranked with its interval, errors, cost); the best values; what moved
    against the baseline; the run's page; then every table, folded in ``<details>``."""
    primary, rows = _primary(metrics), _rows(experiments, metrics)
    if partial or problems:
        head = [f"**{'⚠️' if partial else '❌'} {_md(partial or _n(len(problems), 'problem'))}**"]
        head += [f"- {_md(line)}" for line in problems]
    else:
        head = [f"**✅ {_n(sum(r.runs for r in rows), 'case run')}, no gate failed**"]
    overall = _overall(rows, metrics, primary) if len({r.dataset for r in rows}) > 1 else []
    groups = [(d, [r for r in rows if r.dataset == d]) for d in dict.fromkeys(r.dataset for r in rows)]  # ranked
    lines, unlike = [f"## {_md(title)}", "", *head], _unlike(rows)
    if board := overall or next((group for _, group in groups), []):
        lines += ["", f"### Leaderboard: {'all datasets' if overall else _md(board[0].dataset)}", ""]
        lines += _glance(board, primary, not unlike)
    if unlike:
        lines += ["", _md(_leaderboard_head(unlike, primary))]
    lines += ["", *(f"- {_md(line)}" for _, group in groups for line in _best_value_lines(group, primary, "ascii"))]
    lines += [f"- {_md(line)}" for line in _judge_summary(experiments, metrics)]
    if changes is not None:
        lines += ["", "### Against the baseline", "", *_summary_changes(changes, primary.name, problems)]
    if link := _run_link(os.environ):
        lines += ["", f"[This run's page]({link}): its logs, and the HTML report where the workflow uploads it"]
    lines += ["", "<details><summary>Every table</summary>"]
    whole = _leaderboard_head(unlike, primary).removeprefix("leaderboard: ")
    for name, group in [*groups, *([(whole, overall)] if overall else [])]:
        headers, right = _leaderboard_columns("#", metrics, any(r.errors for r in group))
        places = _places(group, primary, group is not overall or not unlike)
        cells = [[n, *_row_cells(r, metrics, "ascii", "ranked" in headers)] for n, r in zip(places, group, strict=True)]
        lines += ["", f"### {_md(name)}", "", _md_table(headers, cells, right)]
    if changes:
        lines += ["", "### Against the baseline, every line", "", _baseline_table(changes, primary.name)]
    return "\n".join([*lines, "", "</details>"]) + "\n"


def _judge_summary(experiments: Sequence[Experiment], metrics: Sequence[Metric]) -> list[str]:
    """The summary's and the HTML report's word on judged metrics: the judge's spend, apart
    from the contenders', and each judged figure corrected beside the judged (``_judged_lines``)."""
    lines = _judged_lines(experiments, metrics)[0] if any(m.judged for m in metrics) else []
    if (spent := _judge_spend(experiments)) != Usage():
        lines.insert(0, f"judge: {_fmt_cost(spent.cost_usd)}, apart from the contenders' cost")
    return lines


def _glance(ranked: Sequence[_Row], primary: Metric, placed: bool) -> list[str]:
    """The summary's first table, narrow enough for a review: place (``1=`` a tie), contender,
    the primary metric as it ranks (errors counted as wrong) with its interval, errors, cost.
    A figure never breaks across lines (no-break space and hyphen)."""
    header = primary.name + (" (errors as wrong)" if any(r.errors for r in ranked) else "")
    cells, places = [], _places(ranked, primary, placed)
    for place, r in zip(places, ranked, strict=True):
        figure = _fmt_estimate(r, primary.name, "ascii", bool(r.errors and r.strict.get(primary.name)))
        figure = figure.replace(" ", "\u00a0").replace("-", "\u2011")
        cells.append([place, r.contender.label, figure, str(r.errors), _fmt_cost(r.cost)])
    tied = ["", "1= marks a tie: the same ranked figure, errors and cost"] if any("=" in p for p in places) else []
    return [_md_table(["#", "contender", header, "errors", "cost"], cells, [True, False, True, True, True]), *tied]


def _run_link(env: Mapping[str, str]) -> str | None:
    """The GitHub Actions run's page, from the variables GitHub sets (each checked: no link a
    variable could bend elsewhere), or None outside Actions."""
    server, repository, run = (env.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if (
        re.fullmatch(r"https://[\w.-]+(:\d+)?", server)
        and re.fullmatch(r"[\w.-]+/[\w.-]+", repository)
        and run.isdigit()
    ):
        return f"{server}/{repository}/actions/runs/{run}"
    return None


def _summary_changes(changes: Sequence[_Change], primary: str, problems: Sequence[str] = ()) -> list[str]:
    """The baseline in the summary: each line that moved, once (a regression a failed gate
    already names is not repeated), then counts that say what they count (lines compared, and
    lines in one run only). Every line, moved or not, is in the folded table."""
    compared = [c for c in changes if c.old is not None and c.new is not None]
    moved = [c for c in compared if c.verdict in ("regressed", "improved")]
    silent = [c for c in compared if c.verdict in ("not enough data", "nothing to judge")]
    said, lines = " ".join(problems), []
    for c in moved:  # each with a handful of the cases that flipped under it (under their head, if a gate said it)
        flips = _flip_lines([c], None, "box")
        if _change_text(c) not in said:
            lines.append(f"- {c.verdict}: {_md(_change_text(c))}")
        elif flips:
            lines.append(f"- {_md(flips[0])}")
        lines += [f"  - {_md(f.strip())}" for f in flips[1:]]
    new_only, old_only = (sum(c.verdict == f"only in {run}" for c in changes) for run in ("new", "old"))
    lines += [""] * bool(lines)
    rest = [c for c in compared if c not in moved and c not in silent and c.paired is not None]
    largest = max(rest, key=lambda c: abs((c.new or 0) - (c.old or 0)), default=None)
    lines.append(
        f"{len(rest)} of {_n(len(compared), 'line')} compared: no significant change (paired tests over the cases "
        f"both runs answered; p < {ALPHA} after Holm's correction)"
        + (
            f"; the largest move: {_md(_change_text(largest))}"
            if largest is not None and largest.new != largest.old
            else ""
        )
        + (f"; {len(silent)} with too little to judge (no verdict)" if silent else "")
        + (f"; {new_only} only in the new run" if new_only else "")
        + (f"; {old_only} only in the old run" if old_only else "")
    )
    if largest is not None and not moved:  # the cases under the largest move
        lines += [f"  - {_md(f.strip())}" for f in _flip_lines([largest], None, "box")[1:]]
    return lines


def _baseline_table(changes: Sequence[_Change], primary: str) -> str:
    """Every compared line of the primary metric and the errors, and any other line that
    moved, regressions first."""
    moved = ("regressed", "improved")
    shown = [
        c
        for c in changes
        if c.verdict in moved or (c.metric in (primary, ERRORS) and c.old is not None and c.new is not None)
    ]
    shown.sort(key=lambda c: (c.verdict != "regressed", c.verdict != "improved"))
    return _md_table(_CHANGE_HEADERS, [_change_row(c, "ascii") for c in shown], _CHANGE_NUMBERS)


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(_md(v) for v in values) + " |"

    return "\n".join([cells(headers), "|" + "|".join("--:" if r else "---" for r in right) + "|", *map(cells, rows)])


def _md(text: str) -> str:
    """Text as Markdown shows it: a model's ``|`` or ``<`` is never a column or a tag, and its
    ``![i](http://...)`` or ``[text](https://...)`` never an image or a link a server chose."""
    text = _visible(str(text), newlines=True)  # each cell and line stays one line
    return re.sub(r"([\\|*\[\]!`])", r"\\\1", text).replace("<", "&lt;")


# ═══════════════════════════════════════════════════════════════════════════════
# The HTML report: one self-contained file (inline CSS, SVG and a little JavaScript)
# ═══════════════════════════════════════════════════════════════════════════════


_HTML_STYLE = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--accent:#0969da;--bad:#cf222e;
--good:#1a7f37;--card:#f6f8fa}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--line:#30363d;--accent:#4493f8;
--bad:#f85149;--good:#3fb950;--card:#161b22}}
body{margin:0 auto;max-width:1200px;padding:1rem 1.5rem;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
h1{font-size:1.4rem;margin:.2rem 0}h2{font-size:1.15rem;margin:1.6rem 0 .4rem;border-bottom:1px solid var(--line)}
h3{font-size:1rem;margin:1rem 0 .3rem}
.muted{color:var(--muted)}table{border-collapse:collapse;width:100%;margin:.4rem 0 1rem;
font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
td.n,th.n{text-align:right}
th button{all:unset;cursor:pointer;font-weight:600}th button:focus-visible{outline:2px solid var(--accent)}
tr.best td{background:color-mix(in srgb,var(--good) 12%,transparent)}.err{color:var(--bad)}
.plot{width:100%;max-width:760px;height:auto;background:var(--card);border:1px solid var(--line);border-radius:6px}
.plot text{fill:var(--muted);font-size:11px}.plot .axis{stroke:var(--line)}.plot .frontier{stroke:var(--accent);
fill:none;stroke-width:1.5}
.plot circle{fill:var(--accent)}.plot circle.best{fill:var(--good);stroke:var(--fg);stroke-width:2}
details{border:1px solid var(--line);border-radius:6px;margin:.4rem 0;padding:.3rem .6rem}summary{cursor:pointer;
font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;margin:0;max-height:12rem;overflow:auto;font-size:12px}
.filters{margin:.5rem 0}.filters button{margin-right:.4rem}
body.only-errors tr.case:not(.error),body.only-wrong tr.case:not(.wrong){display:none}
.scroll{overflow-x:auto;max-width:100%}table.sortable th{cursor:pointer}.legend{font-size:12px}
table.grid td.err,table.grid td.wrong{color:var(--bad);font-weight:700}table.grid td.err{background:
color-mix(in srgb,var(--bad) 14%,transparent)}table.grid td.right{color:var(--muted)}table.grid a{color:inherit}
table.only-differ tr.g:not(.differ),table.only-errors tr.g:not(.has-error){display:none}
tr:target td{outline:2px solid var(--accent)}td.n{white-space:nowrap}
@media (max-width:600px){body{padding:.5rem}.x{display:none}th,td{padding:.3rem}}
button.side{all:unset;cursor:pointer;text-decoration:underline dotted}
button.side:focus-visible{outline:2px solid var(--accent)}
.side-grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(15rem,1fr));gap:.6rem}
tr.side td>div{position:sticky;left:.3rem;max-width:calc(100vw - 2.5rem)}
.side h4{margin:.4rem 0 .1rem;font-size:12px}
.lab{display:block;white-space:nowrap}.lab button{font-size:11px;margin:.1rem}.lab input{width:4rem}
.lab button[aria-pressed=true]{outline:2px solid var(--accent);font-weight:700}
.lab.done::after,.lab.chosen::after{content:"labelled " attr(data-said);font-size:11px;color:var(--muted)}
.lab.chosen::after{content:"labelled " attr(data-said) " out of turn: asked again in its turn"}
.lab.next{outline:2px dashed var(--accent)}
"""

_HTML_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), index = Array.prototype.indexOf.call(th.parentElement.children, th);
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    var down = th.getAttribute("aria-sort") !== "descending";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", down ? "descending" : "ascending");
    function key(row) { var c = row.cells[index]; var v = c.getAttribute("data-value");
    return v === null ? c.textContent : parseFloat(v); }
    rows.sort(function (a, b) { var x = key(a), y = key(b); var o = x < y ? -1 : x > y ? 1 : 0; return down ? -o : o;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
document.querySelectorAll(".filters button[data-filter]").forEach(function (button) {
  button.addEventListener("click", function () {
    document.body.classList.remove("only-errors", "only-wrong");
    if (button.dataset.filter) { document.body.classList.add(button.dataset.filter); }
  });
});
document.querySelectorAll(".filters button[data-grid]").forEach(function (button) {
  button.addEventListener("click", function () {
    var table = button.parentElement.nextElementSibling.querySelector("table");
    table.classList.remove("only-differ", "only-errors");
    if (button.dataset.grid) { table.classList.add(button.dataset.grid); }
  });
});
function copy(box, title, cell) {
  var head = document.createElement("h4");
  head.textContent = title;
  box.appendChild(head);
  Array.prototype.forEach.call(cell.childNodes, function (node) { box.appendChild(node.cloneNode(true)); });
}
// a case of the grid: its input and expected answer once, then each contender's answer and diagnostics
// side by side, copied from the cases' own rows below (the page holds each answer once)
document.querySelectorAll("table.grid button.side").forEach(function (button) {
  button.addEventListener("click", function () {
    var row = button.closest("tr"), next = row.nextElementSibling;
    if (next && next.classList.contains("side")) { next.remove(); button.setAttribute("aria-expanded", "false");
    return; }
    var heads = row.closest("table").tHead.rows[0].cells, top = document.createElement("div"),
    grid = document.createElement("div");
    grid.className = "side-grid";
    Array.prototype.forEach.call(row.cells, function (cell, i) {
      var link = cell.querySelector("a"), source = link && document.getElementById(link.getAttribute("href").slice(1));
      if (!source) { return; }
      var n = source.cells.length, box = document.createElement("div");
      if (!top.childNodes.length) { copy(top, "input", source.cells[n - 5]);
      copy(top, "expected", source.cells[n - 4]); }
      copy(box, heads[i].textContent + " · " + cell.textContent, source.cells[n - 3]);
      copy(box, "diagnostics / error", source.cells[n - 2]);
      grid.appendChild(box);
    });
    var line = document.createElement("tr"), all = document.createElement("td");
    line.className = "side";
    all.colSpan = row.cells.length;
    all.appendChild(top);
    all.appendChild(grid);
    line.appendChild(all);
    row.after(line);
    button.setAttribute("aria-expanded", "true");
  });
});
// a judged cell's label, kept by its key (in the browser's storage too, so a reload keeps it) and
// offered as one JSON line each in the download; "label next" walks label's queue (data-next), and
// a label given anywhere else is "chosen": it counts for the judge's agreement, never the correction
var labels = new Map(), link = document.getElementById("labels"), next = document.getElementById("next");
var boxes = Array.from(document.querySelectorAll(".lab")), store = link && "agent-evals " + link.download;
var byKey = new Map();  // an answer's cells (the same answer of several contenders shares its label)
boxes.forEach(function (b) { var k = b.getAttribute("data-key"); byKey.set(k, (byKey.get(k) || []).concat([b])); });
var queue = boxes.filter(function (b) { return b.hasAttribute("data-next"); })
  .sort(function (a, b) { return a.getAttribute("data-next") - b.getAttribute("data-next"); });
function queued() { return queue.filter(function (b) { return !b.classList.contains("done"); }); }
function mark(key, value, chosen, line) {
  labels.set(key, line);
  byKey.get(key).forEach(function (b) {
    b.classList.remove("chosen", "next");
    b.classList.add(chosen ? "chosen" : "done");  // a chosen one stays in the queue: asked again in its turn
    var grade = b.querySelector("input");
    if (grade) { grade.value = value; }
    b.setAttribute("data-said", said(value));
    b.querySelectorAll("button").forEach(function (button) {
      button.setAttribute("aria-pressed", String(parseFloat(button.getAttribute("data-value")) === value));
    });
  });
}
function said(value) {  // a label as the cell says it, beside the judge's verdict
  return value === 1 ? "right" : value === 0 ? "wrong" : String(value);
}
function refresh() {
  try { localStorage.setItem(store, JSON.stringify(Object.fromEntries(labels))); } catch (e) { /* none kept */ }
  if (link.href.indexOf("blob:") === 0) { URL.revokeObjectURL(link.href); }
  var text = Array.from(labels.values()).join("\\n") + "\\n";
  link.href = URL.createObjectURL(new Blob([text], {type: "application/x-ndjson"}));
  link.textContent = "download labels (" + labels.size + ")";
  var left = queued().length;
  next.textContent = left ? "label next (" + left + " in the queue)" : "the queue is done";
}
boxes.forEach(function (box) {
  function label(value) {
    var key = box.getAttribute("data-key"), names = JSON.parse(key), row = {}, chosen = queued()[0] !== box;
    ["dataset", "case", "case_hash", "answer_hash", "metric"].forEach(function (n, i) { row[n] = names[i]; });
    row.label = value;
    if (chosen) { row.chosen = true; }
    mark(key, value, chosen, JSON.stringify(row));
    refresh();
  }
  box.querySelectorAll("button").forEach(function (button) {
    button.addEventListener("click", function () { label(parseFloat(button.getAttribute("data-value"))); });
  });
  var grade = box.querySelector("input");
  if (grade) { grade.addEventListener("change", function () { var v = parseFloat(grade.value);
  if (v >= 0 && v <= 1) { label(v); } }); }
});
if (next) {
  next.addEventListener("click", function (event) {
    event.preventDefault();
    boxes.forEach(function (b) { b.classList.remove("next"); });
    var box = queued()[0];
    if (!box) { return; }
    box.classList.add("next");
    for (var node = box; node; node = node.parentElement) { if (node.tagName === "DETAILS") { node.open = true; } }
    box.scrollIntoView({block: "center"});
    (box.querySelector("button, input") || box).focus();
  });
  try {  // the labels this page kept before a reload, by their cells' keys
    var kept = JSON.parse(localStorage.getItem(store) || "{}");
    Object.keys(kept).forEach(function (key) {
      var row = JSON.parse(kept[key]);
      if (byKey.has(key)) { mark(key, row.label, row.chosen, kept[key]); }
    });
  } catch (e) { /* a page opened where storage is refused keeps its labels until it closes */ }
  if (labels.size) { refresh(); } else { next.textContent = "label next (" + queued().length + " in the queue)"; }
}
function reveal() {
  var row = location.hash && document.getElementById(location.hash.slice(1));
  for (var node = row; node; node = node.parentElement) { if (node.tagName === "DETAILS") { node.open = true; } }
  if (row) { row.scrollIntoView({block: "center"}); }
}
window.addEventListener("hashchange", reveal); reveal();
"""


def _h(value: object) -> str:
    """object value as escaped HTML text."""
    import html

    return html.escape(value if isinstance(value, str) else _json_dumps(value), quote=True)


def _pareto(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both cost (lower) and score (higher), cheapest first.

    >>> _pareto([(1.0, 0.5), (2.0, 0.4), (3.0, 0.9), (0.5, 0.5)])
    [(0.5, 0.5), (3.0, 0.9)]
    """
    frontier: list[tuple[float, float]] = []
    for cost, score in sorted(points, key=lambda p: (p[0], -p[1])):
        if not frontier or score > frontier[-1][1]:
            frontier.append((cost, score))
    return frontier


def _scatter(rows: Sequence[_Row], primary: Metric, best: _Row | None) -> str:
    """Score (errors counted as wrong, as the tables rank) against cost as inline SVG: a
    log cost axis when costs span decades, the Pareto frontier drawn, the best value
    ringed. Each dot carries its rank in the table; tied contenders share one dot that
    lists them all."""
    points = [(i, r, r.cost, s) for i, r in enumerate(rows, 1) if (s := r.strict_mean(primary.name)) is not None]
    if not points:
        return '<p class="muted">Nothing was scored.</p>'
    width, height, left, bottom, pad, right = 720, 300, 64, 40, 24, 60
    x, ticks, scale = _cost_axis([c for _, _, c, _ in points], left, width - right)
    # the score axis is zoomed to the scores (a tenth of their spread around them, 1 to 5 points): at 0-100%
    # the contenders between 96.7% and 100% sit on one line and the frontier seems to cross dominated points
    scores = [score for *_, score in points]
    margin = min(0.05, max(0.01, (max(scores) - min(scores)) / 10))
    low, high = max(0.0, min(scores) - margin), min(1.0, max(scores) + margin)

    def y(score: float) -> float:
        return pad + (high - score) / (high - low) * (height - pad - bottom)

    parts = [
        f'<svg class="plot" viewBox="0 0 {width} {height}" role="img" aria-label="{_h(primary.name)} against cost">',
        f'<line class="axis" x1="{left}" y1="{y(low):.1f}" x2="{width - right}" y2="{y(low):.1f}"/>',
        f'<line class="axis" x1="{left}" y1="{pad}" x2="{left}" y2="{y(low):.1f}"/>',
        f'<text transform="translate(14 {y((low + high) / 2):.0f}) rotate(-90)" text-anchor="middle">'
        f"{_h(primary.name)}, errors as wrong ({_fmt_pct(low)} to {_fmt_pct(high)})</text>",
    ]
    for tick in (low + (high - low) * k / 4 for k in range(5)):
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_fmt_pct(tick)}</text>')
    drawn: list[float] = []
    for tick in ticks:  # a tick too near one already drawn would print over it
        if all(abs(x(tick) - d) > 56 for d in drawn):
            drawn.append(x(tick))
            parts.append(f'<text x="{x(tick):.1f}" y="{height - 22}" text-anchor="middle">{_fmt_cost(tick)}</text>')
    parts.append(f'<text x="{(width + left) / 2:.0f}" y="{height - 4}" text-anchor="middle">{scale}</text>')
    frontier = _pareto([(c, score) for _, _, c, score in points])
    path = " ".join(f"{x(c):.1f},{y(score):.1f}" for c, score in frontier)
    parts.append(f'<polyline class="frontier" points="{path}"><title>Pareto frontier</title></polyline>')
    spots: dict[tuple[int, int], list[tuple[int, _Row, float, float]]] = {}
    for point in points:  # dots closer than a few pixels are one spot, listed together
        spots.setdefault((round(x(point[2]) / 4), round(y(point[3]) / 4)), []).append(point)
    for members in spots.values():
        parts += _scatter_spot(members, x(members[0][2]), y(members[0][3]), best, (width + left - right) / 2)
    legend = " · ".join(f"{i} {_h(row.contender.label)}" for i, row, _, _ in points)
    return "".join(parts) + f'</svg><p class="muted legend">{legend}</p>'


def _cost_axis(costs: Sequence[float], left: float, end: float) -> tuple[Callable[[float], float], list[float], str]:
    """The plot's cost axis from ``left`` to ``end``: where a cost is drawn, its ticks and its
    title. Log when costs span decades; then a $0 contender, which a log axis has no place
    for, gets one of its own left of the scale, never another contender's."""
    positive = [c for c in costs if c > 0]
    if not positive:  # every answer cost $0: no cost axis to draw
        return lambda cost: (left + end) / 2, [], "cost: no contender reported any ($0 each)"
    low, high = min(positive), max(positive)
    if high / low < 10:
        return lambda cost: left + cost / high * (end - left), [high * k / 4 for k in range(5)], "cost"
    start = left + 72 if len(positive) < len(costs) else left
    span = math.log10(high) - math.log10(low) or 1.0

    def x(cost: float) -> float:
        return start + (math.log10(cost) - math.log10(low)) / span * (end - start) if cost > 0 else left + 12

    decades = range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)
    ticks = sorted({low, high, *(10.0**k for k in decades), *([0.0] if start > left else [])})
    return x, ticks, "cost, log scale" + (" ($0 at the left)" if start > left else "")


def _scatter_spot(
    members: list[tuple[int, _Row, float, float]], cx: float, cy: float, best: _Row | None, middle: float
) -> list[str]:
    """One dot for the contenders at one spot, ringed when the best value is among them,
    with their ranks beside it on the side with room."""
    ringed = any(row is best for _, row, _, _ in members)
    names = "; ".join(f"#{i} {row.contender.label}: {_fmt_pct(sc)} at {_fmt_cost(c)}" for i, row, c, sc in members)
    css, radius = (' class="best"', 7) if ringed else ("", 5)
    label = ",".join(str(i) for i, *_ in members) + (" best value" if ringed else "")
    anchor, dx = ("start", 10) if cx < middle else ("end", -10)
    return [
        f'<circle{css} cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}"><title>{_h(names)}</title></circle>',
        f'<text x="{cx + dx:.1f}" y="{cy - 8:.1f}" text-anchor="{anchor}">{_h(label)}</text>',
    ]


def _html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[tuple[str, object]]],
    numeric: Sequence[bool],
    classes: Sequence[str] = (),
    hidden: Collection[str] = (),
) -> str:
    """A sortable table: each cell is (text, sort value or None). On a phone the columns
    ``hidden`` names are not shown (class ``x``), so that a row stays one line."""
    extra = [h in hidden for h in headers]
    head = "".join(
        f'<th scope="col" class="{"n" * n}{" x" * x}"><button type="button">{_h(h)}</button></th>'
        for h, n, x in zip(headers, numeric, extra, strict=True)
    )
    body = []
    for i, row in enumerate(rows):
        css = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        cells = "".join(_html_cell(text, value, n, x) for (text, value), n, x in zip(row, numeric, extra, strict=True))
        body.append(f"<tr{css}>{cells}</tr>")
    table = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return f"<div class=scroll>{table}</div>"


def _html_cell(text: str, value: object, numeric: bool, extra: bool = False) -> str:
    """A cell; ``value`` (when not None) is what sorting compares; ``extra``: hidden on a phone."""
    css = f' class="{"n" * numeric}{" x" * extra}"' if numeric or extra else ""
    sort = "" if value is None else f' data-value="{_h(str(value))}"'
    return f"<td{css}{sort}>{_h(text)}</td>"


def _html_rows(
    rows: Sequence[_Row], metrics: Sequence[Metric], lead: str, placed: bool = True
) -> tuple[list[str], list[list[tuple[str, Any]]], list[bool]]:
    """The cells of a table's rows (and what sorting compares); ``placed``: numbered by rank, or "-"."""
    ranked = any(r.errors for r in rows)
    headers, numeric = _leaderboard_columns(lead, metrics, ranked)
    primary = _primary(metrics)
    cells, places = [], _places(rows, primary, placed)
    for i, r in enumerate(rows, 1):
        c = r.contender
        cells.append(
            [
                (places[i - 1] if lead == "#" else r.dataset, i if lead == "#" else None),
                (c.shown + (f" ({r.runs} of {r.planned})" if r.runs < r.planned else ""), None),
                (c.effort or "default", None),
                (_fmt_temp(c.temperature), c.temperature if c.temperature is not None else -1),
                *(
                    (
                        _fmt_estimate(r, m.name) if m is primary else _fmt_pct(r.mean(m.name)),
                        r.mean(m.name) if r.mean(m.name) is not None else -1,
                    )
                    for m in metrics
                ),
                (str(r.errors), r.errors),
                *(
                    [(_fmt_pct(strict := r.strict_mean(primary.name)), -1 if strict is None else strict)]
                    if ranked
                    else []
                ),
                (_fmt_time(r.duration) + _fmt_latency(r), r.duration),
                (str(r.usage.input_tokens), r.usage.input_tokens),
                (str(r.usage.output_tokens), r.usage.output_tokens),
                (_fmt_cost(r.cost), r.cost),
            ]
        )
    if ranked:  # where space is short (a phone's 400 px) the figure the rows are ordered by comes first
        first = [0, 1, headers.index("ranked"), headers.index("errors")]
        order = first + [i for i in range(len(headers)) if i not in first]
        headers, numeric = [headers[i] for i in order], [numeric[i] for i in order]
        cells = [[row[i] for i in order] for row in cells]
    return headers, cells, numeric


def _fmt_latency(row: _Row) -> str:
    """A case's time as users quote it: `` (p50 0.81s, p95 2.10s)``, or nothing."""
    return f" (p50 {row.latency[0]:.2f}s, p95 {row.latency[1]:.2f}s)" if row.latency else ""


def _html_case_section(
    experiments: Sequence[Experiment], metrics: Sequence[Metric], places: Mapping[int, int]
) -> list[str]:
    """The report's Cases: the filters, the labels' download when a metric is judged, and
    each experiment's case runs, folded."""
    out = ["<section><h2>Cases</h2><div class=filters role=group aria-label=Show>"]
    if any(m.judged for m in metrics):  # labels given below are saved by downloading them: the page has no server
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out.append('<a id=next href="#">label next</a> ·')
        out.append(f'<a id=labels download="labels-{stamp}.jsonl" href="#">download labels (0)</a> to evals/labels/ ·')
    ranks = _html_queue(experiments, metrics)
    out.append(
        '<button type=button data-filter="">all</button>'
        '<button type=button data-filter="only-errors">errors only</button>'
    )
    out.append('<button type=button data-filter="only-wrong">wrong only</button></div>')
    for experiment in experiments:
        wrong = sum(1 for r in experiment.results if r.score is not None and r.score.value < 1)
        errors = sum(1 for r in experiment.results if r.error)
        out.append(
            f"<details><summary>{_h(experiment.dataset)} · {_h(experiment.contender.label)} — "
            f"{len(experiment.results)} runs, {wrong} wrong, {errors} errors</summary>"
        )
        out.append(_html_cases(experiment, metrics, places[id(experiment)], ranks))
        out.append("</details>")
    return out


def _render_html(
    experiments: Sequence[Experiment],
    metrics: Sequence[Metric],
    *,
    title: str,
    refused: Sequence[str] = (),
    changes: Sequence[_Change] | None = None,
) -> str:
    """The whole report as one HTML page: no external assets, no network requests; with
    ``changes``, the comparison with the baseline first, as the summary has it."""
    primary = _primary(metrics)
    rows = _rows(experiments, metrics)
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        f"<title>{_h(title)}</title><style>{_HTML_STYLE}</style></head><body>",
        f"<header><h1>{_h(title)}</h1><p class=muted>agent-evals {__version__} · "
        f"{_n(len(experiments), 'experiment')} · "
        f"primary metric <strong>{_h(primary.name)}</strong> · generated "
        f"{_h(time.strftime('%Y-%m-%d %H:%M'))}</p></header>",
    ]
    if refused:
        out.append("<p><strong>Refused</strong> (not scored): " + "; ".join(_h(r) for r in refused) + "</p>")
    if changes is not None:
        out.append(_html_changes(changes, primary.name))
    places = {id(e): i for i, e in enumerate(experiments)}  # a case's anchor: #c<experiment>-<run>
    phone = {"time", "tok_in", "tok_out", *(m.name for m in metrics if m is not primary)}  # hidden at 600 px
    for dataset in dict.fromkeys(r.dataset for r in rows):
        group = [r for r in rows if r.dataset == dataset]
        best = _best_value(group, primary)
        headers, cells, numeric = _html_rows(group, metrics, "#")
        out.append(f"<section><h2>{_h(dataset)}</h2>")
        out.append(_html_table(headers, cells, numeric, ["best" if r is best else "" for r in group], phone))
        lines = _best_value_lines(group, primary) + _error_lines(group) + _reason_lines(group)
        out.extend(f"<p>{_h(line)}</p>" for line in lines)
        out.append(_scatter(group, primary, best))
        ranked = sorted(
            (e for e in experiments if e.dataset == dataset),
            key=lambda e: next(i for i, r in enumerate(group) if r.contender == e.contender),
        )
        out.append(_html_grid(ranked, places))
        out.append("</section>")
    unlike = _unlike(rows)
    headers, cells, numeric = _html_rows(_overall(rows, metrics, primary), metrics, "#", not unlike)
    note = f"<p>{_h(_leaderboard_head(unlike, primary))}</p>" if unlike else ""
    board = _html_table(headers, cells, numeric, hidden=phone)
    out.append(f"<section><h2>Leaderboard, all datasets</h2>{note}{board}</section>")
    if judged := _judge_summary(experiments, metrics):
        out.append("<section><h2>Judged metrics</h2>" + "".join(f"<p>{_h(line)}</p>" for line in judged) + "</section>")
    out += _html_case_section(experiments, metrics, places)
    glossary = _html_glossary(metrics, any(r.errors for r in rows), _corrected_metrics(experiments, metrics))
    out.append(f"</section>{glossary}<script>{_HTML_SCRIPT}</script></body></html>")
    return "\n".join(out)


def _html_changes(changes: Sequence[_Change], primary: str) -> str:
    """The comparison with the baseline: the summary's lines, every line's table, and under each
    line with cases that moved, all of them."""
    rows = [[(text, None) for text in _change_row(c, "box")] for c in changes]
    verdicts = [c.verdict if c.verdict in ("regressed", "improved") else "" for c in changes]
    flips = [
        f"<details{' open' * (c.verdict == 'regressed')}><summary>{_h(_flip_head(c))}</summary><ul>"
        + "".join(f"<li><code>{_h(f.text('box'))}</code></li>" for f in c.flipped)
        + "</ul></details>"
        for c in changes
        if c.flipped
    ]
    moved = [f"{c.verdict}: {_change_text(c)}" for c in changes if c.verdict in ("regressed", "improved")]
    said = "".join(f"<p><strong>{_h(line)}</strong></p>" for line in moved) or "<p>no significant change</p>"
    table = _html_table(_CHANGE_HEADERS, rows, _CHANGE_NUMBERS, verdicts)
    return f"<section><h2>Against the baseline</h2>{said}{table}{''.join(flips)}</section>"


def _html_transcript(transcript: Sequence[Mapping[str, Any]] | None) -> str:
    """An agent's conversation, turn by turn, folded under the output: each message's
    role and text, each tool call with its arguments, each tool result."""
    if not transcript:
        return ""
    items = []
    for message in transcript:
        if not isinstance(message, Mapping):
            continue
        role = str(message.get("role") or "?")
        parts = [] if message.get("content") in (None, "") else [str(message.get("content"))]
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                parts.append(f"→ {function.get('name')}({function.get('arguments')})")
        label = f"{role} ({message.get('tool_call_id')})" if role == "tool" else role
        items.append(f"<li><b>{_h(label)}</b><pre>{_h(chr(10).join(parts))}</pre></li>")
    turns = sum(isinstance(m, Mapping) and m.get("role") == "assistant" for m in transcript)
    return f"<details><summary>transcript: {turns} turns</summary><ol>{''.join(items)}</ol></details>"


def _html_grid(experiments: Sequence[Experiment], places: Mapping[int, int]) -> str:
    """Cases × contenders: a row a case (and repeat), a column a contender, each cell its
    score or ``error``, linked to the case's full row; filters keep the rows where the
    contenders differ, or where one raised."""
    cells: dict[str, dict[int, str]] = {}
    marks: dict[str, set[str]] = {}
    for column, experiment in enumerate(experiments):
        place = places[id(experiment)]
        for k, r in enumerate(experiment.results):
            shown = "error" if r.error else "-" if r.score is None else _fmt_pct(r.score.value)
            kind = "err" if r.error else "wrong" if r.score is not None and r.score.value < 1 else "right"
            tip = f' title="{_h(r.error)}"' if r.error else ""
            cells.setdefault(r.label, {})[column] = (
                f'<td class="n {kind}"{tip}><a href="#c{place}-{k}">{shown}</a></td>'
            )
            marks.setdefault(r.label, set()).add(shown)
    head = "".join(f"<th scope=col>{_h(e.contender.label)}</th>" for e in experiments)
    body = []
    for label, row in cells.items():
        css = " ".join(
            ["g", *(["differ"] if len(marks[label]) > 1 else []), *(["has-error"] if "error" in marks[label] else [])]
        )
        tds = "".join(row.get(column, "<td class=n>·</td>") for column in range(len(experiments)))
        side = (
            f'<button type=button class=side aria-expanded=false title="its answers side by side">{_h(label)}</button>'
        )
        body.append(f'<tr class="{css}"><td>{side}</td>{tds}</tr>')
    filters = (
        '<div class="filters grid-filters" role=group aria-label="Show cases">'
        '<button type=button data-grid="">all cases</button>'
        '<button type=button data-grid="only-differ">where they differ</button>'
        '<button type=button data-grid="only-errors">errors only</button></div>'
    )
    table = (
        f"<table class=grid><thead><tr><th scope=col>case</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )
    # folded when large: a page of 12,000 runs still opens in well under a second
    opened = " open" if len(cells) <= 200 else ""
    summary = f"Case by case: {len(cells)} cases × {len(experiments)} contenders (a case: its answers side by side)"
    return f"<details{opened}><summary>{summary}</summary>{filters}<div class=scroll>{table}</div></details>"


def _html_queue(experiments: Sequence[Experiment], metrics: Sequence[Metric]) -> dict[tuple[str, ...], int]:
    """The report's "label next": ``label``'s queue as the page walks it (each contender's
    gaps in its dataset's one order, ``_order``, the contender whose labelled sample is
    shortest next), as each answer's place in it."""
    ranks: dict[tuple[str, ...], int] = {}
    for metric in (m.name for m in metrics if m.judged):
        queues = []
        for e in experiments:
            units: dict[str, list[tuple[str, ...]]] = {}
            for r in e.results:
                if r.reply is not None and r.score is not None and r.score.metrics.get(metric) is not None:
                    unit = _unit(e.dataset, r.case.id, r.case.metadata.get(CLUSTER))
                    units.setdefault(unit, []).append(_label_key(r, metric))
            todo, start = _in_order(units, e.labels.__contains__)
            queues.append((todo, e.labels, [start]))
        while live := [q for q in queues if q[2][0] < len(q[0])]:
            todo, labels, held = min(live, key=lambda q: q[2][0])  # held: the sample's size, the next one's place
            if (key := todo[held[0]]) not in labels:
                ranks.setdefault(key, len(ranks))
            held[0] += 1
    return ranks


def _html_cases(
    experiment: Experiment, metrics: Sequence[Metric], place: int, ranks: Mapping[tuple[str, ...], int]
) -> str:
    head = "".join(
        f"<th scope=col>{_h(h)}</th>"
        for h in [
            "case",
            "score",
            *(m.name for m in metrics),
            "input",
            "expected",
            "output",
            "diagnostics / error",
            "usage",
        ]
    )
    rows = []
    for k, r in enumerate(experiment.results):
        kind = "error" if r.error else "wrong" if r.score is not None and r.score.value < 1 else "right"
        score = "-" if r.score is None else _fmt_pct(r.score.value)
        metric_cells = "".join(
            f"<td class=n>{_h('-' if r.score is None else _fmt_pct(r.score.metrics.get(m.name)))}"
            f"{_html_label(r, m.name, ranks, experiment.labels) if m.judged else ''}</td>"
            for m in metrics
        )
        output = r.reply.output if r.reply is not None else None
        if r.error:
            note = f'<pre class="err">{_h(r.error)}</pre>'
        elif r.reply is not None and r.reply.error:
            note = f'<pre class="err">model failed: {_h(r.reply.error)}</pre>'
        else:
            note = f"<pre>{_h(dict(r.score.diagnostics) if r.score else {})}</pre>"
        usage = f"{r.usage.input_tokens} in · {r.usage.output_tokens} out · {_fmt_cost(r.usage.cost_usd)}"
        if r.turns > 1:
            usage += f" · {r.turns} turns"
        transcript = _html_transcript(r.transcript)
        rows.append(
            f'<tr class="case {kind}" id="c{place}-{k}"><td>{_h(r.label)}</td>'
            f"<td class=n>{_h(score)}</td>{metric_cells}"
            f"<td><pre>{_h(r.case.input)}</pre></td><td><pre>{_h(r.case.expected)}</pre></td>"
            f"<td><pre>{_h(output)}</pre>{transcript}</td><td>{note}</td><td>{_h(usage)}</td></tr>"
        )
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


def _html_label(
    result: RunResult, metric: str, ranks: Mapping[tuple[str, ...], int], labels: Mapping[tuple[str, ...], float]
) -> str:
    """A judged cell's controls: is this answer right or wrong (a 0/1 verdict), as ``label``
    asks it, or a grade; the script keeps each label for the download (labels-*.jsonl). Its
    place in the queue (``_html_queue``: "label next" walks it), or its label when it has one:
    the button it pressed stays pressed, and the cell says the label beside the judge's."""
    value = result.score.metrics.get(metric) if result.score is not None and result.reply is not None else None
    if value is None:
        return ""
    key = _label_key(result, metric)
    label = _any_label(labels, key)
    mark = "" if label is None else " done" if key in labels else " chosen"  # a chosen one stays in the queue
    attributes = f'class="lab{mark}" data-key="{_h(_json_dumps(key))}"'
    attributes += f' data-next="{ranks[key]}"' if key in ranks else ""
    if label is not None:
        attributes += f' data-label="{label:g}" data-said="{ {1.0: "right", 0.0: "wrong"}.get(label, f"{label:g}") }"'
    if value in (0, 1):
        pressed = [f' aria-pressed="{str(label == v).lower()}"' if label is not None else "" for v in (1, 0)]
        return (
            f'<span {attributes} data-judged="{value:g}"><button type=button data-value=1{pressed[0]}>right</button>'
            f"<button type=button data-value=0{pressed[1]}>wrong</button></span>"
        )
    return f'<span {attributes}><input type=number min=0 max=1 step=0.05 aria-label="your grade"></span>'


def _html_glossary(metrics: Sequence[Metric], ranked: bool = False, corrected: Collection[str] = ()) -> str:
    lines = _glossary(metrics, True, ranked, corrected).splitlines()[1:]
    return "<section><h2>Glossary</h2><pre>" + _h("\n".join(line.strip() for line in lines)) + "</pre></section>"


def _write_html(path: Path, html_text: str, *, open_it: bool, unwritten: list[str] | None = None) -> None:
    failed: list[str] = []
    if not _write_text(path, html_text, failed):
        if unwritten is None:
            raise ConfigError(f"could not write {failed[0]}; name a file in a folder you can write")
        unwritten += failed
        return
    print(f"report: {_display(path)}", file=sys.stderr)
    if open_it:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())


# ═══════════════════════════════════════════════════════════════════════════════
# Terminal I/O: streams and table style
# ═══════════════════════════════════════════════════════════════════════════════


def _style_for(stream: object) -> str:
    """Box drawing where the stream can encode it; ASCII elsewhere."""
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "┌─┬┐│├┼┤└┴┘…·".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return "ascii"
    return "box"


QUIET_KEEPS = ("error:", "warning:", "gate failed:", "interrupted")  # what --quiet still says on STDERR


class _Guarded:
    """A standard stream as the command writes it: secrets masked and control characters
    made visible in every byte, whatever wrote it (tables, warnings, a --debug traceback).
    The progress line writes to the stream underneath (``raw``). ``quiet`` (``--quiet``): only
    lines that ask for something (``QUIET_KEEPS``) get through; a line is judged by its start."""

    def __init__(self, stream: Any, quiet: bool = False, fold: bool = False) -> None:
        self.raw, self.quiet, self.fold = stream, quiet, fold  # fold: lines folded at words to the terminal
        self.fresh = self.keep = True  # at a line's start; whether the line is written

    def write(self, text: str) -> int:
        if self.quiet and text:
            if self.fresh:
                self.keep = text.startswith(QUIET_KEEPS)
            self.fresh = text.endswith("\n")
        if self.keep or not self.quiet:
            shown = _visible(_redact(text))
            width = _width_of(self.raw) if self.fold and len(shown) > 40 else 0
            self.raw.write("\n".join(_wrap(shown.split("\n"), width)) if width else shown)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _at_terminal() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


# ═══════════════════════════════════════════════════════════════════════════════
# The command line: the parser, its completion scripts, and one function per command
# ═══════════════════════════════════════════════════════════════════════════════


def _cmd_diff(args: argparse.Namespace) -> int:
    old = _read_run(args.old, Path(args.old), "diff OLD")
    new = _read_run(args.new, Path(args.new), "diff NEW")
    metrics: dict[str, None] = {}  # declared first, then any other a row carries; in order, once
    for record in [*new.values(), *old.values()]:
        metrics |= dict.fromkeys(m["name"] for m in record.get("metrics") or ())
        metrics |= dict.fromkeys(name for row in record.get("rows", ()) for name in (row.get("metrics") or {}))
    declared = [m for record in [*new.values(), *old.values()] for m in record.get("metrics") or ()]
    primary = next((m["name"] for m in declared if m.get("primary")), next(iter(metrics), ""))
    _check_exclude(args.flaky, {**old, **new}, primary, "diff")
    # people's labels correct the judged metrics: a paired correction
    logged = [(Path(r["read_from"]), r.get("labels")) for r in [*old.values(), *new.values()]]
    labels = _suite_labels(logged, "diff") if any(m.get("judged") for m in declared) else {}
    changes = _compare_runs(old, new, list(metrics), args.flaky, labels)
    effect = None
    if args.effect is not None:
        with contextlib.suppress(ValueError):
            effect = float(args.effect.strip().rstrip("%")) / 100
        if effect is None or not 0 < effect <= 1:
            raise ConfigError(f"--effect {args.effect}: expected points above 0 and at most 100 (5 for five points)")
    width = _width_of(sys.stdout)
    rest = "compare --baseline OLD lists all with --format json or --html"
    print(_render_changes(changes, _style_for(sys.stdout), primary, effect, width, rest))
    for line in _wrap(_upstream_lines(old, new), width):
        print(line)
    failed = _regressions(changes, primary) if args.fail_on_regression else []
    for c in failed:
        print(f"gate failed: --fail-on-regression: {_change_text(c)}", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


_SHELLS = {"bash": "", "zsh": "autoload -U +X bashcompinit && bashcompinit\n"}
# Flags whose value is a file or folder: the shell completes paths for them.
_PATH_FLAGS = ("--helper", "-C", "--config", "-o", "--output", "--junit", "--resume", "--baseline")


def _completion_script(shell: str) -> str:
    """A bash completion function (zsh loads it through bashcompinit): commands, each
    command's flags, and the values of flags with a fixed set (efforts, trackers)."""
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    values: dict[str, Sequence[str]] = {}
    for setting in _SETTINGS:
        if setting.choices:
            values |= dict.fromkeys(setting.flags, setting.choices)
    # the suite's own names, asked of agent-evals when the shell completes them
    asked = {"--tracker": "trackers", "-m": "models", "--models": "models", "-d": "datasets", "--dataset": "datasets"}
    asked |= {"-c": "cases", "--case": "cases"}
    cases = []
    for name, command in sub.choices.items():
        flags = sorted({o for a in command._actions for o in a.option_strings})
        words = " ".join(
            [*flags, *(c for a in command._actions if a.choices and not a.option_strings for c in a.choices)]
        )
        cases.append(f'        {name}) words="{words}" ;;')
    value_cases = [
        f'        {flag}) COMPREPLY=($(compgen -W "{" ".join(v)}" -- "$cur")); return ;;' for flag, v in values.items()
    ]
    value_cases += [
        f'        {flag}) COMPREPLY=($(compgen -W "$(agent-evals __complete {kind} 2>/dev/null)" -- "$cur")); return ;;'
        for flag, kind in asked.items()
    ]
    paths = "|".join(_PATH_FLAGS)
    return f"""{_SHELLS[shell]}# agent-evals {shell} completion: eval "$(agent-evals completion {shell})"
_agent_evals() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" words
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "{" ".join(sub.choices)} --help --version" -- "$cur"))
        return
    fi
    case "$prev" in
{chr(10).join(value_cases)}
        {paths}) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    case "${{COMP_WORDS[1]}}" in
{chr(10).join(cases)}
        *) words="" ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -F _agent_evals agent-evals"""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage dump
        raise _UsageError(f"{message} (see {self.prog} --help)")


def _flag_type(setting: _Setting) -> Callable[[str], object]:
    """The argparse type of a setting's flag: the text as a number or a comma list, then
    the one check the config file's values go through too."""

    listed = setting.kind in ("choices", "temperatures")

    def parse(text: str) -> object:
        items = _split([text]) if listed else [text]
        if not items:  # '' or ',': a flag given nothing is refused, never read as not given
            raise argparse.ArgumentTypeError("empty: give a value, or leave the flag out")
        values = [item if setting.choices else _flag_number(item) for item in items]
        for item, value in zip(items, values, strict=True):
            try:
                _setting_value(setting, [value] if listed else value)
            except ValueError as e:  # named as typed: "got '0'"
                problem, got, _ = str(e).partition(", got ")
                raise argparse.ArgumentTypeError(f"{problem}, got {item!r}" if got else problem) from None
        return _setting_value(setting, values if listed else values[0])

    return parse


def _flag_number(text: str) -> object:
    """A flag's number: an int, a float, or the text itself (which the check then refuses)."""
    for kind in (int, float):
        try:
            return kind(text) if len(text) < 30 else text
        except ValueError:
            pass
    return text


def _flag_help(setting: _Setting) -> str:
    """A setting's --help line, with where its default comes from."""
    text = f"{setting.help}: {', '.join(setting.choices)}" if setting.choices else setting.help
    if not setting.key:
        return text
    default = setting.default
    shown = "none" if default is None else f"{default:g}" if isinstance(default, float) else str(default)
    return f"{text} (default: defaults.{setting.key}, else {shown})"


def _epilog(providers: Sequence[Provider] | None = None) -> str:
    types = _request_types(providers or _builtin_providers())
    width = max(map(len, types))
    lines = ["help COMMAND: a command's flags (as COMMAND --help)", ""]
    lines += ["request types (a suite names what its adapter sends in request_types:):"]
    lines += [f"  {name.ljust(width)}  {text}" for name, text in types.items()]
    lines += ["", "exit codes:"]
    lines += [f"  {code:<3}  {text}" for code, text in _EXIT_CODES]
    lines += [
        "",
        "The suite: evals/eval_helper.py, or evals/.agent-eval.config.json (no package needed) or .yml (PyYAML),",
        "searched upward from here.",
    ]
    return "\n".join(lines)


# The command line's flags, as data: (where, flags, options), in --help's order. ``where`` is
# a parser the commands share (debug, suite, common, running, listing), one of running's
# groups (running/<group>), or a command. "running/settings" is where _SETTINGS' flags go.
_ON: dict[str, object] = {"action": "store_true"}
_MAYBE: dict[str, object] = {"nargs": "?", "const": True}  # a flag whose value may be left out
_LIST: dict[str, object] = {"action": "append"}
_SENT = "what the models are sent (beats the config file's defaults and entries)"
_HOW = "how the run goes (beats the config file's defaults)"
_FORMAT = (
    "table: the tables for people; json: one JSON document on STDOUT for scripts (README: Machine-readable "
    "results); markdown: the summary a pull request shows (GitHub Actions: added to GITHUB_STEP_SUMMARY whatever "
    "the format)"
)
_FORMATS = {"choices": ("table", "json", "markdown"), "default": "table", "help": _FORMAT}
_FLAKY: dict[str, object] = {
    "choices": ("mean", "wrong", "exclude"),
    "default": "mean",
    "help": "how a case whose --repeat answers disagree counts in the gates and the baseline: mean (default: the "
    "share of its repeats right, as the tables show), wrong (pass^k: right only when every repeat is) or exclude "
    "(left out)",
}
_FLAGS: tuple[tuple[str, tuple[str, ...], dict[str, Any]], ...] = (
    ("debug", ("--debug",), {**_ON, "help": "show tracebacks"}),
    (
        "suite",
        ("--helper",),
        {"metavar": "PATH", "help": "the suite's eval_helper.py, config file or evals/ folder (or AGENT_EVALS_HELPER)"},
    ),
    ("common", ("-C", "--config"), {"metavar": "FILE", "help": f"the lineup file instead of evals/{CONFIG_NAME}"}),
    (
        "common",
        ("-d", "--dataset"),
        {**_LIST, "metavar": "NAME", "help": "only these datasets (repeat or comma-separate)"},
    ),
    ("common", ("-c", "--case"), {**_LIST, "metavar": "ID", "help": "only this variant or variant/NNN case"}),
    (
        "common",
        ("-v", "--verbose"),
        {
            **_ON,
            "help": "notes on STDERR: the suite, the tracker and why; every column's glossary and the tests' notes",
        },
    ),
    (
        "debug",
        ("-q", "--quiet"),
        {**_ON, "help": "the tables and the exit code: STDERR only says errors, warnings and failed gates"},
    ),
    (
        "running/what runs",
        ("-m", "--models"),
        {**_LIST, "metavar": "ID", "help": "only these lineup models (repeat or comma-separate)"},
    ),
    ("running/what runs", ("-n", "--dry-run"), {**_ON, "help": "show the experiment matrix; call nothing"}),
    (
        "running/what runs",
        ("--judge",),
        {"metavar": "MODEL", "help": "the model a scorer's Judge asks (beats the config's judge:)"},
    ),
    (
        "running/what runs",
        ("--shard",),
        {"metavar": "K/N", "help": "run only the K-th of N stable slices of the experiment matrix (CI matrices)"},
    ),
    (
        "running/what runs",
        ("--resume",),
        {
            **_MAYBE,
            "metavar": "LOG",
            "help": "skip the cases a run already finished (default: the newest run in log/agent-evals)",
        },
    ),
    (
        "running/what runs",
        ("--retry-errors",),
        {**_ON, "help": "with --resume: ask the cases that ended in an error again"},
    ),
    (
        "running/what runs",
        ("--resend-lost",),
        {
            **_ON,
            "help": "with --resume --batch: send again the batches whose submission got no answer, once you have "
            "checked the provider holds none of them (without it, the resume sends none)",
        },
    ),
    (
        "running/what runs",
        ("--batch",),
        {
            **_ON,
            "help": "ask through OpenRouter's Batch API: about half price, answers in minutes to hours, an "
            "agent's turns a batch each (README: Providers)",
        },
    ),
    (
        "running/what runs",
        ("--batch-fallback",),
        {
            "choices": ("batch", "sync"),
            "default": "batch",
            "help": "what asks again the requests a batch left unanswered (expired, cancelled, refused): a new "
            "batch (default), or one by one now (sync)",
        },
    ),
    (
        "running/what runs",
        ("--until-decided",),
        {
            **_ON,
            "help": "ask cases in rounds, in a seeded random order, and stop asking a contender once it is shown "
            "below the top (sequential tests: README, How the numbers are computed)",
        },
    ),
    ("running/settings", (), {}),
    (
        f"running/{_HOW}",
        ("--cache",),
        {**_ON, "help": "answer from, and store in, the response cache (or cache: true)"},
    ),
    ("running/trackers and files", ("--format",), _FORMATS),
    ("running/trackers and files", ("--project",), {"metavar": "NAME", "help": "the tracker's project name"}),
    (
        "running/trackers and files",
        ("--tracker",),
        {"metavar": "NAME", "help": "the remote tracker beside the local log (none: no remote)"},
    ),
    ("running/trackers and files", ("--local",), {**_ON, "help": "no remote tracker; the local log only"}),
    (
        "running/trackers and files",
        ("--no-open",),
        {**_ON, "help": "do not open the tracker's page when the run finishes"},
    ),
    (
        "running/trackers and files",
        ("--html",),
        {**_MAYBE, "metavar": "FILE", "help": "also write the HTML report (default: log/<command>.<stamp>.html)"},
    ),
    ("running/trackers and files", ("--open",), {**_ON, "help": "open the HTML report in a browser (on a terminal)"}),
    (
        "running/trackers and files",
        ("--no-raw",),
        {**_ON, "help": "leave each reply's raw text out of the logs (output stays)"},
    ),
    (
        "running/trackers and files",
        ("-o", "--output"),
        {
            **_MAYBE,
            "metavar": "FILE",
            "help": "write the per-case breakdowns to FILE (default: log/<command>.<stamp>.txt)",
        },
    ),
    (
        "running/trackers and files",
        ("--junit",),
        {
            "metavar": "FILE",
            "help": "write JUnit XML: a testcase per case run, errors as errors, wrong answers as failures",
        },
    ),
    (
        "running/gates: exit 1 when",
        ("--baseline",),
        {
            **_MAYBE,
            "metavar": "LOG",
            "help": "compare with an earlier run (default: the newest in log/agent-evals) and mark regressions",
        },
    ),
    (
        "running/gates: exit 1 when",
        ("--fail-under",),
        {
            **_LIST,
            "metavar": "[METRIC=]PCT",
            "help": "exit 1 when an experiment's metric (the primary by default) is below PCT percent",
        },
    ),
    (
        "running/gates: exit 1 when",
        ("--max-errors",),
        {"metavar": "N|PCT%", "help": "exit 1 when an experiment has more errors than N (or than PCT%% of its runs)"},
    ),
    (
        "running/gates: exit 1 when",
        ("--fail-on-regression",),
        {
            **_ON,
            "help": "with --baseline: exit 1 when the primary metric regressed significantly (Holm-adjusted over "
            "the experiments) or more cases raise than before",
        },
    ),
    ("running/gates: exit 1 when", ("--flaky",), {**_FLAKY}),
    ("running/reserved", ("-l",), {**_ON, "dest": "reserved", "help": "reserved for logging; not yet implemented"}),
    ("running/reserved", ("-L",), {**_ON, "dest": "reserved", "help": "reserved for logging; not yet implemented"}),
    (
        "listing",
        ("--format",),
        {"choices": ("table", "json"), "default": "table", "help": "table, or one JSON document for scripts"},
    ),
    (
        "report",
        ("logs",),
        {
            "nargs": "*",
            "metavar": "LOG",
            "help": "a log or journal of each run (its whole run is read); none: the newest run",
        },
    ),
    ("report", ("--format",), _FORMATS),
    ("report", ("-o", "--output"), {"metavar": "FILE", "help": "write the report as one self-contained HTML file"}),
    ("report", ("--open",), {**_ON, "help": "open the HTML report in a browser (on a terminal)"}),
    ("rescore", ("logs",), {"nargs": "+", "metavar": "LOG", "help": "a log or journal of each run to rescore"}),
    (
        "label",
        ("log",),
        {"nargs": "?", "metavar": "LOG", "help": "a log of the run whose answers to label (the newest)"},
    ),
    ("label", ("--metric",), {"metavar": "NAME", "help": "the judged metric to label (the first declared)"}),
    (
        "label",
        ("--baseline",),
        {
            "metavar": "OLD",
            "help": "the question: did the run regress against OLD (a stamp or log)? labels both runs' answers "
            "case by case and stops once decided (the default when the run was compared with --baseline)",
        },
    ),
    (
        "label",
        ("--versus",),
        {"nargs": 2, "metavar": ("A", "B"), "help": "the question: which of two contenders (ids or parts) is better?"},
    ),
    ("label", ("--bar",), {"metavar": "PCT", "help": "the question: is each contender above PCT percent?"}),
    ("label", ("--cap",), {"type": int, "metavar": "N", "help": "ask at most N labels this time"}),
    ("label", ("--fixed",), {**_ON, "help": "no question: label the planned sample in order, as many as you give"}),
    ("cache", ("action",), {"choices": ("stats", "clear"), "help": "stats: what it holds; clear: empty it"}),
    (
        "models",
        ("pattern",),
        {"nargs": "?", "metavar": "PATTERN", "help": "only ids containing PATTERN (or a glob: *mini*)"},
    ),
    (
        "models",
        ("--refresh",),
        {**_ON, "help": "fetch the catalogs now (default: the cached ones; a first one is fetched)"},
    ),
    ("models", ("--provider",), {"metavar": "NAME", "help": "only this provider's models (openrouter, local, ...)"}),
    (
        "runs",
        ("folder",),
        {"nargs": "?", "metavar": "FOLDER", "help": "the log folder (default: the suite's log/agent-evals)"},
    ),
    ("completion", ("shell",), {"choices": tuple(_SHELLS), "help": "the shell to complete in"}),
    ("diff", ("old",), {"metavar": "OLD", "help": "a log or journal of the earlier run (its whole run is read)"}),
    ("diff", ("new",), {"metavar": "NEW", "help": "a log or journal of the later run"}),
    (
        "diff",
        ("--fail-on-regression",),
        {**_ON, "help": "exit 1 when the primary metric regressed significantly or more cases raise than before"},
    ),
    ("diff", ("--flaky",), {**_FLAKY}),
    (
        "diff",
        ("--effect",),
        {
            "metavar": "PTS",
            "help": "the change in points worth finding (5: five points): the cases a test needs for it at 80%% power",
        },
    ),
)
# The shared parsers, each with those it builds on, and the commands, with theirs.
_SHARED = {"debug": (), "suite": ("debug",), "common": ("suite",), "running": (), "listing": ()}
_SUBCOMMANDS = (
    ("cases", ("common", "listing"), "list the cases; calls nothing"),
    ("verify", ("common",), "offline checks: inputs, expected.json, adapter, scorer"),
    ("run", ("common", "running"), "run models over every dataset, with the per-case breakdown"),
    ("compare", ("common", "running"), "everything the lineup lists; leaderboard only"),
    ("report", ("debug",), "the tables compare prints, from logs: merges the logs of every shard"),
    ("rescore", ("common",), "the current scorer over the replies logs kept; calls no model"),
    ("label", ("common",), "your verdicts on a run's judged answers, blind: they correct the judge's figures"),
    ("cache", ("suite",), "the response cache: stats or clear"),
    ("models", ("suite", "listing"), "the model ids the providers serve, with prices and context length"),
    ("runs", ("suite", "listing"), "the runs under log/agent-evals, newest first, with what each holds"),
    ("completion", (), "print a shell completion script (bash or zsh)"),
    ("diff", ("debug",), "compare two runs' logs: each metric's delta and its paired significance"),
)


def _parser(providers: Sequence[Provider] | None = None) -> _Parser:
    """The command line, built from ``_FLAGS``, ``_SETTINGS`` and ``_SUBCOMMANDS``; ``providers``:
    whose request types ``--help`` lists (the built-in ones)."""
    parser = _Parser(
        prog="agent-evals",
        description="Compare models and settings on your own suite: an honest leaderboard.",
        epilog=_epilog(providers),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agent-evals {__version__}")
    shared: dict[str, _Parser] = {}
    groups: dict[str, object] = {}  # running's, by title
    for name, builds_on in _SHARED.items():  # a parser's flags are copied when one builds on it: in order
        shared[name] = _Parser(add_help=False, parents=[shared[p] for p in builds_on])
        for where, flags, options in _FLAGS:
            parent, _, group = where.partition("/")
            if parent == name and not group:
                shared[name].add_argument(*flags, **options)
            elif parent == name:
                _add_flags(shared[name], groups, group, flags, options)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, builds_on, text in _SUBCOMMANDS:
        command = sub.add_parser(name, parents=[shared[p] for p in builds_on], help=text)
        for flags, options in ((f, o) for where, f, o in _FLAGS if where == name):
            command.add_argument(*flags, **options)
    return parser


def _usage_hint(message: str, words: Sequence[str]) -> str:
    """argparse's usage error with the nearest command, flag or choice named, as the config
    file's errors name the nearest key."""
    parser = _parser()
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if bad := re.match(r"argument ([^:]+): invalid choice: '(.*)' \(choose from (.*)\) (\(see .*)", message):
        choices = [c.strip("'") for c in bad[3].split(", ")] + ["help"] * (bad[1] == "COMMAND")
        what = "command" if bad[1] == "COMMAND" else f"{bad[1]} value"
        return f"no {what} {_shown(bad[2])}{_hint(bad[2], choices)}; choose from {', '.join(choices)} {bad[4]}"
    if message.startswith("unrecognized arguments: "):
        command = next((w for w in words if w in commands), None)
        known = [o for a in (commands[command] if command else parser)._actions for o in a.option_strings]
        unknown = message.removeprefix("unrecognized arguments: ").rpartition(" (see ")[0].split()
        fixes = [
            f"{w} (did you mean --format json?)"
            if w == "--json"
            else (w if len(w) <= 60 else w[:57] + "...") + _hint(w.partition("=")[0], known)
            for w in unknown
        ]
        where = f"agent-evals {command}" if command else "agent-evals"
        return f"unknown to {where}: {' '.join(fixes)} (see {where} --help)"
    return message


def _add_flags(parser: _Parser, groups: dict[str, Any], group: str, flags: tuple[str, ...], options: Any) -> None:
    """A flag in one of running's groups; at "settings", every setting that has a flag, in
    the group of what is sent or of how the run goes."""
    if group == "settings":
        for setting in _SETTINGS:
            if setting.flags:
                options = {"type": _flag_type(setting), "metavar": setting.metavar, "help": _flag_help(setting)}
                _add_flags(parser, groups, _SENT if setting.entry else _HOW, setting.flags, options)
        return
    if group not in groups:
        groups[group] = parser.add_argument_group(group)
    groups[group].add_argument(*flags, **options)


def _words(words: list[str]) -> list[str]:
    """The command line's words, ``help [COMMAND]`` read as ``[COMMAND] --help``."""
    return [*(w for w in words[1:2] if w != "help"), "--help"] if words[:1] == ["help"] else words


def main(argv: Sequence[str] | None = None) -> int:
    """The ``agent-evals`` command; returns the exit code.

    Only this function decides the exit code: suite code that calls ``sys.exit`` or
    raises anything at all is reported as one line, never as a traceback (``--debug``
    shows one) and never as an exit code of its choosing. Secrets are masked and control
    characters made visible in everything the command writes to STDOUT and STDERR.
    """
    args = None
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Guarded(streams[0]), _Guarded(streams[1], fold=True)  # type: ignore[assignment]
    _Secrets.refresh()
    handler = _catch_ctrl_c()
    words = _words(sys.argv[1:] if argv is None else list(argv))
    try:
        if words[:1] == ["__complete"]:  # the shell completion asking for the suite's names
            return _complete(words[1:])
        # inside a suite, --help lists the request types its own providers add
        providers = _suite_providers() if words[:1] in (["-h"], ["--help"]) else None
        try:
            args = _parser(providers).parse_args(words)
        except SystemExit as e:  # --help and --version
            return e.code if isinstance(e.code, int) else EXIT_OK
        args.words = words  # an interrupted run's hint repeats them
        sys.stderr.quiet = getattr(args, "quiet", False)  # type: ignore[union-attr]
        if not args.command:
            _parser().print_help(sys.stderr)
            return EXIT_USAGE
        with _few_collections():
            code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except _UsageError as e:
        print(f"error: {_said(_usage_hint(str(e), words))}", file=sys.stderr)
        return EXIT_USAGE
    except EvalError as e:
        _traceback_if_debug(args)
        print(f"error: {_said(_redact(str(e)))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        _traceback_if_debug(args)
        _, by, code = _interruption()
        print(f"interrupted{by}", file=sys.stderr)
        return code
    except BrokenPipeError:
        # the reader went away (| head): end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, streams[0].fileno())
        return EXIT_OK
    except BaseException as e:  # suite code outside every hook, or a bug of ours (Ctrl-C is above)
        _traceback_if_debug(args)
        text = _describe(e)[0]
        where = "writing the output" if isinstance(e, OSError) else "agent-evals stopped"
        with contextlib.suppress(OSError):
            print(f"error: {where}: {_said(text)} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_FAILED
    finally:
        sys.stdout, sys.stderr = streams
        _restore_ctrl_c(handler)
        _CTRL_C.clear()  # this command's Ctrl-C is not a later one's


def _complete(words: Sequence[str]) -> int:
    """``agent-evals __complete KIND``: the names the shell completes after a flag, one per
    line, from the suite found here (trackers, models, datasets, cases); nothing when no
    suite loads. The completion script calls it; it is no command of its own."""
    kind = words[0] if words else ""
    names: list[str] = []
    try:
        suite = _quietly_load_suite()
        if kind == "trackers":
            names = ["none", *(name for name in suite.trackers if name != "local")]
        elif kind == "models":
            names = list(dict.fromkeys(c.model for c, _ in _build_lineup(suite, _Overrides(), []).contenders))
        elif kind in ("datasets", "cases"):
            found, _ = _find_cases(suite)
            if kind == "datasets":
                names = list(dict.fromkeys(f.dataset for f in found))
            else:
                names = list(dict.fromkeys([*(f.variant for f in found), *(f.id for f in found)]))
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        names = ["none", *(t.name for t in _builtin_trackers() if t.name != "local")] if kind == "trackers" else []
    for name in names:
        print(name)
    return EXIT_OK


def _suite_providers() -> list[Provider] | None:
    """The providers of the suite found from here (for ``--help``); None when none loads."""
    try:
        return _quietly_load_suite().providers
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        return None


def _quietly_load_suite() -> _Suite:
    """The suite found from here, for --help and completion: what its code prints while
    it loads would land in the help text or among the names the shell offers."""
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return _load_suite(None, None)


def _traceback_if_debug(args: argparse.Namespace | None) -> None:
    if args is not None and getattr(args, "debug", False):
        import traceback

        traceback.print_exc()


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """A command keeps what the imports made out of the cyclic collector's reach (``gc.freeze``),
    so a full pass does not walk the modules again and again; thawed after. The collector's
    thresholds stay as Python or the caller set them, so a suite's own cyclic garbage is freed
    as promptly as without the tool (a young pass each 50,000 allocations held 2.5-7.8x the
    memory: tests/benchmark_collector.py), and a caller that froze objects of its own keeps
    them frozen: nothing is frozen then, nor thawed after."""
    import gc

    mine = not gc.get_freeze_count()
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()


def _catch_ctrl_c() -> dict[int, Any]:
    """Note the user's own Ctrl-C (or a SIGTERM, a SIGHUP) before it becomes a
    KeyboardInterrupt, so that one raised by suite code is not taken for it; returns the
    handlers to put back (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def interrupted(signum: int, frame: object) -> None:
        _SIGNALLED.append(signal.Signals(signum))
        _CTRL_C.set()
        raise KeyboardInterrupt

    handlers = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # Windows has no SIGHUP
        with contextlib.suppress(ValueError, OSError, AttributeError):  # an embedding that owns the signals
            handlers[getattr(signal, name)] = signal.signal(getattr(signal, name), interrupted)
    return handlers


def _restore_ctrl_c(handlers: dict[int, Any]) -> None:
    for number, handler in handlers.items():
        signal.signal(number, handler)
    _SIGNALLED.clear()


def _prepare(args: argparse.Namespace) -> tuple[_Suite, list[Case], _LoadedCases]:
    suite = _open_suite(args)
    loaded = _load_cases(suite)
    cases = _select_cases(loaded.cases, _split(args.dataset), _split(args.case))
    return suite, cases, loaded


def _open_suite(args: argparse.Namespace) -> _Suite:
    suite = _load_suite(args.helper, args.config)
    if args.verbose:
        print(
            f"note: suite {suite.name} at {_display(suite.root)}; lineup {_display(suite.config.path)}", file=sys.stderr
        )
    return suite


def _cmd_cases(args: argparse.Namespace) -> int:
    suite, cases, _ = _prepare(args)
    for refusal in _build_lineup(suite, _Overrides(), []).refused:
        _warn(refusal)
    if args.format == "json":
        entries = [dict(zip(_CASE_COLUMNS, row, strict=True)) for row in _case_rows(cases, suite.scorer)]
        print(_json_dumps({"schema": "agent-evals/cases", "version": 1, "cases": entries}, indent=2))
    else:
        print(_render_cases(cases, suite.scorer, _style_for(sys.stdout)))
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    suite, cases, loaded = _prepare(args)
    lineup = _build_lineup(suite, _Overrides(), [])
    for refusal in lineup.refused:
        _warn(refusal)
    _setup_providers(suite, args, offline=True)
    selected = {c.key for c in cases}
    keys, datasets = {c.key for c in loaded.cases}, _split(args.dataset)
    problems = [
        problem
        for key, problem in loaded.problems
        if key in selected or (key not in keys and not args.case and (not datasets or key.split("/", 1)[0] in datasets))
    ]
    problems += _catalog_problems(lineup)
    unchecked = sorted({c.model for c, p in lineup.contenders if p.catalog() is None})
    for dataset in dict.fromkeys(c.dataset for c in cases):
        group = [c for c in cases if c.dataset == dataset]
        problems += _suite_problems(suite, dataset, group)
    for problem in problems:
        print(problem)
    count = len({c.dataset for c in cases})
    if problems:
        print(f"{_n(len(problems), 'problem')} in {_n(len(cases), 'case')}, {_n(count, 'dataset')}")
        return EXIT_FAILED
    print(f"ok: {_n(len(cases), 'case')}, {_n(count, 'dataset')}, {_n(len(lineup.contenders), 'contender')}")
    if unchecked:  # offline, a catalog never fetched checks nothing: never an "ok" for those
        print(
            f"not checked: {', '.join(unchecked)} (no cached model list of its server; compare, run or "
            "models --refresh fetches it)"
        )
    return EXIT_OK


def _suite_problems(suite: _Suite, dataset: str, cases: list[Case]) -> list[str]:
    """What adapter.verify(dataset) and scorer.verify(case, context) report."""
    adapter, scorer = suite.adapter, suite.scorer
    problems = []
    try:
        adapter.prepare(dataset)
        found = adapter.verify(dataset) or []
        if not isinstance(found, list | tuple) or not all(isinstance(p, str) for p in found):
            raise SuiteError(f"verify({dataset!r}) returned {_shown(found)}, not a list of problems (str)")
        problems += [f"{dataset}: {p}" for p in found]
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        return [f"{dataset}: adapter {type(adapter).__name__} raised {_describe(e)[0]}"]
    raised: dict[str, list[str]] = {}  # the same failure in every case is one line, not thirty
    for case in cases:
        if case.expected is None:
            continue  # already reported as missing or unparsable
        where = _display(case.path / "expected.json" if case.path else case.key)
        hook = f"adapter {type(adapter).__name__}.context"
        try:
            context = adapter.context(case)
            hook = f"scorer {type(scorer).__name__}.verify"
            found = scorer.verify(case, context) or ()
        except _SUITE_EXCEPTIONS as e:
            _reraise_ctrl_c(e)
            raised.setdefault(f"{hook} raised {_describe(e)[0]}", []).append(where)
            continue
        problems += [f"{where}: {p}" for p in found]
    for what, cases_of in raised.items():
        alike = f" (and {_n(len(cases_of) - 1, 'more case')} of {dataset} alike)" if len(cases_of) > 1 else ""
        problems.append(f"{cases_of[0]}: {what}{alike}")
    return problems


@dataclass(eq=False, frozen=True)  # internal records are never compared: no __eq__ to build at import
class _Plan:
    """What ``run`` or ``compare`` will do, decided before any model is called."""

    suite: _Suite
    lineup: _Lineup
    experiments: list[Experiment]
    by_dataset: dict[str, _Cases]  # each dataset's cases, read as the run reaches them
    twice: list[tuple[str, str]]  # (case key, problem) of the selected cases two globs found
    gates: _Gates
    notes: list[str]  # what -v prints about the providers and the tracker
    log_dir: Path
    forecasts: list[_Forecast]
    decided: bool  # --until-decided
    judge: tuple[str, Provider] | None  # the model a Judge asks, and its provider
    # what _prepare_run finds once the run is sure to go (each a plan of its own, made whole)
    remote: type[Tracker] | None = None  # the tracker beside the local log, if any
    previous: dict[tuple[str, str], dict[tuple[str, int], RunResult]] = field(default_factory=dict)
    resumed_from: str | None = None  # the stamp --resume continues
    baseline: Mapping[tuple[str, str], Mapping[str, object]] | None = None
    budget: _Budget | None = None
    cache: _Cache | None = None  # --cache
    credit: _Credit | None = None  # --cache: what the keys have left, asked at the first call it did not answer
    batches: dict[tuple[str, str], list[dict[str, object]]] = field(default_factory=dict)  # --resume: to collect


def _cmd_run(args: argparse.Namespace) -> int:
    """``run`` and ``compare``: plan the matrix, then a dry run, or prepare, execute, report."""
    plan = _plan_run(args)
    if args.dry_run:
        return _dry_run(args, plan)
    plan = _prepare_run(args, plan)
    stamp = _reserve_stamp(plan.log_dir, args.shard)
    try:
        session, interrupted = _execute(args, plan, stamp)
        if session.pace is not None:
            session.pace.keep()
        return _report(args, plan, session, interrupted)
    finally:
        _release_stamp(plan.log_dir, stamp)


def _batch_problem(lineup: _Lineup) -> str | None:
    """Why a lineup cannot go through the Batch API, before anything is sent: a provider with
    none; a model its catalog lists no ``:batch`` variant of (the catalog lists what can be
    batched, and at what price), once the catalog lists any; a routing the batch cannot honour
    (it runs on one upstream: only ``provider.only`` is sent, never ZDR or a data policy)."""
    if unbatched := [c.label for c, p in lineup.contenders if not p.batches]:
        return f"{', '.join(unbatched)}: the provider has no batch API; leave them out with -m, or run without --batch"
    unlisted, routed = [], []
    for c, p in lineup.contenders:
        if not _batch_listed(c.model, p):
            unlisted.append(c.label)
        if c.routing and set(json.loads(c.routing)) - {"only"}:
            routed.append(f"{c.label} ({', '.join(sorted(set(json.loads(c.routing)) - {'only'}))})")
    if unlisted:
        return (
            f"{', '.join(unlisted)}: OpenRouter's catalog lists no :batch variant of it, so it cannot be asked as a "
            "batch; leave it out with -m, or run without --batch"
        )
    if routed:
        return (
            f"{', '.join(routed)}: a batch runs on one upstream and honours no routing but provider.only; route it "
            "with only, or run without --batch"
        )
    return None


def _batch_listed(model_id: str, provider: Provider) -> bool:
    """Whether a catalog that lists ``:batch`` variants lists this model's (or lists none)."""
    catalog = provider.catalog()
    return not (catalog and any(m.endswith(":batch") for m in catalog) and f"{model_id}:batch" not in catalog)


def _batch_judge(judge: tuple[str, Provider] | None) -> str | None:
    """--batch: a judge is held to the contenders' rules. No ``:batch`` variant: refused by
    name; a provider with no batch API: its verdicts are asked at once, said (the note)."""
    if judge is None:
        return None
    model_id, provider = judge
    if not provider.batches:
        return f"--batch: judge {model_id}: {provider.name} has no batch API, so its verdicts are asked at once"
    if not _batch_listed(model_id, provider):
        raise ConfigError(
            f"--batch: judge {model_id}: OpenRouter's catalog lists no :batch variant of it, so it cannot be asked "
            "as a batch; name a judge that has one with --judge, or run without --batch"
        )
    return None


def _plan_run(args: argparse.Namespace) -> _Plan:
    """The suite, the cases, the lineup and its experiments, the gates, and providers set up."""
    if args.reserved:
        raise ConfigError("-l and -L are reserved for logging and not yet implemented")
    suite = _open_suite(args)
    found, twice = _find_cases(suite)
    selected = _select_cases(found, _split(args.dataset), _split(args.case))
    # each dataset's cases are read as the run reaches them, while the others wait on the network
    by_dataset = {d: _Cases([f for f in selected if f.dataset == d]) for d in sorted({f.dataset for f in selected})}
    overrides = _Overrides(args.effort, args.temperature, args.max_tokens, args.service_tier)
    lineup = _build_lineup(suite, overrides, _split(args.models))
    for refusal in lineup.refused:
        _warn(refusal)
    if not lineup.contenders:
        raise ConfigError(
            f"nothing to run: every contender was refused or left out by -m ({_display(suite.config.path)})"
        )
    parallelism = args.parallelism or suite.config.defaults.parallelism
    repeat = args.repeat or suite.config.defaults.repeat
    max_turns, keep_raw = args.max_turns or suite.config.defaults.max_turns, not args.no_raw
    # people's labels correct the judged metrics' figures
    labels = _read_labels(suite.root / LABELS.parent) if any(m.judged for m in suite.metrics) else {}
    experiments = [
        Experiment(c, p, d, group, parallelism, repeat, order=n, max_turns=max_turns, keep_raw=keep_raw, labels=labels)
        for d, group in by_dataset.items()
        for n, (c, p) in enumerate(lineup.contenders)
    ]
    if args.shard:
        args.shard = _shard_spec(args.shard, os.environ)
        experiments = _shard(experiments, args.shard)
    gates = _Gates.parse(args, suite.metrics)
    notes = [] if args.dry_run else _load_env(suite, lineup)
    _setup_providers(suite, args, offline=args.dry_run)
    unknown = _catalog_problems(lineup)
    notes += [note for p in suite.providers for note in getattr(p, "notes", ())]
    if args.verbose and not args.dry_run:
        servers = {p.base_url: p for _, p in lineup.contenders if isinstance(p, OpenRouter)}
        notes += [f"{p.name}: {_URL_PASSWORD.sub('', url)} is reached {_route(url)}" for url, p in servers.items()]
    if unknown:
        raise ConfigError(unknown[0])
    if args.batch and (problem := _batch_problem(lineup)):
        raise ConfigError(f"--batch: {problem}")
    keys = {f.key for f in selected}
    twice = [(key, problem) for key, problem in twice if key in keys]
    log_dir = suite.project_root / LOG_DIR
    if args.judge is not None and not args.judge.strip():
        raise ConfigError("--judge: empty: name the judge model (openai/gpt-4.1-mini), or leave the flag out")
    judge = _judge_of(suite, args.judge or suite.config.judge)
    if args.batch and (note := _batch_judge(judge)):
        _warn(note)
    cached = log_dir / "cache" / "completions.sqlite3"
    cache = _Cache(cached) if (args.cache or suite.config.cache) and cached.is_file() else None
    turns = max_turns if getattr(suite.adapter, "uses_tools", False) else 1
    forecasts = [_forecast(experiment, log_dir, cache, turns) for experiment in experiments]
    decided = bool(args.until_decided)
    return _Plan(suite, lineup, experiments, by_dataset, twice, gates, notes, log_dir, forecasts, decided, judge)


def _apply_budget(plan: _Plan, limit: float | None) -> _Plan:
    """The plan within ``limit`` (None: none): the experiments the forecast fits, and the budget that holds."""
    if limit is None:
        return plan
    forecasts, budget = _within_budget(plan.forecasts, limit, plan.lineup.refused, plan.decided)
    return dataclasses.replace(plan, forecasts=forecasts, budget=budget, experiments=[f.experiment for f in forecasts])


def _dry_run(args: argparse.Namespace, plan: _Plan) -> int:
    """The experiment matrix, and what is wrong with the cases; nothing is called."""
    for cases in plan.by_dataset.values():
        list(cases)  # nothing runs: read them all now, to name their problems
    _warn_case_problems(plan.by_dataset.values(), plan.twice)
    _print_notes(args, plan.notes)
    plan = _apply_budget(plan, _chosen(args.budget, plan.suite.config.defaults.budget))
    if args.format == "json":  # the matrix as data: one entry per experiment, what it would ask and cost
        entries = [
            {
                "dataset": f.experiment.dataset,
                "contender": f.experiment.contender.to_json(),
                "cases": len(f.experiment.cases),
                "repeat": f.experiment.repeat,
                "forecast": {"basis": f.basis, "expected_usd": f.expected, "least_usd": f.least, "worst_usd": f.worst},
            }
            for f in plan.forecasts
        ]
        print(_json_dumps({"schema": "agent-evals/matrix", "version": 1, "experiments": entries}, indent=2))
    else:
        style = _style_for(sys.stdout)
        matrix, last = _render_matrix(plan.experiments, style).rsplit("\n", 1)  # the dry run's last word last
        batched = f"\n{_batch_forecast(plan.forecasts)}" if args.batch else ""
        batched += f"\n{_decider_reach(plan.experiments)}" if plan.decided else ""
        print(f"{matrix}\n{_render_forecast(plan.forecasts, style, plan.decided)}{batched}\n{last}")
    return EXIT_OK


def _prepare_run(args: argparse.Namespace, plan: _Plan) -> _Plan:
    """Everything that can refuse the run, checked before any model is called; the plan with
    what that found (the tracker, what --resume keeps and collects, the budget, the baseline)."""
    suite, log_dir = plan.suite, plan.log_dir
    remote = _choose_tracker(suite, args.tracker, args.local, plan.notes)
    _print_notes(args, plan.notes)
    _check_writable(log_dir)
    _check_writable(log_dir.parent)
    for flag, value in (("--junit", args.junit), ("--html", args.html), ("-o", args.output)):
        if isinstance(value, str):
            _check_target(value, flag)
    resumed_from, previous, batches = None, {}, {}
    if args.resume:
        resumed_from, files = _resume_files(args.resume, log_dir, shard=args.shard)
        every = [case for group in plan.by_dataset.values() for case in group]
        edited: set[str] = set()
        records = _read_records(files, "--resume")
        previous = _load_previous(records, every, args.retry_errors, edited)
        batches = _unfinished_batches(records, previous, args.resend_lost)
        if batches and not args.batch:  # collected all the same: they are paid for
            count = sum(len(b) for b in batches.values())
            print(
                f"resume: {count} batch{'es' if count > 1 else ''} that run sent are collected first (without "
                "--batch, what they leave unanswered and the cases they did not ask are asked one by one)",
                file=sys.stderr,
            )
        skipped = sum(len(v) for v in previous.values())
        print(f"resume: {skipped} finished cases from the run of {resumed_from} are not asked again", file=sys.stderr)
        if edited:
            _warn(f"resume: {_n(len(edited), 'case')} edited since that run are asked again ({_some(sorted(edited))})")
    # what --resume does not ask again costs nothing now
    forecasts = [_resumed(f, previous) for f in plan.forecasts] if previous else plan.forecasts
    limit = _chosen(args.budget, suite.config.defaults.budget)
    plan = _apply_budget(dataclasses.replace(plan, forecasts=forecasts), limit)
    credit = _check_credit(plan.forecasts, limit, previous, bool(args.cache or suite.config.cache))
    baseline = _read_run(args.baseline, log_dir, "--baseline") if args.baseline else None
    _check_exclude(args.flaky, baseline or {}, _primary(suite.metrics).name, "--baseline")
    cache = _Cache(log_dir / "cache" / "completions.sqlite3") if args.cache or suite.config.cache else None
    return dataclasses.replace(
        plan,
        remote=remote,
        previous=previous,
        resumed_from=resumed_from,
        baseline=baseline,
        cache=cache,
        credit=credit,
        batches=batches,
    )


def _chosen(flag: object, configured: object) -> Any:
    """The flag's value when it was given (0 included), else the config file's."""
    return configured if flag is None else flag


def _execute(args: argparse.Namespace, plan: _Plan, stamp: str) -> tuple[_Session, bool]:
    """Run the matrix with its trackers, progress line and captured suite output; the
    session (with what could not be written) and whether a Ctrl-C cut it short."""
    suite, log_dir, experiments, err = plan.suite, plan.log_dir, plan.experiments, sys.stderr
    session = _session(args, plan, stamp)
    progress = session.progress
    capture = _Capture(log_dir.parent / f"{args.command}.warnings.{stamp}.log")
    with capture:
        if capture.terminal is not None:  # descriptor 2 is captured now: the harness speaks on a copy
            progress.err = _Guarded(capture.terminal, args.quiet, fold=True)
            progress.stream = capture.terminal if progress.stream is not None else None
        # last, once every check has passed; what it prints goes where the cases' output goes
        if suite.before_run:
            try:
                suite.before_run()
            except _SUITE_EXCEPTIONS as e:
                _reraise_ctrl_c(e)
                raise SuiteError(f"before_run raised {_describe(e)[0]}") from None
        print(
            _forecast_line(plan.forecasts, plan.decided), file=progress.err
        )  # every check passed: the run's first line
        if args.batch and (batched := _batch_forecast(plan.forecasts)):
            print(batched, file=progress.err)
        if plan.judge and plan.forecasts:
            print(_judge_forecast(plan.forecasts, plan.log_dir, plan.judge[0]), file=progress.err)
        concurrency = os.cpu_count() or 1 if args.concurrency is None else args.concurrency
        interrupted = _run_experiments(session, experiments, concurrency)
    if capture.failure:
        session.unwritten.append(capture.failure)
    _show_pages(session.pages, open_them=not args.no_open and _at_terminal())
    _warn_case_problems(plan.by_dataset.values(), plan.twice)
    if capture.file is not None:
        print(f"warnings: what the suite printed or logged during the run is in {_display(capture.path)}", file=err)
    for line, warning in _run_lines(experiments, args.verbose):
        if warning:
            _warn(line)
        else:
            print(line, file=err)
    for provider in suite.providers:
        for model_id in sorted(getattr(provider, "unpriced", ())):
            _warn(f"{model_id}: no cost in the response and no price in the catalog; its cost counts as $0")
    print(f"logs: {_display(log_dir)} ({stamp})", file=err)
    return session, interrupted


def _session(args: argparse.Namespace, plan: _Plan, stamp: str) -> _Session:
    """The run's session: its trackers (the local log, and the one chosen beside it), its
    progress line, its timeouts and what --resume carries over."""
    suite, experiments, err = plan.suite, plan.experiments, sys.stderr
    context = {
        **{"suite": suite.name, "project": args.project or suite.config.project, "command": args.command},
        **{"project_id": os.environ.get("BRAINTRUST_PROJECT_ID"), "stamp": stamp, "log_dir": plan.log_dir},
        "root": suite.project_root,
        "labels": suite.root / LABELS.parent,
        # the run this one is compared with (--baseline): label's question by default
        "baseline": next((str(r.get("stamp")) for r in (plan.baseline or {}).values()), None),
        **{"resumed_from": plan.resumed_from, "adapter_metadata": _adapter_metadata(suite.adapter)},
        **{"metrics": suite.metrics, "shard": args.shard, "tracker": plan.remote and plan.remote.name},
        "run_id": _run_id(os.environ) if args.shard else None,
        "planned": sum(len(experiment.cases) * experiment.repeat for experiment in experiments),
        "plan": [_label_of(experiment) for experiment in experiments],  # report names those with no log
    }
    # each run starts its keys at the pace the last run left them (a key unknown: a slow start at the run's largest -p)
    kept = plan.log_dir / "cache" / "pace.json"
    pace = _Pace(max((e.parallelism for e in experiments), default=8), kept) if _limiter_on() else None
    trackers: list[Tracker] = [LocalTracker({**context, "options": {}})]
    if plan.remote:
        trackers.append(plan.remote({**context, "options": suite.config.sections.get(plan.remote.name, {})}))
    shown = err.isatty() and not args.quiet
    progress = _Progress(getattr(err, "raw", err) if shown else None, context["planned"], err, pace)
    progress.done = sum(len(v) for v in plan.previous.values())
    servers = {_origin(e.provider.base_url)[1] for e in experiments if isinstance(e.provider, OpenRouter)}
    progress.waiting = f" from {', '.join(sorted(servers))}" if servers else ""
    return _Session(
        suite,
        [t for t in trackers if t.enabled()],
        journal_dir=plan.log_dir,
        progress=progress,
        stamp=stamp,
        case_timeout=_chosen(args.case_timeout, suite.config.defaults.case_timeout),
        tracker_timeout=_chosen(args.tracker_timeout, suite.config.defaults.tracker_timeout),
        previous=plan.previous,
        pace=pace,
        tags={k: context[k] for k in ("shard", "run_id") if context[k]},
        until_decided=_primary(suite.metrics).name if args.until_decided else None,
        batch=args.batch_fallback if args.batch else None,
        earlier_batches=plan.batches,
        cache=plan.cache,
        budget=plan.budget,
        judge=plan.judge,
        credit=plan.credit,
    )


def _report(args: argparse.Namespace, plan: _Plan, session: _Session, interrupted: bool) -> int:
    """Write the files asked for, print the tables, apply the gates: the exit code."""
    ending = _Ending.of(plan, session, interrupted)
    changes, upstream = _baseline_changes(plan, ending)
    _write_files(args, plan, session, ending, changes)  # every file first: a reader that stops at | head loses none
    _print_results(args, plan, session, ending, changes, upstream)
    failures = [] if interrupted else _print_failures(args, plan, session, ending, changes)
    partial = ending.partial(args) if interrupted else None
    title = f"agent-evals: {plan.suite.name} · {args.command} {session.stamp}"
    _print_summary(args.format, session.unwritten, title, ending.shown, plan.suite.metrics, failures, changes, partial)
    _report_unwritten(session.unwritten)
    if interrupted:
        return _interruption()[2]
    return EXIT_FAILED if failures or session.unwritten else EXIT_OK


def _print_summary(
    fmt: str,
    unwritten: list[str],
    title: str,
    experiments: Sequence[Experiment],
    metrics: Sequence[Metric],
    problems: Sequence[str],
    changes: Sequence[_Change] | None,
    partial: str | None,
) -> None:
    """``--format markdown`` prints the pull request's summary; in GitHub Actions it is added
    to the step's summary (``GITHUB_STEP_SUMMARY``) too, whatever the format. Neither: not
    even made."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if fmt != "markdown" and not target:
        return
    text = _markdown(title, experiments, metrics, problems, changes, partial)
    if fmt == "markdown":
        print(text, end="")
    if target:
        import stat

        try:  # opened without blocking: a FIFO nobody reads never holds the exit
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
            with open(fd, "a", encoding="utf-8", errors="backslashreplace") as file:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError("not a regular file: write the summary to one")
                os.set_blocking(fd, True)
                file.write(_redact(text) + "\n")
        except OSError as e:
            unwritten.append(f"{_display(target)} ({e.strerror or e}; GITHUB_STEP_SUMMARY)")


@dataclass(frozen=True, slots=True)
class _Ending:
    """How a run ended: its case runs finished of all, why it stopped early, what it shows."""

    finished: int
    total: int
    interrupted: bool
    stopped: str | None  # the line a run stopped before its end (a refused key, the budget) ends with
    shown: list[Experiment]  # the experiments with a result to show

    @classmethod
    def of(cls, plan: _Plan, session: _Session, interrupted: bool) -> _Ending:
        experiments, reason = plan.experiments, session.stop.reason
        total = sum(len(experiment.cases) * experiment.repeat for experiment in experiments)
        finished = sum(len(experiment.results) for experiment in experiments)
        stopped = None if interrupted or not reason else f"the run stopped after {finished} of {total} cases: {reason}"
        lost = [
            _lost({"dataset": e.dataset, "contender": e.contender.to_json()}, batch)
            for e in experiments
            for batch in e.batches
            if str(batch.get("failed", "")).startswith(_UNSURE)
        ]
        if stopped and len(lost) > 1:  # each one named: cancelling one and resending the rest pays twice
            stopped += f" (all {len(lost)} submissions that got no answer: {'; '.join(lost)})"
        if stopped and plan.budget is not None and str(reason).startswith(_BUDGET):
            stopped = plan.budget.stopped(finished, total)
            if session.batch:  # --batch: what the cases put off for a batch it stopped before is unpaid
                stopped += " (a batch not yet sent when it stopped was never sent, and costs nothing)"
        return cls(finished, total, interrupted, stopped, [e for e in experiments if e.results])

    def partial(self, args: argparse.Namespace) -> str:
        by = _interruption()[1]
        return f"interrupted{by} after {self.finished} of {self.total} cases; finish with: {_resume_command(args)}"


def _resume_command(args: argparse.Namespace) -> str:
    """The command that finishes an interrupted run: the run's own words (what it asks and how,
    ``--batch`` above all, so that nothing is paid for twice) with ``--resume`` for any it had."""
    import shlex

    words, kept = list(getattr(args, "words", None) or [args.command]), []
    while words:
        word = words.pop(0)
        name = word.split("=", 1)[0]
        if len(name) > 4 and "--resume".startswith(name):  # argparse takes a flag's unambiguous start
            if "=" not in word and words and not words[0].startswith("-"):
                words.pop(0)  # the run it continued: this one now holds all of it
            continue
        kept.append(word)
    return f"agent-evals {shlex.join(kept)} --resume"


def _write_files(
    args: argparse.Namespace, plan: _Plan, session: _Session, ending: _Ending, changes: Sequence[_Change] | None
) -> None:
    """-o's breakdowns, --html's page and --junit's XML, each named on STDERR once written."""
    suite, experiments, unwritten, err = plan.suite, plan.experiments, session.unwritten, sys.stderr
    named = plan.log_dir.parent / f"{args.command}.{session.stamp}"
    if args.output:
        target = Path(args.output) if isinstance(args.output, str) else named.with_name(f"{named.name}.txt")
        if _write_text(target, _render_breakdowns(experiments, suite.metrics, "box"), unwritten):
            print(f"breakdowns: {_display(target)}", file=err)
    if args.html and ending.shown:
        target = Path(args.html) if isinstance(args.html, str) else named.with_name(f"{named.name}.html")
        title = f"agent-evals: {suite.name}"
        page = _render_html(ending.shown, suite.metrics, title=title, refused=plan.lineup.refused, changes=changes)
        _write_html(target, page, open_it=args.open and _at_terminal(), unwritten=unwritten)
    if args.junit and not ending.interrupted and _write_text(Path(args.junit), _junit_xml(experiments), unwritten):
        print(f"junit: {_display(args.junit)}", file=err)


def _baseline_changes(plan: _Plan, ending: _Ending) -> tuple[list[_Change] | None, list[str]]:
    """The comparison with the baseline (None: there is none, or the run was interrupted), and
    its lines on the upstreams that answered (``_upstream_lines``): the run's records made once."""
    if plan.baseline is None or ending.interrupted:
        return None, []
    current = {(_contender_key(e.contender), e.dataset): _experiment_record(e) for e in plan.experiments}
    labels = next((e.labels for e in plan.experiments), {})  # the suite's, read with the plan
    metrics = [m.name for m in plan.suite.metrics]
    changes = _compare_runs(plan.baseline, current, metrics, plan.gates.flaky, labels)
    return changes, _upstream_lines(plan.baseline, current)


def _print_baseline(
    args: argparse.Namespace,
    baseline: Mapping[tuple[str, str], _Logged],
    changes: Sequence[_Change],
    upstream: Sequence[str],
    primary: str,
) -> None:
    """The comparison with the baseline on STDOUT: which run it is, its table and notes, and the upstreams."""
    out = sys.stdout
    stamps = sorted({m[1] for r in baseline.values() if (m := _STAMP.search(str(r.get("read_from", ""))))})
    newest = f"the newest run ({', '.join(stamps)})" if stamps else "the newest run"
    print(f"\nbaseline: {args.baseline if isinstance(args.baseline, str) else newest}", file=out)
    print(_render_changes(changes, _style_for(out), primary, width=_width_of(out), full=args.verbose), file=out)
    for line in _wrap(upstream, _width_of(out)):
        print(line, file=out)


def _print_results(
    args: argparse.Namespace,
    plan: _Plan,
    session: _Session,
    ending: _Ending,
    changes: Sequence[_Change] | None,
    upstream: Sequence[str],
) -> None:
    """The tables (or the one JSON document), and the comparison with the baseline."""
    suite, experiments, shown, out = plan.suite, plan.experiments, ending.shown, sys.stdout
    style, tables = _style_for(out), args.format == "table"  # json or markdown: one document on STDOUT, nothing else
    if tables and args.command == "run" and not args.output:
        answers = args.verbose or all(len(e.results) <= 1 for e in experiments)  # one case: its answer too
        for experiment in experiments:
            print(_render_breakdown(experiment, suite.metrics, style, _width_of(out)), file=out)
            print(*_answer_lines(experiment, _width_of(out)) if answers else (), "", sep="\n", file=out)
    if tables and ending.interrupted:
        print(f"partial: {ending.partial(args)}", file=out)
    if tables and shown:
        print(_render_report(shown, suite.metrics, style, _width_of(out), args.quiet, args.verbose), file=out)
        for line in _reason_lines(_rows(shown, suite.metrics)):
            print(line, file=sys.stderr)
    for line in _cache_lines(shown):
        print(line, file=out if tables else sys.stderr)
    judged, corrected = _judged_lines(shown, suite.metrics, plan.judge and plan.judge[0])
    for line in _wrap(judged, _width_of(out)) if tables else ():
        print(line, file=out)
    if changes is not None and plan.baseline is not None and tables:
        _print_baseline(args, plan.baseline, changes, upstream, _primary(suite.metrics).name)
    for line in (
        _flaky_lines(_rows(shown, suite.metrics), plan.gates.flaky) if tables and plan.gates.flaky != "mean" else ()
    ):
        print(line, file=out)
    if args.format == "json":
        complete = not ending.interrupted and not ending.stopped and ending.finished == ending.total
        context = {
            **{"suite": suite.name, "command": args.command, "stamp": session.stamp, "complete": complete},
            **{"cases_finished": ending.finished, "cases_total": ending.total},
            **{"interrupted": ending.partial(args) if ending.interrupted else None, "stopped": ending.stopped},
            "baseline": None if changes is None else [_change_document(c) for c in changes],
            "refused": plan.lineup.refused,
            "decided": session.decisions if args.until_decided else None,
            "judge": {"model": plan.judge[0], "usage": _judge_spend(shown).to_json()} if plan.judge else None,
            "corrected": [
                {"dataset": e.dataset, "contender": e.contender.to_json(), "metric": name, **figures}
                for e in shown
                for name, figures in corrected.get(id(e), {}).items()
            ],
            **(
                {"answers": [_answer_document(r) for e in experiments for r in e.results]}
                if args.command == "run"
                else {}
            ),
        }
        print(_json_dumps(_results_document(shown, suite.metrics, context), indent=2), file=out)


def _print_failures(
    args: argparse.Namespace, plan: _Plan, session: _Session, ending: _Ending, changes: list[_Change] | None
) -> list[str]:
    """One line on STDERR for each way the run failed the user (a gate, a contender stopped
    or never answered, a dataset that could not run, the run stopped): what makes it exit 1."""
    experiments, err = plan.experiments, sys.stderr
    failures = [
        f"gate failed: {message}"
        for message in plan.gates.check(_rows(ending.shown, plan.suite.metrics, plan.gates.flaky), changes)
    ]
    for e in experiments:
        asked = f"{len(e.results)} of {len(e.cases) * e.repeat} cases"
        if e.halted:
            failures.append(
                f"error: [{e.dataset}] {e.contender.label} stopped after {asked}: {e.halted}; --resume asks the "
                "rest once it is fixed"
            )
        # a contender whose server answered none of its cases compared nothing: never a run that did its job
        elif e.results and all(str(r.error).startswith("ProviderError: ") for r in e.results):
            first = _redact(str(e.results[0].error))
            failures.append(
                f"error: [{e.dataset}] {e.contender.label} got no answer at all: its {_n(len(e.results), 'case')} "
                f"failed (the first: {first})"
            )
    for line in failures:
        print(line, file=err)
    for line in session.decisions:
        print(line, file=err)
    if args.until_decided:
        done = sum(len(e.results) for e in experiments if e.decided)
        unasked = sum(len(e.cases) * e.repeat - len(e.results) for e in experiments if e.decided)
        print(
            f"until decided: {_n(unasked, 'case run')} not asked ({done} asked by the decided contenders); the "
            "decisions' intervals are sequential (alpha spent over the rounds, O'Brien-Fleming type, and split over "
            "the comparisons), the tables' the usual 95%",
            file=err,
        )
    if ending.stopped:
        failures.append(ending.stopped)
        if not session.unwritten:
            print(f"error: {_redact(ending.stopped)}", file=err)
            if ending.finished < ending.total and not str(session.stop.reason).startswith(_BUDGET):
                print(f"finish with: {_resume_command(args)}", file=err)  # the budget's line says its own way on
    return failures + [e.failure for e in experiments if e.failure]


def _report_unwritten(unwritten: Sequence[str]) -> None:
    """One line naming every file the run could not write (never a claim that all is well)."""
    if unwritten:
        print(
            f"error: could not write {'; '.join(unwritten)}: the tables above are complete, those files are not; "
            "free space or fix the folder, then finish with --resume",
            file=sys.stderr,
        )


def _warn_case_problems(groups: Iterable[_Cases], twice: Sequence[tuple[str, str]]) -> None:
    """What was wrong with the case files read (a run reads them as it goes)."""
    for _, problem in [p for group in groups for p in group.problems()] + list(twice):
        _warn(f"{problem} (agent-evals verify lists every problem)")


def _show_pages(pages: Sequence[tuple[str, str]], *, open_them: bool) -> None:
    """Name each tracker page on STDERR; open the first in a browser when a person is
    at a terminal (never in CI, never with --no-open)."""
    for tracker, url in pages:
        print(f"{tracker}: {url}", file=sys.stderr)
    if pages and open_them:
        import webbrowser

        webbrowser.open(pages[0][1])


def _print_notes(args: argparse.Namespace, notes: Iterable[str]) -> None:
    if args.verbose:
        for note in notes:
            print(f"note: {_redact(note)}", file=sys.stderr)


def _load_env(suite: _Suite, lineup: _Lineup) -> list[str]:
    """Load the suite's env files, then fail on any key a contender's provider lacks."""
    notes = []
    for name in suite.env_files:
        path = Path(name) if Path(name).is_absolute() else suite.root / name
        if path.exists() and not path.is_file():
            raise ConfigError(
                f"{_display(path)}: env file is not a file (a folder?); name a KEY=value file in env_files"
            )
        if path.exists():
            notes.append(f"env: {_display(path)} set {_n(_load_env_file(path), 'variable')}")
    missing: dict[str, list[str]] = {}
    for contender, provider in lineup.contenders:
        for key in provider.missing_keys(contender.model):
            missing.setdefault(key, []).append(contender.model)
    if missing:
        needs = "; ".join(
            f"{key} is not set (needed by {', '.join(dict.fromkeys(models))})"
            for key, models in sorted(missing.items())
        )
        raise ConfigError(f"{needs}: export it or add it to an env file")
    return notes


def _setup_providers(suite: _Suite, args: argparse.Namespace, *, offline: bool) -> None:
    """Give every provider the run's transport settings: flags beat the config's defaults."""
    settings = dict(suite.config.defaults.transport)
    for setting in _SETTINGS:
        if setting.transport and setting.flags and getattr(args, setting.key, None) is not None:
            settings[setting.key] = getattr(args, setting.key)
    for provider in suite.providers:
        for key, value in settings.items():
            setattr(provider, key, value)
        provider.offline = offline
        provider.cache_dir = suite.project_root / LOG_DIR / "cache"
        # attribution on OpenRouter: the tool itself, unless the config names the app (app: url:, title:),
        # so that suites never rename one shared app
        app = suite.config.app
        if app.get("url"):
            provider.referer = app["url"]
        provider.app_name = app.get("title") or (
            suite.config.project or suite.name if app.get("url") else "agent-evals"
        )


def _render_breakdowns(experiments: Sequence[Experiment], metrics: Sequence[Metric], style: str) -> str:
    """``run``'s per-case tables, one per experiment, for the screen or the ``-o`` file."""
    return "\n\n".join(_render_breakdown(experiment, metrics, style) for experiment in experiments) + "\n"


def _adapter_metadata(adapter: Any) -> Mapping[str, object]:
    """What the adapter's ``metadata()`` says, as plain JSON (see ``_jsonable``)."""
    name = f"adapter {type(adapter).__name__}.metadata()"
    try:
        metadata = adapter.metadata() or {}
    except _SUITE_EXCEPTIONS as e:
        _reraise_ctrl_c(e)
        raise SuiteError(f"{name} raised {_describe(e)[0]}") from None
    if not isinstance(metadata, Mapping):
        raise SuiteError(f"{name} returned {_shown(metadata)}, not a dict")
    return _jsonable(metadata, "metadata()", mend=True)  # a value that contains itself is logged as such


def _cmd_report(args: argparse.Namespace) -> int:
    partial: list[str] = []
    folder = _log_folder(None)
    if not args.logs and not (folder.is_dir() and any(_STAMP.search(p.name) for p in folder.iterdir())):
        raise ConfigError(f"report: no run in {_display(folder)} yet; run agent-evals compare, or name a LOG")
    records = _records_of(args.logs or ["latest"], "report", partial)
    metrics = _logged_metrics(records.values())
    logged = [(Path(str(r["read_from"])), r.get("labels")) for r in records.values()]
    labels = _suite_labels(logged, "report") if any(m.judged for m in metrics) else {}
    experiments = sorted(
        (_logged_experiment(r, labels=labels) for r in records.values()), key=lambda e: (e.dataset, e.order)
    )
    partial += _unfinished(records.values(), experiments)
    suites = sorted({str(r.get("suite")) for r in records.values() if r.get("suite")})
    title = f"agent-evals: {', '.join(suites) or 'report'}"
    if args.output:
        _write_html(
            Path(args.output), _render_html(experiments, metrics, title=title), open_it=args.open and _at_terminal()
        )
    if args.format == "json":  # with -o too: the page is written, and the document printed
        stamps = sorted({str(r.get("stamp")) for r in records.values() if r.get("stamp")})
        context = {"suite": ", ".join(suites) or None, "command": "report", "stamps": stamps, "partial": partial}
        print(_json_dumps(_results_document(experiments, metrics, context), indent=2))
    elif args.format == "table" and not args.output:
        print(_render_report(experiments, metrics, _style_for(sys.stdout), _width_of(sys.stdout), args.quiet))
        for line in _reason_lines(_rows(experiments, metrics)):
            print(line, file=sys.stderr)
    unwritten: list[str] = []
    _print_summary(args.format, unwritten, title, experiments, metrics, [], None, "; ".join(partial) or None)
    _report_unwritten(unwritten)
    return EXIT_FAILED if unwritten else EXIT_OK


def _unfinished(records: Iterable[Mapping[str, object]], experiments: Sequence[Experiment]) -> list[str]:
    """Warned, and notes for ``partial``: the experiments an interrupt or a killed shard cut
    short, with what they hold, and those a run planned that left no log at all."""
    notes = [
        f"{_label_of(e)}: {len(e.results)} of {len(e.results) + len(e.not_run)} case runs"
        for e in experiments
        if e.not_run and not e.decided
    ]
    present = {_label_of(e) for e in experiments}
    plans = [r.get("plan") for r in records]
    planned = dict.fromkeys(p for plan in plans if isinstance(plan, list) for p in plan if isinstance(p, str))
    if missing := [p for p in planned if p not in present]:
        notes.append(f"planned but never started: {', '.join(missing)}")
    for note in notes:
        _warn(f"report: {note}")
    return notes


def _cmd_label(args: argparse.Namespace) -> int:
    """``label``: people's verdicts on a run's judged answers, asked at a terminal and blind
    (the judge's verdict and the contender are said only once the label is given), each
    appended at once to ``evals/labels/labels.jsonl``. Each contender's gaps are asked in its
    dataset's one random order (``_units``: what makes its labelled sample a random draw), the
    contender with the shortest labelled sample first; an answer already labelled (another
    contender's, or the same answer in an earlier run) is not asked again. A skip ends that
    contender's questions: its sample cannot grow past the gap."""
    suite, cases, _ = _prepare(args)
    judged = [m.name for m in suite.metrics if m.judged]
    if not judged or (args.metric and args.metric not in judged):
        known = f"the judged: {', '.join(judged)}" if judged else "none is (Metric(..., judged=True))"
        raise ConfigError(f"label: {args.metric or 'a judged metric'} is not one of the scorer's metrics; {known}")
    metric, path = args.metric or judged[0], suite.root / LABELS
    if (path.parent.exists() and not path.parent.is_dir()) or (path.exists() and not path.is_file()):
        raise ConfigError(f"label: {_display(path)} cannot be written (something else is in its place): move it aside")
    labels = _read_labels(path.parent)
    run = _read_run(args.log or True, suite.project_root / LOG_DIR, "label")
    if args.cap is not None and args.cap < 1:
        raise ConfigError(f"label --cap {args.cap}: expected a number of labels of at least 1")
    if questions := _questions(args, run, suite.project_root / LOG_DIR, metric, cases):
        return _label_until_decided(questions, labels, path, metric, args.cap)
    queues = _label_queues(run, metric, labels, cases)
    graded = any(v not in (0.0, 1.0) for _, _, items, _ in queues for _, _, _, v, _ in items)
    # each distinct answer once: one shared by two contenders (or runs) takes one label
    missing = len({k for _, _, items, _ in queues for k, *_ in items if (*k, _PAIRED) not in labels} - labels.keys())
    if not queues:
        print("label: no logged run with judged answers to label; run agent-evals compare first")
        return EXIT_OK
    said = " · ".join(f"{name} {held} of {total}" for name, (held, total), *_ in queues)
    print(f"label: answers in each labelled sample: {said}; {_n(missing, 'answer')} to label, in one random order")
    print(f"label: labels for ±5 points: {' · '.join(_need_said(name, need) for name, _, _, need in queues)}")
    added = 0
    try:
        while (queue := min((q for q in queues if q[2]), key=lambda q: q[1][0], default=None)) and added != args.cap:
            name, counts, items, _ = queue
            key, case, output, verdict, _ = items.pop(0)
            if not _taken_in_turn(path, labels, key) and key not in labels:  # another's same answer may have been
                value = _ask_label(case, output, verdict, graded, added + 1, missing)
                if value is None:
                    break
                if value < 0:  # skipped: this contender's sample ends at the gap
                    print(f"  skipped: {name}'s labelled sample ends here until this answer is labelled")
                    items.clear()
                    continue
                _add_label(path, key, value)
                labels[key], added = value, added + 1
                print(f"  {name}")
            counts[0] += 1
    except KeyboardInterrupt:
        print(f"\nlabel: interrupted{_interruption()[1]}; {_n(added, 'label')} kept in {_display(path)}")
        return _interruption()[2]
    print(f"label: {_n(added, 'label')} added to {_display(path)} ({len(labels)} in all); compare and diff use them")
    return EXIT_OK


def _taken_in_turn(path: Path, labels: dict[tuple[str, ...], float], key: tuple[str, ...]) -> bool:
    """An answer labelled for a question of two sides (``_PAIRED``), now reached in turn: its label
    written plain, in place of asking it again."""
    if key in labels or (value := labels.get((*key, _PAIRED))) is None:
        return False
    _add_label(path, key, value)
    labels[key] = value
    return True


def _need_said(name: str, need: tuple[int, int, bool]) -> str:
    """``_labels_needed``'s figures for one contender, as ``label`` says them."""
    judge, alone, known = need
    if not alone:
        return f"{name} out of reach (too few cases: more cases narrow it)"
    if not known:
        return f"{name} about {alone} by the labels alone (what the judge saves shows from {LABELS_LEAST} labels)"
    return f"{name} about {judge} (labels alone: {alone})" if judge else f"{name} out of reach with the judge"


# an answer to label: its key, case, output, the judge's verdict and what it predicts (its probability of pass, if any)
_Item = tuple[tuple[str, ...], Case, object, float, float]
if TYPE_CHECKING:
    _Logged = Mapping[str, Any]  # a logged experiment's record, as _read_record reads it
_Queue = tuple[str, list[int], list[_Item], tuple[int, int, bool]]


def _judged_answers(record: _Logged, metric: str, known: Mapping[tuple[str, str], Case]) -> dict[str, list[_Item]]:
    """A logged experiment's judged answers by unit, those of cases as they are now."""
    units: dict[str, list[_Item]] = {}
    for row in record.get("rows", ()):
        case = known.get((str(row.get("dataset", record.get("dataset"))), str(row.get("case"))))
        verdict = (row.get("metrics") or {}).get(metric)
        if case is None or verdict is None or row.get("error") or row.get("case_hash") != _case_hash(case):
            continue
        key = _label_key(result := _result_from_row(row, case), metric)
        units.setdefault(_unit(case.dataset, case.id, row.get(CLUSTER)), []).append(
            (key, case, row.get("output"), float(verdict), result.chances.get(metric, float(verdict)))
        )
    return units


@dataclasses.dataclass
class _Question:
    """One line of what ``label`` is asked to decide: a run against its baseline, two contenders,
    or one against a bar. ``sides``: the answers of each side by unit (the second None against a
    bar); ``records``: what the gate reads to check the same verdict; ``at``: cases labelled;
    ``turn``: the cases, from the first, that some sample holds (``_planned``) when it began."""

    name: str
    sides: tuple[dict[str, list[_Item]], dict[str, list[_Item]] | None]
    records: tuple[_Logged, _Logged | None]
    kind: str  # baseline, versus, bar
    bar: float = 0.0
    at: int = 0
    said: str = ""
    turn: int = 0

    @functools.cached_property
    def units(self) -> list[str]:
        """The cases both sides answered, in their dataset's one order."""
        first, second = self.sides
        return sorted(first.keys() & (second or first).keys(), key=_order)


def _questions(
    args: argparse.Namespace, run: Mapping[tuple[str, str], _Logged], log_dir: Path, metric: str, cases: Sequence[Case]
) -> list[_Question]:
    """What ``label`` is to decide: --baseline's, --versus' or --bar's lines, or, with none of
    them (nor --fixed), the gate of a run that was compared with a baseline; [] for none."""
    known = {(c.dataset, c.id): c for c in cases}
    asked = [flag for flag in ("baseline", "versus", "bar") if getattr(args, flag)]
    if len(asked) > 1 or (asked and args.fixed):
        raise ConfigError(
            f"label: --{' and --'.join(asked + ['fixed'] * args.fixed)} ask different questions: give one"
        )
    if args.fixed:
        return []
    if args.bar:
        bar = _percent(args.bar, f"label --bar {args.bar}") / 100
        return [
            _Question(_logged_name(r), (_judged_answers(r, metric, known), None), (r, None), "bar", bar)
            for r in run.values()
        ]
    if args.versus:
        first, second = (_contender_named(run, part) for part in args.versus)
        pairs = [(a, second[d]) for d, a in first.items() if d in second and a is not second[d]]
        if not pairs:
            raise ConfigError(f"label --versus {' '.join(args.versus)}: no dataset where they are two contenders")
    elif stamp := args.baseline or next(
        (r["baseline"] for r in run.values() if isinstance(r.get("baseline"), str)), None
    ):
        old = _read_run(stamp, log_dir, "label --baseline")
        if not (pairs := [(new, old[key]) for key, new in run.items() if key in old]):
            raise ConfigError(f"label --baseline {stamp}: no contender and dataset of the run is in that one")
    else:
        return []
    return [
        _Question(
            _logged_name(a) + (f" against {_logged_name(b).split('] ', 1)[1]}" if args.versus else ""),
            (_judged_answers(a, metric, known), _judged_answers(b, metric, known)),
            (a, b),
            "versus" if args.versus else "baseline",
        )
        for a, b in pairs
    ]


def _contender_named(run: Mapping[tuple[str, str], _Logged], part: str) -> dict[object, _Logged]:
    """The one contender of a run that ``part`` of its name names, by dataset (``label --versus``)."""
    found: dict[object, _Logged] = {}
    for record in (r for r in run.values() if part in _logged_name(r)):
        if record.get("dataset") in found:
            raise ConfigError(f"label --versus {part}: names more than one contender; give more of its id")
        found[record.get("dataset")] = record
    if not found:
        names = ", ".join(sorted(dict.fromkeys(_logged_name(r) for r in run.values())))
        raise ConfigError(f"label --versus {part}: no contender of the run is named so; it has {names}")
    return found


def _label_queues(
    records: Mapping[tuple[str, str], _Logged],
    metric: str,
    labels: Mapping[tuple[str, ...], float],
    cases: Sequence[Case],
) -> list[_Queue]:
    """Each logged experiment's judged answers in its dataset's one order (``_order``), as
    (its name, [answers in its labelled sample, judged answers], the answers past the sample,
    the labels that bring it to ±5 points with the judge and alone, and whether its labels
    tell yet: ``_labels_needed``)."""
    queues: list[_Queue] = []
    known = {(c.dataset, c.id): c for c in cases}
    for record in records.values():
        todo, held = _in_order(_judged_answers(record, metric, known), lambda item: item[0] in labels)
        pairs = [(f, labels[key]) for key, _, _, _, f in todo[:held]]
        need = (*_labels_needed([item[4] for item in todo], pairs), len(pairs) >= LABELS_LEAST)
        queues.append((_logged_name(record), [held, len(todo)], todo[held:], need))
    return queues


def _logged_name(record: _Logged) -> str:
    """A logged experiment as ``label`` names it: ``[dataset] model effort temperature``."""
    who = record.get("contender") or {}
    return f"[{record.get('dataset')}] " + " ".join(
        str(who[k]) for k in ("model", "effort", "temperature") if who.get(k) is not None
    )


def _label_until_decided(
    questions: list[_Question], labels: dict[tuple[str, ...], float], path: Path, metric: str, cap: int | None
) -> int:
    """``label`` with a question: each line's cases asked in their dataset's one order, both
    sides' answers of a case together (a shared answer once; past the labelled samples, only
    the cases whose answers differ: ``_to_ask``), and after each case an anytime-valid interval
    (``_sequence``, at ALPHA over the lines) of the corrected difference (or of the figure
    against the bar): a line is decided once the interval leaves 0 (the bar) and the figure the
    gate reads says the same, from ``EARLIEST`` cases on; asked until every line is decided, its
    cases run out, or ``cap`` labels were given."""
    alpha, added, quit_, planned = ALPHA / len(questions), 0, False, _planned(labels, metric)
    for q in questions:
        held = (any(i[0][:2] in planned for side in q.sides for i in (side or {}).get(u, ())) for u in q.units)
        q.turn = next((i for i, inside in enumerate(held) if not inside), len(q.units))
    every = [item for q in questions for item in _to_ask(q, {}, len(q.units))]
    graded, total = any(v not in (0.0, 1.0) for _, _, _, v, _ in every), len(every)
    print(
        f"label: {_n(len(questions), 'line')} to decide ({questions[0].kind}), up to {_n(total, 'answer')} to label: "
        "each case's answers in one random order, until each line is decided"
    )
    try:
        while not quit_ and (left := [q for q in questions if not q.said and q.at < len(q.units)]) and added != cap:
            question = min(left, key=lambda q: q.at)
            for item in _to_ask(question, labels, question.at + 1, question.at):
                if _taken_in_turn(path, labels, item[0]):
                    continue
                value = _ask_label(item[1], item[2], item[3], graded, added + 1, total)
                if value is None or value < 0:
                    quit_ = value is None
                    if value is not None:  # a skip: the cases are asked in order, so the line ends here
                        question.said = f"undecided {question.name}: skipped after {_n(question.at, 'case')} labelled"
                    break
                _add_label(path, item[0], value)
                labels[item[0]], added = value, added + 1
                if added == cap:
                    break
            else:
                question.at += 1
                if said := _settle(question, labels, metric, alpha):
                    question.said = said
                    print(f"  {said}")
    except KeyboardInterrupt:
        print(f"\nlabel: interrupted{_interruption()[1]}; {_n(added, 'label')} kept in {_display(path)}")
        return _interruption()[2]
    for question in questions:
        if not question.said.startswith("decided"):
            print(question.said or _undecided(question, labels, alpha))
    print(f"label: {_n(added, 'label')} added to {_display(path)} ({len(labels)} in all); compare and diff use them")
    return EXIT_OK


def _to_ask(question: _Question, labels: Mapping[tuple[str, ...], float], stop: int, start: int = 0) -> list[_Item]:
    """The answers of the question's cases ``start`` to ``stop``, both sides', that carry no label
    yet (a shared answer once). Past ``turn``, a question of two sides asks only the cases whose
    answers differ (the same answers' difference is 0, known), each label ``_PAIRED``: a side's
    own sample is not grown by them, as it would then end where the answers agree."""
    found: dict[tuple[str, ...], _Item] = {}
    for i, unit in enumerate(question.units[start:stop], start):
        sides = [{item[0]: item for item in side.get(unit, ())} for side in question.sides if side is not None]
        if i < question.turn or len(sides) == 1:
            found |= {key: item for side in sides for key, item in side.items()}
        elif sides[0].keys() != sides[1].keys():
            found |= {(*k, _PAIRED): ((*k, _PAIRED), *item[1:]) for side in sides for k, item in side.items()}
    return [item for key, item in found.items() if key not in labels and key[: len(_LABEL_KEYS)] not in labels]


def _question_pairs(
    question: _Question, labels: Mapping[tuple[str, ...], float]
) -> tuple[list[tuple[float, float]], list[float]]:
    """A question's (judge's, people's) value of each case labelled so far, in order, and the
    judge's value of every case: a contender's own, or the difference between two sides (0 where
    their answers are the same, as ``_alike`` takes it)."""

    def value(unit: str, labelled: bool) -> float:
        if question.sides[1] and {k for k, *_ in question.sides[0][unit]} == {k for k, *_ in question.sides[1][unit]}:
            return 0.0
        first, second = (
            [(labels[k] if k in labels else labels[(*k, _PAIRED)]) if labelled else f for k, _, _, _, f in side[unit]]
            if side
            else [0.0]
            for side in question.sides
        )
        return sum(first) / len(first) - sum(second) / len(second)

    judge = [value(u, False) for u in question.units]
    return [(judge[i], value(u, True)) for i, u in enumerate(question.units[: question.at])], judge


def _settle(question: _Question, labels: Mapping[tuple[str, ...], float], metric: str, alpha: float) -> str:
    """The line's verdict once decided ("": not yet): the anytime-valid interval leaves 0 (the
    bar) and the figure the gate and the tables read (corrected over the planned sample, now the
    cases labelled) says the same beyond chance."""
    if question.at < min(EARLIEST, len(question.units)):
        return ""
    pairs, judge = _question_pairs(question, labels)
    point, low, high = _sequence(pairs, judge, alpha)
    if question.at < len(question.units) and low <= question.bar <= high:
        return ""
    new, old = question.records
    if old is None:
        estimate = _estimate_of(_row_values(new, metric, labels))
        if estimate is None or estimate.method != "corrected" or estimate.low <= question.bar <= estimate.high:
            return ""
        side = "above" if estimate.low > question.bar else "below"
        said = f"{side} {_fmt_pct(question.bar)}: {_fmt_pct(estimate.mean)}{_fmt_interval(estimate.low, estimate.high)}"
    else:
        paired = _paired(_row_values(new, metric, labels), _row_values(old, metric, labels))
        if paired is None or paired.how != "corrected" or not paired.significant or paired.low is None:
            return ""
        words = ("regressed", "improved") if question.kind == "baseline" else ("worse", "better")
        said = f"{words[paired.delta > 0]} by {abs(paired.delta) * 100:.1f} points"
        said += _fmt_interval(paired.low, paired.high or 0.0, signed=True)
    asked = len(_to_ask(question, {}, question.at))
    return (
        f"decided [{metric}] {question.name}: {said} after {_n(asked, 'label')} ({_n(question.at, 'case')}); "
        f"{_fixed_labels(pairs, judge, question.sides[1] is not None, point - question.bar)}"
    )


def _fixed_labels(pairs: Sequence[tuple[float, float]], judge: Sequence[float], two: bool, gap: float) -> str:
    """What a fixed sample of uniform labels, each side corrected apart (PPI++ at lambda 1, the
    judge's own disagreements), needs to see ``gap`` 80% of the time at the 5% level, from the
    spreads the labels so far show, the cases' own sampling counted."""
    residual = _spread([y - f for f, y in pairs]) * (1 + two)
    room = gap * gap / (_Z95 + _Z80) ** 2 - _variance([y for _, y in pairs]) / len(judge)
    if room <= 0:
        return "a fixed sample of equal power would need every answer labelled"
    labels = min(math.ceil(residual / room), len(judge)) * (1 + two)
    return f"a fixed sample of equal power needs about {_n(labels, 'label')}"


def _undecided(question: _Question, labels: Mapping[tuple[str, ...], float], alpha: float) -> str:
    """An undecided line: where its interval stands and, at the rate so far, how many more
    labels would decide it."""
    if not question.at:
        return f"undecided {question.name}: nothing labelled yet"
    pairs, judge = _question_pairs(question, labels)
    point, low, high = _sequence(pairs, judge, alpha)
    signed = question.sides[1] is not None
    now = (
        f"undecided {question.name} after {_n(question.at, 'case')}: {_fmt_interval(low, high, signed=signed).strip()}"
    )
    if question.at >= len(question.units):
        return f"{now}; every case is labelled, and its cases cannot tell"
    spread, gap = _spread(_terms(pairs, judge)), abs(point - question.bar)
    more = next((t for t in range(question.at, len(judge) + 1) if _half(spread, t, alpha) < gap), None)
    if more is None:
        return f"{now}; at this rate the run's {_n(len(judge), 'case')} are too few to decide it"
    per = len(_to_ask(question, {}, question.at)) / question.at
    return f"{now}; at this rate about {_n(math.ceil((more - question.at) * per), 'label')} more"


def _answer(prompt: str) -> str:
    """A line the person types. At a terminal it is waited for a quarter second at a time, so a
    Ctrl-C or a SIGTERM ends ``label`` at once: ``input``'s readline waits in a ``select`` that a
    signal arriving just before it leaves asleep until a key is pressed (seen under load)."""
    if os.name == "nt" or not sys.stdin.isatty():
        return input(prompt)
    import select

    print(prompt, end="", flush=True)
    while not select.select([sys.stdin], [], [], 0.25)[0]:
        pass
    if not (line := sys.stdin.readline()):
        raise EOFError
    return line.rstrip("\n")


def _ask_label(case: Case, output: object, verdict: float, graded: bool, number: int, total: int) -> float | None:
    """One answer shown (its case's input and expected answer, then the answer) and its label
    read: 1 or 0 (y/n), a grade from 0 to 1, -1 to skip it, None to stop (q, or no more input).
    The judge's ``verdict`` is said only after."""
    print(f"\n[{number} of {total}] {case.dataset} {case.id}")
    for name, value in (("input", case.input), ("expected", case.expected), ("answer", output)):
        text = value if isinstance(value, str) else _json_dumps(value)
        print(f"{name}:", *_cut(text.rstrip(), _width_of(sys.stdout), 20), sep="\n  ")
    while True:
        try:
            said = _answer(f"{'a grade from 0 to 1' if graded else 'right? y/n'}, then Enter (s skips, q quits): ")
        except EOFError:
            return None
        said = said.strip().lower()
        if said == "q":
            return None
        with contextlib.suppress(ValueError, KeyError):  # y/n asks y or n: never a grade stored as one
            value = {"y": 1.0, "n": 0.0, "s": -1.0}[said] if said in ("y", "n", "s") or not graded else float(said)
            if value == -1.0 or 0 <= value <= 1:
                if value >= 0:
                    word = f"{verdict:g}" if graded else "right" if verdict else "wrong"
                    print(f"  the judge said {word}: {'you agree' if verdict == value else 'you disagree'}")
                return value
        print("  y, n, s or q" + (", or a number from 0 to 1" if graded else ""))


def _cmd_rescore(args: argparse.Namespace) -> int:
    """The current scorer over the replies the logs kept: no model is called (so a scorer
    whose metrics a judge gives is refused by name before anything is read)."""
    suite, cases, _ = _prepare(args)
    if judged := [m.name for m in suite.metrics if m.judged]:
        raise ConfigError(
            f"rescore: a judge gives {', '.join(judged)} and rescore calls no model; run compare --cache "
            "instead: the contenders' answers come from the response cache, the judge is asked as a run asks it"
        )
    records = _records_of(args.logs, "rescore")
    known = {(c.dataset, c.id): c for c in cases}
    names = frozenset(m.name for m in suite.metrics)
    experiments = []
    for record in records.values():
        old = _logged_experiment(record, known)
        experiment = Experiment(old.contender, old.provider, old.dataset, old.cases, 1, old.repeat, order=old.order)
        experiment.duration = old.duration
        failure = _prepare_dataset(suite, experiment.dataset)
        if failure:
            raise SuiteError(failure)
        for r in old.results:
            if r.error is not None or r.reply is None or (r.case.dataset, r.case.id) not in known:
                experiment.results.append(
                    dataclasses.replace(r, experiment=experiment)
                )  # errors stay errors: nothing to score
                continue
            try:
                score, error, trace = _score(suite, r.case, r.reply, names), None, None
            except _SUITE_EXCEPTIONS as e:
                _reraise_ctrl_c(e)
                score, (error, trace) = None, _describe(e)
            experiment.results.append(
                dataclasses.replace(r, experiment=experiment, score=score, error=error, traceback=trace)
            )
        experiments.append(experiment)
    experiments.sort(key=lambda experiment: (experiment.dataset, experiment.order))
    log_dir = suite.project_root / LOG_DIR
    _check_writable(log_dir)
    stamp = _stamp()
    sources = sorted({m[1] for p in args.logs if (m := _STAMP.search(Path(p).name))})
    tracker = LocalTracker(
        {
            "suite": suite.name,
            "project": suite.config.project,
            "command": "rescore",
            "stamp": stamp,
            "log_dir": log_dir,
            "metrics": suite.metrics,
            "rescored_from": sources or list(args.logs),
        }
    )
    for experiment in experiments:
        tracker.finish(experiment, _summarize(experiment.results, suite.metrics, experiment.duration))
    print(f"logs: {_display(log_dir)} ({stamp}); rescored, no model was called", file=sys.stderr)
    print(_render_report(experiments, suite.metrics, _style_for(sys.stdout), quiet=args.quiet, full=args.verbose))
    return EXIT_OK


def _cmd_cache(args: argparse.Namespace) -> int:
    _, _, evals = _find_suite(args.helper, None)
    path = evals.parent / LOG_DIR / "cache" / "completions.sqlite3"
    if not path.is_file():
        print(f"{_display(path)}: no cache yet (run with --cache, or cache: true in the config)")
        return EXIT_OK
    if args.action == "clear" and _Cache.repair(path):
        print(f"{_display(path)}: the cache was damaged; removed it and started an empty one")
        _Cache(path)
        return EXIT_OK
    cache = _Cache(path)
    if args.action == "clear":
        print(f"{_display(path)}: cleared {cache.clear()} answers")
    else:
        stats = cache.stats()
        count, cost = sum(n for _, n, _ in stats), sum(c for _, _, c in stats)
        size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-*"))
        print(f"{_display(path)}: {_n(count, 'answer')}, first paid {_fmt_cost(cost)}, {size / 1e6:.1f} MB")
        for model, n, paid in stats:
            print(f"  {_visible(model or '(model not noted)')}: {_n(n, 'answer')}, first paid {_fmt_cost(paid)}")
    return EXIT_OK


def _listed_providers(args: argparse.Namespace) -> tuple[list[Provider], Path]:
    """The providers ``models`` lists (the suite's, else the built-in ones; --provider picks
    one), and where their catalogs are cached."""
    try:
        suite = _load_suite(args.helper, None)
    except ConfigError as e:
        if not str(e).startswith("no suite is configured"):
            raise
        providers, cache_dir = _builtin_providers(), LOG_DIR / "cache"
    else:
        _load_env(suite, _Lineup([], []))
        providers, cache_dir = list(suite.providers), suite.project_root / LOG_DIR / "cache"
    if not args.provider:
        return providers, cache_dir
    known = [p.name for p in providers]
    if not (chosen := [p for p in providers if p.name == args.provider]):
        raise ConfigError(
            f"--provider {args.provider}: unknown{_hint(args.provider, known)}; known: {', '.join(known)}"
        )
    return chosen, cache_dir


def _cmd_models(args: argparse.Namespace) -> int:
    """The model ids the suite's providers serve, with prices and context length, from each
    provider's cached catalog (``--refresh`` fetches it): what to write under ``vendors:``."""
    import fnmatch

    providers, cache_dir = _listed_providers(args)
    pattern = args.pattern.lower() if args.pattern else None
    found: list[tuple[str, str, float | None, float | None, int | None]] = []
    notes: list[str] = []
    for provider in providers:
        provider.cache_dir, provider.retries = cache_dir, 0  # a listing is asked for now: no minutes of retries
        path = getattr(provider, "_cache_path", lambda: None)()
        # a catalog that lasts (OpenRouter's) and was never fetched is fetched now, and a local server's
        # (asked every run) when it is the one named; the others' on --refresh
        ttl = getattr(provider, "catalog_ttl", None)
        never = ttl is not None and ttl > 0 and path is not None and not path.is_file()
        first = never or (ttl == 0 and args.provider == provider.name)
        provider.offline = not (args.refresh or first)
        if args.refresh and hasattr(provider, "catalog_ttl"):
            provider.catalog_ttl = 0.0  # type: ignore[attr-defined]
        try:
            entries = provider.catalog_entries()
        except _SUITE_EXCEPTIONS as e:
            _reraise_ctrl_c(e)
            needs = "the network" if provider.name == "openrouter" else "its server running"
            notes.append(f"{provider.name}: no catalog ({_describe(e)[0]}); models --refresh needs {needs}")
            continue
        notes += list(getattr(provider, "notes", ()))
        for model_id, prompt, completion, context in entries or ():
            if pattern is None or pattern in model_id.lower() or fnmatch.fnmatch(model_id.lower(), pattern):
                found.append((model_id, provider.name, prompt, completion, context))
    for note in dict.fromkeys(notes):
        print(f"note: {_redact(note)}", file=sys.stderr)
    if args.format == "json":  # prices in dollars per token, as the catalogs give them
        keys = ("model", "provider", "usd_per_input_token", "usd_per_output_token", "context")
        listed = [dict(zip(keys, row, strict=True)) for row in found]
        print(_json_dumps({"schema": "agent-evals/models", "version": 1, "models": listed}, indent=2))
        return EXIT_OK
    rows = [
        [model_id, name, *("-" if p is None else f"${p * 1e6:,.2f}" for p in (i, o)), f"{c:,}" if c else "-"]
        for model_id, name, i, o, c in found
    ]
    if not rows:
        print(
            f"no models{f' match {args.pattern!r}' if pattern else ''}"
            f"{'' if args.refresh else '; --refresh fetches the catalogs'}",
            file=sys.stderr,
        )
        return EXIT_OK
    headers = ["model", "provider", "$/M in", "$/M out", "context"]
    print(_table(headers, rows, [False, False, True, True, True], _style_for(sys.stdout)))
    return EXIT_OK


def _cmd_runs(args: argparse.Namespace) -> int:
    """The runs under log/agent-evals, newest first: the stamps ``report``, ``diff``,
    ``--resume`` and ``--baseline`` take, with what each run holds."""
    folder = Path(args.folder) if args.folder else _log_folder(args.helper)
    if not folder.is_dir():
        raise ConfigError(f"runs: no such folder {_display(folder)}; run agent-evals compare first, or name the folder")
    by_stamp: dict[str, list[Path]] = {}
    try:
        listing = sorted(folder.iterdir())
    except OSError as e:
        raise ConfigError(f"runs: {_display(folder)} cannot be read ({e.strerror or e})") from None
    for path in listing:
        if match := _STAMP.search(path.name):
            by_stamp.setdefault(match[1], []).append(path)
    labels = _suite_labels([(folder / "log", None)])  # a judged primary metric's best is its corrected figure
    runs = [_run_line(stamp, files, labels) for stamp, files in sorted(by_stamp.items(), reverse=True)]
    headers = ["stamp", "command", "suite", "experiments", "cases", "errors", "cost", "judge", "best primary", "state"]
    if args.format == "json":
        keys = [h.replace(" ", "_").replace("cost", "cost_usd").replace("judge", "judge_usd") for h in headers]
        entries = [dict(zip(keys, run, strict=True)) for run in runs]
        print(_json_dumps({"schema": "agent-evals/runs", "version": 1, "runs": entries}, indent=2))
        return EXIT_OK
    if not runs:
        print(f"no runs in {_display(folder)}", file=sys.stderr)
        return EXIT_OK
    if not any(run[7] for run in runs):  # no judge spent: no column for it
        headers, runs = headers[:7] + headers[8:], [run[:7] + run[8:] for run in runs]
    rows = [[_fmt_cost(v) if isinstance(v, float) else "-" if v is None else str(v) for v in run] for run in runs]
    right = [h in ("experiments", "cases", "errors", "cost", "judge") for h in headers]
    print(f"{len(rows)} run{'s' if len(rows) != 1 else ''} in {_display(folder)}, newest first")
    order = ("suite", "command", "judge", "experiments", "errors", "cost", "cases", "state")  # the stamp stays
    print(_fit(headers, rows, right, _style_for(sys.stdout), _width_of(sys.stdout), order))
    return EXIT_OK


def _run_line(stamp: str, files: Sequence[Path], labels: Mapping[tuple[str, ...], float]) -> list[object]:
    """One run's line: from its logs' headers, or from its journals when it never finished
    (None where a journal cannot tell). The judge's spend apart from the contenders'."""
    logs = [p for p in files if p.suffix == ".json"]
    journals = [p for p in files if p.suffix == ".jsonl"]
    headers: list[dict[str, Any]] = []
    unreadable = []
    for path in logs:
        try:
            data = json.loads(path.read_bytes())
            if not isinstance(data, dict) or not isinstance(data.get("summary"), dict):
                raise ValueError("not an agent-evals log")
            _check_record(data)  # the fields, of the shapes a log has
            summary = data["summary"]
            for key, kinds in (("means", (dict, type(None))), ("usage", (dict, type(None))), ("cases", (int,))):
                if not isinstance(summary.get(key), kinds) or isinstance(summary.get(key), bool):
                    raise ValueError(f"summary.{key} is {_shown(summary.get(key))}")
            if not isinstance(summary.get("errors", 0), int):
                raise ValueError("summary.errors is of the wrong shape")
            if not isinstance((summary.get("usage") or {}).get("cost_usd", 0), int | float):
                raise ValueError("summary.usage.cost_usd is not a number")
            headers.append(data)
        except (OSError, ValueError, RecursionError) as e:
            unreadable.append(f"{path.name} ({str(e)[:60]})")
    if not headers:
        cases = 0
        for path in journals:
            with contextlib.suppress(OSError):
                cases += max(path.read_bytes().count(b"\n") - 1, 0)  # the first line is its header
        state = "unreadable: " + "; ".join(unreadable) if unreadable else "stopped before its logs: --resume it"
        return [stamp, None, None, len(journals), cases, None, None, None, None, state]
    primary = next((m.get("name") for m in headers[0].get("metrics") or [] if m.get("primary")), None)
    best = _best_experiment(headers, primary, labels) if primary else None
    judge = sum((Usage.coerce(r.get("judge_usage")) or Usage()).cost_usd for h in headers for r in h.get("rows") or ())
    cost = sum((Usage.coerce(h["summary"].get("usage")) or Usage()).cost_usd for h in headers)  # NaN, -1: unknown
    unasked = sum(len(h.get("not_run") or ()) for h in headers if h.get("decided"))  # --until-decided's, on purpose
    not_run = sum(len(h.get("not_run") or ()) for h in headers) - unasked
    if isinstance(planned := headers[0].get("planned"), int):  # experiments never started have no log
        not_run = planned - sum(int(h["summary"].get("cases") or 0) for h in headers) - unasked
    decided = any(h.get("decided") for h in headers)
    state = ", ".join([f"partial: {not_run} not run"] * bool(not_run) + ["decided"] * decided) or "complete"
    if unreadable:
        state += "; unreadable: " + "; ".join(unreadable)
    return [
        stamp,
        headers[0].get("command"),
        headers[0].get("suite"),
        len(headers),
        sum(int(h["summary"].get("cases") or 0) for h in headers),
        sum(int(h["summary"].get("errors") or 0) for h in headers),
        cost,
        judge or None,
        None if best is None else f"{primary} {best}",
        state,
    ]


def _best_experiment(
    headers: Sequence[Mapping[str, Any]], primary: str, labels: Mapping[tuple[str, ...], float]
) -> str | None:
    """A run's best single experiment, ranked as the tables rank (every error counted as
    wrong, then fewer errors, then cheaper): its score (a judged one corrected by the
    suite's labels, said), contender and dataset."""
    ranked = []
    for header in headers:
        if estimate := _estimate_of(_row_values(header, primary, labels, 0.0)):
            spent = (Usage.coerce(header["summary"].get("usage")) or Usage()).cost_usd
            tie = (-int(header["summary"].get("errors") or 0), -spent if math.isfinite(spent) else -math.inf)
            ranked.append((estimate.mean, *tie, estimate.method, header))
    if not ranked:
        return None
    mean, _, _, method, top = max(ranked, key=lambda r: r[:3])
    contender, how = top.get("contender") or {}, " corrected" if method == "corrected" else ""
    model = _shown_model(contender.get("model"), contender.get("provider"))
    return f"{_fmt_pct(mean)}{how} {model} [{top.get('dataset')}]"


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "report": _cmd_report,
    "runs": _cmd_runs,
    "models": _cmd_models,
    "rescore": _cmd_rescore,
    "label": _cmd_label,
    "cache": _cmd_cache,
    "completion": lambda args: print(_completion_script(args.shell)) or EXIT_OK,
    "diff": _cmd_diff,
    "cases": _cmd_cases,
    "verify": _cmd_verify,
    "run": _cmd_run,
    "compare": _cmd_run,
}


if __name__ == "__main__":
    _self = next((m for m in list(sys.modules.values()) if getattr(m, "__dict__", None) is globals()), None)
    if _self is None:  # run by a wrapper such as cProfile: a module over the same objects
        import types

        _self = types.ModuleType("agent_evals")
        _self.__dict__.update(globals())
    sys.modules.setdefault("agent_evals", _self)
    sys.meta_path.insert(0, _This(_self))  # type: ignore[arg-type]
    raise SystemExit(main())

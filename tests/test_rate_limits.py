"""One pace per key: the contenders of a run share a limiter that learns the key's rate.

A stand-in OpenRouter enforces a token bucket per key (429 with Retry-After above it), as
OpenRouter and the vendors behind it do; the figures at scale are in tests/benchmark.py.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import limiter_rigs as rigs
import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, many, read_logs

FOUR = (
    "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n      effort: [default, low, "
    "medium, high]\n"
)


class Bucket:
    """A key's rate limit: ``rate`` requests a second, bursts of ``burst``; 429 above it."""

    def __init__(self, rate: float, burst: float, headers: dict[str, str] | None = None) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, time.monotonic()
        self.headers = headers if headers is not None else {"Retry-After": "1"}
        self.lock = threading.Lock()
        self.served = self.refused = 0

    def __call__(self, request) -> Answer:
        with self.lock:
            now = time.monotonic()
            self.tokens, self.at = min(self.burst, self.tokens + (now - self.at) * self.rate), now
            if self.tokens < 1:
                self.refused += 1
                return Answer(429, {"error": {"message": "Rate limit exceeded", "code": 429}}, dict(self.headers))
            self.tokens -= 1
            self.served += 1
        answer = chat_answer(request.body["messages"][-1]["content"])
        answer.delay = 0.02
        return answer


def run(make_suite, cli, monkeypatch, bucket: Bucket, *argv: str, cases: int = 40) -> tuple[int, str, str]:
    with OpenAICompatible(bucket) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-shared")
        project = make_suite(helper=EXACT_HELPER, config=FOUR, cases=many(cases))
        return cli("compare", "--local", *argv, cwd=project)


def test_contenders_sharing_a_key_share_its_pace_and_no_case_is_an_error(make_suite, cli, monkeypatch) -> None:
    bucket = Bucket(rate=100, burst=10)
    code, _, err = run(make_suite, cli, monkeypatch, bucket, "-p", "16", "-j", "4")
    assert code == 0, err
    logs = read_logs(_project())
    assert len(logs) == 4 and all(row["error"] is None for log in logs for row in log["rows"])
    # a rate-limit wait is the limiter's: never one of a case's retries
    assert all(row["retries"] == 0 for log in logs for row in log["rows"])
    assert sum(log["summary"]["rate_limited_s"] for log in logs) > 0 and "rate-limited [ds] " in err
    # learning a bucket ten deep costs a fifth to a quarter of 160 requests here (an unpaced client: four
    # fifths); the limiter's figures at scale are its rigs', on a virtual clock no busy machine can move
    assert bucket.refused / (bucket.served + bucket.refused) < 0.4, (bucket.refused, bucket.served)


def _project() -> Path:
    return Path.cwd()  # cli() ran from the project


def test_without_the_limiter_each_request_meets_the_limit_alone(make_suite, cli, monkeypatch) -> None:
    """Off, nothing is paced or waited for the key: each refusal is one of its case's retries
    (counted, not compared with a paced run's count, which a busy machine can change)."""
    alone = Bucket(rate=100, burst=10)
    monkeypatch.setenv("AGENT_EVALS_LIMITER", "OFF")
    _, _, err = run(make_suite, cli, monkeypatch, alone, "-p", "16", "-j", "4", cases=20)
    rows = [row for log in read_logs(_project()) for row in log["rows"]]
    assert alone.refused > 0 and "rate-limited [" not in err
    assert sum(row["retries"] for row in rows) + sum(row["error"] is not None for row in rows) >= alone.refused > 0


@pytest.mark.parametrize("value", ["garbage", "of"])
def test_a_limiter_setting_that_is_neither_on_nor_off_is_refused_by_name(make_suite, cli, monkeypatch, value) -> None:
    monkeypatch.setenv("AGENT_EVALS_LIMITER", value)
    code, _, err = run(make_suite, cli, monkeypatch, Bucket(rate=100, burst=10), cases=2)
    assert code == 2 and f"AGENT_EVALS_LIMITER={value}: say on or off" in err, err


def test_a_key_that_never_recovers_ends_the_run_with_one_line(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setattr(ae._Tries, "BOUND", 0.5)
    closed = Bucket(rate=0, burst=0, headers={"Retry-After": "0.1"})
    code, _, err = run(make_suite, cli, monkeypatch, closed, "-p", "2", "-j", "1")
    assert code == 1, err
    # one cause, one line, and the way on: the refused cases are not run (a refusal of the key
    # says nothing of the model), so a plain --resume asks them
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    said = "refused for the key's rate limit: openrouter: openai/gpt-4.1-mini: still refused after [01] s of waiting"
    assert re.search(said, line), line  # half a second's bound: 1 s where a loaded machine was slow to it
    assert "finish with: agent-evals compare --local -p 2 -j 1 --resume" in err
    assert "errors [" not in err and "got no answer at all" not in err


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "3500"},
        {"Retry-After": "99999999"},
        {"Retry-After": "inf"},
        {"retry-after-ms": "3599999"},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3000"},
        {"Retry-After": "HTTP-DATE"},
    ],
)
def test_a_wait_longer_than_the_bound_ends_the_run_at_once_naming_the_header(
    make_suite, cli, monkeypatch, headers
) -> None:
    import email.utils

    if headers.get("Retry-After") == "HTTP-DATE":
        headers = {"Retry-After": email.utils.formatdate(time.time() + 3600, usegmt=True)}
    closed = Bucket(rate=0, burst=0, headers=headers)
    code, _, err = run(make_suite, cli, monkeypatch, closed, "-p", "2", "-j", "1", cases=4)
    assert code == 1, err
    name = list(headers)[-1].lower()
    asked = [line for line in err.splitlines() if "the server asks to wait" in line]
    assert asked and f"({name}: " in asked[0] and "more than the 600 s a request may wait" in asked[0], err
    assert closed.refused <= 4, closed.refused  # one refusal a request in flight, then the run ends


@pytest.mark.parametrize("value", ["nan", "0", "-5", "Mon, 01 Jan 2001 00:00:00 GMT"])
def test_a_wait_of_nothing_is_a_refusal_with_no_hint_and_never_floods_the_server(
    make_suite, cli, monkeypatch, value
) -> None:
    """Every answer refused with a wait of nothing: never an immediate resend. Until the
    bound (lowered here), the key is paced at the floor and each refusal backs off."""
    monkeypatch.setattr(ae._Tries, "BOUND", 3.0)
    closed = Bucket(rate=0, burst=0, headers={"Retry-After": value})
    code, _, err = run(make_suite, cli, monkeypatch, closed, "-p", "8", "-j", "1", cases=8)
    assert code == 1 and "refused for the key's rate limit: " in err and "still refused after" in err, err
    assert "OverflowError" not in err
    # 8 in flight, then each one's backoff (0.5-1 s, then 1-2 s) at the floor's pace: far from thousands
    assert closed.refused <= 8 * 4, closed.refused


@pytest.mark.parametrize(
    ("fields", "wait"),
    [
        ({"retry-after-ms": "250"}, (0.25, "retry-after-ms: 250")),
        ({"retry-after": "2"}, (2.0, "retry-after: 2")),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "3"}, (3.0, "x-ratelimit-reset: 3")),
        ({"x-ratelimit-remaining": "5", "x-ratelimit-reset": "3"}, None),
        ({"retry-after-ms": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "0"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after-ms": "0", "retry-after": "4"}, (4.0, "retry-after: 4")),
        ({"retry-after": "inf"}, (float("inf"), "retry-after: inf")),
    ],
)
def test_the_wait_a_server_asks_for(fields, wait) -> None:
    assert ae._wait_of(fields) == wait


def test_the_reset_as_an_epoch_in_seconds_or_milliseconds() -> None:
    now = time.time()
    for reset in (now + 4, (now + 4) * 1000):
        got = ae._wait_of({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)})
        assert got is not None and 3 < got[0] <= 4


def test_a_run_that_can_cost_more_than_the_key_has_left_is_refused_before_any_call(
    make_suite, cli, monkeypatch
) -> None:
    config = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n      max_tokens: 100\n"
    key = {"label": "sk-or-v1-abc...", "limit": 1, "limit_remaining": 0.0001, "is_free_tier": False}
    with OpenAICompatible(key=key) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-with-little-left")
        project = make_suite(helper=EXACT_HELPER, config=config, cases=many(4))
        code, out, err = cli("compare", "--local", cwd=project)
        assert (code, out) == (2, "")
        assert "error: openrouter: the key has $0.0001 left (limit_remaining); this run can cost $0." in err
        assert not server.chats()
        # a --budget within what is left stops the run first: it is let through
        code, _, err = cli("compare", "--local", "--budget", "0.0001")
        assert "the key has" not in err
        key["limit_remaining"] = 5.0
        code, _, err = cli("compare", "--local")
        assert code == 0 and len(server.chats()) >= 4, err


@pytest.mark.parametrize("max_tokens", ["", "      max_tokens: 100\n"], ids=["no max_tokens", "max_tokens"])
def test_a_key_with_nothing_left_is_refused_before_any_call(make_suite, cli, monkeypatch, max_tokens) -> None:
    config = f"request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n{max_tokens}"
    with OpenAICompatible(key={"limit": 1, "limit_remaining": 0}) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-spent")
        code, out, err = cli("compare", "--local", cwd=make_suite(helper=EXACT_HELPER, config=config, cases=many(4)))
    assert (code, out, server.chats()) == (2, "", [])
    cost = "can cost $0.0" if max_tokens else "costs at least $0.0"
    assert err.startswith(f"error: openrouter: the key has $0.0000 left (limit_remaining); this run {cost}"), err


@pytest.mark.parametrize(
    "answer",
    [Answer(500, {"error": {"message": "boom"}}), Answer(200, {"data": {}}, delay=8)],
    ids=["500", "silent"],
)
def test_a_key_endpoint_that_fails_is_asked_once_and_named(make_suite, cli, monkeypatch, answer) -> None:
    config = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"
    with OpenAICompatible(key=answer) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-unknown")
        code, _, err = cli("compare", "--local", cwd=make_suite(helper=EXACT_HELPER, config=config, cases=many(2)))
    assert code == 0 and len(server.chats()) == 2, err
    assert [r.path for r in server.requests].count("/api/v1/key") == 1
    failure = "HTTP 500: boom" if answer.status == 500 else "TimeoutError"
    (line,) = [line for line in err.splitlines() if "GET /key" in line]
    assert line.startswith(f"warning: openrouter: GET /key: {failure}") and line.endswith(
        "; the run goes on without knowing what the key has left"
    )


def test_a_run_that_sends_nothing_never_asks_what_the_key_has_left(make_suite, cli, monkeypatch) -> None:
    """--resume of a finished run sends nothing: no GET /key (it could cost 5 s of waiting)."""
    config = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n"
    with OpenAICompatible(key={"limit_remaining": 10.0}) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-known")
        project = make_suite(helper=EXACT_HELPER, config=config, cases=many(2))
        assert cli("compare", "--local", cwd=project)[0] == 0
        asked = [r.path for r in server.requests].count("/api/v1/key")
        code, _, err = cli("compare", "--local", "--resume", cwd=project)
        again = [r.path for r in server.requests].count("/api/v1/key")
    assert code == 0 and asked == 1 and again == 1 and len(server.chats()) == 2, err


def test_with_the_cache_the_key_is_asked_at_the_first_request_the_cache_does_not_answer(
    make_suite, cli, monkeypatch
) -> None:
    """A run the cache answers whole asks nothing; one that must send, on a key that cannot pay
    for it, stops before that request goes: nothing sent, one error line, its way on."""
    config = (
        "request_types: [prompt]\ncache: true\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n      max_tokens: 100\n"
    )
    key = {"limit_remaining": 10.0}
    with OpenAICompatible(key=key) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-cached")
        project = make_suite(helper=EXACT_HELPER, config=config, cases=many(3))
        assert cli("compare", "--local", cwd=project)[0] == 0
        keys = lambda: [r.path for r in server.requests].count("/api/v1/key")  # noqa: E731
        assert keys() == 1 and len(server.chats()) == 3
        code, out, err = cli("compare", "--local")  # all from the cache
        assert code == 0 and "100.0%" in out and keys() == 1 and len(server.chats()) == 3, err
        key["limit_remaining"] = 0.0001  # a new case must be sent: the key cannot pay for the run
        make_suite(helper=EXACT_HELPER, config=config, cases=many(4))
        code, out, err = cli("compare", "--local")
        assert code == 1 and keys() == 2 and len(server.chats()) == 3, err
        lines = err.splitlines()
        (stop,) = [line for line in lines if line.startswith("error:")]
        assert "the key has $0.0001 left (limit_remaining); this run can cost $0." in stop
        assert any(line.startswith("finish with: agent-evals compare --local --resume") for line in lines)
        key["limit_remaining"] = 10.0
        code, out, err = cli("compare", "--local", "--resume")
        assert code == 0 and len(server.chats()) == 4 and "100.0%" in out and "of 4)" not in out, err


def test_the_time_held_back_counts_waits_side_by_side_once() -> None:
    waits = [(0.0, 2.0), (1.0, 3.0), (1.5, 2.5), (10.0, 10.5), (10.5, 11.0), (9.0, 9.0)]
    assert ae._held_back(waits) == (4.0, 6.0)  # 0-3 and 10-11 of the run; 2+2+1+0.5+0.5 summed
    assert ae._held_back([]) == (0.0, 0)


def test_free_models_are_paced_at_the_accounts_documented_rate() -> None:
    pace = ae._Pace(32)
    limiter = pace.of("http://x", "Bearer k", free=True)
    assert limiter.rate == pytest.approx(20 / 60) and limiter.window is None
    assert pace.of("http://x", "Bearer k").rate is None  # the key's paid models keep their own pace
    assert pace.of("http://x", "Bearer k").window == 32  # their slow start at the run's -p
    assert ae._Pace().of("http://x", "Bearer k") is not limiter  # a pace is its run's


@pytest.mark.parametrize("one_in", [20, 4], ids=["sporadic", "dense"])
def test_refusals_that_do_not_follow_the_pace_are_waited_out(make_suite, cli, monkeypatch, one_in) -> None:
    """An upstream that refuses one request in twenty (or in four) whatever the pace: each
    refused one waits and goes again, and no case is an error or a retry."""
    import itertools

    seen = itertools.count(1)

    def flaky(request) -> Answer:
        if next(seen) % one_in == 0:
            return Answer(429, {"error": {"message": "Provider returned error", "code": 429}}, {"Retry-After": "0.01"})
        return chat_answer(request.body["messages"][-1]["content"])

    with OpenAICompatible(flaky) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-flaky-upstream")
        project = make_suite(helper=EXACT_HELPER, config=FOUR, cases=many(40))
        code, _, err = cli("compare", "--local", "-p", "16", "-j", "4", cwd=project)
        refused = sum(1 for _ in server.chats()) - 160
    assert code == 0, err
    rows = [row for log in read_logs(project) for row in log["rows"]]
    assert len(rows) == 160 and all(row["error"] is None and row["retries"] == 0 for row in rows)
    assert refused >= 160 // (one_in - 1)


# The rigs of issue #49, on a virtual clock (tests/limiter_rigs.py; tests/benchmark.py --limiter prints
# them whole): first as the issue sized them (50 ms a request), then at an LLM's latency, where an answer
# takes a second and a refusal 20 ms.


def test_a_steady_limit_is_met_near_the_ideal_with_few_refusals() -> None:
    result = rigs.drive(rigs.Bucket(lambda now: 40.0), 800, 128, start=32)
    assert result.wall / (800 / 40) <= 1.1 and result.share < 0.1, result


def test_a_limit_that_drops_is_followed_within_seconds() -> None:
    result = rigs.drive(rigs.Bucket(lambda now: 100.0 if now < 2 else 10.0), 600, 64, after=2.0)
    assert result.wall / (2 + 400 / 10) <= 1.25 and result.share_after < 0.15 and result.rate < 15, result


def test_a_limit_that_appears_mid_run_is_paced_within_five_seconds() -> None:
    result = rigs.drive(rigs.Bucket(lambda now: None if now < 3 else 20.0), 2000, 16, horizon=8.0)
    assert result.paced_at - 3 <= 5 and 10 <= result.rate <= 30, result


@pytest.mark.parametrize("share", [0.2, 0.35])
def test_refusals_at_random_are_never_paced(share) -> None:
    paced = rigs.drive(rigs.Random(share), 1000, 64, retry_after=0.05)
    alone = rigs.drive(rigs.Random(share), 1000, 64, retry_after=0.05, paced=False)
    assert paced.wall <= 1.1 * alone.wall and paced.paced_at == math.inf


def test_a_fixed_minute_window_is_met_with_few_refusals() -> None:
    result = rigs.drive(rigs.Window(600), 1500, 64)
    assert result.share < 0.15, result


@pytest.mark.parametrize("concurrency", [32, 64])
def test_a_fixed_window_that_refuses_as_slowly_as_it_answers_is_met_with_few_refusals(concurrency) -> None:
    """LiteLLM's rpm as measured through its proxy: no Retry-After, refusals in 0.35-1.7 s."""
    result = rigs.drive(rigs.Window(600), 800, concurrency, **rigs.LITELLM)
    assert result.share < 0.15 and result.wall < 1.2 * 800 / 10, result


def test_at_an_llms_latency_a_refusal_back_first_weighs_no_more_than_a_slow_answer() -> None:
    """Refusals come back in 20 ms, answers in a second: judged as they land, a fifth refused at random
    looks like a key refusing everything for the first second. Judged by when they went, it is noise."""
    paced = rigs.drive(rigs.Random(0.2), 300, 64, retry_after=0.5, **rigs.REAL)
    alone = rigs.drive(rigs.Random(0.2), 300, 64, retry_after=0.5, paced=False, **rigs.REAL)
    assert paced.wall <= 1.1 * alone.wall and paced.paced_at == math.inf, paced


def test_at_an_llms_latency_a_key_shared_by_contenders_is_paced_near_its_limit() -> None:
    result = rigs.drive(rigs.Bucket(lambda now: 40.0), 800, 128, start=8, **rigs.REAL)
    assert result.wall / (800 / 40) <= 1.3 and result.share < 0.15, result


def test_at_an_llms_latency_a_drop_is_followed_and_upstream_noise_does_not_choke_the_pace() -> None:
    drop = rigs.drive(rigs.Bucket(lambda now: 100.0 if now < 5 else 10.0), 2000, 128, after=5.0, **rigs.REAL)
    assert drop.wall / (5 + 1500 / 10) <= 1.25 and drop.share_after < 0.15 and drop.rate < 15, drop
    # a limit with 5% more refused upstream at random: cut after cut would choke the pace to its floor
    limit = rigs.Bucket(lambda now: 40.0)
    noisy = rigs.drive(rigs.Both(limit, rigs.Random(0.05)), 800, 128, **rigs.REAL)
    alone = rigs.drive(rigs.Both(rigs.Bucket(lambda now: 40.0), rigs.Random(0.05)), 800, 128, paced=False, **rigs.REAL)
    assert noisy.wall <= 1.5 * 800 / (40 * 0.95) and noisy.wall < alone.wall and noisy.share < alone.share / 2, noisy


def test_after_an_upstream_storm_the_pace_climbs_back() -> None:
    paced = rigs.drive(rigs.Storm(2, 5, 0.9), 3000, 64, **rigs.REAL)
    alone = rigs.drive(rigs.Storm(2, 5, 0.9), 3000, 64, paced=False, **rigs.REAL)
    assert paced.wall <= 1.5 * alone.wall, (paced, alone)


def test_an_html_refusal_is_quoted_by_its_title_never_its_markup() -> None:
    nginx = (
        b"<html>\r\n<head><title>429 Too Many Requests</title></head>\r\n<body><hr><center>nginx</center></body></html>"
    )
    assert ae._error_text(None, nginx) == "429 Too Many Requests"
    assert ae._error_text(None, b"<p>Rate   limited <b>now</b></p>") == "Rate limited now"


class Timed(Bucket):
    """A Bucket that notes when each request arrived."""

    def __init__(self, rate: float, burst: float) -> None:
        super().__init__(rate, burst)
        self.arrived: list[float] = []

    def __call__(self, request) -> Answer:
        self.arrived.append(time.monotonic())
        return super().__call__(request)


def test_the_bound_on_waiting_for_a_rate_limit_counts_the_queue_behind_the_pace() -> None:
    """A request refused 570 s into its 600 s of waiting, 50 turns queued before its own at 1
    a second: its next try would go past the bound, so the run stops now (it went up to 43%
    over when only the wait after a refusal was counted); with 5 turns queued it waits on."""
    tries = ae._Tries(ae.OpenRouter(), "openrouter: m", None)
    tries.since, tries.refused = time.monotonic() - 570, 1
    limiter = ae._Limiter(rate=1.0)
    limiter.held = 50
    refusal = ae._Retry("HTTP 429", (1.0, "retry-after: 1"), limited=True)
    with pytest.raises(ae.ProviderError, match="still refused after 570 s of waiting") as stopped:
        tries.wait_limited(refusal, limiter)
    assert stopped.value.stops_run
    limiter.held = 5
    assert tries.wait_limited(refusal, limiter) == pytest.approx(1.0)


class Told(Bucket):
    """A key that says its own numbers on every answer, as OpenAI and LiteLLM's proxy do: its
    limit a minute (``x-ratelimit-limit-requests``) and what remains of it."""

    def __call__(self, request) -> Answer:
        answer = super().__call__(request)
        with self.lock:
            left = int(min(self.burst, self.tokens + (time.monotonic() - self.at) * self.rate))
        answer.headers |= {
            "x-ratelimit-limit-requests": f"{self.rate * 60:g}",
            "x-ratelimit-remaining-requests": str(left),
        }
        return answer


def test_a_key_that_says_its_limit_is_paced_at_it_from_its_first_answer(make_suite, cli, monkeypatch) -> None:
    """The server's own numbers first: a key of 20 requests a second that says so on each
    answer, met at -p 16 by answers in 20 ms (an unpaced client would ask 800 a second): after
    the first round (at most -p requests, sent before any answer), at most 1% refused."""
    told = Told(rate=20, burst=5)
    code, _, err = run(make_suite, cli, monkeypatch, told, "-p", "16", cases=40)
    assert code == 0, err
    assert told.served == 160 and told.refused <= 16 + 0.01 * 160, (told.refused, told.served)
    assert all(row["error"] is None for log in read_logs(_project()) for row in log["rows"])


@pytest.mark.parametrize("concurrency", [32, 64])
def test_a_server_s_own_numbers_keep_refusals_to_the_first_round(concurrency) -> None:
    """On the rigs' virtual clock, at 1-s answers: LiteLLM's fixed minute of 600 that says what
    remains and when it resets is met with no refusal at all and within 5% of its ideal; a
    token bucket of 40 a second, bursts of 20, that says its limit: refused no more than the
    first round and 1% besides."""
    window = rigs.Window(600)
    proxy = rigs.drive(window, 800, concurrency, told=window.headers, **rigs.LITELLM)
    assert proxy.refused == 0 and proxy.wall <= 1.05 * (60 + 200 / 10 + 1), proxy
    bucket = rigs.Bucket(lambda now: 40.0, burst=20)
    key = rigs.drive(bucket, 800, concurrency, start=concurrency, told=bucket.headers, **rigs.REAL)
    assert key.refused <= concurrency + 0.01 * 800, key


def test_the_next_run_on_a_key_starts_at_the_pace_the_last_one_left(make_suite, cli, monkeypatch) -> None:
    """What a key took is kept beside the response cache, under a hash of server and key (the
    key itself never written): the first run learns it by being refused, the next starts
    paced and is refused less than the first round the first one sent at once."""
    bucket = Bucket(rate=20, burst=5)
    with OpenAICompatible(bucket) as server:
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/api/v1")
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-kept-SECRET-42")
        project = make_suite(helper=EXACT_HELPER, config=FOUR, cases=many(20))
        assert cli("compare", "--local", "-p", "16", cwd=project)[0] == 0
        first = bucket.refused
        kept = project / "log" / "agent-evals" / "cache" / "pace.json"
        paces = json.loads(kept.read_text())
        assert len(paces) == 1 and 0 < next(iter(paces.values())) <= 30, paces
        assert "SECRET" not in kept.read_text() and "sk-or" not in kept.read_text()
        assert cli("compare", "--local", "-p", "16", cwd=project)[0] == 0
    assert first >= 8 and bucket.refused - first <= first / 4, (first, bucket.refused - first, paces)


def test_a_slow_starts_small_clump_refused_paces_at_half_of_it_not_at_the_few_it_took() -> None:
    """Against real nginx with no burst a first round of 13 sent at once was judged on its 3 answered: 3 a
    second, and 12 s of doubling back to the key's 40. A clump refused says nothing of the rate: the pace is
    half of what went (TCP's ssthresh after a loss), whatever fewer it answered."""
    drive = rigs.drive(rigs.Bucket(lambda now: 40.0, burst=1.0), 800, 64, start=12, **rigs.REAL)
    assert drive.wall / (800 / 40 + 1) < 1.6, drive  # 1.79 when paced at what the clump answered
    # and the first ten refusals back before the other threads of -p 64 had sent (seen against nginx: 13 had,
    # so the pace began at 6.5 a second and the run took 1.44x): the clump is what the slow start lets go at once
    for start, sent, pace in ((12.0, 12, 6.0), (64.0, 13, 32.0)):
        limiter = ae._Limiter(start)
        for _ in range(sent):
            limiter.went(0.0)
        for _ in range(10):
            limiter.landed(1, refused=True)
        assert limiter.rate == pace, (start, sent, limiter.rate)


def test_a_limit_with_no_burst_is_met_near_it_and_the_next_runs_start_there() -> None:
    """Real nginx ``limit_req`` at 40 a second with no burst answers only every other request of a pace
    just past it, so a cut to what it answered went to 20 a second; a cut now stops at the last pace it
    took whole, and a pace cut just past that one holds there. Measured against nginx (800 cases, 1-s
    answers, -p 64, three runs on one key): 1.57x, 1.22x, 1.23x the ideal before, 1.23x, 1.04x, 1.06x
    now. The rig reads the sends' times to the millisecond, as nginx does (at 5 ms, evenly paced sends
    bunch into refusals a real client's would not)."""
    known, runs = None, []
    for _ in range(3):
        run = rigs.drive(
            rigs.Bucket(lambda now: 40.0, burst=1.0), 800, 64, known=known, **(rigs.REAL | {"step": 0.001})
        )
        runs.append(run)
        known = ae._kept(run.limiter) if run.limiter else known
    first, *next_runs = runs
    assert first.wall / 21 <= 1.25, first
    assert all(run.wall / 21 <= 1.15 and run.share <= 0.05 for run in next_runs), next_runs

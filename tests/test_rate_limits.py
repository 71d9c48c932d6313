"""One pace per key: the contenders of a run share a limiter that learns the key's rate.

A stand-in OpenRouter enforces a token bucket per key (429 with Retry-After above it), as
OpenRouter and the vendors behind it do; the figures at scale are in tests/benchmark.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from servers import Answer, OpenAICompatible, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, many, read_logs

FOUR = "request_types: [prompt]\nvendors:\n  openai:\n    - model: gpt-4.1-mini\n      effort: [default, low, medium, high]\n"


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
    assert bucket.refused / (bucket.served + bucket.refused) < 0.25, (bucket.refused, bucket.served)


def _project() -> Path:
    return Path.cwd()  # cli() ran from the project


def test_without_the_limiter_each_request_meets_the_limit_alone(make_suite, cli, monkeypatch) -> None:
    paced, alone = Bucket(rate=100, burst=10), Bucket(rate=100, burst=10)
    assert run(make_suite, cli, monkeypatch, paced, "-p", "16", "-j", "4", cases=20)[0] == 0
    monkeypatch.setattr(ae, "_PACED", False)
    (_project() / "log").rename(_project() / "paced-log")
    run(make_suite, cli, monkeypatch, alone, "-p", "16", "-j", "4", cases=20)
    assert alone.refused > 2 * paced.refused, (alone.refused, paced.refused)


def test_a_key_that_never_recovers_ends_the_run_with_one_line(make_suite, cli, monkeypatch) -> None:
    monkeypatch.setattr(ae._Limiter, "BOUND", 0.5)
    closed = Bucket(rate=0, burst=0, headers={"Retry-After": "0.1"})
    code, _, err = run(make_suite, cli, monkeypatch, closed, "-p", "2", "-j", "1")
    assert code == 1, err
    assert "still refused for the key's rate limit after 1 s of waiting (HTTP 429: Rate limit exceeded)" in err


@pytest.mark.parametrize(
    ("fields", "wait"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after": "2"}, 2.0),
        ({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "3"}, 3.0),
        ({"x-ratelimit-remaining": "5", "x-ratelimit-reset": "3"}, None),
        ({"retry-after-ms": "soon"}, None),
    ],
)
def test_the_wait_a_server_asks_for(fields, wait) -> None:
    assert ae._Limiter.wait_of(fields) == wait


def test_the_reset_as_an_epoch_in_seconds_or_milliseconds() -> None:
    now = time.time()
    for reset in (now + 4, (now + 4) * 1000):
        got = ae._Limiter.wait_of({"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)})
        assert got is not None and 3 < got <= 4


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


def test_free_models_are_paced_at_the_accounts_documented_rate() -> None:
    limiter = ae._Limiter.of("http://x", "Bearer k", free=True)
    assert limiter.rate == pytest.approx(20 / 60) and limiter.window is None
    assert ae._Limiter.of("http://x", "Bearer k").rate is None  # the key's paid models keep their own pace


@pytest.mark.parametrize("one_in", [20, 4], ids=["sporadic", "dense"])
def test_refusals_that_do_not_follow_the_pace_are_waited_out_and_do_not_pace_the_key(
    make_suite, cli, monkeypatch, one_in
) -> None:
    """An upstream that refuses one request in twenty (or in four) whatever the pace: each
    refused one waits and goes again, and the key is never paced (cutting the pace for each
    took the benchmark's 5% of 429s from 2 s to 254, and 20% past ten minutes). One in four
    is dense enough to look like a limit at first: the pace it sets is dropped once a cut
    does not lower the refused share."""
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
    limiter = ae._Limiter._ALL[(server.url + "/api/v1", "Bearer sk-or-flaky-upstream")]
    assert refused >= 160 // (one_in - 1) and limiter.rate is None
    if one_in == 20:
        assert limiter.share < limiter.SPORADIC and limiter.noise == 0.0
    else:
        assert limiter.noise >= limiter.SPORADIC  # a cut did not lower it: these refusals are not the pace's


def test_a_sporadic_refusal_cuts_the_pace_only_near_the_pace_the_key_last_refused() -> None:
    limiter = ae._Limiter()
    limiter._pace(100.0, time.monotonic())
    limiter.ceiling = 200.0  # the key last refused at twice this pace: this refusal is not the pace's
    refusal = ae._Retry("HTTP 429", 0.5, limited=True)
    refusal.sent = time.monotonic()
    assert limiter.refused(refusal) == 0.5 and limiter.rate == 100.0
    limiter.ceiling = 105.0  # back near it: the pace is cut by a quarter, and this is the new ceiling
    assert limiter.refused(refusal) == 0.5 and (limiter.rate, limiter.ceiling) == (75.0, 100.0)

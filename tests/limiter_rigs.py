"""The limiter's rigs: the run's real ``_Limiter`` driven on a virtual clock by workers that
stand for ``-p`` threads, against a server's rate limit as a function of time.

Each worker takes a case, waits for its turn (the slow start's window, then the pace's
ticket), sends, and hears the answer ``latency`` later: answered, the case is done; refused
(a 429), it waits what the limiter says (the server's Retry-After, else a backoff) and goes
again. Virtual time makes a rig of minutes run in a second and the same on a busy machine;
``tests/benchmark.py --limiter`` prints every rig at full size, and tests/test_rate_limits.py
runs them small. The servers:

- ``Bucket(rate)``: a token bucket of ``rate`` requests a second (a function of time: a drop,
  or None for no limit), bursts of 10, as OpenRouter and nginx's ``limit_req`` count.
- ``Window(per_minute)``: a fixed one-minute window, as LiteLLM's ``rpm`` counts. LiteLLM's
  proxy (1.8x, ``rpm: 600``, 1-s answers at -p 64) sends no Retry-After and refuses as slowly
  as it answers (0.35-1.7 s, measured): ``LITELLM`` is that, where the rigs' other refusals
  come back in 20 ms.
- ``Random(share)``: an upstream that refuses a share of requests at random, whatever the pace.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import agent_evals as ae


class Bucket:
    def __init__(self, rate: Callable[[float], float | None], burst: float = 10.0) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, 0.0

    def headers(self, now: float) -> dict[str, str]:
        """What an OpenAI-style server says on an answer: its limit a minute and what remains."""
        rate = self.rate(now) or 0.0
        return {"x-ratelimit-limit-requests": f"{rate * 60:g}", "x-ratelimit-remaining-requests": str(int(self.tokens))}

    def __call__(self, now: float) -> bool:
        if (rate := self.rate(now)) is None:
            return True
        self.tokens, self.at = min(self.burst, self.tokens + (now - self.at) * rate), now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class Window:
    def __init__(self, per_minute: int) -> None:
        self.per_minute, self.minute, self.count = per_minute, -1, 0

    def headers(self, now: float) -> dict[str, str]:
        """LiteLLM's proxy's: the limit a minute, what remains of this minute, and when it resets."""
        left = max(self.per_minute - self.count, 0) if int(now // 60) == self.minute else self.per_minute
        return {
            "x-ratelimit-limit-requests": str(self.per_minute),
            "x-ratelimit-remaining-requests": str(left),
            "x-ratelimit-reset-requests": f"{60 - now % 60:.3f}",
        }

    def __call__(self, now: float) -> bool:
        if int(now // 60) != self.minute:
            self.minute, self.count = int(now // 60), 0
        self.count += 1
        return self.count <= self.per_minute


class Storm:
    """An upstream that refuses ``share`` at random from ``start`` to ``end`` seconds, and nothing else."""

    def __init__(self, start: float, end: float, share: float) -> None:
        self.start, self.end, self.refuse = start, end, Random(share)

    def __call__(self, now: float) -> bool:
        return not self.start <= now < self.end or self.refuse(now)


class Both:
    """A key's limit and an upstream's random refusals at once: answered when both let it through."""

    def __init__(self, *servers: Callable[[float], bool]) -> None:
        self.servers = servers

    def __call__(self, now: float) -> bool:
        return all(server(now) for server in self.servers)


REAL = {"latency": 1.0, "refusal_latency": 0.02, "step": 0.005}
LITELLM = {"latency": 1.0, "refusal_latency": 0.8, "retry_after": None, "step": 0.005}


class Random:
    def __init__(self, share: float, seed: int = 1) -> None:
        self.share, self.draw = share, random.Random(seed).random

    def __call__(self, now: float) -> bool:
        return self.draw() >= self.share


@dataclass
class Result:
    wall: float  # virtual seconds until the last case was answered
    sent: int
    refused: int
    refused_after: int  # refusals of requests sent at or after ``after`` (the drop)
    sent_after: int
    limiter: ae._Limiter | None
    paced_at: float = math.inf  # when the limiter first paced the key

    @property
    def rate(self) -> float:
        """The pace at the end (0: unpaced)."""
        return (self.limiter.rate or 0.0) if self.limiter is not None else 0.0

    @property
    def share(self) -> float:
        return self.refused / self.sent

    @property
    def share_after(self) -> float:
        return self.refused_after / max(self.sent_after, 1)


@contextlib.contextmanager
def _virtual(clock: list[float]) -> Iterator[None]:
    real = ae.time
    ae.time = types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time)  # type: ignore[assignment]
    try:
        yield
    finally:
        ae.time = real


def drive(
    server: Callable[[float], bool],
    cases: int,
    concurrency: int,
    *,
    latency: float = 0.05,
    refusal_latency: float | None = None,
    retry_after: float | None = 1.0,
    start: int | None = None,
    paced: bool = True,
    after: float = 0.0,
    step: float = 0.002,
    horizon: float = 3600.0,
    told: Callable[[float], dict[str, str]] | None = None,
    known: float | None = None,
) -> Result:
    """Run ``cases`` through ``concurrency`` workers against ``server``; ``paced`` False is a
    client that waits out each refusal as asked and never paces; ``told``: the headers the
    server puts on each answer (its own numbers), given to the limiter as the client does;
    ``known``: the pace an earlier run left for the key, which this one starts at."""
    clock = [0.0]
    refusal = ae._Retry("HTTP 429", (retry_after, "retry-after") if retry_after else None, limited=True)
    with _virtual(clock):
        limiter = ae._Limiter(float(start or concurrency), known) if paced else None
        # each worker: [state, until or ticket, round, refusals of its case, sent]
        workers = [["idle", 0.0, 0, 0, 0.0] for _ in range(concurrency)]
        started = done = sent = refused = refused_after = sent_after = 0
        paced_at = math.inf
        while done < cases and clock[0] < horizon:
            now = clock[0]
            if limiter is not None and limiter.rate is not None:
                paced_at = min(paced_at, now)
            for w in workers:
                if w[0] == "idle" and started < cases:
                    started, w[:] = started + 1, ["ready", 0.0, 0, 0, 0.0]
                if w[0] == "sleep" and now >= w[1]:
                    w[0] = "ready"
                if w[0] == "ready":
                    if limiter is None or (limiter.window is None and limiter.rate is None):
                        w[0] = "go"
                    elif limiter.window is not None:
                        if limiter.flying >= limiter.window:
                            continue
                        w[0], limiter.flying = "go", limiter.flying + 1
                    else:  # waiting on the pace: held back, as ``admit`` counts it
                        w[0], w[1], limiter.held = "queued", limiter.ticket(now), limiter.held + 1
                if w[0] == "queued" and limiter is not None and limiter.due(int(w[1])) <= now:
                    w[0], limiter.held = "go", limiter.held - 1
                if w[0] == "go":
                    ok, w[2], w[4] = server(now), limiter.went(now) if limiter is not None else 0, now
                    sent, sent_after = sent + 1, sent_after + (now >= after)
                    back = latency if ok or refusal_latency is None else refusal_latency
                    w[0], w[1] = ("answered" if ok else "refused"), now + back
                elif w[0] in ("answered", "refused") and now >= w[1]:
                    if (
                        limiter is not None
                        and told is not None
                        and w[0] == "answered"
                        and (n := ae._numbers(told(w[4])))
                    ):
                        ae._heed(limiter, *n)
                    if limiter is not None:
                        limiter.landed(int(w[2]), w[0] == "refused")
                    if w[0] == "answered":
                        done, w[0] = done + 1, "idle"
                        continue
                    refused, refused_after, w[3] = refused + 1, refused_after + (w[4] >= after), int(w[3]) + 1
                    wait = (
                        ae._Tries.refused_wait(refusal, int(w[3]), limiter.rate)
                        if limiter is not None
                        else refusal.retry_after or 1.0
                    )
                    w[0], w[1] = "sleep", now + wait
            clock[0] += step
    return Result(clock[0], sent, refused, refused_after, sent_after, limiter, paced_at)


def rigs(scale: float = 1.0) -> dict[str, dict[str, float]]:
    """Each rig of issue #49 at ``scale`` (1: the issue's sizes), then the same limits met at an
    LLM's latency: answers in a second, refusals in 20 ms (``REAL``)."""
    n = lambda count: max(int(count * scale), 1)  # noqa: E731
    out: dict[str, dict[str, float]] = {}
    steady = drive(Bucket(lambda now: 40.0), n(800), 128, start=32)
    out["steady 40/s"] = {"x_ideal": steady.wall / (n(800) / 40), "refused": steady.share}
    drop = drive(Bucket(lambda now: 100.0 if now < 2 else 10.0), n(600), 64, after=2.0)
    ideal = 2 + (n(600) - 200) / 10
    out["100/s then 10/s at 2 s"] = {"x_ideal": drop.wall / ideal, "refused_after_drop": drop.share_after}
    late = drive(Bucket(lambda now: None if now < 3 else 20.0), n(2000), 16)
    out["no limit, then 20/s at 3 s"] = {"paced_after_s": late.paced_at - 3, "rate_at_end": late.rate}
    for share in (0.2, 0.35):
        paced = drive(Random(share), n(2000), 64, retry_after=0.05)
        alone = drive(Random(share), n(2000), 64, retry_after=0.05, paced=False)
        out[f"{share:.0%} refused at random"] = {"x_unpaced": paced.wall / alone.wall}
    window = drive(Window(600), n(1500), 64)
    out["600 a minute, a fixed window"] = {"refused": window.share, "x_ideal": window.wall / (n(1500) / 10)}
    for share in (0.2, 0.35):
        paced = drive(Random(share), n(1000), 64, retry_after=0.5, **REAL)
        alone = drive(Random(share), n(1000), 64, retry_after=0.5, paced=False, **REAL)
        out[f"at 1 s: {share:.0%} refused at random"] = {"x_unpaced": paced.wall / alone.wall}
    for start in (8, 32):
        key = drive(Bucket(lambda now: 40.0), n(800), 128, start=start, **REAL)
        out[f"at 1 s: 40/s, -p 32 x 4 sharing it, slow start {start}"] = {
            "x_ideal": key.wall / (n(800) / 40),
            "refused": key.share,
        }
    drop = drive(Bucket(lambda now: 100.0 if now < 5 else 10.0), n(2000), 128, after=5.0, **REAL)
    ideal = 5 + (n(2000) - 500) / 10
    out["at 1 s: 100/s then 10/s at 5 s"] = {"x_ideal": drop.wall / ideal, "refused_after_drop": drop.share_after}
    for p in (32, 64):
        proxy = drive(Window(600), n(800), p, **LITELLM)
        out[f"at 1 s: LiteLLM's rpm 600, -p {p}"] = {"refused": proxy.share, "x_ideal": proxy.wall / (n(800) / 10)}
    for p in (32, 64):  # #72's shapes of real nginx: a limit with no burst met with -p at once, a burst under the clump
        ideal = n(800) / min(40, p) + 1
        for burst in (1.0, 20.0):
            key = drive(Bucket(lambda now: 40.0, burst=burst), n(800), p, **REAL)
            out[f"at 1 s: 40/s, burst {burst:g}, -p {p}"] = {"x_ideal": key.wall / ideal, "refused": key.share}
            again = drive(
                Bucket(lambda now: 40.0, burst=burst),
                n(800),
                p,
                known=ae._kept(key.limiter) if key.limiter else None,
                **REAL,
            )
            out[f"at 1 s: 40/s, burst {burst:g}, -p {p}, the next run"] = {
                "x_ideal": again.wall / ideal,
                "refused": again.share,
            }
        told = Window(600)
        proxy = drive(told, n(800), p, told=told.headers, **LITELLM)
        out[f"at 1 s: LiteLLM's rpm 600 with its headers, -p {p}"] = {
            "refused": proxy.share,
            "x_ideal": proxy.wall / (n(800) / 10),
        }
    noisy = drive(Both(Bucket(lambda now: 40.0), Random(0.05)), n(1500), 128, **REAL)
    out["at 1 s: 40/s and 5% refused at random"] = {
        "x_ideal": noisy.wall / (n(1500) / 40 / 0.95),
        "refused": noisy.share,
    }
    for name, kw in (("", {}), ("at 1 s: ", REAL)):
        paced, alone = (drive(Storm(2, 5, 0.9), n(3000), 64, paced=p, **kw) for p in (True, False))
        out[f"{name}90% refused for 3 s"] = {"x_unpaced": paced.wall / alone.wall}
    return out

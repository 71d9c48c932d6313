"""The keep-alive HTTP/1.1 client under the OpenRouter provider, against scripted raw bytes."""

from __future__ import annotations

import json
import time

import pytest
from servers import RawHTTP, Trickle

import agent_evals as ae

OK = json.dumps(
    {
        "choices": [{"finish_reason": "stop", "message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "cost": 0.5},
    }
).encode()


def response(body: bytes = OK, *, status: str = "200 OK", headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode()
        + body
    )


def chunked(body: bytes) -> bytes:
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    encoded = b"".join(f"{len(p):x};ext=1\r\n".encode() + p + b"\r\n" for p in parts)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + encoded + b"0\r\nX-Trailer: t\r\n\r\n"


@pytest.fixture
def complete(monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test-key-12345")

    def run(server: RawHTTP, **settings):
        monkeypatch.setenv("OPENROUTER_BASE_URL", server.url + "/v1")
        provider = ae.OpenRouter()
        provider.retry_backoff = 0.01
        for key, value in settings.items():
            setattr(provider, key, value)
        model = ae.Model("openai/x", provider)
        return model, provider

    return run


def test_keep_alive_reuses_one_connection_and_sends_a_proper_request(complete, asks) -> None:
    with RawHTTP([response(), response(), response()]) as server:
        model, _ = complete(server)
        assert [c.text for c in asks(model, [{"user": "x"}] * 3)] == ["hi"] * 3
    assert server.connections == 1
    head = server.requests[0].split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"Host: {server.url[7:]}" in head and "Content-Type: application/json" in head
    assert any(line.startswith("Content-Length: ") for line in head)


def test_chunked_interim_and_read_until_close(complete, asks) -> None:
    continue_then_ok = b"HTTP/1.1 100 Continue\r\n\r\n" + response()
    until_close = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK, True)
    with RawHTTP([chunked(OK), continue_then_ok, until_close, response(headers="Connection: close\r\n")]) as server:
        model, _ = complete(server)
        assert [c.usage.cost_usd for c in asks(model, [{"user": "x"}] * 4)] == [0.5] * 4
    assert server.connections == 2  # the body read until close ends that connection


def test_a_request_sent_again_on_a_fresh_connection_is_no_retry(complete, asks) -> None:
    # the server closed the idle connection before a byte of the answer came: nothing was
    # answered, so the request goes again at once on a fresh one, as urllib3 does, uncounted
    with RawHTTP([(response(), True), response()]) as server:
        model, _ = complete(server)
        asks(model, [{"user": "x"}, {"user": "y"}])
    assert model.ledger.retries == 0 and server.connections == 2


def test_a_request_held_then_dropped_on_a_reused_connection_is_a_counted_retry(complete, asks) -> None:
    # the server held the request (it may have done the work) before it hung up: never a silent resend
    with RawHTTP([response(), (b"", True, 0.8), response()]) as server:
        model, _ = complete(server)
        asks(model, [{"user": "x"}, {"user": "y"}])
    assert model.ledger.retries == 1 and server.connections == 2


@pytest.fixture
def checks(monkeypatch) -> list[bool]:
    """What each check of an idle connection before its reuse found (True: the server closed it)."""
    found: list[bool] = []
    dropped = ae._Connection.dropped
    monkeypatch.setattr(ae._Connection, "dropped", lambda conn: found.append(dropped(conn)) or found[-1])
    return found


@pytest.mark.parametrize("idle_checked_after", [ae._CHECKED_IDLE, 0.01])
def test_an_idle_connection_the_server_closed_is_left_before_it_is_used(
    complete, asks, checks, monkeypatch, idle_checked_after
) -> None:
    # closed after its answer, with no Connection: close (as tinyproxy does). Kept under a second, the
    # first reuse goes unchecked: reset on arrival, sent again at once on a new connection (no retry), and
    # the origin is known to close them: the next is checked, seen closed and never sent on. Kept longer
    # (a server's idle timeout), every reuse is checked from the first
    monkeypatch.setattr(ae, "_CHECKED_IDLE", idle_checked_after)
    with RawHTTP([(response(), True), (response(), True), response()]) as server:
        model, provider = complete(server)
        for user in "xyz":
            time.sleep(0.05)  # the close reaches the client before the next request
            asks(model, [{"user": user}])
    assert model.ledger.retries == 0 and server.connections == 3 and len(server.requests) == 3
    learned = idle_checked_after > 0.05
    assert checks == ([True] if learned else [True, True]) and bool(provider._http._closing) is learned


def test_a_connection_reused_at_once_to_an_origin_that_keeps_them_is_not_checked(complete, asks, checks) -> None:
    with RawHTTP([response(), response(), response()]) as server:
        model, _ = complete(server)
        asks(model, [{"user": "x"}] * 3)
    assert checks == [] and server.connections == 1


def test_an_answer_cut_off_on_a_reused_connection_is_not_sent_again_unseen(complete, asks) -> None:
    # part of the answer arrived: the server took the request, so it is the retry rule's, counted
    with RawHTTP([response(), (response()[:20], True), response()]) as server:
        model, _ = complete(server)
        asks(model, [{"user": "x"}, {"user": "y"}])
    assert model.ledger.retries == 1 and server.connections == 2


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ([(b"SMTP ready\r\n\r\n", True)], "_TransportError: not an HTTP response: 'SMTP ready'"),
        ([("HTTP/1.1 ²00 OK\r\n\r\n".encode("latin-1"), True)], "_TransportError: not an HTTP response: 'HTTP/1.1 ²00"),
        ([(response()[:-5], True)], "_TransportError: the response ended after"),
        ([(b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 300000, True)], "response headers longer than 256 KiB"),
        (
            [(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", True)],
            "ValueError: invalid literal for int()",
        ),
        ([(b"", True)], "ConnectionResetError: the server closed the connection"),
        ([(chunked(OK)[:60], True)], "_TransportError: the response ended inside its chunked body"),
        ([(b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", True)], "a negative Content-Length: -3"),
        # the connection stays open: a 204 has no body to wait for
        ([b"HTTP/1.1 204 No Content\r\n\r\n", response()], "HTTP 204, the body is not JSON"),
        ([(chunked(OK)[:-10], True)], "_TransportError: the response ended inside its chunked body"),
    ],
)
def test_broken_http_is_a_transport_failure(complete, ask, script, message) -> None:
    with RawHTTP(script) as server:
        model, _ = complete(server, retries=0)
        with pytest.raises(ae.ProviderError, match=message.replace("(", r"\(").replace(")", r"\)")):
            ask(model, user="x")


def test_a_chunk_size_line_that_never_ends(complete, ask) -> None:
    endless = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"a" * 70000
    with RawHTTP([(endless, True)]) as server:
        model, _ = complete(server, retries=0)
        with pytest.raises(ae.ProviderError, match="a response line longer than 64 KiB"):
            ask(model, user="x")


def test_acomplete_from_async_code_rides_the_one_blocking_client(complete) -> None:
    import asyncio

    with RawHTTP([response(), response()]) as server:
        model, provider = complete(server)

        async def both() -> list:
            return [await model.acomplete(user="x"), await model.acomplete(user="y")]

        assert [c.text for c in asyncio.run(both())] == ["hi", "hi"]
    assert model.calls == 2 and not hasattr(provider, "_ahttp")  # one client: no second one for event loops


def test_a_whole_response_must_arrive_within_the_timeout(complete, ask) -> None:
    # a byte every 50 ms keeps each receive short; the whole answer would take 50 s
    with Trickle(total=1000, interval=0.05) as server:
        model, _ = complete(server, timeout=0.5, retries=0)
        with pytest.raises(ae.ProviderError, match="TimeoutError: timed out"):
            ask(model, user="x")


def test_a_body_past_the_cap_is_an_error_and_not_retried(complete, ask) -> None:
    big = b'{"choices": [{"message": {"content": "' + b"x" * (3 * 2**20) + b'"}}]}'
    with RawHTTP([response(big), response()]) as server:
        model, _ = complete(server, max_response_mb=1.0)
        with pytest.raises(ae.ProviderError, match=r"the response is larger than 1 MiB"):
            ask(model, user="x")
    assert model.ledger.retries == 0 and len(server.requests) == 1


def test_a_body_of_many_tiny_chunks_is_read_whole(complete, ask) -> None:
    body = b"".join(b"1\r\n%c\r\n" % c for c in OK) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    with RawHTTP([head + body]) as server:
        model, _ = complete(server)
        assert ask(model, user="x").text == json.loads(OK)["choices"][0]["message"]["content"]

"""Real local stand-ins for the outside world, on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # dict/list -> JSON; bytes/str as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False  # after the delay, the connection closes with no answer (the request was taken)


def chat_answer(
    content: str, *, prompt_tokens: int = 10, completion_tokens: int = 5, cost: float | None = 0.0002, **extra: Any
) -> Answer:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cost is not None:
        usage["cost"] = cost
    body = {
        "id": "gen-1",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": usage,
    }
    body.update(extra)
    return Answer(200, body)


CATALOG = [
    {"id": "openai/gpt-4.1-mini", "pricing": {"prompt": "0.0000004", "completion": "0.0000016"}},
    {
        "id": "openai/gpt-4o-mini",
        "pricing": {"prompt": "0.00000015", "completion": "0.0000006"},
        "context_length": 128000,
    },
    {"id": "meta-llama/llama-3.3-70b-instruct", "pricing": {"prompt": "-1", "completion": "n/a"}},
]


class OpenAICompatible:
    """An OpenAI-compatible chat server; ``respond(request) -> Answer`` decides each reply.

    By default it echoes the last user message back as the assistant's content. Given
    ``tls`` (a server-side ``ssl.SSLContext``), it speaks HTTPS. ``key``: what OpenRouter's
    ``GET /key`` says of the key, or the ``Answer`` it gives (without it, the path is not found,
    as on a local server).
    ``replays``: it has OpenRouter's response cache: a chat request sent with
    ``X-OpenRouter-Cache: true`` (or without the header, when ``replays == "preset"``, as a
    preset with cache_enabled does) is answered from the cache when the same key sent the
    same body before: the stored answer with its usage zeroed, ``X-OpenRouter-Cache-Status: HIT``.
    """

    def __init__(
        self,
        respond: Callable[[Received], Answer] | None = None,
        catalog: list[dict] | None = None,
        tls: Any = None,
        *,
        idle: float | None = None,
        encoding: str | None = None,
        key: dict | Answer | None = None,
        replays: bool | str = False,
    ) -> None:
        self.respond = respond or (lambda r: chat_answer(r.body["messages"][-1]["content"]))
        self.catalog = CATALOG if catalog is None else catalog
        self.key = key
        self.requests: list[Received] = []
        self.replayed: dict[tuple[str, bytes], Answer] = {}
        self.hits = 0
        self.connections = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle  # seconds a kept-alive connection may idle before the server closes it (uvicorn's is 5)

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                received = Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(received)
                if self.command == "GET" and self.path.split("?")[0].endswith("/models") and server.catalog is not None:
                    answer = Answer(200, {"data": server.catalog})
                elif self.command == "GET" and self.path.endswith("/key"):
                    answer = (
                        server.key
                        if isinstance(server.key, Answer)
                        else Answer(200, {"data": server.key})
                        if server.key
                        else Answer(404, {"error": {"message": "Not Found"}})
                    )
                elif replays:
                    answer = server._replay(received, raw, replays)
                else:
                    answer = server.respond(received)
                if answer.delay:
                    threading.Event().wait(answer.delay)
                if answer.drop:  # taken, and never answered: the connection closes
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                payload = (
                    answer.body
                    if isinstance(answer.body, bytes)
                    else (answer.body.encode() if isinstance(answer.body, str) else json.dumps(answer.body).encode())
                )
                if encoding is not None:  # compressed whether asked or not, as some servers do
                    payload = _compress(payload, encoding)
                    answer.headers.setdefault("Content-Encoding", encoding)
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_POST = _handle
            do_GET = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:  # each accepted connection shakes hands before its first request
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> OpenAICompatible:
        self._thread.start()
        return self

    def _replay(self, received: Received, raw: bytes, replays: bool | str) -> Answer:
        asked = received.headers.get("x-openrouter-cache", "true" if replays == "preset" else "false")
        if asked != "true":
            return self.respond(received)
        key = (received.headers.get("authorization", ""), raw)
        with self._lock:
            stored = self.replayed.get(key)
            if stored is not None:
                self.hits += 1
        if stored is None:
            answer = self.respond(received)
            if answer.status == 200:
                with self._lock:
                    self.replayed.setdefault(key, answer)
            return Answer(answer.status, answer.body, {**answer.headers, "X-OpenRouter-Cache-Status": "MISS"})
        body = json.loads(json.dumps(stored.body))
        body["usage"] = {k: 0 for k in body.get("usage") or {}}
        return Answer(200, body, {**stored.headers, "X-OpenRouter-Cache-Status": "HIT"})

    def chats(self) -> list[Received]:
        return [r for r in self.requests if r.method == "POST"]

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class BatchAPI:
    """OpenRouter's Batch API as its guide and API reference describe it (the reference's
    BatchSubmitBody, BatchObject and BatchResultsPageResponse, read in December 2026), in front of a chat
    answerer (``answer(received) -> Answer``, as ``OpenAICompatible`` takes):

    - ``POST /batches``: ``{endpoint, model, requests: [{custom_id, body}]}``, endpoint and
      model before requests (400 otherwise, as OpenRouter stream-parses it), a body's own
      model equal to the batch's, custom ids unique; 202 with ``status: "validating"``.
    - ``GET /batches/{id}``: ``validating``, then ``in_progress`` with ``request_counts``
      growing, then ``completed`` after ``polls`` looks, with the ``results`` inline;
      ``failed`` with ``error.message`` for a model in ``refuse``; ``expired`` with the
      last ``expire`` requests of each of the first ``expiring`` batches unanswered.
    - ``GET /batches/{id}/results?limit=&cursor=``: ``{data, has_more, next_cursor, object}``
      pages of ``page`` results (``inline``: the results in the batch itself, as the beta did).

    Made to misbehave on command (``misbehave``): ``"loop"``, every page says there is more and
    names the same next one; ``"twice"``, every request answered twice, the second wrongly.

    Each result is the chat answer in ``response {status_code, request_id, body}``, or, for
    a status of 400 and up, ``error {message, type, param}``; its ``usage.cost`` is halved
    (batch price). ``submitted`` holds each batch as sent; ``sync`` counts chat completions
    asked one by one."""

    def __init__(
        self,
        answer: Callable[[Received], Answer] | None = None,
        *,
        polls: int = 2,
        refuse: frozenset[str] = frozenset(),
        expire: int = 0,
        expiring: int = 1,
        page: int = 2,
        inline: bool = False,
        misbehave: str = "",
    ) -> None:
        self.answer = answer or (lambda r: chat_answer(r.body["messages"][-1]["content"], cost=0.0004))
        self.polls, self.refuse, self.expire, self.expiring, self.page = polls, refuse, expire, expiring, page
        self.inline, self.misbehave, self.pages = inline, misbehave, 0
        self.submitted: list[dict] = []
        self.batches: dict[str, dict] = {}
        self.sync = 0
        self.looks = 0
        self._lock = threading.Lock()

    def __call__(self, received: Received) -> Answer:
        path = received.path.split("/api/v1", 1)[-1]
        route, _, query = path.partition("?")
        if received.method == "POST" and route == "/batches":
            return self._submit(received)
        if received.method == "GET" and route.startswith("/batches/"):
            batch_id, _, results = route[len("/batches/") :].partition("/")
            if batch_id not in self.batches:
                return Answer(404, {"error": {"message": f"No batch {batch_id}"}})
            return self._results(batch_id, query) if results == "results" else self._look(batch_id)
        with self._lock:
            self.sync += 1
        return self.answer(received)

    def _submit(self, received: Received) -> Answer:
        body = received.body
        keys = list(body) if isinstance(body, dict) else []
        if keys[:2] != ["endpoint", "model"] or "requests" not in keys:
            return Answer(400, {"error": {"message": "endpoint and model must come before requests"}})
        # the reference's BatchSubmitBody, field by field: what else is sent is refused here
        provider = body.get("provider") or {}
        if (
            not set(keys) <= {"completion_window", "endpoint", "model", "provider", "requests"}
            or body["endpoint"] not in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings")
            or body.get("completion_window", "24h") != "24h"
            or not set(provider) <= {"only", "allow_fallbacks"}
            or any(set(r) != {"custom_id", "body"} or not isinstance(r["body"], dict) for r in body["requests"])
        ):
            return Answer(400, {"error": {"message": "not a BatchSubmitBody of the API reference"}})
        ids = [r["custom_id"] for r in body["requests"]]
        if len(set(ids)) != len(ids) or any(
            r["body"].get("model", body["model"]) != body["model"] for r in body["requests"]
        ):
            return Answer(400, {"error": {"message": "custom_id repeated, or a body's model is not the batch's"}})
        with self._lock:
            self.submitted.append(body)
            batch_id = f"batch_{len(self.submitted)}"
            expires = len(self.submitted) <= self.expiring
        unanswered = set(ids[len(ids) - self.expire :]) if expires and self.expire else set()
        self.batches[batch_id] = {"body": body, "looks": 0, "unanswered": unanswered}
        return Answer(202, self._object(batch_id, "validating"))

    def _object(
        self, batch_id: str, status: str, counts: tuple[int, int] = (0, 0), results: list | None = None
    ) -> dict:
        batch = self.batches[batch_id]
        total = len(batch["body"]["requests"])
        refused = batch["body"]["model"] in self.refuse
        return {
            "id": batch_id,
            "object": "batch",
            "endpoint": batch["body"]["endpoint"],
            "model": batch["body"]["model"],
            "status": status,
            "completion_window": "24h",
            "created_at": 1764900000,
            "expires_at": 1764986400,
            "finalized_at": 1764900600 if results is not None else None,
            "provider": None,
            "request_counts": {"completed": counts[0], "failed": counts[1], "total": total},
            "error": {"message": f"Model {batch['body']['model']} is not available for batch"} if refused else None,
            "usage": None,
            "results": results if results is not None and self.inline else None,
        }

    def _look(self, batch_id: str) -> Answer:
        batch = self.batches[batch_id]
        with self._lock:
            self.looks += 1
            batch["looks"] += 1
            looks = batch["looks"]
        if batch["body"]["model"] in self.refuse:
            return Answer(200, self._object(batch_id, "failed", results=[]))
        total = len(batch["body"]["requests"])
        if looks < self.polls:
            return Answer(
                200,
                self._object(batch_id, "validating" if looks == 1 else "in_progress", (total * looks // self.polls, 0)),
            )
        results = self._all_results(batch_id)
        failed = sum(1 for r in results if r["error"])
        status = "expired" if batch["unanswered"] else "completed"
        return Answer(200, self._object(batch_id, status, (len(results) - failed, failed), results))

    def _all_results(self, batch_id: str) -> list[dict]:
        batch = self.batches[batch_id]
        if batch["body"]["model"] in self.refuse:
            return []
        if "results" not in batch:
            results = []
            for n, request in enumerate(batch["body"]["requests"]):
                if request["custom_id"] in batch["unanswered"]:
                    continue
                body = {"model": batch["body"]["model"], **request["body"]}
                answer = self.answer(Received("POST", "/api/v1/chat/completions", {}, body))
                result = {"id": f"{batch_id}-{n}", "custom_id": request["custom_id"], "response": None, "error": None}
                if answer.status >= 400:
                    message = (answer.body or {}).get("error", {}).get("message", "failed")
                    result["error"] = {"message": message, "type": "invalid_request_error", "param": None}
                else:
                    reply = json.loads(json.dumps(answer.body))
                    if isinstance(reply.get("usage", {}).get("cost"), int | float):
                        reply["usage"]["cost"] /= 2
                    result["response"] = {"status_code": answer.status, "request_id": f"req-{n}", "body": reply}
                results.append(result)
            batch["results"] = results
        return batch["results"]

    def _results(self, batch_id: str, query: str) -> Answer:
        fields = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        start = int(fields.get("cursor", "0"))
        if not 1 <= int(fields.get("limit", "1000")) <= 1000:  # the reference: from 1 through 1000
            return Answer(400, {"error": {"message": "limit must be from 1 through 1000"}})
        limit = min(int(fields.get("limit", "1000")), self.page)
        results = self._all_results(batch_id)
        if self.misbehave == "twice":
            wrong = [json.loads(json.dumps(r).replace("content", "content_")) for r in results]
            results = [r for pair in zip(results, wrong, strict=True) for r in pair]
        rows = results[start : start + limit]
        more = start + limit < len(results) or self.misbehave == "loop"
        cursor = str(start + limit) if self.misbehave != "loop" else "0"
        with self._lock:
            self.pages += 1
        return Answer(200, {"data": rows, "has_more": more, "next_cursor": cursor if more else None, "object": "list"})


class _Loopback:
    """A TCP server on 127.0.0.1 that hands each connection to ``_handle`` on a thread of
    its own, until it is closed."""

    def __init__(self) -> None:
        import socket

        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: Any) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sock.close()


class RawHTTP(_Loopback):
    """A TCP server on 127.0.0.1 that answers each request with scripted raw bytes.

    ``script`` is a list, one entry per request in order: bytes to send, or
    ``(bytes, close)`` to close the connection after sending, or ``(bytes, close, hold)``
    to hold the request ``hold`` seconds first.
    """

    def __init__(self, script: list[bytes | tuple[bytes, bool] | tuple[bytes, bool, float]]) -> None:
        super().__init__()
        self.script = list(script)
        self.requests: list[bytes] = []

    def _handle(self, conn: Any) -> None:
        # a client that hangs up mid-script (a Ctrl-C test's child) ends the connection, quietly
        with conn, contextlib.suppress(ConnectionError):
            self._serve_script(conn)

    def _serve_script(self, conn: Any) -> None:
        buffer = b""
        while self.script:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, rest = buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests.append(head + b"\r\n\r\n" + rest[:length])
            buffer = rest[length:]
            step = self.script.pop(0)
            payload, close, hold = (*step, 0.0)[:3] if isinstance(step, tuple) else (step, False, 0.0)
            time.sleep(hold)
            conn.sendall(payload)
            if close:
                return


class Trickle(_Loopback):
    """A TCP server on 127.0.0.1 that answers every request with a status line and headers
    at once, then its body one byte every ``interval`` seconds: a server that never quite
    stops sending. It stops by itself after ``total`` bytes or when closed."""

    def __init__(self, total: int = 1000, interval: float = 0.05) -> None:
        super().__init__()
        self.total, self.interval = total, interval
        self.closed = threading.Event()

    def _handle(self, conn: Any) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.total)
                for _ in range(self.total):
                    if self.closed.wait(self.interval):
                        return
                    conn.sendall(b" ")
            except OSError:
                pass

    def __exit__(self, *exc: Any) -> None:
        self.closed.set()
        super().__exit__(*exc)


class Silent(_Loopback):
    """A TCP server on 127.0.0.1 that accepts every connection and never answers: a hung API."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = threading.Event()

    def _handle(self, conn: Any) -> None:
        with conn:
            self.closed.wait()

    def __exit__(self, *exc: Any) -> None:
        self.closed.set()
        super().__exit__(*exc)


def _compress(payload: bytes, encoding: str) -> bytes:
    import gzip
    import zlib

    if encoding == "gzip":
        return gzip.compress(payload)
    if encoding == "deflate":
        return zlib.compress(payload)
    return payload  # an encoding the client cannot decode: sent as it is, labelled all the same


class ProxyPy:
    """A real forward proxy, proxy.py from PyPI, as its own process on 127.0.0.1: HTTPS in a
    CONNECT tunnel, plain HTTP in absolute form, Basic credentials when ``auth`` is given.
    ``log()`` is its access log: one line per request it carried."""

    def __init__(self, folder: Any, auth: str | None = None) -> None:
        self.folder, self.auth = folder, auth
        self.url = ""

    def __enter__(self) -> ProxyPy:
        import shutil
        import subprocess
        import time

        port_file, self.log_file = self.folder / "proxy.port", self.folder / "proxy.log"
        command = [shutil.which("proxy") or "proxy", "--hostname", "127.0.0.1", "--port", "0"]
        command += ["--port-file", str(port_file), "--num-workers", "1", "--num-acceptors", "1", "--threaded"]
        command += ["--log-level", "INFO", *(["--basic-auth", self.auth] if self.auth else [])]
        with self.log_file.open("w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"proxy.py did not start: {self.log_file.read_text()[-2000:]}")
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def __exit__(self, *exc: Any) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except Exception:
            self.process.kill()


class HeadersThenStall(_Loopback):
    """A TCP server on 127.0.0.1 that lists ``catalog`` at GET .../models and answers every
    other request with a status line and headers at once, then nothing more (a stuck upstream
    behind a proxy that already committed to 200), until closed. ``asked`` counts those."""

    def __init__(self, catalog: list[dict]) -> None:
        super().__init__()
        self.catalog, self.asked = json.dumps({"data": catalog}).encode(), 0
        self.closed = threading.Event()

    def _handle(self, conn: Any) -> None:
        with conn, contextlib.suppress(OSError):
            while (request := conn.recv(65536)) and not self.closed.is_set():
                if request.split(b" ", 2)[1].split(b"?")[0].endswith(b"/models"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(self.catalog), self.catalog))
                    continue
                self.asked += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{")
                self.closed.wait(120)
                return

    def __exit__(self, *exc: Any) -> None:
        self.closed.set()
        super().__exit__(*exc)

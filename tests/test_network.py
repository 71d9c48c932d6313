"""The network as users have it: a real proxy process (proxy.py), CA bundles set the way
corporate machines set them, servers that close idle connections, compress, hang, or
behave as local inference servers do; the real CLI throughout."""

from __future__ import annotations

import gzip
import json
import time
import types
import zlib

import pytest
from servers import Answer, OpenAICompatible, ProxyPy, RawHTTP, Silent, chat_answer

import agent_evals as ae
from conftest import EXACT_HELPER, many, needs, read_logs, run_agent_evals

KEY = "sk-or-net-SECRET-4242"
needs_proxy = needs("proxy")

LINEUP = """
request_types: [prompt]
defaults:
  max_tokens: 64
  retry_backoff: 0.01
vendors:
  openai:
    - model: gpt-4.1-mini
"""

LOCAL = """
request_types: [prompt]
defaults:
  retry_backoff: 0.01
direct:
  local:
    - model: tiny-llama
"""


@pytest.fixture
def project(make_suite):
    return make_suite(helper=EXACT_HELPER, config=LINEUP, cases=many(3))


def cli(project, *argv, env, limit=300):
    done = run_agent_evals(*argv, cwd=project, env={"OPENROUTER_API_KEY": KEY, **env}, limit=limit)
    return done.returncode, done.stdout, done.stderr


def written(project) -> str:
    """Every byte the run wrote under the project's log folder."""
    return "".join(p.read_text(errors="replace") for p in (project / "log").rglob("*") if p.is_file())


# -- proxies ------------------------------------------------------------------------------


@needs_proxy
def test_https_goes_through_the_proxy_in_a_tunnel_trusting_requests_ca_bundle(project, tls, tmp_path) -> None:
    context, ca_file = tls
    with ProxyPy(tmp_path) as proxy, OpenAICompatible(tls=context) as server:
        env = {
            "OPENROUTER_BASE_URL": f"{server.url}/api/v1",
            "HTTPS_PROXY": proxy.url,
            "REQUESTS_CA_BUNDLE": str(ca_file),
        }
        code, out, err = cli(project, "compare", "--local", "-v", env={**env, "SSL_CERT_FILE": "", "SSL_CERT_DIR": ""})
        log = proxy.log()
    assert code == 0, err
    assert "│ 100.0% ±0.0 │" in out or "100.0%" in out
    port = server.url.rsplit(":", 1)[1]
    assert log.count(f"CONNECT 127.0.0.1:{port}") >= 1  # every byte went through the proxy, in a tunnel
    assert len(server.chats()) == 3 and server.chats()[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in log  # TLS ran end to end: the proxy never saw the key
    assert server.chats()[0].headers["user-agent"] == f"agent-evals/{ae.__version__}"
    assert f"is reached through the proxy {proxy.url} (HTTPS_PROXY), trusting REQUESTS_CA_BUNDLE={ca_file}" in err


@needs_proxy
def test_plain_http_goes_through_the_proxy_with_its_credentials_never_written(project, tmp_path) -> None:
    with ProxyPy(tmp_path, auth="alice:pa55-w0rd-XYZ") as proxy, OpenAICompatible() as server:
        address = proxy.url.replace("http://", "http://alice:pa55-w0rd-XYZ@")
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", "http_proxy": address}
        code, out, err = cli(project, "compare", "--local", "-v", env=env)
        log = proxy.log()
    assert code == 0, err
    port = server.url.rsplit(":", 1)[1]
    assert f"POST 127.0.0.1:{port}/api/v1/chat/completions" in log and len(server.chats()) == 3
    assert f"through the proxy {proxy.url} (http_proxy)" in err
    assert "pa55-w0rd-XYZ" not in out + err + written(project)


@needs_proxy
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_that_wants_credentials_is_one_line_naming_the_variable(project, tls, tmp_path, scheme) -> None:
    context, ca_file = tls
    with (
        ProxyPy(tmp_path, auth="alice:secret") as proxy,
        OpenAICompatible(tls=context if scheme == "https" else None) as server,
    ):
        variable = "HTTPS_PROXY" if scheme == "https" else "HTTP_PROXY"
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", variable: proxy.url, "SSL_CERT_FILE": str(ca_file)}
        code, _, err = cli(project, "compare", "--local", env=env)
    assert code == 2 and server.requests == []
    assert err.strip() == (
        f"error: the proxy {proxy.url} asks for credentials: put them in {variable} (HTTP 407), as "
        "user:password@host:port after its http://"
    )


@needs_proxy
def test_no_proxy_bypasses_the_proxy(project, tmp_path) -> None:
    with ProxyPy(tmp_path) as proxy, OpenAICompatible() as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", "ALL_PROXY": proxy.url, "no_proxy": "localhost,127.0.0.1"}
        code, _, err = cli(project, "compare", "--local", "-v", env=env)
        log = proxy.log()
    assert code == 0, err
    assert "127.0.0.1:" not in log.split("Loaded plugin")[-1] and len(server.chats()) == 3
    assert f"{server.url}/api/v1 is reached directly" in err


def test_all_proxy_is_used_when_no_scheme_has_its_own(project) -> None:
    env = {"OPENROUTER_BASE_URL": "http://api.example.test/v1", "ALL_PROXY": "http://127.0.0.1:9"}
    code, _, err = cli(project, "compare", "--local", env=env)
    assert code == 2
    assert err.strip().startswith(
        "error: openrouter: cannot reach the proxy http://127.0.0.1:9 (ALL_PROXY: ConnectionRefusedError"
    )


def test_a_dead_proxy_is_one_line_naming_it_never_the_server(project) -> None:
    env = {"OPENROUTER_BASE_URL": "https://openrouter.example.test/api/v1", "HTTPS_PROXY": "http://127.0.0.1:9"}
    code, out, err = cli(project, "compare", "--local", env=env)
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: openrouter: cannot reach the proxy http://127.0.0.1:9 (HTTPS_PROXY: ConnectionRefusedError: "
        "[Errno 111] Connection refused); start it, fix that variable, or name the server in NO_PROXY"
    )
    assert "openrouter.example.test" not in err


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("socks5://127.0.0.1:1080", "socks5://127.0.0.1:1080"),
        ("https://user:pw@proxy.test:3128", "https://proxy.test:3128"),
    ],
)
def test_a_proxy_agent_evals_cannot_speak_to_is_one_line(project, value, shown) -> None:
    env = {"OPENROUTER_BASE_URL": "https://openrouter.example.test/api/v1", "https_proxy": value}
    code, _, err = cli(project, "compare", "--local", env=env)
    assert code == 2 and "pw@" not in err
    assert err.strip() == (
        f"error: https_proxy: {shown} is no proxy agent-evals can use; it speaks to http:// proxies (HTTPS goes "
        "through them in a CONNECT tunnel): write it as http://host:port"
    )


# tinyproxy 1.11's answer to a wrong password (to a request, and to CONNECT alike): a 401, not a 407
TINYPROXY_401 = (
    b"HTTP/1.0 401 Unauthorized\r\nServer: tinyproxy/1.11.1\r\nContent-Type: text/html\r\n"
    b'WWW-Authenticate: Basic realm="Tinyproxy"\r\nConnection: close\r\n\r\n'
    b"<html><head><title>401 Unauthorized</title></head><body>The administrator of this proxy has not "
    b"configured it to service requests from you.</body></html>"
)
REFUSED = (
    "error: the proxy {proxy} refused the credentials in {variable} (HTTP 401{server}), as user:password@host:port "
    "after its http://"
)
DEAD = (
    "error: openrouter: cannot reach the proxy http://127.0.0.1:9 ({variable}: ConnectionRefusedError: [Errno 111] "
    "Connection refused); start it, fix that variable, or name the server in NO_PROXY"
)
FILTERED = (
    "error: openrouter: the proxy {proxy} ({variable}) answered CONNECT 127.0.0.1:{port}: HTTP/1.0 403 Filtered; it "
    "could not open the way to the server: check what it lets through, or name the server in NO_PROXY"
)


@pytest.mark.parametrize(
    ("scheme", "refusal"),
    [
        ("http", "wrong password"),
        ("https", "wrong password"),
        ("http", "dead"),
        ("https", "dead"),
        ("https", "filtered"),
    ],
)
def test_a_proxy_refusal_is_one_line_exit_2_even_with_a_fresh_catalog_cached(project, tls, scheme, refusal) -> None:
    context, ca_file = tls
    variable = f"{scheme.upper()}_PROXY"
    with OpenAICompatible(tls=context if scheme == "https" else None) as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1", "SSL_CERT_FILE": str(ca_file)}
        assert cli(project, "compare", "--local", env=env)[0] == 0  # the catalog is cached now, and fresh
        answer = TINYPROXY_401 if refusal == "wrong password" else b"HTTP/1.0 403 Filtered\r\n\r\n"
        with RawHTTP([(answer, True)] * 3) as proxy:
            url = "http://127.0.0.1:9" if refusal == "dead" else proxy.url.replace("//", "//alice:wrong@")
            code, out, err = cli(project, "compare", "--local", "-p", "3", env={**env, variable: url})
    assert code == 2 and out == "" and len(server.chats()) == 3, err  # the first run's three, none since
    port = server.url.rsplit(":", 1)[1]
    if refusal == "dead":
        expected = DEAD.format(variable=variable)
    elif refusal == "wrong password":  # the proxy's Server is named when it gave one (a request's answer)
        expected = REFUSED.format(
            proxy=proxy.url, variable=variable, server=" from tinyproxy/1.11.1" * (scheme == "http")
        )
    else:  # a CONNECT refused (a plain-HTTP proxy's 403 cannot be told from the server's own)
        expected = FILTERED.format(proxy=proxy.url, variable=variable, port=port)
    assert err.strip() == expected
    assert "wrong" not in err


def test_a_json_401_through_a_proxy_is_the_server_refusing_the_key(project, tmp_path) -> None:
    refused = json.dumps({"error": {"message": "No auth credentials found", "code": 401}}).encode()
    answer = b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(refused),
        refused,
    )
    with RawHTTP([answer] * 3) as proxy:
        env = {"OPENROUTER_BASE_URL": "http://api.example.test/api/v1", "HTTP_PROXY": proxy.url}
        code, _, err = cli(project, "compare", "--local", env=env)
    assert code == 2 and "OPENROUTER_API_KEY" in err and "proxy" not in err, err


def test_a_proxy_is_looked_up_only_when_a_connection_opens(monkeypatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://u%40corp:p%3Ass@10.0.0.1:3128")
    proxy = ae._proxy_for("http", "api.test", 80)
    assert proxy is not None and (proxy.host, proxy.port, proxy.variable) == ("10.0.0.1", 3128, "HTTP_PROXY")
    import base64

    assert base64.b64decode(proxy.auth.split()[1]) == b"u@corp:p:ss"  # percent-escapes decoded, as curl does
    monkeypatch.setenv("NO_PROXY", ".test")
    assert ae._proxy_for("http", "api.test", 80) is None
    assert ae._proxy_for("https", "api.test", 443) is None  # no HTTPS_PROXY: direct


# -- idle keep-alive, compression, the user agent -----------------------------------------


SLOW_HELPER = EXACT_HELPER.replace(
    "ae.configure(",
    """import time

class Pausing(ae.EchoAdapter):
    def call(self, case, model):
        time.sleep(1.5)  # longer than the server keeps an idle connection
        return super().call(case, model)

ae.configure(""",
).replace("adapter=ae.EchoAdapter()", "adapter=Pausing()")


@pytest.mark.parametrize("parallelism", ["1", "2", "4"])
def test_a_connection_the_server_closed_while_idle_is_no_retry(make_suite, parallelism) -> None:
    """uvicorn's --timeout-keep-alive: every pooled connection is closed while the cases think;
    each request goes once, on a connection that is open, at any -p (a resend once took another
    dead one from the pool)."""
    project = make_suite(helper=SLOW_HELPER, config=LINEUP, cases=many(6))
    with OpenAICompatible(idle=1.0) as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1"}
        code, _, err = cli(project, "compare", "--local", "-p", parallelism, "--retries", "0", env=env)
    assert code == 0, err
    (log,) = read_logs(project)
    assert [row["retries"] for row in log["rows"]] == [0] * 6 and all(row["score"] == 1.0 for row in log["rows"])
    assert len(server.chats()) == 6 and server.connections >= 6 // int(parallelism)
    assert "retries" not in err


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_server_that_compresses_every_answer_is_read(project, encoding) -> None:
    with OpenAICompatible(encoding=encoding) as server:
        code, _out, err = cli(project, "compare", "--local", env={"OPENROUTER_BASE_URL": f"{server.url}/api/v1"})
    assert code == 0, err
    assert all(row["score"] == 1.0 for row in read_logs(project)[0]["rows"])
    assert server.chats()[0].headers["accept-encoding"] == "gzip, deflate"


def test_an_encoding_it_cannot_decode_is_named(project) -> None:
    with OpenAICompatible(encoding="br") as server:
        code, _, err = cli(project, "compare", "--local", env={"OPENROUTER_BASE_URL": f"{server.url}/api/v1"})
    assert code == 2 and len(server.requests) == 1  # the catalog, asked once: it would not read better again
    assert "the server answered in the br encoding, which agent-evals does not decode (it asks for gzip)" in err


def test_compressed_bodies_are_bounded_and_raw_deflate_is_read() -> None:
    bomb = gzip.compress(b" " * (8 * 2**20))  # 8 MiB that arrive as 8 KiB
    with pytest.raises(ae._TooLarge):
        ae._decoded(bomb, "gzip", 2**20)
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert ae._decoded(raw.compress(b'{"a": 1}') + raw.flush(), "deflate", 100) == b'{"a": 1}'
    assert ae._decoded(b"plain", "identity", 100) == b"plain"
    with pytest.raises(ae._TransportError, match="the gzip body cannot be decoded"):
        ae._decoded(b"\x1f\x8bnot really", "gzip", 100)


def test_gzip_sent_without_its_header_is_named(project) -> None:
    def respond(request):
        return Answer(200, gzip.compress(json.dumps(chat_answer("{}").body).encode()))

    with OpenAICompatible(respond) as server:
        code, _, err = cli(project, "compare", "--local", env={"OPENROUTER_BASE_URL": f"{server.url}/api/v1"})
    assert code == 1, err
    (log,) = read_logs(project)
    assert "the body is not JSON (gzip data with no Content-Encoding header)" in log["rows"][0]["error"]


# -- a server that hangs ------------------------------------------------------------------


def test_a_hung_server_is_one_line_and_a_failure_within_the_list_deadline(project) -> None:
    with Silent() as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1"}
        code, out, err = cli(project, "compare", "--local", "--timeout", "2", env=env, limit=300)
    # asked once, never retried: a hung list is not worth another try
    assert code == 2 and out == "" and server.connections == 1
    assert err.strip() == (
        f"error: openrouter: no whole answer from {server.url}/api/v1 within 2 s (GET /models); check that the "
        "server is up and not stuck, then run again"
    )


def test_cases_that_all_time_out_stop_their_contender_within_two_timeouts(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LINEUP, cases=many(12))
    with OpenAICompatible(lambda r: Answer(200, {}, delay=8)) as server:
        env = {"OPENROUTER_BASE_URL": f"{server.url}/api/v1"}
        code, _, err = cli(project, "compare", "--local", "--timeout", "1", "-p", "4", env=env, limit=300)
    # the four cases in flight, each tried twice at most, and nothing answered meanwhile: the server is
    # stuck, and the run stops with one line (its cases not run: --resume asks them); never 12 cases x 5 tries
    assert code == 1 and 4 <= len(server.chats()) <= 8, err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "the server answers nothing: openrouter: openai/gpt-4.1-mini: TimeoutError: timed out twice" in line, err
    assert all(not row["error"] for log in read_logs(project) for row in log["rows"])
    (log,) = read_logs(project)
    assert all(row["retries"] == 1 for row in log["rows"])  # a timeout is tried again once, no more


class Screen:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return True


def test_the_progress_line_says_what_it_waits_for(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    progress = ae._Progress(Screen(), 10)
    progress.waiting, progress.started = " from api.test", time.monotonic() - 42
    progress.answered = progress.started
    progress.draw([time.monotonic() - 41, time.monotonic() - 40])
    assert "0/10 cases · waiting for the first answer from api.test (42 s) · 2 in flight, the oldest 41 s" in (
        progress.stream.text
    )


def test_a_silence_after_answers_is_said_on_the_line_and_off_a_terminal_at_doubling_waits(monkeypatch) -> None:
    """A server that answered, then stalls: the line says for how long nothing ended and how many
    case runs wait; in a log (no terminal) a line of its own after 60 s, again after 120, never each draw."""
    monkeypatch.setenv("COLUMNS", "200")
    progress = ae._Progress(Screen(), 10)
    progress.add(types.SimpleNamespace(error=None, usage=ae.Usage(), experiment=None))
    progress.draw([time.monotonic()])
    assert "1/10 cases" in progress.stream.text and "no case ended" not in progress.stream.text
    progress.answered -= 31
    progress.last = 0
    progress.draw([time.monotonic() - 31])
    assert "1/10 cases · no case ended for 31 s · 1 in flight, the oldest 31 s" in progress.stream.text
    quiet, told = ae._Progress(None, 10, Screen()), []
    quiet.say = told.append
    for silence in (10, 59, 61, 62, 100, 121, 130):
        quiet.started = quiet.answered = time.monotonic() - silence
        quiet.draw([quiet.answered])
    said = [line.split(" · ")[1] for line in told]
    assert said == ["waiting for the first answer (61 s)", "waiting for the first answer (121 s)"]
    quiet.draw([])  # nothing in flight (a batch waits at its provider): nothing to say
    assert len(told) == 2


# -- local inference servers as they behave -----------------------------------------------


def test_an_on_demand_server_that_lists_no_model_says_so_and_can_be_asked_anyway(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(2))
    with OpenAICompatible(catalog=[]) as server:
        env = {"LOCAL_BASE_URL": f"{server.url}/v1"}
        code, _, err = cli(project, "compare", "--local", env=env)
        assert code == 2 and server.chats() == []
        assert err.strip() == (
            "error: local/tiny-llama: provider local has no such model; its server listed 0 models (one that loads "
            "models on demand lists only those it has loaded: defaults.check_models: false asks it anyway)"
        )
        (project / "evals/.agent-eval.config.yml").write_text(
            LOCAL.replace("defaults:\n", "defaults:\n  check_models: false\n")
        )
        code, _, err = cli(project, "compare", "--local", env=env)
    assert code == 0, err
    assert len(server.chats()) == 2 and server.chats()[0].body["model"] == "tiny-llama"


def test_a_server_that_answers_500_to_every_case_stops_its_contender(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(20))
    with OpenAICompatible(lambda r: Answer(500, "Internal Server Error"), catalog=[{"id": "tiny-llama"}]) as server:
        code, _, err = cli(project, "compare", "--local", "--retries", "1", env={"LOCAL_BASE_URL": f"{server.url}/v1"})
    assert code == 1
    assert "local/tiny-llama (direct) effort=default stopped after" in err and "check the server and its log" in err
    assert len(server.chats()) < 20  # not every case asked twice


def test_fastapi_detail_errors_are_read_as_the_message(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(1))
    answers = iter(
        [
            Answer(422, {"detail": [{"loc": ["body"], "msg": "Field required"}]}),
            Answer(400, {"detail": "no such adapter"}),
        ]
    )
    with OpenAICompatible(lambda r: next(answers), catalog=[{"id": "tiny-llama"}]) as server:
        env = {"LOCAL_BASE_URL": f"{server.url}/v1"}
        cli(project, "compare", "--local", env=env)
        first = read_logs(project)[-1]["rows"][0]["error"]
        cli(project, "compare", "--local", env=env)
        second = read_logs(project)[-1]["rows"][0]["error"]
    assert first.endswith("HTTP 422: Field required") and second.endswith("HTTP 400: no such adapter")


def test_an_empty_answer_that_cost_tokens_says_so(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(1))

    def respond(request):
        answer = chat_answer("", completion_tokens=64)
        answer.body["choices"][0]["finish_reason"] = "length"
        answer.body["choices"][0]["message"]["reasoning_content"] = "Let me think. " * 20
        return answer

    with OpenAICompatible(respond, catalog=[{"id": "tiny-llama"}]) as server:
        cli(project, "run", "--local", env={"LOCAL_BASE_URL": f"{server.url}/v1"})
    (log,) = read_logs(project)
    assert log["rows"][0]["reply_error"] == (
        "no JSON object in the reply (the answer's text was empty though the model wrote 64 output tokens, cut off "
        "at max_tokens; its reasoning (280 characters) came back alone)"
    )


def test_models_lists_a_local_server_when_named_and_verify_says_what_it_did_not_check(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LOCAL, cases=many(1))
    with OpenAICompatible(catalog=[{"id": "tiny-llama"}, {"id": "qwen3:0.6b"}]) as server:
        env = {"LOCAL_BASE_URL": f"{server.url}/v1"}
        code, _, err = cli(project, "verify", env=env)
        assert code == 0 and server.requests == []  # verify is offline
        code, out, _ = cli(project, "verify", env=env)
        assert "not checked: local/tiny-llama (no cached model list of its server" in out
        code, out, err = cli(project, "models", "--provider", "local", env=env)
    assert code == 0, err
    assert "local/tiny-llama" in out and "local/qwen3:0.6b" in out


# -- LiteLLM, held to the same rules -------------------------------------------------------


LITELLM = """
request_types: [prompt]
defaults:
  retry_backoff: 0.01
direct:
  litellm:
    - model: openai/gpt-4o-mini
"""


@needs("litellm")
def test_litellm_a_dead_server_is_one_line_at_once(make_suite) -> None:
    project = make_suite(helper=EXACT_HELPER, config=LITELLM, cases=many(6))
    env = {"LITELLM_API_BASE": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-x"}
    # the child's bound (4.4 s quiet), below the 35.7 s LiteLLM's own retries took when they were on
    code, _, err = cli(project, "compare", "--local", env=env, limit=300)
    assert code == 1
    assert "error: the run stopped after" in err
    assert (
        "litellm: cannot reach http://127.0.0.1:9/v1 (ConnectionRefusedError: [Errno 111] Connection refused); " in err
    )
    (log,) = read_logs(project)
    assert sum(row["retries"] for row in log["rows"]) == 0


@needs("litellm")
def test_litellm_a_refused_request_stops_the_contender_and_drop_params_is_a_setting(make_suite) -> None:
    # a LiteLLM proxy without its database answers every request so, as a deployment that refuses a setting does
    project = make_suite(helper=EXACT_HELPER, config=LITELLM, cases=many(8))
    with OpenAICompatible(lambda r: Answer(400, {"error": {"message": "No connected db."}})) as server:
        env = {"LITELLM_API_BASE": f"{server.url}/v1", "OPENAI_API_KEY": "sk-x"}
        code, _, err = cli(project, "compare", "--local", env=env, limit=120)
        assert code == 1 and "openai/gpt-4o-mini (direct) effort=default stopped after" in err
        assert "HTTP 400: BadRequestError" in err and "check what it sends" in err
        assert "drop_params" not in server.chats()[0].body  # never sent unasked
        config = LITELLM.replace("defaults:\n", "defaults:\n  drop_params: true\n")
        (project / "evals/.agent-eval.config.yml").write_text(config)
        server.respond = lambda r: chat_answer(r.body["messages"][-1]["content"])
        code, _, err = cli(project, "compare", "--local", env=env, limit=120)
    assert code == 0, err
    assert server.chats()[-1].body["drop_params"] is True

"""Slow and half-open connections against the bounded listener: each is cut off in time, the cap
makes room by closing idle ones, and a flood against a running daemon neither starves /healthz and
the chat nor fills the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.events import Caller
from gateway.ops.http_limits import Limits, Listening, serve
from tests.daemon_proc import DaemonProc, WebChatClient, free_port
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.floods import flood_a_daemon
from tests.helpers import write_config

HALF_SENT = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: the headers never end
# How long a test waits for what it expects: met at once on a quiet machine, and a busy one may
# hold the loop back for seconds. Far below aiohttp's own limits (an hour for headers).
WAIT_S = 60.0


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


async def echo_socket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for message in ws:
        await ws.send_str(f"echo {message.data}")
    return ws


async def posted(request: web.Request) -> web.Response:
    return web.Response(text=f"got {len(await request.read())} bytes")


def gate(request: web.BaseRequest) -> Caller:
    """The test app's gate: /healthz is a probe; `X-Caller` says who anyone else is (KNOWN if it is
    absent), `X-Caller: forbidden` is refused with the gate's own 403."""
    if request.path == "/healthz":
        return Caller.PROBE
    said = request.headers.get("X-Caller", "known")
    if said == "forbidden":
        raise web.HTTPForbidden(text="not you\n")
    return Caller(said)


@pytest.fixture
async def listening(request: pytest.FixtureRequest) -> AsyncIterator[Listening]:
    limits: Limits = getattr(
        request, "param", Limits(max_connections=3, header_timeout=0.5, body_timeout=0.5)
    )
    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_get("/ws", echo_socket)
    app.router.add_post("/in", posted)
    app.router.add_route("*", "/healthz", hello)
    found = await serve(app, "127.0.0.1", 0, gate, limits=limits, name="test")
    try:
        yield found
    finally:
        await found.stop()


async def connect(
    port: int, data: bytes = HALF_SENT
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(WAIT_S):
        return await reader.read()  # until EOF


async def test_headers_that_never_end_are_cut_off(listening: Listening) -> None:
    reader, writer = await connect(listening.port)
    assert await closed_by_server(reader) == b""  # the header timeout (0.5 s), not aiohttp's hour
    writer.close()


async def test_a_body_that_never_arrives_gets_408(listening: Listening) -> None:
    reader, writer = await connect(
        listening.port,
        b"POST /in HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nonly ten b",
    )
    answer = await closed_by_server(reader)
    assert answer.startswith(b"HTTP/1.1 408")
    writer.close()


async def test_at_the_cap_the_oldest_idle_connection_makes_room(listening: Listening) -> None:
    idle = [await connect(listening.port) for _ in range(3)]
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{listening.port}/") as resp,
    ):
        assert resp.status == 200 and await resp.text() == "hello"
    assert await closed_by_server(idle[0][0]) == b""  # the oldest half-open one was closed for it
    for _, writer in idle:
        writer.close()


async def test_busy_connections_are_kept_and_a_newcomer_is_told_503(listening: Listening) -> None:
    async with aiohttp.ClientSession() as http:
        sockets = [await http.ws_connect(f"http://127.0.0.1:{listening.port}/ws") for _ in range(3)]
        reader, writer = await connect(listening.port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 503")
        for ws in sockets:  # and each socket still works
            await ws.send_str("hi")
            assert (await ws.receive()).data == "echo hi"
            await ws.close()
        writer.close()


async def test_an_open_websocket_outlives_the_header_timeout(listening: Listening) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"http://127.0.0.1:{listening.port}/ws") as ws,
    ):
        # something that the header timeout does close
        reader, writer = await connect(listening.port)
        await closed_by_server(reader)
        writer.close()
        await ws.send_str("still here")
        assert (await ws.receive()).data == "echo still here"


# ------------------------------------------------------------------------------- against the daemon
@pytest.mark.skipif(
    sys.platform != "linux", reason="file limits of a child process are set the Linux way"
)
async def test_a_flood_of_half_open_connections_starves_nothing_and_logs_little(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2_500:
        # this test's own client side
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4_096, hard), hard))
    home, port = tmp_path / "home", free_port()
    home.mkdir()
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra=f"web:\n  port: {port}\ndaemon:\n  max_connections: 64\n",
    )
    # the open-file limit the daemon cannot raise: a flood must fit in it
    daemon = DaemonProc(home, nofile=512)
    await daemon.start()
    flood: list[asyncio.StreamWriter] = []
    try:
        await daemon.wait_ready()
        for _ in range(1_100):
            flood.append((await connect(port))[1])
        async with aiohttp.ClientSession() as http:
            async with (
                asyncio.timeout(WAIT_S),
                http.get(f"http://127.0.0.1:{port}/healthz") as resp,
            ):
                assert resp.status == 200
        async with WebChatClient(port, home=home) as tab:
            assert (await tab.say("still there?"))["outcome"] == "accepted"
            assert (await tab.next("message"))["text"] == "echo: still there? [users=1]"
        code = await daemon.stop()
    finally:
        for writer in flood:
            writer.close()
        await daemon.kill()
    assert code == 0, daemon.output()
    errors = [r for r in daemon.log_records() if r["level"] in ("WARNING", "ERROR")]
    assert len(daemon.stderr) < 64_000 and len(errors) <= 20, daemon.output()[-3000:]
    assert not any("out of system resource" in r["msg"] for r in errors)


def test_the_units_let_the_daemon_hold_enough_files_and_it_raises_its_own_soft_limit() -> None:
    from gateway.ops.http_limits import raise_fd_limit

    repo = Path(__file__).resolve().parent.parent
    for unit in ("agent-gateway.service", "agent-gateway.user.service"):
        assert "\nLimitNOFILE=65536\n" in (repo / "systemd" / unit).read_text(), unit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_fd_limit(wanted=min(hard, soft + 1)) == min(hard, soft + 1)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == min(hard, soft + 1)


@pytest.mark.parametrize(
    "listening", [Limits(max_connections=3, header_timeout=60, body_timeout=60)], indirect=True
)
async def test_a_burst_accepted_at_once_still_lets_the_newest_in(listening: Listening) -> None:
    """Connections the kernel queued while the loop was busy are accepted in one round, before any
    of them is connected: idle ones among them make room like any idle connection, so the last one
    (a request) is served."""
    # the loop never runs here
    idle = [socket.create_connection(("127.0.0.1", listening.port)) for _ in range(10)]
    last = socket.create_connection(("127.0.0.1", listening.port))
    try:
        for sock in idle:
            sock.sendall(HALF_SENT)
        last.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        last.setblocking(False)
        answer = b""
        async with asyncio.timeout(WAIT_S):
            while chunk := await asyncio.get_running_loop().sock_recv(last, 65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello"), answer
        assert listening.connections.evicted == 8 and listening.connections.refused == 0
        for sock in idle[:8]:
            # the ones closed to make room are really closed (not left open by aiohttp)
            sock.setblocking(False)
            async with asyncio.timeout(WAIT_S):
                with contextlib.suppress(ConnectionResetError):
                    # closed with its half request unread: a reset
                    assert await asyncio.get_running_loop().sock_recv(sock, 100) == b""
    finally:
        for sock in (*idle, last):
            sock.close()


async def test_malformed_requests_are_one_warning_without_traceback(
    listening: Listening, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp logs what it cannot parse at ERROR with a traceback quoting the bytes: from anyone,
    at any rate."""
    garbage = (
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /?token=\x80 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
    )
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        for data in garbage:
            reader, writer = await connect(listening.port, data)
            assert (await closed_by_server(reader))[:12] in (
                b"HTTP/1.0 400",
                b"HTTP/1.1 400",
                b"HTTP/1.1 431",
            ), data
            writer.close()
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == len(garbage)
    assert {(r.levelname, r.getMessage(), r.exc_info) for r in records} <= {
        ("WARNING", f"malformed HTTP requests answered {code} ({kind})", None)
        for code in (400, 431)
        for kind in ("InvalidURLError", "BadHttpMessage", "InvalidHeader", "LineTooLong")
    }


# ------------------------------------------------------------------- who is asking, before the body
async def drip(writer: asyncio.StreamWriter, chunk: bytes, *, every: float, times: int) -> None:
    """Send `chunk` every `every` seconds, `times` times, or until the server hangs up."""
    with contextlib.suppress(ConnectionError):
        for _ in range(times):
            await asyncio.sleep(every)
            writer.write(chunk)
            await writer.drain()


def post(path: str, caller: str, length: int, body: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Caller: {caller}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode() + body


@pytest.mark.parametrize(
    "listening", [Limits(8, header_timeout=60, body_timeout=60)], indirect=True
)
async def test_a_stranger_is_refused_at_once_without_its_body(listening: Listening) -> None:
    """A small Content-Length and no body: the answer does not wait for the body (here 60 s), the
    connection is never counted busy, and the handler never runs."""
    reader, writer = await connect(listening.port, post("/in", "stranger", 100))
    answer = await closed_by_server(reader)
    assert answer.startswith(b"HTTP/1.1 401")
    assert answer.endswith(b"needs its credential in the request's headers\n")
    reader, writer2 = await connect(listening.port, post("/in", "forbidden", 100, b"0123456789"))
    assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 403")  # the gate's own refusal
    assert listening.connections.strangers == 2 and listening.connections.busy == {}
    for w in (writer, writer2):
        w.close()


@pytest.mark.parametrize(
    "listening", [Limits(8, header_timeout=60, body_timeout=60)], indirect=True
)
async def test_a_probe_is_answered_without_waiting_for_a_body(listening: Listening) -> None:
    reader, writer = await connect(listening.port, post("/healthz", "known", 1000))
    answer = await closed_by_server(reader)  # answered, then closed: its body is not waited for
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello")
    writer.close()


@pytest.mark.parametrize(
    "listening",
    [
        Limits(
            max_connections=8,
            header_timeout=60,
            body_timeout=600,
            body_grace=0.2,
            min_body_rate=100,
        )
    ],
    indirect=True,
)
async def test_a_body_must_keep_coming_at_the_minimum_rate(listening: Listening) -> None:
    """After the grace, the body must have come at 100 bytes a second; a drip is cut with 408 long
    before the 600 s in all (the test waits WAIT_S), and a steady body that takes longer than the
    grace is taken."""
    reader, writer = await connect(listening.port, post("/in", "claimed", 10_000, b"x"))
    dripping = asyncio.ensure_future(drip(writer, b"x", every=0.2, times=300))  # 5 bytes a second
    assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 408")
    dripping.cancel()
    writer.close()
    reader, writer = await connect(listening.port, post("/in", "claimed", 3_000))
    await drip(writer, b"y" * 200, every=0.1, times=15)  # 2,000 bytes a second, for 1.5 s
    async with asyncio.timeout(WAIT_S):
        answer = await reader.readuntil(b"bytes")
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"got 3000 bytes")
    writer.close()


async def until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    "listening",
    [Limits(max_connections=4, header_timeout=60, body_timeout=60, body_grace=60)],
    indirect=True,
)
async def test_when_full_the_oldest_claim_still_waiting_for_its_body_makes_room(
    listening: Listening,
) -> None:
    """Four claimed requests (Slack-like: only a body could prove them) that send no body fill the
    listener; a probe and an authenticated request still get in, each closing the oldest claim."""
    claims = []
    for _ in range(4):
        claims.append(await connect(listening.port, post("/in", "claimed", 100)))
        await until(lambda: len(listening.connections.busy) == len(claims))
    probe = await connect(
        listening.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    assert (await closed_by_server(probe[0])).startswith(b"HTTP/1.1 200")
    probe[1].close()
    claims.append(await connect(listening.port, post("/in", "claimed", 100)))  # full again
    await until(lambda: len(listening.connections.busy) == 4)
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{listening.port}/in", data=b"12345", headers={"X-Caller": "known"}
        ) as resp:
            assert resp.status == 200 and await resp.text() == "got 5 bytes"
    for reader, _ in claims[:2]:  # closed for room, oldest first, without an answer
        assert await closed_by_server(reader) == b""
    assert listening.connections.evicted == 2 and listening.connections.refused == 0
    assert len([s for s in listening.connections.busy.values() if s.evictable]) == 3
    for _, writer in claims:
        writer.close()


@pytest.mark.parametrize(
    "listening", [Limits(4, header_timeout=60, body_timeout=60)], indirect=True
)
async def test_an_authenticated_connection_is_kept_while_an_unauthenticated_one_goes(
    listening: Listening,
) -> None:
    """The oldest connection carried an authenticated request and now idles (keep-alive): room is
    made by closing the oldest one that never authenticated; the authenticated one still works."""
    again = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Caller: known\r\n\r\n"
    known = await connect(listening.port, again)
    async with asyncio.timeout(WAIT_S):
        assert (await known[0].readuntil(b"hello")).startswith(b"HTTP/1.1 200")
    idle = [await connect(listening.port) for _ in range(3)]  # headers never end: no request yet
    await until(lambda: len(listening.connections.known) == 1)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{listening.port}/") as resp:
            assert resp.status == 200
    assert await closed_by_server(idle[0][0]) == b""
    known[1].write(again)
    async with asyncio.timeout(WAIT_S):
        assert (await known[0].readuntil(b"hello")).startswith(b"HTTP/1.1 200")
    for _, writer in (known, *idle):
        writer.close()


@pytest.mark.parametrize(
    "listening", [Limits(3, header_timeout=60, body_timeout=60)], indirect=True
)
async def test_only_authenticated_and_served_connections_left_means_503(
    listening: Listening,
) -> None:
    url = f"http://127.0.0.1:{listening.port}/ws"
    async with aiohttp.ClientSession() as http:
        sockets = [
            await http.ws_connect(url, headers={"X-Caller": caller})
            for caller in ("known", "known", "claimed")
        ]  # a bodiless claim: being served
        probe = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        reader, writer = await connect(listening.port, probe)
        assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 503")
        for ws in sockets:
            await ws.send_str("hi")
            assert (await ws.receive()).data == "echo hi"
            await ws.close()
        writer.close()


@pytest.mark.skipif(sys.platform != "linux", reason="file limits of a child are set the Linux way")
async def test_a_slow_body_flood_starves_neither_healthz_nor_the_chat_nor_slack(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """300 unauthenticated POSTs that promise a body and send none, kept up against the web
    listener, and 300 with a plausible Slack signature against the Events endpoint: /healthz, the
    web chat and a genuine Slack event are answered throughout. (Figures: bench/http_flood.py.)"""
    users = {"U1": {"id": "U1", "name": "alice", "profile": {"display_name": "Alice"}}}
    async with FakeSlack(users=users) as slack:
        report = await flood_a_daemon(tmp_path, fake_llm, slack, sockets=300, rounds=3)
    assert [(p.what, p.ok) for p in report.probes] == [
        ("/healthz", True),
        ("web chat answer", True),
        ("slack event ack", True),
    ] * 3, report.probes
    web, slack_answers = report.floods["web"], report.floods["slack"]
    # refused on their headers (or, past the cap, closed to make room): never a 503, never waited on
    assert web["HTTP/1.1 401"] >= 300 and set(web) <= {"HTTP/1.1 401", "closed", "reset"}, web
    assert slack_answers["closed"] > 0, slack_answers  # claims closed for room (or cut: too slow)
    assert "HTTP/1.1 503" not in slack_answers, slack_answers
    assert report.exit_code == 0, report.output[-3000:]
    assert not [r for r in report.log_records if r["level"] == "ERROR"], report.output[-3000:]


# --------------------------------------------------------------------------- each listener's gate
def _request(method: str, path: str, headers: dict[str, str] | None = None) -> web.Request:
    from aiohttp.test_utils import make_mocked_request

    return make_mocked_request(method, path, headers={"Host": "127.0.0.1", **(headers or {})})


def test_telegrams_gate_knows_only_its_secret_token_on_its_path() -> None:
    from adapters.telegram.webhook import WebhookServer
    from gateway.config.settings import TelegramConfig
    from gateway.config.yamlload import Secret

    config = TelegramConfig(
        token=Secret("1:x"),
        mode="webhook",
        webhook_url="https://x.test/tg",
        secret_token=Secret("s3cret-token"),
        path="/tg",
    )
    server = WebhookServer(config)
    server.secret = "s3cret-token"  # what serve() sets
    right = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}
    assert server.caller(_request("POST", "/tg", right)) is Caller.KNOWN
    wrong = {"X-Telegram-Bot-Api-Secret-Token": "x"}
    for method, path, headers in (
        ("POST", "/tg", {}),
        ("POST", "/tg", wrong),
        ("GET", "/tg", right),
        ("POST", "/other", right),
    ):
        assert server.caller(_request(method, path, headers)) is Caller.STRANGER, (method, path)


def test_slacks_gate_claims_only_a_fresh_signature_of_slacks_shape() -> None:
    from adapters.slack.ack import events_caller

    now = 1_800_000_000.0
    caller = events_caller("/slack/events", clock=lambda: now)
    stamp = "X-Slack-Request-Timestamp"
    signed = {stamp: str(int(now) - 299), "X-Slack-Signature": "v0=" + "ab" * 32}
    assert caller(_request("POST", "/slack/events", signed)) is Caller.CLAIMED
    for method, path, headers in (
        ("POST", "/slack/events", {}),
        ("POST", "/slack/events", {**signed, stamp: str(int(now) - 301)}),  # stale
        ("POST", "/slack/events", {**signed, stamp: str(int(now) + 301)}),
        ("POST", "/slack/events", {**signed, "X-Slack-Signature": "v0=" + "ab" * 31}),
        ("POST", "/slack/events", {**signed, "X-Slack-Signature": "v1=" + "ab" * 32}),
        ("POST", "/slack/events", {**signed, stamp: "１２３"}),  # not ASCII digits
        ("GET", "/slack/events", signed),
        ("POST", "/slack/other", signed),
    ):
        assert caller(_request(method, path, headers)) is Caller.STRANGER, (method, path, headers)


def test_the_web_guards_gate_judges_every_route_from_the_headers() -> None:
    from gateway.config.yamlload import Secret
    from gateway.ops.web_guard import WebGuard

    guard = WebGuard(Secret("the-login-secret"))
    bearer = {"Authorization": "Bearer the-login-secret"}
    assert guard.caller(_request("POST", "/healthz", {"Host": "evil.example"})) is Caller.PROBE
    assert guard.caller(_request("POST", "/upload", bearer)) is Caller.KNOWN
    assert guard.caller(_request("GET", "/?token=the-login-secret")) is Caller.KNOWN
    assert guard.caller(_request("GET", "/status", bearer)) is Caller.KNOWN
    with pytest.raises(web.HTTPUnauthorized):
        guard.caller(_request("GET", "/status"))  # no peer address: not known to be this machine
    with pytest.raises(web.HTTPUnauthorized):
        guard.caller(_request("POST", "/upload"))
    with pytest.raises(web.HTTPForbidden):
        guard.caller(_request("POST", "/upload", {**bearer, "Host": "rebind.evil.example"}))
    with pytest.raises(web.HTTPForbidden):
        guard.caller(_request("POST", "/upload", {**bearer, "Origin": "https://evil.example"}))

"""Slow and half-open connections against the bounded listener: each is cut off in time, the cap makes room by
closing idle ones, and a flood against a running daemon neither starves /healthz and the chat nor fills the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.ops.http_limits import Limits, Listening, serve
from tests.daemon_proc import DaemonProc, WebChatClient, free_port
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config

HALF_SENT = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: the headers never end


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


@pytest.fixture
async def listening(request: pytest.FixtureRequest) -> AsyncIterator[Listening]:
    limits: Limits = getattr(request, "param", Limits(max_connections=3, header_timeout=0.5, body_timeout=0.5))
    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_get("/ws", echo_socket)
    app.router.add_post("/in", posted)
    found = await serve(app, "127.0.0.1", 0, limits=limits, name="test")
    try:
        yield found
    finally:
        await found.stop()


async def connect(port: int, data: bytes = HALF_SENT) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(10):
        return await reader.read()  # until EOF


async def test_headers_that_never_end_are_cut_off(listening: Listening) -> None:
    reader, writer = await connect(listening.port)
    started = asyncio.get_running_loop().time()
    assert await closed_by_server(reader) == b""
    assert asyncio.get_running_loop().time() - started < 5  # the header timeout (0.5 s), not aiohttp's hour
    writer.close()


async def test_a_body_that_never_arrives_gets_408(listening: Listening) -> None:
    reader, writer = await connect(listening.port, b"POST /in HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n"
                                                   b"\r\nonly ten b")
    answer = await closed_by_server(reader)
    assert answer.startswith(b"HTTP/1.1 408")
    writer.close()


async def test_at_the_cap_the_oldest_idle_connection_makes_room(listening: Listening) -> None:
    idle = [await connect(listening.port) for _ in range(3)]
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{listening.port}/") as resp:
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
    async with aiohttp.ClientSession() as http, http.ws_connect(f"http://127.0.0.1:{listening.port}/ws") as ws:
        reader, writer = await connect(listening.port)  # something that the header timeout does close
        await closed_by_server(reader)
        writer.close()
        await ws.send_str("still here")
        assert (await ws.receive()).data == "echo still here"


# ------------------------------------------------------------------------------------------ against the daemon
@pytest.mark.skipif(sys.platform != "linux", reason="file limits of a child process are set the Linux way")
async def test_a_flood_of_half_open_connections_starves_nothing_and_logs_little(
        tmp_path: Path, fake_llm: FakeLLM) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2_500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4_096, hard), hard))  # this test's own client side
    home, port = tmp_path / "home", free_port()
    home.mkdir()
    write_config(home, provider="anthropic", base_url=fake_llm.base_url,
                 extra=f"web:\n  port: {port}\ndaemon:\n  max_connections: 64\n")
    daemon = DaemonProc(home, nofile=512)  # the open-file limit the daemon cannot raise: a flood must fit in it
    await daemon.start()
    flood: list[asyncio.StreamWriter] = []
    try:
        await daemon.wait_ready()
        for _ in range(1_100):
            flood.append((await connect(port))[1])
        async with aiohttp.ClientSession() as http:
            async with asyncio.timeout(5), http.get(f"http://127.0.0.1:{port}/healthz") as resp:
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


@pytest.mark.parametrize("listening", [Limits(max_connections=3, header_timeout=60, body_timeout=60)], indirect=True)
async def test_a_burst_accepted_at_once_still_lets_the_newest_in(listening: Listening) -> None:
    """Connections the kernel queued while the loop was busy are accepted in one round, before any of them is
    connected: idle ones among them make room like any idle connection, so the last one (a request) is served."""
    idle = [socket.create_connection(("127.0.0.1", listening.port)) for _ in range(10)]  # the loop never runs here
    last = socket.create_connection(("127.0.0.1", listening.port))
    try:
        for sock in idle:
            sock.sendall(HALF_SENT)
        last.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        last.setblocking(False)
        answer = b""
        async with asyncio.timeout(10):
            while chunk := await asyncio.get_running_loop().sock_recv(last, 65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello"), answer
        assert listening.connections.evicted == 8 and listening.connections.refused == 0
        for sock in idle[:8]:  # the ones closed to make room are really closed (not left open by aiohttp)
            sock.setblocking(False)
            async with asyncio.timeout(5):
                with contextlib.suppress(ConnectionResetError):  # closed with its half request unread: a reset
                    assert await asyncio.get_running_loop().sock_recv(sock, 100) == b""
    finally:
        for sock in (*idle, last):
            sock.close()


async def test_malformed_requests_are_one_warning_without_traceback(listening: Listening,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp logs what it cannot parse at ERROR with a traceback quoting the bytes: from anyone, at any rate."""
    garbage = (b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /?token=\x80 HTTP/1.1\r\n\r\n",
               b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        for data in garbage:
            reader, writer = await connect(listening.port, data)
            assert (await closed_by_server(reader))[:12] in (b"HTTP/1.0 400", b"HTTP/1.1 400", b"HTTP/1.1 431"), data
            writer.close()
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == len(garbage)
    assert {(r.levelname, r.getMessage(), r.exc_info) for r in records} <= {
        ("WARNING", f"malformed HTTP requests answered {code} ({kind})", None)
        for code in (400, 431) for kind in ("InvalidURLError", "BadHttpMessage", "InvalidHeader", "LineTooLong")}

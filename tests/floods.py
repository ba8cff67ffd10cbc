"""Connection floods against a listener on 127.0.0.1, kept up while a test (or bench/http_flood.py)
checks that the daemon still answers: `sockets` connections are in flight at every moment, each
sending `request` (headers that promise a body, and no body) and waiting for whatever the server
does; when the server answers or hangs up, the socket is opened again at once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from tests.daemon_proc import DaemonProc, WebChatClient, free_port
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    event_callback,
    signed_request_headers,
)
from tests.helpers import write_config


def slow_post(path: str, *, length: int = 100, headers: dict[str, str] | None = None) -> bytes:
    """A POST whose headers promise `length` bytes of body that never come."""
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def plausible_slack_headers() -> dict[str, str]:
    """What an attacker can send without the signing secret: Slack's shape, a fresh timestamp."""
    stamp = str(int(time.time()))
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": "v0="
        + hmac.new(b"not-the-secret", stamp.encode(), hashlib.sha256).hexdigest(),
    }


class Flood:
    """`async with Flood(port, request, sockets=300) as flood:` returns once every socket has sent
    request (`request()` makes each one); `answers` counts what the server did with each (the status
    line, "closed" or "reset")."""

    def __init__(self, port: int, request: Callable[[], bytes], *, sockets: int = 300) -> None:
        self.port = port
        self.request = request
        self.sockets = sockets
        self.answers: Counter[str] = Counter()
        self.sent = 0
        self._all_sent = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Self:
        self._tasks = [asyncio.ensure_future(self._keep_one()) for _ in range(self.sockets)]
        async with asyncio.timeout(60):
            await self._all_sent.wait()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _keep_one(self) -> None:
        while not self._stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                self.answers["refused at connect"] += 1
                await asyncio.sleep(0.05)
                continue
            try:
                writer.write(self.request())
                await writer.drain()
                self.sent += 1
                if self.sent >= self.sockets:
                    self._all_sent.set()
                line = await reader.readline()
                self.answers[line[:12].decode("latin-1") if line else "closed"] += 1
            except ConnectionError:
                self.answers["reset"] += 1
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()


REQUESTS: dict[str, Callable[[], bytes]] = {
    "web": lambda: slow_post("/"),  # the web chat's listener, unauthenticated
    "slack": lambda: slow_post("/slack/events", length=100_000, headers=plausible_slack_headers()),
}


class FloodProcess:
    """A Flood run by a child process (`python -m tests.floods KIND PORT SOCKETS`), so its own work
    takes nothing from the event loop that times the probes; `answers` once it has stopped."""

    def __init__(self, kind: str, port: int, sockets: int) -> None:
        self.args = (kind, str(port), str(sockets))
        self.answers: Counter[str] = Counter()
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Self:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.floods",
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self._proc.stdout is not None
        async with asyncio.timeout(90):
            ready = await self._proc.stdout.readline()
        assert ready == b"ready\n", ready
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert (
            self._proc is not None
            and self._proc.stdin is not None
            and self._proc.stdout is not None
        )
        self._proc.stdin.close()
        async with asyncio.timeout(60):
            counts = await self._proc.stdout.read()
            await self._proc.wait()
        self.answers = Counter(json.loads(counts or b"{}"))


async def _flood_until_stdin_ends(kind: str, port: int, sockets: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4 * sockets), hard), hard))
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    async with Flood(port, REQUESTS[kind], sockets=sockets) as flood:
        print("ready", flush=True)
        await stdin.read()
    print(json.dumps(flood.answers), flush=True)


# -------------------------------------------------------------------- against a real `gateway run`
@dataclass
class Probe:
    """One check made while the floods ran: what, whether it was answered right, how long."""

    what: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class FloodReport:
    probes: list[Probe] = field(default_factory=list)
    floods: dict[str, Counter[str]] = field(default_factory=dict)
    log_records: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    output: str = ""


async def flood_a_daemon(
    tmp: Path, llm: FakeLLM, slack: FakeSlack, *, sockets: int = 300, rounds: int = 5
) -> FloodReport:
    """`gateway run` with the web chat and Slack's Events API, each listener under a flood of
    `sockets` slow-body POSTs (web: unauthenticated; Slack: with a plausible signature, which only a
    body could disprove); meanwhile, `rounds` times: /healthz, a web chat message and a genuine
    Slack event, each timed."""
    home, web_port, slack_port = tmp / "home", free_port(), free_port()
    home.mkdir()
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=(
            f"web:\n  port: {web_port}\n"
            f"slack:\n  bot_token: '{BOT_TOKEN}'\n  signing_secret: '{SIGNING_SECRET}'\n"
            "  mode: http\n"
            f"  listen_port: {slack_port}\n  api_url: {slack.api_base_url}\n  allowed_users: [U1]\n"
        ),
    )
    report = FloodReport()
    daemon = DaemonProc(home)
    await daemon.start()
    try:
        await daemon.wait_ready()
        async with (
            FloodProcess("web", web_port, sockets) as web_flood,
            FloodProcess("slack", slack_port, sockets) as slack_flood,
            WebChatClient(web_port, home=home) as tab,
        ):
            for i in range(rounds):
                report.probes += [
                    await _healthz(web_port),
                    await _web_chat(tab, i),
                    await _slack_event(slack_port, slack, i),
                ]
        report.floods = {"web": web_flood.answers, "slack": slack_flood.answers}
        report.exit_code = await daemon.stop()
    finally:
        await daemon.kill()
    report.log_records, report.output = daemon.log_records(), daemon.output()
    return report


async def _healthz(port: int) -> Probe:
    started = time.monotonic()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as resp,
        ):
            return Probe(
                "/healthz", resp.status == 200, time.monotonic() - started, str(resp.status)
            )
    except aiohttp.ClientError as exc:
        return Probe("/healthz", False, time.monotonic() - started, repr(exc))


async def _web_chat(tab: WebChatClient, i: int) -> Probe:
    started = time.monotonic()
    ack = await tab.say(f"still there {i}?")
    reply = await tab.next("message")
    ok = ack["outcome"] == "accepted" and reply["text"] == f"echo: still there {i}? [users={i + 1}]"
    return Probe("web chat answer", ok, time.monotonic() - started, reply["text"])


async def _slack_event(port: int, slack: FakeSlack, i: int) -> Probe:
    event = {
        "type": "message",
        "channel_type": "im",
        "channel": "D1",
        "user": "U1",
        "text": f"slack still there {i}?",
        "ts": f"{int(time.time())}.{i + 1:06d}",
    }
    raw = json.dumps(event_callback(event, f"EvFlood{i}"))
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{port}/slack/events",
            data=raw,
            headers=signed_request_headers(SIGNING_SECRET, raw),
        ) as resp:
            acked = time.monotonic() - started
            if resp.status != 200:
                return Probe("slack event ack", False, acked, str(resp.status))
    posted = await slack.wait_for_post("D1", count=i + 1)
    return Probe(
        "slack event ack",
        posted.text.startswith(f"echo: slack still there {i}?"),
        acked,
        posted.text,
    )


if __name__ == "__main__":
    asyncio.run(_flood_until_stdin_ends(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))

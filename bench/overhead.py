"""What the gateway adds on top of the platform and the model: `gateway run` (a subprocess) with 1,000 active
sessions and 100,000 stored messages, a zero-latency fake model, and the web chat's WebSocket as the platform;
beside it, in the same run, a raw aiohttp echo (also a subprocess) doing the same hops with nothing in between.

Measured per message, all on this process's monotonic clock:
  in   = model request arrives  - platform frame sent         (inbound → LLM request)
  out  = reply frame arrives    - model response written      (LLM reply → platform send)
Latency runs one message at a time, rotating over the sessions; throughput runs `--clients` conversations at
once. Added = gateway - echo. Goals: p99 added ≤ 5 ms; throughput ≥ 50 % of the echo's.

The web chat is the platform here because it has no published send limits: Telegram's 30 messages/s per bot
would measure the rate limiter, not overhead.

Also printed: the daemon's and the echo's CPU time per message over the throughput run (user + system, from
/proc), which moves much less than msg/s when other jobs share the machine. The gateway answers whole here, as the
echo does; then the streaming figure (bench/streaming.py): the model's first token → the first visible text on the
web chat and on Telegram (a fake Bot API), p50/p99, and platform calls per answer.

Run:  PYTHONPATH=. python bench/overhead.py [--sessions 1000] [--history 100] [--latency 2000]
      [--clients 50] [--per-client 40] [--model-client native|sdk] [--keep DIR] [--profile DIR]
      [--stream-answers 100] [--stream-pieces 12] [--stream-every 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.store.database import Store
from tests.daemon_proc import NotifySocket, free_port
from tests.fakes.llm import FakeLLM

GATEWAY = str(Path(sys.executable).parent / "gateway")
PY_SPY = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
SYSTEM = "You are a helpful assistant on a chat platform. " * 150  # ~7 KB, a realistic stored prompt
FILLER = "a sentence of ordinary chat history, neither short nor long, about plans for the weekend"


# ------------------------------------------------------------------------------------------ the model
class TimedLLM(FakeLLM):
    """The fake model, answering at once; notes when each tagged request arrived and was answered."""

    def __init__(self) -> None:
        super().__init__(validate=False)
        self.times: dict[str, tuple[float, float]] = {}

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        body = await request.json()
        response = await super()._anthropic(request)
        self.times[_tag(body)] = (arrived, time.monotonic())
        self.calls.clear()  # the record would grow by the whole history per request
        self.usages.clear()
        return response


def _tag(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content
                                                            if b.get("type") == "text")
    return text.split()[0] if text else ""


# ------------------------------------------------------------------------------------------ the two servers
def seed(home: Path, sessions: int, history: int, platform: str = "web") -> None:
    """Active sessions (one per chat `client(i)`, or chat id i + 1 on Telegram) with a stored prompt and
    `history` messages each, written straight to SQLite."""
    Store(home / "state.db").close()  # migrations
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, key, platform, chat_type, chat_id, user_id, created_at, last_user_at, model,"
            " provider, system_prompt, prompt_built_at) VALUES (?, ?, ?, 'dm', ?, ?, ?, ?, 'claude-test',"
            " 'anthropic', ?, ?)",
            [(i + 1, f"{platform}:dm:{chat}", platform, chat, chat, now, now, SYSTEM, now)
             for i, chat in ((i, client(i) if platform == "web" else str(i + 1)) for i in range(sessions))])
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            [(s + 1, "user" if m % 2 == 0 else "assistant", f"{FILLER} #{m}", now)
             for s in range(sessions) for m in range(history)])
    conn.close()


def client(i: int) -> str:
    return f"c{i:04d}"

BENCH_WEB_TOKEN = "bench-web-token"  # the web chat's login secret (the echo baseline ignores it)


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def start_gateway(home: Path, llm: FakeLLM, extra: str = "", client: str = "native",
                        streaming: str = "off") -> Server:
    port = free_port()
    (home / "config.yaml").write_text(
        f"model:\n  provider: anthropic\n  name: claude-test\n  base_url: {llm.base_url}\n  api_key: k\n"
        f"  max_retries: 0\n  client: {client}\nweb:\n  port: {port}\n  auth_token: {BENCH_WEB_TOKEN}\nsession_reset:\n  mode: none\ndaemon:\n  watchdog: false\n  max_connections: 4000\n"
        # The echo answers whole: so does the gateway here (the streaming figure is measured on its own).
        + f"streaming:\n  mode: {streaming}\n" + extra, encoding="utf-8")
    notify = NotifySocket(home.parent / "gw-notify.sock")
    log = home.parent / "gateway.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home.parent), "NOTIFY_SOCKET": str(notify.path),
           **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})}  # the code under test
    with log.open("wb") as out:
        proc = subprocess.Popen([GATEWAY, "--home", str(home), "--log-format", "json", "run"], env=env,  # noqa: ASYNC220
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        await notify.wait_for("READY=1", 120)
    finally:
        notify.close()
    return Server("gateway", port, proc, log)


async def start_echo(home: Path, llm: FakeLLM, sessions: int, history: int) -> Server:
    port = free_port()
    log = home.parent / "echo.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--serve-echo", str(port), llm.base_url, str(sessions),  # noqa: ASYNC220
                                 str(history)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            try:
                async with http.get(f"http://127.0.0.1:{port}/ready") as resp:
                    if resp.status == 200:
                        return Server("echo", port, proc, log)
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"the echo did not start; see {log}")


def serve_echo(port: int, llm_url: str, sessions: int, history: int) -> None:
    """The floor: WebSocket in, one plain HTTP request to the model with the same prompt and history, frame out."""
    histories = {client(i): [{"role": "user" if m % 2 == 0 else "assistant", "content": f"{FILLER} #{m}"}
                             for m in range(history)] for i in range(sessions)}

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def socket(request: web.Request) -> web.WebSocketResponse:
        http: aiohttp.ClientSession = request.app["http"]
        name = request.query["client"]
        convo = histories.setdefault(name, [])
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            text = json.loads(msg.data)["text"]
            await ws.send_str(json.dumps({"type": "ack"}))
            convo.append({"role": "user", "content": text})
            body = {"model": "claude-test", "max_tokens": 4096, "system": SYSTEM, "messages": convo}
            async with http.post(f"{llm_url}/v1/messages", json=body,
                                 headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}) as resp:
                answer = "".join(b["text"] for b in (await resp.json())["content"] if b["type"] == "text")
            convo.append({"role": "assistant", "content": answer})
            await ws.send_str(json.dumps({"type": "message", "kind": "reply", "text": answer}))
        return ws

    async def on_startup(app: web.Application) -> None:
        app["http"] = aiohttp.ClientSession()

    async def on_cleanup(app: web.Application) -> None:
        await app["http"].close()

    app = web.Application()
    app.router.add_get("/ready", ready)
    app.router.add_get("/ws", socket)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ------------------------------------------------------------------------------------------ the platform side
@dataclass
class Sample:
    sent: float
    received: float
    llm_in: float = 0.0
    llm_out: float = 0.0

    @property
    def inbound(self) -> float:
        return self.llm_in - self.sent

    @property
    def outbound(self) -> float:
        return self.received - self.llm_out


@dataclass
class Result:
    latency: list[Sample] = field(default_factory=list)
    throughput: float = 0.0
    cpu_per_message: float | None = None  # the server's CPU seconds (user + system) per message, throughput run


class Tab:
    """One chat: a WebSocket with a fixed client id (the session)."""

    def __init__(self, http: aiohttp.ClientSession, port: int, name: str) -> None:
        self.http, self.port, self.name = http, port, name
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def say(self, tag: str) -> Sample:
        if self.ws is None:
            url = f"ws://127.0.0.1:{self.port}/ws?client={self.name}&token={BENCH_WEB_TOKEN}"
            self.ws = await self.http.ws_connect(url)
        sent = time.monotonic()
        await self.ws.send_str(json.dumps({"text": f"{tag} how is the weather?"}))
        while True:
            msg = await self.ws.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"{self.name}: socket closed ({msg.type})")
            data = json.loads(msg.data)
            if data.get("type") == "message":
                return Sample(sent, time.monotonic())
            if data.get("type") == "error":
                raise RuntimeError(f"{self.name}: {data}")

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


async def measure(server: Server, llm: TimedLLM, *, sessions: int, latency_n: int, clients: int,
                  per_client: int, profile_to: Path | None = None) -> Result:
    result = Result()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:  # one socket per tab
        tabs = [Tab(http, server.port, client(i)) for i in range(sessions)]
        for n in range(min(50, latency_n)):  # warm-up: connections, caches, the model client
            await tabs[n % sessions].say(f"{server.name}-w{n}")
        for n in range(latency_n):
            tag = f"{server.name}-l{n}"
            sample = await tabs[(n * 7) % sessions].say(tag)  # a stride, so neighbours are not reused
            sample.llm_in, sample.llm_out = llm.times.pop(tag)
            result.latency.append(sample)
        for tab in tabs:
            await tab.close()
        busy = [Tab(http, server.port, client(i)) for i in range(clients)]

        async def converse(tab: Tab, i: int) -> None:
            for n in range(per_client):
                await tab.say(f"{server.name}-t{i}-{n}")

        spy = profile(server, profile_to) if profile_to else None
        cpu = cpu_seconds(server.proc.pid)
        started = time.monotonic()
        await asyncio.gather(*(converse(tab, i) for i, tab in enumerate(busy)))
        result.throughput = clients * per_client / (time.monotonic() - started)
        if cpu is not None and (after := cpu_seconds(server.proc.pid)) is not None:
            result.cpu_per_message = (after - cpu) / (clients * per_client)
        for tab in busy:
            await tab.close()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
    llm.times.clear()
    return result


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process so far (Linux /proc); steadier than throughput on a shared machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(server: Server, into: Path) -> subprocess.Popen[bytes]:
    """Sample the server with py-spy (not a dependency: `pip install py-spy`) during the throughput run."""
    return subprocess.Popen([PY_SPY, "record", "--pid", str(server.proc.pid), "--format", "raw", "--rate", "250",
                             "--output", str(into / f"{server.name}.folded")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ------------------------------------------------------------------------------------------ report
def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.2f} ms"


def report(gateway: Result, echo: Result, args: argparse.Namespace, seed_s: float) -> str:
    lines = [(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} "
             f"(1 min), Python {platform.python_version()}"),
             (f"seeded {args.sessions:,} sessions x {args.history} messages = {args.sessions * args.history:,} "
             f"stored messages in {seed_s:.1f}s; latency over {args.latency:,} messages, throughput with "
             f"{args.clients} conversations x {args.per_client} messages"), "",
             (f"{'ms':<28}{'gateway p50':>12}{'p99':>8}{'max':>8}{'echo p50':>10}{'p99':>8}{'added p50':>11}"
             f"{'p99':>8}")]
    rows: tuple[tuple[str, Callable[[Sample], float]], ...] = (
        ("inbound -> LLM request", lambda s: s.inbound), ("LLM reply -> platform send", lambda s: s.outbound),
        ("both hops", lambda s: s.inbound + s.outbound))
    for label, value in rows:
        g = [value(s) for s in gateway.latency]
        e = [value(s) for s in echo.latency]
        lines.append(f"{label:<28}{pct(g, .5):>12.2f}{pct(g, .99):>8.2f}{max(g) * 1000:>8.1f}{pct(e, .5):>10.2f}"
                     f"{pct(e, .99):>8.2f}{pct(g, .5) - pct(e, .5):>11.2f}{pct(g, .99) - pct(e, .99):>8.2f}")
    lines += ["", (f"throughput: gateway {gateway.throughput:.0f} msg/s, echo {echo.throughput:.0f} msg/s, "
              f"ratio {gateway.throughput / echo.throughput:.2f} (goal >= 0.50)"),
              (f"CPU per message in the throughput run: gateway {_ms(gateway.cpu_per_message)}, echo "
              f"{_ms(echo.cpu_per_message)}"),
              (f"mean round trip at one message at a time: gateway "
              f"{statistics.mean(s.received - s.sent for s in gateway.latency) * 1000:.2f} ms, echo "
              f"{statistics.mean(s.received - s.sent for s in echo.latency) * 1000:.2f} ms")]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gw-overhead-") as tmp:
        root = args.keep or Path(tmp)
        home = root / "home"
        home.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        seed(home, args.sessions, args.history)
        seed_s = time.monotonic() - started
        async with TimedLLM() as llm:
            gateway = await start_gateway(home, llm, client=args.model_client)
            try:
                g = await measure(gateway, llm, sessions=args.sessions, latency_n=args.latency, clients=args.clients,
                                  per_client=args.per_client, profile_to=args.profile)
            finally:
                gateway.stop()
            echo = await start_echo(home, llm, args.sessions, args.history)
            try:
                e = await measure(echo, llm, sessions=args.sessions, latency_n=args.latency, clients=args.clients,
                                  per_client=args.per_client)
            finally:
                echo.stop()
        print(report(g, e, args, seed_s))
        if args.answers:  # the streaming figure: first token → first visible text, calls per answer
            print()
            from bench import streaming as stream_bench  # imported here: it imports this module
            print(await stream_bench.measure(root, args))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-echo":
        serve_echo(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--history", type=int, default=100, help="stored messages per session")
    parser.add_argument("--latency", type=int, default=2000, help="messages sent one at a time")
    parser.add_argument("--clients", type=int, default=50, help="conversations at once for throughput")
    parser.add_argument("--per-client", type=int, default=40)
    parser.add_argument("--model-client", choices=["native", "sdk"], default="native",
                        help="the daemon's model.client: its own aiohttp transport or the vendor SDK")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it (database, logs)")
    parser.add_argument("--profile", type=Path, help="write py-spy samples of the gateway's throughput run here")
    from bench import streaming as stream_bench
    stream_bench.arguments(parser, prefix="stream-")
    asyncio.run(main(parser.parse_args()))

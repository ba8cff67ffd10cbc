"""What the gateway adds on top of the platform and the model: `gateway run` (a subprocess) with
1,000 active sessions and 100,000 stored messages, a zero-latency fake model, and the web chat's
WebSocket as the platform; beside it, in the same run, a raw aiohttp echo (also a subprocess) doing
the same hops with nothing in between.

Measured per message, all on this process's monotonic clock:
  in   = model request arrives  - platform frame sent         (inbound → LLM request)
  out  = reply frame arrives    - model response written      (LLM reply → platform send)
Latency runs one message at a time, rotating over the sessions; added = gateway - echo, goal
p99 ≤ 5 ms.

Throughput runs in rounds, `--clients` conversations at once: a gateway round, then an echo round,
the order swapped every other round, so both see the same machine (two shared cores move msg/s by
half from one minute to the next). Each pair gives a ratio (gateway msg/s / echo msg/s); the median
and the spread of the ratios are the figure, goal median ≥ 0.6. Several `--clients` values run one
after the other in the same run. Each round talks to the next `--clients` sessions (round-robin),
so a history grows by `--per-client` turns a round at most.

`--compare DIR` adds another tree's daemon (a checkout with its own `.venv`, e.g. `git worktree add
/tmp/base COMMIT`) to every round: before and after measured under the same load. Its home is
seeded by its own code.

Also printed: the CPU time per message of each server over its rounds (user + system, from /proc),
which moves much less than msg/s when other jobs share the machine. The gateway answers whole here,
as the echo does; then the streaming figure (bench/streaming.py): the model's first token → the
first visible text on the web chat and on Telegram (a fake Bot API), p50/p99, and platform calls
per answer.

The web chat is the platform here because it has no published send limits: Telegram's 30 messages/s
per bot would measure the rate limiter, not overhead.

Run:  PYTHONPATH=. python bench/overhead.py [--sessions 1000] [--history 100] [--latency 2000]
      [--clients 100 200] [--per-client 40] [--rounds 6] [--compare DIR] [--model-client native|sdk]
      [--keep DIR] [--profile DIR] [--stream-answers 100] [--stream-pieces 12] [--stream-every 0.1]
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

from tests.daemon_proc import NotifySocket, free_port
from tests.fakes.llm import FakeLLM

GATEWAY = str(Path(sys.executable).parent / "gateway")
PY_SPY = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
# ~7 KB, a realistic stored prompt
SYSTEM = "You are a helpful assistant on a chat platform. " * 150
FILLER = "a sentence of ordinary chat history, neither short nor long, about plans for the weekend"
GOAL_RATIO = 0.6


# ---------------------------------------------------------------------------------------- the model
class TimedLLM(FakeLLM):
    """The fake model, answering at once; notes when
    each tagged request arrived and was answered."""

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
    text = (
        content
        if isinstance(content, str)
        else "".join(b.get("text", "") for b in content if b.get("type") == "text")
    )
    return text.split()[0] if text else ""


# ---------------------------------------------------------------------------------- the two servers
def seed(
    home: Path, sessions: int, history: int, platform: str = "web", tree: Path | None = None
) -> None:
    """Active sessions (one per chat `client(i)`, or chat id i + 1 on Telegram) with a stored prompt
    and `history` messages each, written straight to SQLite; the schema made by `tree`'s own code
    (default: this one)."""
    python, path = _interpreter(tree)
    migrate = (
        "import sys; from gateway.store.database import Store;"
        " Store(__import__('pathlib').Path(sys.argv[1]))"
    )
    subprocess.run(
        [python, "-c", f"{migrate}.close()", str(home / "state.db")],
        check=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, key, platform, chat_type, "
            "chat_id, user_id, created_at, last_user_at, model,"
            " provider, system_prompt, prompt_built_at) "
            "VALUES (?, ?, ?, 'dm', ?, ?, ?, ?, 'claude-test',"
            " 'anthropic', ?, ?)",
            [
                (i + 1, f"{platform}:dm:{chat}", platform, chat, chat, now, now, SYSTEM, now)
                for i, chat in (
                    (i, client(i) if platform == "web" else str(i + 1)) for i in range(sessions)
                )
            ],
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            [
                (s + 1, "user" if m % 2 == 0 else "assistant", f"{FILLER} #{m}", now)
                for s in range(sessions)
                for m in range(history)
            ],
        )
    conn.close()


def client(i: int) -> str:
    return f"c{i:04d}"


def _interpreter(tree: Path | None) -> tuple[str, str]:
    """(python, PYTHONPATH) of a tree: this one's, or a checkout with its own .venv."""
    if tree is None:
        return sys.executable, str(Path(__file__).resolve().parent.parent)
    return str(tree / ".venv" / "bin" / "python"), str(tree)


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


async def start_gateway(
    home: Path,
    llm: FakeLLM,
    extra: str = "",
    client: str = "native",
    streaming: str = "off",
    tree: Path | None = None,
    name: str = "gateway",
) -> Server:
    """`gateway run` of this tree (or of `tree`, a checkout with its own .venv) in `home`."""
    port = free_port()
    (home / "config.yaml").write_text(
        "model:\n  provider: anthropic\n  name: claude-test\n "
        f" base_url: {llm.base_url}\n  api_key: k\n"
        f"  max_retries: 0\n  client: {client}\nweb:\n  port: {port}\n "
        f" auth_token: {BENCH_WEB_TOKEN}\nsession_reset:\n  mode: "
        "none\ndaemon:\n  watchdog: false\n  max_connections: 4000\n"
        # The echo answers whole: so does the gateway here
        # (the streaming figure is measured on its own).
        + f"streaming:\n  mode: {streaming}\n"
        + extra,
        encoding="utf-8",
    )
    notify = NotifySocket(home.parent / f"{name}-notify.sock")
    log = home.parent / f"{name}.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home.parent),
        "NOTIFY_SOCKET": str(notify.path),
    }
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    elif "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the code under test
    command = str(tree / ".venv" / "bin" / "gateway") if tree is not None else GATEWAY
    with log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: ASYNC220
            [command, "--home", str(home), "--log-format", "json", "run"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        await notify.wait_for("READY=1", 120)
    finally:
        notify.close()
    return Server(name, port, proc, log)


async def start_echo(home: Path, llm: FakeLLM, sessions: int, history: int) -> Server:
    port = free_port()
    log = home.parent / "echo.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: ASYNC220
            [
                sys.executable,
                __file__,
                "--serve-echo",
                str(port),
                llm.base_url,
                str(sessions),
                str(history),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
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
    """The floor: WebSocket in, one plain HTTP request to the model with the same prompt and
    history, frame out."""
    histories = {
        client(i): [
            {"role": "user" if m % 2 == 0 else "assistant", "content": f"{FILLER} #{m}"}
            for m in range(history)
        ]
        for i in range(sessions)
    }

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
            async with http.post(
                f"{llm_url}/v1/messages",
                json=body,
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            ) as resp:
                answer = "".join(
                    b["text"] for b in (await resp.json())["content"] if b["type"] == "text"
                )
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


# -------------------------------------------------------------------------------- the platform side
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
class Round:
    """One throughput round of one server."""

    msgs_per_s: float
    cpu_per_message: float | None  # the server's CPU seconds (user + system) per message
    load: float  # the 1-minute load average as the round ended


@dataclass
class Result:
    name: str
    latency: list[Sample] = field(default_factory=list)
    rounds: dict[int, list[Round]] = field(default_factory=dict)  # conversations at once → rounds


class Tab:
    """One chat: a WebSocket with a fixed client id (the session)."""

    def __init__(self, http: aiohttp.ClientSession, port: int, name: str) -> None:
        self.http, self.port, self.name = http, port, name
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def connect(self) -> aiohttp.ClientWebSocketResponse:
        if self.ws is None:
            url = f"ws://127.0.0.1:{self.port}/ws?client={self.name}&token={BENCH_WEB_TOKEN}"
            self.ws = await self.http.ws_connect(url)
        return self.ws

    async def say(self, tag: str) -> Sample:
        ws = await self.connect()
        sent = time.monotonic()
        await ws.send_str(json.dumps({"text": f"{tag} how is the weather?"}))
        while True:
            msg = await ws.receive()
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


async def latency_block(
    server: Server,
    llm: TimedLLM,
    http: aiohttp.ClientSession,
    *,
    sessions: int,
    first: int,
    count: int,
) -> list[Sample]:
    """`count` messages one at a time, striding over the sessions so neighbours are not reused."""
    found = []
    tabs: dict[int, Tab] = {}
    for n in range(first, first + count):
        chat = (n * 7) % sessions
        tab = tabs.setdefault(chat, Tab(http, server.port, client(chat)))
        tag = f"{server.name}-l{n}"
        sample = await tab.say(tag)
        sample.llm_in, sample.llm_out = llm.times.pop(tag)
        found.append(sample)
    for tab in tabs.values():
        await tab.close()
    return found


async def throughput_round(
    server: Server, http: aiohttp.ClientSession, *, chats: Sequence[int], per_client: int, tag: str
) -> Round:
    """`len(chats)` conversations at once, `per_client` messages each, each awaiting its answer."""
    tabs = [Tab(http, server.port, client(i)) for i in chats]
    await asyncio.gather(*(tab.connect() for tab in tabs))  # not timed: a chat's socket stays open

    async def converse(tab: Tab, i: int) -> None:
        for n in range(per_client):
            await tab.say(f"{server.name}-{tag}-{i}-{n}")

    cpu = cpu_seconds(server.proc.pid)
    started = time.monotonic()
    await asyncio.gather(*(converse(tab, i) for i, tab in enumerate(tabs)))
    elapsed = time.monotonic() - started
    after = cpu_seconds(server.proc.pid)
    for tab in tabs:
        await tab.close()
    messages = len(tabs) * per_client
    per_message = (after - cpu) / messages if cpu is not None and after is not None else None
    return Round(messages / elapsed, per_message, os.getloadavg()[0])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process so far (Linux /proc);
    steadier than throughput on a shared machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(server: Server, into: Path) -> subprocess.Popen[bytes]:
    """Sample the server with py-spy (not a dependency: `pip install py-spy`) over the run's
    throughput rounds; it sleeps through the other servers' rounds, and py-spy leaves idle samples
    out."""
    return subprocess.Popen(
        [
            PY_SPY,
            "record",
            "--pid",
            str(server.proc.pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--output",
            str(into / f"{server.name}.folded"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def measure(
    servers: Sequence[Server], llm: TimedLLM, args: argparse.Namespace
) -> list[Result]:
    """Latency in blocks and throughput in rounds, the servers taking turns (the order reversed
    every other turn)."""
    results = [Result(s.name) for s in servers]
    connector = aiohttp.TCPConnector(limit=0)  # one socket per tab
    async with aiohttp.ClientSession(connector=connector) as http:
        for server in servers:  # warm-up: connections, caches, the model client
            await latency_block(server, llm, http, sessions=args.sessions, first=-50, count=50)
        blocks = 4
        for b in range(blocks):
            for server, result in _turns(servers, results, b):
                first = b * args.latency // blocks
                count = (b + 1) * args.latency // blocks - first
                result.latency += await latency_block(
                    server, llm, http, sessions=args.sessions, first=first, count=count
                )
        spies = [profile(s, args.profile) for s in servers if s.name == "gateway" and args.profile]
        offset = 0
        for clients in args.clients:
            for server in servers:  # unmeasured: this many sockets, the sessions' histories read
                await throughput_round(
                    server,
                    http,
                    chats=_window(offset, clients, args.sessions),
                    per_client=2,
                    tag=f"warm{clients}",
                )
            for r in range(args.rounds):
                chats = _window(offset, clients, args.sessions)
                offset += clients
                for server, result in _turns(servers, results, r):
                    done = await throughput_round(
                        server, http, chats=chats, per_client=args.per_client, tag=f"c{clients}r{r}"
                    )
                    result.rounds.setdefault(clients, []).append(done)
                    llm.times.clear()
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
    llm.times.clear()
    return results


def _turns(
    servers: Sequence[Server], results: Sequence[Result], n: int
) -> list[tuple[Server, Result]]:
    pairs = list(zip(servers, results, strict=True))
    return pairs if n % 2 == 0 else pairs[::-1]


def _window(offset: int, size: int, sessions: int) -> list[int]:
    return [(offset + i) % sessions for i in range(size)]


# ------------------------------------------------------------------------------------------ report
def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.2f}"


def report(results: Sequence[Result], args: argparse.Namespace, seed_s: float) -> str:
    *gateways, echo = results
    lines = [
        (
            f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} "
            f"(1 min), Python {platform.python_version()}"
        ),
        (
            f"seeded {args.sessions:,} sessions x {args.history} "
            f"messages = {args.sessions * args.history:,} "
            f"stored messages in {seed_s:.1f}s; latency over {args.latency:,} messages;"
            f" throughput in {args.rounds} rounds per server and concurrency, {args.per_client}"
            " messages per conversation"
        ),
    ]
    rows: tuple[tuple[str, Callable[[Sample], float]], ...] = (
        ("inbound -> LLM request", lambda s: s.inbound),
        ("LLM reply -> platform send", lambda s: s.outbound),
        ("both hops", lambda s: s.inbound + s.outbound),
    )
    for gateway in gateways:
        lines += [
            "",
            (
                f"{gateway.name + ', ms':<28}{'p50':>8}{'p99':>8}{'max':>8}{'echo p50':>10}"
                f"{'p99':>8}{'added p50':>11}{'p99':>8}"
            ),
        ]
        for label, value in rows:
            g = [value(s) for s in gateway.latency]
            e = [value(s) for s in echo.latency]
            lines.append(
                f"{label:<28}{pct(g, 0.5):>8.2f}{pct(g, 0.99):>8.2f}{max(g) * 1000:>8.1f}"
                f"{pct(e, 0.5):>10.2f}{pct(e, 0.99):>8.2f}{pct(g, 0.5) - pct(e, 0.5):>11.2f}"
                f"{pct(g, 0.99) - pct(e, 0.99):>8.2f}"
            )
    lines.append("")
    lines.append(f"throughput (goal: median ratio >= {GOAL_RATIO})")
    lines.append(
        f"{'server':<12}{'at once':>8}{'msg/s median':>14}{'ratio median':>14}"
        f"{'ratio range':>14}{'CPU ms/msg':>12}{'load':>11}"
    )
    for clients in args.clients:
        e_rounds = echo.rounds[clients]
        for result in results:
            mine = result.rounds[clients]
            cpu = [r.cpu_per_message for r in mine if r.cpu_per_message is not None]
            loads = [r.load for r in mine]
            ratio = "" if result is echo else _ratios(mine, e_rounds)
            speed = statistics.median(r.msgs_per_s for r in mine)
            cpu_ms = _ms(statistics.median(cpu) if cpu else None)
            lines.append(
                f"{result.name:<12}{clients:>8}{speed:>14.0f}"
                f"{ratio}{cpu_ms:>{12 if ratio else 40}}"
                f"{min(loads):>6.1f}-{max(loads):<4.1f}"
            )
        for gateway in gateways:
            pairs = zip(gateway.rounds[clients], e_rounds, strict=True)
            per = " ".join(f"{g.msgs_per_s / e.msgs_per_s:.2f}" for g, e in pairs)
            lines.append(f"  {gateway.name} / echo by round at {clients}: {per}")
    return "\n".join(lines)


def _ratios(mine: Sequence[Round], echo: Sequence[Round]) -> str:
    ratios = [g.msgs_per_s / e.msgs_per_s for g, e in zip(mine, echo, strict=True)]
    return f"{statistics.median(ratios):>14.2f}{f'{min(ratios):.2f}-{max(ratios):.2f}':>14}"


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gw-overhead-") as tmp:
        root = args.keep or Path(tmp)
        trees: list[tuple[str, Path | None]] = [("gateway", None)]
        trees += [(f"{tree.name}", tree) for tree in args.compare]
        started = time.monotonic()
        homes = []
        for name, tree in trees:
            home = root / name / "home"
            home.mkdir(parents=True, exist_ok=True)
            seed(home, args.sessions, args.history, tree=tree)
            homes.append(home)
        seed_s = (time.monotonic() - started) / len(trees)
        servers: list[Server] = []
        async with TimedLLM() as llm:
            try:
                for (name, tree), home in zip(trees, homes, strict=True):
                    servers.append(
                        await start_gateway(
                            home, llm, client=args.model_client, tree=tree, name=name
                        )
                    )
                echo_home = root / "gateway" / "home"
                servers.append(await start_echo(echo_home, llm, args.sessions, args.history))
                results = await measure(servers, llm, args)
            finally:
                for server in servers:
                    server.stop()
        print(report(results, args, seed_s))
        if args.answers:  # the streaming figure: first token → first visible text, calls per answer
            print()
            from bench import streaming as stream_bench  # imported here: it imports this module

            print(await stream_bench.measure(root, args))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-echo":
        serve_echo(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--history", type=int, default=100, help="stored messages per session")
    parser.add_argument(
        "--latency", type=int, default=2000, help="messages sent one at a time, per server"
    )
    parser.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=[100, 200],
        help="conversations at once in the throughput rounds (one or more values)",
    )
    parser.add_argument(
        "--per-client", type=int, default=40, help="messages per conversation in a round"
    )
    parser.add_argument(
        "--rounds", type=int, default=6, help="throughput rounds per server and --clients value"
    )
    parser.add_argument(
        "--compare",
        type=Path,
        action="append",
        default=[],
        help="another tree (a checkout with its own .venv) run in the same rounds",
    )
    parser.add_argument(
        "--model-client",
        choices=["native", "sdk"],
        default="native",
        help="the daemon's model.client: its own aiohttp transport or the vendor SDK",
    )
    parser.add_argument(
        "--keep", type=Path, help="run in this directory and keep it (database, logs)"
    )
    parser.add_argument(
        "--profile", type=Path, help="write py-spy samples of the gateway's throughput rounds here"
    )
    from bench import streaming as stream_bench

    stream_bench.arguments(parser, prefix="stream-")
    asyncio.run(main(parser.parse_args()))

"""Memory of a long-running gateway: `gateway run` (a subprocess, Telegram and the web chat
configured) with 10,000 sessions, each with a stored prompt and 20 messages, every one of them
touched by a real turn; then a soak of steady traffic, sampling the daemon's RSS. Goals: ≤ 120 MB
after the sessions; < 5 % growth over the soak.

The sessions are seeded in SQLite with 18 messages, then each gets one real turn (its 19th and 20th)
from FakeTelegram (or the web chat), so every per-session path (lanes, locks, outbox, rate-limit
windows, lifecycle deadlines) has run. Telegram traffic stays under the bot's 30 messages a second,
so creating 10,000 takes minutes.

Where the MB at start go is measured beside it, each step in a fresh interpreter with the daemon's
config: the bare interpreter, the core (`gateway.cli.main` and `gateway.ops.daemon` with their
libraries, the config loaded), the model client as configured, and each configured platform's
adapter module (its library) on top of the core.

Run:  PYTHONPATH=. python bench/memory.py [--sessions 10000] [--soak-seconds 1800] [--rate 20]
      PYTHONPATH=. python bench/memory.py --quick      (2,000 sessions, a 2-minute soak)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.overhead import Server, Tab, client, seed, start_gateway
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import TOKEN, FakeTelegram


class QuietLLM(FakeLLM):
    """The fake model without its request record (it
    would hold every request body for the whole soak)."""

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        response = await super()._anthropic(request)
        self.calls.clear()
        self.usages.clear()
        return response


# One step of the breakdown, run as `python -c STEP step home`; prints its own RSS in MB.
STEP = """
import importlib, os, sys
from pathlib import Path
step, home = sys.argv[1], Path(sys.argv[2])
if step != "python":
    import gateway.cli.main, gateway.ops.daemon
    from gateway.config.settings import load_config
    config = load_config(home)
if step == "model":
    from gateway.llm.factory import build_llm
    build_llm(config, dict(os.environ), probe_ollama=False)
elif step.startswith("adapters."):
    importlib.import_module(step)
status = Path("/proc/self/status").read_text().splitlines()
print(next(int(l.split()[1]) for l in status if l.startswith("VmRSS:")) / 1024)
"""
ADAPTER_MODULES = {
    "web": "adapters.webchat",
    "telegram": "adapters.telegram.adapter",
    "discord": "adapters.discord.adapter",
    "slack": "adapters.slack.adapter",
}


def step_mb(step: str, home: Path) -> float:
    # as the daemon gets it
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home.parent)}
    done = subprocess.run(
        [sys.executable, "-c", STEP, step, str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return float(done.stdout.split()[-1])


def breakdown(home: Path, platforms: list[str]) -> list[tuple[str, float]]:
    """(what, MB) for the interpreter, the core on top of it, then the model client and each adapter
    on the core."""
    python = step_mb("python", home)
    core = step_mb("core", home)
    parts = [
        ("python", python),
        ("core", core - python),
        ("model client", step_mb("model", home) - core),
    ]
    parts += [(name, step_mb(ADAPTER_MODULES[name], home) - core) for name in platforms]
    return parts


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def touch_all(server: Server, sessions: int, concurrency: int) -> float:
    """One turn in every session, `concurrency` at a time; returns the seconds it took."""
    started = time.monotonic()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(sessions):
        queue.put_nowait(i)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                tab = Tab(http, server.port, client(i))
                await tab.say(f"touch-{i}")
                await tab.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.monotonic() - started


async def touch_all_telegram(tg: FakeTelegram, sessions: int, concurrency: int) -> float:
    """One Telegram turn in every session (chat ids
    1..N), `concurrency` chats in flight at a time."""
    started = time.monotonic()
    for first in range(0, sessions, concurrency):
        chats = range(first + 1, min(sessions, first + concurrency) + 1)
        for chat in chats:
            tg.inject_message(chat, f"touch-{chat}", user_id=chat, username=None)
        await tg.wait_until(_sent_at_least(tg, chats[-1]), 120)
    return time.monotonic() - started


def _sent_at_least(tg: FakeTelegram, count: int) -> Callable[[], bool]:
    return lambda: len(tg.sent_messages()) >= count


async def soak_telegram(
    server: Server, tg: FakeTelegram, sessions: int, seconds: float, rate: float, every: float
) -> list[tuple[float, float]]:
    """Steady Telegram traffic at `rate` messages a second (under the bot's 30/s), RSS sampled every
    `every` s."""
    samples: list[tuple[float, float]] = []
    base = len(tg.sent_messages())
    started = next_sample = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - started < seconds:
        if now >= next_sample:
            samples.append((now - started, rss_mb(server.proc.pid)))
            next_sample += every
        for _ in range(max(int((now - started) * rate) - sent, 0)):
            chat = (sent * 7919) % sessions + 1
            tg.inject_message(chat, f"soak-{sent}", user_id=chat, username=None)
            sent += 1
        await asyncio.sleep(max(0.0, 1.0 / rate - (time.monotonic() - now)))
    # no backlog left behind
    await tg.wait_until(lambda: len(tg.sent_messages()) >= base + sent, 300)
    samples.append((time.monotonic() - started, rss_mb(server.proc.pid)))
    return samples


async def soak(
    server: Server, sessions: int, seconds: float, rate: float, every: float
) -> list[tuple[float, float]]:
    """Steady traffic: `rate` messages a second, each to the next session in turn; RSS sampled every
    `every` s."""
    samples: list[tuple[float, float]] = []
    started = time.monotonic()
    sent = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        tabs: dict[int, Tab] = {}
        next_sample = started
        while (now := time.monotonic()) - started < seconds:
            if now >= next_sample:
                samples.append((now - started, rss_mb(server.proc.pid)))
                next_sample += every
            due = int((now - started) * rate) - sent
            batch = []
            for _ in range(max(due, 0)):
                # a prime stride: every session in turn, neighbours apart
                i = (sent * 7919) % sessions
                tab = tabs.get(i) or Tab(http, server.port, client(i))
                tabs[i] = tab
                batch.append(tab.say(f"soak-{sent}"))
                sent += 1
            if batch:
                await asyncio.gather(*batch)
            if len(tabs) > 200:
                # a few hundred open tabs at most, like real browsers coming and going
                for tab in list(tabs.values())[:100]:
                    await tab.close()
                tabs = dict(list(tabs.items())[100:])
            await asyncio.sleep(max(0.0, 1.0 / rate - (time.monotonic() - now)))
        samples.append((time.monotonic() - started, rss_mb(server.proc.pid)))
        for tab in tabs.values():
            await tab.close()
    return samples


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gw-memory-") as tmp:
        root = args.keep or Path(tmp)
        home = root / "home"
        home.mkdir(parents=True, exist_ok=True)
        seed(home, args.sessions, 18, args.platform)
        async with QuietLLM(validate=False) as llm, FakeTelegram() as tg:
            users = ", ".join(str(i + 1) for i in range(args.sessions))
            server = await start_gateway(
                home,
                llm,
                extra=(
                    f"telegram:\n  token: '{TOKEN}'\n  api_server: "
                    f"{tg.base_url}\n  allowed_users: [{users}]\n"
                ),
            )
            try:
                idle = rss_mb(server.proc.pid)
                if args.platform == "telegram":
                    took = await touch_all_telegram(tg, args.sessions, 20)
                    after = rss_mb(server.proc.pid)
                    samples = await soak_telegram(
                        server, tg, args.sessions, args.soak_seconds, args.rate, args.sample_every
                    )
                else:
                    took = await touch_all(server, args.sessions, 20)
                    after = rss_mb(server.proc.pid)
                    samples = await soak(
                        server, args.sessions, args.soak_seconds, args.rate, args.sample_every
                    )
            finally:
                server.stop()
        parts = breakdown(home, ["web", "telegram"])
    # after the first tenth: caches are warm
    warm = samples[min(len(samples) - 1, max(1, len(samples) // 10))][1]
    last = samples[-1][1]
    peak = max(mb for _, mb in samples)
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} (1 "
        f"min), Python {platform.python_version()}"
    )
    print(
        f"traffic: {args.platform}; RSS at start (Telegram + web chat configured): {idle:7.1f} MB"
    )
    summed = sum(mb for _, mb in parts)
    shares = ", ".join(
        f"{what} {mb:.1f}" if i == 0 else f"{what} {mb:+.1f}" for i, (what, mb) in enumerate(parts)
    )
    print(
        f"  where they go (MB, each step in a fresh interpreter): {shares} = {summed:.1f}; "
        f"the running daemon {idle - summed:+.1f} (store, loop, models built on first use)"
    )
    print(
        f"RSS after {args.sessions:,} sessions x 20 messages (each touched, {took:.0f}s): "
        f"{after:7.1f} MB (goal <= 120 MB)"
    )
    print(
        f"soak: {args.soak_seconds:.0f}s at {args.rate:g} msg/s "
        f"({int(args.soak_seconds * args.rate):,} messages);"
        f" RSS {samples[0][1]:.1f} at start, {warm:.1f} once "
        f"warm, {last:.1f} at the end, peak {peak:.1f} MB"
    )
    print(f"growth over the soak (warm to end): {100 * (last - warm) / warm:+.1f} % (goal < 5 %)")
    if args.verbose:
        for at, mb in samples:
            print(f"  {at:7.0f}s {mb:7.1f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--soak-seconds", type=float, default=1800.0)
    parser.add_argument(
        "--rate", type=float, default=20.0, help="messages a second during the soak"
    )
    parser.add_argument(
        "--sample-every", type=float, default=30.0, help="seconds between RSS samples"
    )
    parser.add_argument(
        "--platform",
        choices=["telegram", "web"],
        default="telegram",
        help="where the traffic comes from (telegram: FakeTelegram at <= 30 msg/s)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="2,000 sessions, a 2-minute soak, samples every 5 s"
    )
    parser.add_argument(
        "--keep", type=Path, help="run in this directory and keep it (database, logs)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every RSS sample")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.soak_seconds, args.sample_every = min(args.sessions, 2000), 120.0, 5.0
    asyncio.run(main(args))

"""CPU time and SQL statements per turn, in-process: the whole gateway graph (build_gateway) with an
instant in-process model and a recording adapter, so nothing but the gateway's own per-message work
is timed.

`overhead.py` measures the same work from outside, through a subprocess and the web chat; on a
shared machine its msg/s moves with the load. This one counts what does not move: SQL statements per
turn (every statement the gateway's connection runs, by SQLite's trace callback) and the CPU time of
this process per turn (time.process_time, best and median of the rounds).

Scenarios (each in a fresh home, `--people` people
writing in their own DMs, one message each per round):
  telegram+admins     Telegram, allowed_users lists `--listed` ids (the people among them),
                      access.admins names one
  telegram-no-admins  the same without access.admins (who is an admin is worked out from the
                      allowlist)
  telegram-paired     nobody listed: every person let in by an approved pairing code
                      (access.admins names one)
  web                 the local web chat (the owner)

`--history 10 500` adds that many stored messages to every session first (a run for each value):
a turn's work should not grow with its history.

Run:  PYTHONPATH=. python bench/turn_cpu.py [--people 20] [--listed 200] [--rounds 100]
                                            [--repeat 3] [--only NAME] [--history N ...]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.events import ChatRef, Inbound, OutboundMessage
from gateway.llm.anthropic_wire import AnthropicClient
from gateway.llm.http import HttpTransport
from gateway.llm.transport import WireSettings
from gateway.ops.wiring import build_gateway

SCENARIOS = ("telegram+admins", "telegram-no-admins", "telegram-paired", "web")


class InstantTransport(HttpTransport):
    """The gateway's own HTTP transport up to the socket: the body is built and encoded as for a
    real request (the stored prompt, the whole history, the tools), then answered at once instead
    of sent."""

    async def _once(self, data: bytes) -> dict[str, Any]:
        self.sent_bytes = getattr(self, "sent_bytes", 0) + len(data)
        return {
            "content": [{"type": "text", "text": "Sure, noted."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1200, "output_tokens": 8},
        }


def instant_llm() -> AnthropicClient:
    """The Anthropic client, request building and all, with a model that answers at once
    (InstantTransport)."""
    llm = AnthropicClient(
        WireSettings(
            model="bench-instant",
            api_key="k",
            base_url="http://127.0.0.1:9",
            max_tokens=1024,
            timeout_s=10,
            max_retries=0,
            context_window=200_000,
        )
    )
    llm._transport = InstantTransport(
        url="http://127.0.0.1:9/v1/messages",
        headers={},
        model="bench-instant",
        timeout_s=10,
        max_retries=0,
    )
    return llm


class CountingAdapter:
    def __init__(self, name: str) -> None:
        self.platform = name
        self.sent = 0

    async def start(self, submit: Any) -> None:
        return None

    async def send(self, message: OutboundMessage) -> str:
        self.sent += 1
        return f"{self.platform}-{self.sent}"

    async def stop(self) -> None:
        return None


@dataclass
class Figures:
    scenario: str
    turns: int
    cpu_ms: list[float]
    statements: float


def _config(home: Path, scenario: str, people: int, listed: int) -> None:
    ids = [str(1000 + i) for i in range(max(people, listed))]
    if scenario == "web":
        text = "web:\n  enabled: false\n"
    else:
        allowed = "" if scenario == "telegram-paired" else f"  allowed_users: [{', '.join(ids)}]\n"
        admins = (
            "" if scenario == "telegram-no-admins" else "access:\n  admins: ['telegram:1000']\n"
        )
        text = f"web:\n  enabled: false\ntelegram:\n  token: '123:bench'\n{allowed}{admins}"
    (home / "config.yaml").write_text(text, encoding="utf-8")


def _pair_everyone(gw: Any, people: int) -> None:
    now = datetime.now(UTC)
    for i in range(people):
        gw.store.execute(
            "INSERT INTO approved_users (platform, user_id, user_name, approved_at, approved_by)"
            " VALUES ('telegram', ?, NULL, ?, 'bench')",
            (str(1000 + i), now.isoformat()),
        )


def _message(scenario: str, person: int, n: int) -> Inbound:
    platform = "cli" if scenario == "web" else "telegram"
    uid = str(1000 + person)
    return Inbound(
        chat=ChatRef(platform, "dm", uid),
        user_id=uid,
        text=f"message {n} from {uid}",
        message_id=f"m{n}",
        received_at=datetime.now(UTC),
        # the web chat sends no name
        user_name=None if scenario == "web" else f"user{person}",
    )


async def _round(gw: Any, scenario: str, people: int, start: int) -> int:
    for person in range(people):
        await gw.sessions.submit(_message(scenario, person, start + person))
    await gw.sessions.wait_idle()
    return start + people


def _seed_history(gw: Any, scenario: str, people: int, history: int) -> None:
    """`history` more stored messages in each person's session (opened by the warm-up round)."""
    platform = "cli" if scenario == "web" else "telegram"
    now = datetime.now(UTC)
    filler = "a sentence of ordinary chat history, neither short nor long, about the weekend"
    for person in range(people):
        session = gw.store.active_session(f"{platform}:dm:{1000 + person}")
        messages = [
            {"role": "user" if m % 2 == 0 else "assistant", "content": f"{filler} #{m}"}
            for m in range(history)
        ]
        gw.store.add_messages(session.id, messages, now=now)
    _index(gw)  # the seeded messages' search entries are not the rounds' work


def _index(gw: Any) -> None:
    """Index what waits for session_search (a tree from before batched indexing has nothing)."""
    if hasattr(gw.store, "index_pending"):
        gw.store.index_pending()


async def run(scenario: str, *, people: int, listed: int, rounds: int, history: int = 0) -> Figures:
    with tempfile.TemporaryDirectory(prefix="turn-cpu-") as tmp:
        home = Path(tmp)
        _config(home, scenario, people, listed)
        config = load_config(home, env={})
        adapter = CountingAdapter("cli" if scenario == "web" else "telegram")
        # The send limits (Telegram: 1 message/s per chat) would make this a bench of waiting: their
        # clock runs a thousand times faster than real time, so no send ever waits.
        gw = build_gateway(
            config,
            env={},
            adapters=[adapter],
            llm=instant_llm(),
            probe_ollama=False,
            monotonic=lambda: time.monotonic() * 1000,
        )
        if scenario == "telegram-paired":
            _pair_everyone(gw, people)
        try:
            # warm-up: sessions opened, prompts built and stored
            n = await _round(gw, scenario, people, 0)
            _seed_history(gw, scenario, people, history)
            n = await _round(gw, scenario, people, n)
            n = await _round(gw, scenario, people, n)
            statements = 0

            def count(_sql: str) -> None:
                nonlocal statements
                statements += 1

            gc.collect()
            cpu: list[float] = []
            for _ in range(rounds):
                gw.store.conn.set_trace_callback(count)
                started = time.process_time()
                n = await _round(gw, scenario, people, n)
                cpu.append((time.process_time() - started) * 1000 / people)
                gw.store.conn.set_trace_callback(None)
            # The search index is kept after the turns, in batches: what the rounds left counts too.
            gw.store.conn.set_trace_callback(count)
            _index(gw)
            gw.store.conn.set_trace_callback(None)
            assert adapter.sent >= people * (rounds + 2), "every turn must have answered"
            return Figures(scenario, people * rounds, cpu, statements / (people * rounds))
        finally:
            await gw.llm.close()
            gw.store.close()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--people", type=int, default=20)
    ap.add_argument(
        "--listed", type=int, default=200, help="Telegram allowed_users entries (at least --people)"
    )
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs per scenario (fresh home each)")
    ap.add_argument("--only", choices=SCENARIOS, action="append")
    ap.add_argument(
        "--history",
        type=int,
        nargs="+",
        default=[0],
        help="stored messages added to each session first (several values: a run each)",
    )
    args = ap.parse_args(argv)
    import logging

    logging.disable(logging.CRITICAL)  # the per-turn INFO line is not what is measured here
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} (1 "
        f"min), Python {sys.version.split()[0]}"
    )
    print(
        f"{args.people} people x {args.rounds} rounds per run, {args.repeat} run(s) per scenario, "
        f"{max(args.people, args.listed)} ids in allowed_users\n"
    )
    print(
        f"{'scenario':<20} {'history':>8} {'SQL/turn':>9} {'CPU ms/turn: best':>18}"
        f" {'median':>7} {'worst run':>10}"
    )
    for scenario in args.only or SCENARIOS:
        for history in args.history:
            runs = [
                asyncio.run(
                    run(
                        scenario,
                        people=args.people,
                        listed=args.listed,
                        rounds=args.rounds,
                        history=history,
                    )
                )
                for _ in range(args.repeat)
            ]
            medians = [statistics.median(r.cpu_ms) for r in runs]
            best = min(min(r.cpu_ms) for r in runs)
            print(
                f"{scenario:<20} {history:>8} {runs[0].statements:>9.1f} {best:>18.3f} "
                f"{statistics.median(medians):>7.3f} {max(medians):>10.3f}"
            )


if __name__ == "__main__":
    main()

"""Crash points: the kill -9 run made exhaustive for one message. The in-process gateway "dies"
right before its N-th SQLite write transaction (or right after the platform took its k-th send,
before the outbox could mark it), then a fresh gateway on the same home boots the way the daemon
does (replay, then pending sends) and the platform redelivers an update whose submit never returned.

A SIGKILL can only land between durable effects, so dying before every write and after every send
covers every moment a real kill could pick for that message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.errors import LLMUnavailable
from gateway.events import Inbound, OutboundMessage
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.ops.wiring import Gateway, build_gateway
from gateway.store.database import Store
from tests.helpers import inbound


class VirtualTime:
    """The gateway's own waits (per-chat send pacing,
    backoff) pass at once and move a virtual clock."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


def build(home: Path, adapter: Any, llm: Any) -> Gateway:
    time_ = VirtualTime()
    return build_gateway(
        load_config(home, env={}),
        env={},
        adapters=[adapter],
        llm=llm,
        probe_ollama=False,
        sleep=time_.sleep,
        monotonic=time_.monotonic,
    )


class Crash(BaseException):
    """The process died here. A BaseException, so no `except Exception` in the code under test
    catches it."""


@dataclass
class Fate:
    """Where this life ends: before write number `at_write`,
    or after platform send number `after_send`."""

    at_write: int | None = None
    after_send: int | None = None
    writes: int = 0
    sends: int = 0
    armed: bool = False
    dead: bool = False
    last: str = ""  # the last durable effect: "write" or "send"
    # the send (1-based) that was in flight at death: taken, not yet marked
    died_after_send: int = 0

    def die(self) -> None:
        self.dead = True
        self.died_after_send = self.sends if self.last == "send" else 0
        raise Crash


@dataclass
class Platform:
    """What users saw, across every life of the gateway (the platform outlives the process)."""

    sent: list[OutboundMessage] = field(default_factory=list)
    # the chunk's key → the id it was posted under
    keys: dict[str, str] = field(default_factory=dict)

    def texts(self) -> list[str]:
        return [m.text for m in self.sent]


class DyingAdapter:
    """A contract fake adapter whose process can die after the platform took a message. On "discord"
    the platform dedupes as Discord does with `enforce_nonce`: a send whose key it has seen returns
    the message already posted."""

    def __init__(self, platform: str, record: Platform, fate: Fate) -> None:
        self.platform = platform
        self.record = record
        self.fate = fate

    async def start(self, submit: Any) -> None:
        return None

    async def send(self, message: OutboundMessage) -> str:
        if self.fate.dead:
            raise Crash
        if self.platform == "discord" and message.key in self.record.keys:
            return self.record.keys[message.key]
        self.record.sent.append(message)
        self.record.keys[message.key] = f"{self.platform}-{len(self.record.sent)}"
        if self.fate.armed:
            self.fate.sends += 1
            self.fate.last = "send"
            if self.fate.sends == self.fate.after_send:
                self.fate.die()
        return f"{self.platform}-{len(self.record.sent)}"

    async def stop(self) -> None:
        return None


def arm(store: Store, fate: Fate) -> None:
    """Count write transactions from now on; die before
    the fated one (and refuse all after death)."""
    original = store.tx
    fate.armed = True

    @contextmanager
    def tx() -> Iterator[Any]:
        if fate.dead:
            raise Crash
        if fate.armed:
            fate.writes += 1
            if fate.writes == fate.at_write:
                fate.die()
        with original() as conn:
            yield conn
        fate.last = "write"

    store.tx = tx  # type: ignore[method-assign]


class ScriptLLM:
    """A contract fake model: `answer(user text, user messages seen)` gives the reply, or raises."""

    provider = "fake"
    model = "fake-1"
    context_window = 100_000

    def __init__(self, answer: Callable[[str, int], str]) -> None:
        self.answer = answer
        self.calls: list[str] = []

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        text = str(messages[-1]["content"])
        self.calls.append(text)
        users = sum(1 for m in messages if m["role"] == "user")
        return LLMReply(self.answer(text, users), (), Usage(10, 2), self.model, self.provider)

    async def close(self) -> None:
        return None


def long_answer(text: str, users: int) -> str:
    """A reply Telegram must split in three messages, its
    lines numbered so a lost or doubled chunk shows."""
    body = "\n".join(f"L{j:03d} " + "the fox keeps every promise it makes " * 2 for j in range(110))
    return f"re: {text} [users={users}]\n\n{body}"


def down(text: str, users: int) -> str:
    raise LLMUnavailable("fake: HTTP 529 overloaded")


@dataclass
class Scenario:
    name: str
    before: tuple[str, ...]  # messages answered before the fated one (not armed)
    text: str  # the fated message
    answer: Callable[[str, int], str]


async def _settle(gw: Any) -> None:
    await gw.sessions.wait_idle()
    await asyncio.sleep(0)


async def _die(gw: Any) -> None:
    gw.sessions.stop_accepting()
    await gw.sessions.cancel_all()
    gw.store.close()


async def live_once(
    home: Path,
    platform: str,
    record: Platform,
    scenario: Scenario,
    fate: Fate,
    message: Inbound,
    *,
    llm_calls: list[str],
    setup: bool,
) -> bool:
    """One life of the gateway; returns whether `message` was handed in (its submit returned)."""
    adapter = DyingAdapter(platform, record, fate)
    llm = ScriptLLM(scenario.answer)
    gw = build(home, adapter, llm)
    delivered = False
    try:
        if setup:
            for i, text in enumerate(scenario.before):
                await gw.sessions.submit(
                    inbound(text, platform=platform, chat_id="42", user_id="42", message_id=f"b{i}")
                )
                await _settle(gw)
            arm(gw.store, fate)
        else:  # booting: what Daemon.start does before and as the adapter comes up
            arm(gw.store, fate)
            await gw.sessions.replay()
            await gw.outbox.deliver_pending()
        try:
            await gw.sessions.submit(message)
            delivered = True
            await _settle(gw)
            await gw.outbox.deliver_pending()
        except Crash:
            pass
        if fate.dead:
            return delivered
        await _settle(gw)
        return delivered
    except Crash:
        return delivered
    finally:
        llm_calls.extend(llm.calls)
        await _die(gw)


async def run_with_crash(
    home: Path,
    platform: str,
    scenario: Scenario,
    *,
    at_write: int | None = None,
    after_send: int | None = None,
) -> tuple[Platform, Fate, list[str]]:
    """Live until the fate strikes, then boot again (no
    crash) and let the platform redeliver if needed."""
    record = Platform()
    message = inbound(
        scenario.text, platform=platform, chat_id="42", user_id="42", message_id="fated"
    )
    fate = Fate(at_write=at_write, after_send=after_send)
    calls: list[str] = []
    handed_in = await live_once(
        home, platform, record, scenario, fate, message, llm_calls=calls, setup=True
    )
    # redelivered either way: the platform's offset was not confirmed before the death
    del handed_in
    first_life = Fate(
        writes=fate.writes, sends=fate.sends, dead=fate.dead, died_after_send=fate.died_after_send
    )
    if fate.dead:
        await live_once(
            home, platform, record, scenario, Fate(), message, llm_calls=calls, setup=False
        )
    return record, first_life, calls

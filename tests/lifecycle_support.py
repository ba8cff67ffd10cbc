"""Shared test doubles for the session lifecycle tests:
a settable clock, a gated LLM client, row builders.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.ops.wiring import Gateway
from gateway.store.database import Store
from gateway.store.rows import SessionRow, iso
from tests.fakes.llm import FakeLLM
from tests.helpers import gateway_for

START = datetime(2031, 1, 6, 9, 0, tzinfo=UTC)


class FakeClock:
    """The injected clock: a test moves time by calling advance(); nothing ever sleeps."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


class GatedLLM:
    """An LLMClient double whose calls wait at a gate: lets a test hold turns or flushes open and
    count how many run at once. Each call answers with the next scripted text (default "ok") and no
    tool calls."""

    provider = "anthropic"
    model = "gated-test"
    context_window = 200_000

    def __init__(self, *, open_gate: bool = False) -> None:
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls: list[dict[str, Any]] = []
        self.started = asyncio.Event()
        self.answers: list[str] = []

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        self.calls.append(
            {"system": system, "messages": list(messages), "tools": [t.name for t in tools]}
        )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.started.set()
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        text = self.answers.pop(0) if self.answers else "ok"
        return LLMReply(text, (), Usage(10, 2), self.model, self.provider, "end_turn")

    async def close(self) -> None:
        return None


@asynccontextmanager
async def open_gateway(
    home: Any, adapters: Sequence[Any], *, clock: FakeClock, llm: Any = None, start: bool = False
) -> AsyncIterator[Gateway]:
    """The real gateway graph around the fakes; `start`
    also starts the lifecycle (timers + flush workers)."""
    gw = gateway_for(home, adapters, llm=llm, clock=clock)
    assert gw.lifecycle is not None
    try:
        if start:
            await gw.lifecycle.start()
        yield gw
    finally:
        await gw.outbox.wait_background()
        await gw.sessions.cancel_all()
        if gw.lifecycle.started or gw.lifecycle.flusher.running:
            await gw.lifecycle.stop(0)
        await gw.llm.close()
        gw.store.close()


def session_row(**overrides: Any) -> SessionRow:
    base = SessionRow(
        id=1,
        key="cli:dm:c1",
        platform="cli",
        chat_type="dm",
        chat_id="c1",
        thread_id=None,
        user_id="u1",
        parent_id=None,
        created_at=iso(START) or "",
        last_user_at=None,
        ended_at=None,
        end_reason=None,
        model="m",
        provider="anthropic",
        system_prompt=None,
        prompt_built_at=None,
        prompt_rebuild_reason=None,
        prompt_rebuilds=0,
        flush_state=None,
        flush_attempts=0,
        flush_error=None,
        flush_finished_at=None,
        input_tokens=0,
        output_tokens=0,
        cache_read_tokens=0,
        cache_write_tokens=0,
        compressions=0,
    )
    if isinstance(overrides.get("last_user_at"), datetime):
        overrides["last_user_at"] = iso(overrides["last_user_at"])
    return replace(base, **overrides)


def seed_session(
    store: Store,
    *,
    key: str,
    last_user_at: datetime,
    messages: int = 4,
    prompt: str = "PROMPT",
    platform: str = "cli",
    chat_type: str = "dm",
) -> int:
    """An active session with a stored prompt and `messages` user/assistant messages, as a past run
    left it."""
    chat_id = key.split(":")[2]
    row = store.create_session(
        key=key,
        platform=platform,
        chat_type=chat_type,
        chat_id=chat_id,
        thread_id=None,
        user_id="u1",
        parent_id=None,
        model="gated-test",
        provider="anthropic",
        now=last_user_at,
    )
    store.store_prompt(row.id, prompt, now=last_user_at)
    store.add_messages(
        row.id,
        [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
            for i in range(messages)
        ],
        now=last_user_at,
    )
    store.touch_user(row.id, last_user_at)
    return row.id


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    if not users:
        return ""
    content = users[-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def user_messages(fake: FakeLLM) -> list[str]:
    """The last user text of every Anthropic request the fake received, in order."""
    return [last_user_text(body) for body in fake.anthropic_requests()]


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

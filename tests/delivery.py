"""Contract fakes for delivery tests: an adapter with scripted send failures, a model that answers at once,
and the real gateway graph built on a virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.events import ChatRef, OutboundMessage, Submit
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.ops.wiring import Gateway, build_gateway
from tests.fakeclock import FakeClock


class ScriptedAdapter:
    """Records every send attempt with its clock time; `fail(...)` queues errors for the next attempts
    (None = let that attempt through)."""

    def __init__(self, platform: str, clock: FakeClock | None = None) -> None:
        self.platform = platform
        self.clock = clock
        self.script: list[BaseException | None] = []
        self.attempts: list[tuple[float, OutboundMessage]] = []
        self.sent: list[OutboundMessage] = []
        self.events: list[str] = []
        self.submit: Submit | None = None
        self.starts = 0

    def fail(self, *errors: BaseException | None) -> None:
        self.script.extend(errors)

    async def start(self, submit: Submit) -> None:
        self.starts += 1
        self.submit = submit

    async def stop(self) -> None:
        self.events.append("stop")

    async def send(self, message: OutboundMessage) -> str:
        self.attempts.append((self.clock.monotonic() if self.clock else 0.0, message))
        self.events.append(f"send {message.chunk_index}")
        if self.script:
            error = self.script.pop(0)
            if error is not None:
                raise error
        self.sent.append(message)
        return f"{self.platform}-{len(self.sent)}"

    def seen(self, chat_id: str | None = None) -> list[str]:
        """What the user's client shows, message by message (platforms trim trailing whitespace)."""
        return [(m.plain if m.use_plain else m.text).rstrip() for m in self.sent
                if chat_id is None or m.chat.chat_id == chat_id]


class TypingAdapter(ScriptedAdapter):
    """Also shows a typing indicator, logging when it starts and stops."""

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        self.events.append("typing on")
        try:
            yield
        finally:
            self.events.append("typing off")


class ReplyLLM:
    """A model that answers each user message with `answer(text)`, or raises what `answer` raises."""

    provider = "fake"
    model = "fake-1"
    context_window = 100_000

    def __init__(self, answer: Callable[[str], str] = lambda text: f"re: {text}") -> None:
        self.answer = answer
        self.seen: list[str] = []

    async def complete(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                       max_tokens: int | None = None, stream: TextSink | None = None) -> LLMReply:
        text = str(messages[-1]["content"])
        self.seen.append(text)
        await asyncio.sleep(0)
        return LLMReply(self.answer(text), (), Usage(10, 2), self.model, self.provider)

    async def close(self) -> None:
        return None


def gateway_on(clock: FakeClock, home: Path, adapters: Sequence[Any], llm: Any) -> Gateway:
    """The real graph, with every clock and sleep virtual."""
    return build_gateway(load_config(home), env={}, adapters=adapters, llm=llm, clock=clock.now,
                         probe_ollama=False, sleep=clock.sleep, monotonic=clock.monotonic)


TELEGRAM_CONFIG = """\
web:
  enabled: false
telegram:
  token: "123:fake"
  allowed_users: ["u1", "u2"]
"""


def write_home(home: Path, extra: str = TELEGRAM_CONFIG) -> Path:
    (home / "config.yaml").write_text(extra, encoding="utf-8")
    return home

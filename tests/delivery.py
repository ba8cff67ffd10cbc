"""Contract fakes for delivery tests: an adapter with scripted send failures, a model that answers
at once, and the real gateway graph built on a virtual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.events import ChatRef, OutboundMessage, PreviewPart, PreviewStyle, Submit, TextEntity
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.ops.wiring import Gateway, build_gateway
from tests.fakeclock import FakeClock


class ScriptedAdapter:
    """Records every send attempt with its clock time; `fail(...)` queues errors for the next
    attempts (None = let that attempt through)."""

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
        return [
            (m.plain if m.use_plain else m.text).rstrip()
            for m in self.sent
            if chat_id is None or m.chat.chat_id == chat_id
        ]


class TypingAdapter(ScriptedAdapter):
    """Also shows a typing indicator, logging when it starts and stops."""

    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        self.events.append("typing on")
        try:
            yield
        finally:
            self.events.append("typing off")


EDITS = PreviewStyle(1.0)  # a platform whose previews are messages edited at most once a second


class PreviewAdapter(ScriptedAdapter):
    """Also shows live previews (the LivePreview ability). Every preview call is logged with its
    clock time; `fail_preview(...)` queues errors for the next show_preview calls; finishing a
    preview shares the send script (it is the send of that chunk)."""

    def __init__(
        self, platform: str, clock: FakeClock | None = None, *, style: PreviewStyle | None = EDITS
    ) -> None:
        super().__init__(platform, clock)
        self.style = style
        self.shows: list[tuple[float, PreviewPart]] = []
        self.finished: list[tuple[str, OutboundMessage]] = []
        self.dropped: list[str] = []
        self.preview_script: list[BaseException | None] = []
        # set while a show_preview is on the wire, when `hold` is set
        self.in_call = asyncio.Event()
        self.hold: asyncio.Event | None = None
        # what the chat shows, by message id
        self.messages: dict[str, tuple[str, tuple[TextEntity, ...]]] = {}
        self._opened = 0

    def fail_preview(self, *errors: BaseException | None) -> None:
        self.preview_script.extend(errors)

    def preview_style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle | None:
        return self.style

    async def show_preview(self, part: PreviewPart) -> str:
        self.shows.append((self.clock.monotonic() if self.clock else 0.0, part))
        self.events.append(f"show {part.index}")
        if self.hold is not None:
            self.in_call.set()
            await self.hold.wait()
        if self.preview_script and (error := self.preview_script.pop(0)) is not None:
            raise error
        if self.style is not None and self.style.ephemeral:
            return ""
        mid = part.platform_message_id
        if not mid:
            self._opened += 1
            mid = f"p{self._opened}"
        self.messages[mid] = (part.text, part.entities)
        return mid

    async def finish_preview(self, message: OutboundMessage, platform_message_id: str) -> str:
        self.attempts.append((self.clock.monotonic() if self.clock else 0.0, message))
        self.events.append(f"finish {message.chunk_index} {platform_message_id}")
        if self.script and (error := self.script.pop(0)) is not None:
            raise error
        self.finished.append((platform_message_id, message))
        self.sent.append(message)
        self.messages[platform_message_id] = (
            (message.plain, ()) if message.use_plain else (message.text, message.entities)
        )
        return platform_message_id

    async def drop_preview(self, chat: ChatRef, platform_message_id: str) -> None:
        self.events.append(f"drop {platform_message_id}")
        self.dropped.append(platform_message_id)
        self.messages.pop(platform_message_id, None)

    async def send(self, message: OutboundMessage) -> str:
        mid = await super().send(message)
        self.messages[mid] = (
            (message.plain, ()) if message.use_plain else (message.text, message.entities)
        )
        return mid

    def shown(self) -> list[str]:
        return [part.text for _, part in self.shows]

    def view(self) -> list[tuple[str, tuple[TextEntity, ...]]]:
        """The messages the chat shows now, oldest first (previews as edited, sends as sent)."""
        return list(self.messages.values())

    def texts(self) -> list[str]:
        return [text for text, _ in self.view()]


class ReplyLLM:
    """A model that answers each user message with
    `answer(text)`, or raises what `answer` raises."""

    provider = "fake"
    model = "fake-1"
    context_window = 100_000

    def __init__(self, answer: Callable[[str], str] = lambda text: f"re: {text}") -> None:
        self.answer = answer
        self.seen: list[str] = []

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
        self.seen.append(text)
        await asyncio.sleep(0)
        return LLMReply(self.answer(text), (), Usage(10, 2), self.model, self.provider)

    async def close(self) -> None:
        return None


class StreamingLLM(ReplyLLM):
    """A model that writes its answer in `pieces`, `every` seconds of virtual time apart, telling
    the stream each piece as it goes (and answering whole, as the wires do, at the end)."""

    def __init__(self, clock: FakeClock, pieces: Sequence[str], *, every: float = 0.5) -> None:
        super().__init__(lambda text: "".join(pieces))
        self.clock = clock
        self.pieces = list(pieces)
        self.every = every
        self.streamed = 0

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        self.seen.append(str(messages[-1]["content"]))
        if stream is not None:
            self.streamed += 1
        for piece in self.pieces:
            if stream is not None:
                stream.text(piece)
            await self.clock.sleep(self.every)
        return LLMReply("".join(self.pieces), (), Usage(10, 2), self.model, self.provider)


def gateway_on(clock: FakeClock, home: Path, adapters: Sequence[Any], llm: Any) -> Gateway:
    """The real graph, with every clock and sleep virtual."""
    return build_gateway(
        load_config(home),
        env={},
        adapters=adapters,
        llm=llm,
        clock=clock.now,
        probe_ollama=False,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
    )


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

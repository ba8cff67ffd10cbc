"""Live previews: what the model is writing, shown in the chat while the turn runs, under the
platform's limits.

A preview is never the answer. The answer is stored and sent by the outbox as always; it replaces
the preview (an edit of the same message) or follows it (a Telegram draft, a progress line). So
nothing here may fail a turn: a preview that errors stops, and the turn goes on. One task per turn
wakes on new text, waits for the chat's pacing and any 429 pause, and makes at most one platform
call per tick; the id of a message it opened is stored before that message is ever edited, so a
restarted daemon edits it instead of posting a second one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.config.settings import StreamingConfig
from gateway.delivery.partial import Part, PartialRenderer, progress_line
from gateway.delivery.previews import PreviewBook
from gateway.delivery.ratelimit import RateLimiter
from gateway.errors import AdapterError, MarkupRejected, PreviewGone, RateLimited
from gateway.events import (
    Adapter,
    ChatRef,
    Inbound,
    LivePreview,
    PreviewPart,
    PreviewStyle,
    account_of,
    adapter_key,
)
from gateway.llm.types import TextSink
from gateway.prompt.hints import PlatformFacts

log = logging.getLogger(__name__)

Monotonic = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
PROGRESS = -1  # the part index of the progress line
# a preview that vanishes by itself is shown again after this share of its lifetime
KEEP_ALIVE = 2 / 3


@dataclass(frozen=True, slots=True)
class Live:
    """What a turn hands the agent: where the answer's text goes, and where tool starts are told."""

    sink: TextSink | None = None
    on_tool: Callable[[str], None] | None = None


NO_PREVIEW = Live()


@dataclass(frozen=True, slots=True)
class PreviewPorts:
    """What every turn's preview shares: the book of the messages previews opened, the platform
    rate limits and the sleep their pacing waits on."""

    book: PreviewBook
    limiter: RateLimiter
    sleep: Sleep


class Streams:
    """Opens one live preview per turn, as `streaming` asks and the platform's adapter can show."""

    def __init__(
        self,
        config: StreamingConfig,
        book: PreviewBook,
        facts: Mapping[str, PlatformFacts],
        limiter: RateLimiter,
        *,
        sleep: Sleep,
    ) -> None:
        self.config = config
        self.book = book
        self.facts = facts
        self.limiter = limiter
        self.sleep = sleep
        self.ports = PreviewPorts(book, limiter, sleep)
        # platform → (its adapter, is it a LivePreview)
        self._able: dict[str, tuple[Adapter, bool]] = {}

    @asynccontextmanager
    async def open(
        self, turn_id: str, inbound: Inbound, adapter: Adapter | None
    ) -> AsyncIterator[Live]:
        stream = self._stream(turn_id, inbound, adapter)
        if stream is None:
            yield NO_PREVIEW
            return
        stream.start()
        try:
            yield Live(stream, None) if stream.mode == "edit" else Live(None, stream.tool)
        except asyncio.CancelledError:
            # a drain or a kill: the replayed turn takes the preview over
            await stream.close(keep=True)
            raise
        except BaseException:  # the turn failed: its error message stands alone
            await stream.close(keep=False)
            raise
        await stream.close(keep=True, complete=True)

    async def abandon(self, turn_id: str, chat: ChatRef, adapter: Adapter | None) -> None:
        """A turn that will never be answered (its message was erased as it ran: `gateway users
        forget`): the preview of its answer comes down, and its records go."""
        for index, mid in sorted(self.book.parts(turn_id).items()):
            if adapter is None or not self._can_preview(adapter):
                break
            try:
                await adapter.drop_preview(chat, mid)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 (a stale preview is all that is left)
                log.info(
                    "%s: preview part %s of turn %s not removed: %s",
                    chat.platform,
                    index,
                    turn_id,
                    exc,
                )
        self.book.forget_turn(turn_id)

    def _stream(
        self, turn_id: str, inbound: Inbound, adapter: Adapter | None
    ) -> AnswerStream | None:
        chat = inbound.chat
        mode = self.config.mode_for(chat.platform, chat.chat_type)
        if mode == "off" or adapter is None or not self._can_preview(adapter):
            return None
        style = adapter.preview_style(chat, inbound.message_id)  # type: ignore[attr-defined]
        if style is None:
            return None
        facts = self.facts.get(chat.platform) or self.facts["cli"]
        return AnswerStream(
            turn_id=turn_id,
            inbound=inbound,
            adapter=adapter,  # type: ignore[arg-type]
            style=style,
            facts=facts,
            mode=mode,
            ports=self.ports,
        )

    def _can_preview(self, adapter: Adapter) -> bool:
        via = adapter_key(adapter.platform, account_of(adapter))
        known = self._able.get(via)
        if known is None or known[0] is not adapter:
            # isinstance on a runtime Protocol costs ~10 µs: once each
            known = self._able[via] = (adapter, isinstance(adapter, LivePreview))
        return known[1]


class AnswerStream:
    """One turn's preview. `text`/`restart` are the model's TextSink (edit mode); `tool` lists tool
    starts (progress mode). Both only note what changed and wake the task; the task makes the
    platform calls."""

    def __init__(
        self,
        *,
        turn_id: str,
        inbound: Inbound,
        adapter: LivePreview,
        style: PreviewStyle,
        facts: PlatformFacts,
        mode: str,
        ports: PreviewPorts,
    ) -> None:
        self.turn_id = turn_id
        self.inbound = inbound
        self.chat = inbound.chat
        self.adapter = adapter
        self.style = style
        self.facts = facts
        self.mode = mode
        self.book = ports.book
        self.limiter = ports.limiter
        self.sleep = ports.sleep
        self.calls = 0  # platform calls made (bench/overhead.py)
        self._key = (self.chat.adapter_key, self.chat.chat_id)  # one bot's pace in the chat
        scope = (self.chat.adapter_key, style.scope) if style.scope else None
        self.book.pacer.track(self._key, style.interval_s, scope)
        self._pieces: list[str] = []
        self._renderer = PartialRenderer(facts, raw=style.raw)
        self._tools: list[str] = []
        # messages an earlier life of this turn opened
        self._ids: dict[int, str] = self.book.parts(turn_id)
        self._shown: dict[int, tuple[str, object]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._in_call = False
        self._broken = False
        self._plain = False
        # the draft shown now (a vanishing style), and when
        self._draft: tuple[int, Part, float] | None = None

    # ------------------------------------------------------------------ what the turn tells it
    def text(self, delta: str) -> None:
        self._pieces.append(delta)
        self._wake.set()

    def restart(self) -> None:
        """The text so far is void (a retry, the fallback model, the next model call); what is shown
        stays until new text replaces it."""
        self._pieces.clear()
        self._renderer.reset()

    def tool(self, name: str) -> None:
        self._tools.append(name)
        self._wake.set()

    # ------------------------------------------------------------------ the task
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"preview:{self.turn_id}"
        )

    async def close(self, *, keep: bool, complete: bool = False) -> None:
        """Stop updating. A call on the wire is let finish (its message id gets stored); no call
        starts after. `keep=False` (the turn failed) takes the preview down again. `complete` (the
        turn is answered): a progress line that has not caught up yet gets its last update, since it
        stays above the answer."""
        self._closing = True
        self._wake.set()
        task = self._task
        if task is not None:
            if not self._in_call:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if complete and self.mode == "progress" and not self._broken:
            await self._catch_up()
        if not keep:
            await self._drop_all()

    async def _catch_up(self) -> None:
        changed = [(i, p) for i, p in self._wanted() if self._shown.get(i) != (p.text, p.entities)]
        if changed:
            delay = max(self.book.pacer.delay(self._key), self.limiter.paused_for(self.chat))
            if delay > 0:
                await self.sleep(delay)
            await self._show(*changed[0])

    async def _run(self) -> None:
        while not (self._closing or self._broken):
            await self._until_woken()
            if self._closing:
                return
            delay = max(self.book.pacer.delay(self._key), self.limiter.paused_for(self.chat))
            if delay > 0:
                await self.sleep(delay)
                await asyncio.sleep(0)  # never a busy loop, whatever the injected sleep does
                continue
            self._wake.clear()
            if await self._step():
                self._wake.set()  # another part still differs: it goes on the next tick

    async def _until_woken(self) -> None:
        """Wait for new text, or for the moment a preview
        that vanishes by itself must be shown again."""
        left = self._keep_alive_in()
        if left is None or self._wake.is_set():
            await self._wake.wait()
            return
        if left > 0:
            woken = asyncio.ensure_future(self._wake.wait())
            slept = asyncio.ensure_future(self.sleep(left))
            try:
                await asyncio.wait({woken, slept}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
                slept.cancel()
        self._wake.set()

    def _keep_alive_in(self) -> float | None:
        """Seconds until the shown preview must be renewed
        (None: it does not vanish, or nothing is shown)."""
        if self._draft is None:
            return None
        return self._draft[2] + self.style.lasts_s * KEEP_ALIVE - self.book.pacer.clock()

    async def _step(self) -> bool:
        """Show the first part that differs from what the chat shows (or, when it is about to
        vanish, what it shows again); True when more differ."""
        changed = [(i, p) for i, p in self._wanted() if self._shown.get(i) != (p.text, p.entities)]
        if not changed and self._draft is not None and (self._keep_alive_in() or 0.0) <= 0:
            # no new text for a while (a long tool call): the same draft again
            changed = [(self._draft[0], self._draft[1])]
        if not changed:
            return False
        index, part = changed[0]
        await self._show(index, part)
        return len(changed) > 1

    def _wanted(self) -> list[tuple[int, Part]]:
        if self.mode == "progress":
            return (
                [(PROGRESS, Part(line, (), line))] if (line := progress_line(self._tools)) else []
            )
        parts = self._renderer.parts("".join(self._pieces))
        if self._plain:
            parts = [Part(p.plain, (), p.plain) for p in parts]
        if self.style.ephemeral and parts:  # a draft shows one part: the newest
            return [(len(parts) - 1, parts[-1])]
        return list(enumerate(parts))

    async def _show(self, index: int, part: Part) -> None:
        target = PreviewPart(
            chat=self.chat,
            index=index,
            text=part.text,
            entities=part.entities,
            platform_message_id=self._ids.get(index),
            reply_to_id=self.inbound.message_id,
            user_id=self.inbound.user_id,
            space_id=self.inbound.space_id,
            key=f"{self.turn_id}:{index}",
        )
        self._in_call = True
        mid = ""
        try:
            mid = await self.adapter.show_preview(target)
        except RateLimited as exc:
            # the stream waits it out; the final answer only waits what Telegram demands
            self.limiter.pause(self.chat, exc.retry_after, is_global=exc.is_global)
            log.info(
                "%s: preview of turn %s paused %.3gs (429)",
                self.chat.platform,
                self.turn_id,
                exc.retry_after,
            )
            self._wake.set()  # the refused update goes once the pause is over, new text or not
            return
        except MarkupRejected as exc:
            self._fail_markup(exc)
            return
        except PreviewGone:  # someone deleted it: the next tick opens a new one
            self._ids.pop(index, None)
            self._shown.pop(index, None)
            self.book.forget_part(self.turn_id, index)
            self._wake.set()  # opened again on the next tick, new text or not (as after a 429)
            return
        except AdapterError as exc:
            log.info("%s: preview of turn %s stopped: %s", self.chat.platform, self.turn_id, exc)
            self._broken = True
            return
        except Exception:
            log.exception(
                "%s: preview of turn %s crashed; the answer still comes",
                self.chat.platform,
                self.turn_id,
            )
            self._broken = True
            return
        finally:
            self._in_call = False
            self.calls += 1
            # a draft has no message id
            self.book.pacer.note(self._key, draft=self.style.ephemeral and not mid)
        if mid and self._ids.get(index) != mid:
            # before this message is ever edited
            self.book.record(self.turn_id, index, self.chat, mid)
            self._ids[index] = mid
        self._shown[index] = (part.text, part.entities)
        # a draft vanishes unless shown again in time (a message, the progress line, a fallback to
        # edits stays)
        self._draft = (
            (index, part, self.book.pacer.clock()) if self.style.lasts_s and not mid else None
        )
        if mid and not self.style.raw:
            # raw Markdown is never the final's rendering: the finish always goes
            self.book.showing(self.turn_id, index, part.text, part.entities)

    def _fail_markup(self, exc: MarkupRejected) -> None:
        if self._plain:
            log.info(
                "%s: preview of turn %s stopped: plain text refused too (%s)",
                self.chat.platform,
                self.turn_id,
                exc,
            )
            self._broken = True
        else:
            self._plain = True
            self._wake.set()

    async def _drop_all(self) -> None:
        for index, mid in sorted(self._ids.items()):
            try:
                await self.adapter.drop_preview(self.chat, mid)
            except Exception as exc:  # noqa: BLE001 (a stale preview is all that is left)
                log.info(
                    "%s: preview part %s of turn %s not removed: %s",
                    self.chat.platform,
                    index,
                    self.turn_id,
                    exc,
                )
        self.book.forget_turn(self.turn_id)

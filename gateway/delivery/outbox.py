"""Durable outbound delivery: a reply is rendered and split once, every chunk is recorded, then sent
in order.

Each chunk's state lives in the `outbound` table, so a retry after an error or a restart sends
exactly the chunks that were not sent yet. Per chat, chunks go out strictly in the order they were
recorded: a chunk that cannot go now holds back everything after it in that chat (never in other
chats) until a later round. Platform weather (429 retry_after, 5xx backoff, rejected markup) is
handled here; limits in gateway/delivery/ratelimit.py.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from gateway.delivery.previews import PreviewBook
from gateway.delivery.ratelimit import RateLimiter
from gateway.delivery.rows import render_rows, row_chat, row_message
from gateway.errors import (
    AdapterError,
    MarkupRejected,
    NotSendable,
    RateLimited,
    RecipientUnavailable,
    StoreUnavailable,
)
from gateway.events import Adapter, ChatRef, OutboundKind, OutboundMessage, TextEntity, adapter_key
from gateway.prompt.hints import PlatformFacts
from gateway.store.database import Store
from gateway.store.rows import OutboundRow
from gateway.telemetry.metrics import Metrics, error_kind

if TYPE_CHECKING:
    from gateway.delivery.files import ChatFiles
    from gateway.delivery.voice import VoiceReplies
    from gateway.events import Choices

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]
ChatKey = tuple[str, str, str]  # (platform, account, chat_id): the unit of ordering
PAYLOADS = frozenset({OutboundKind.VOICE.value, OutboundKind.FILE.value})  # rows with bytes too


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter, bounded; `attempts` tries per round before a chunk
    waits for later."""

    first: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    attempts: int = 6

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.maximum, self.first * self.factor**attempt))


@dataclass(frozen=True, slots=True)
class Pacing:
    """The time the outbox reads and waits on, and how it spaces sends: backoff between tries
    (jittered by `rng`) and each platform's rate limits (`limiter`; None: the shipped ones)."""

    clock: Clock
    sleep: Sleep = asyncio.sleep
    backoff: Backoff = Backoff()
    rng: random.Random | None = None
    limiter: RateLimiter | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a pending chunk is tried and when it is given up: `available(adapter key)` is False
    while its adapter is down; `max_rounds` delivery rounds, `max_rate_limited` 429s in one
    round."""

    max_rounds: int = 10
    max_rate_limited: int = 20
    available: Callable[[str], bool] | None = None


class _Outcome(enum.Enum):
    SENT = "sent"
    FAILED = "failed"  # will never be sent
    # still pending: a later round (retry timer, adapter back up, restart) sends it
    LATER = "later"


@dataclass(slots=True)
class _Tries:
    """One row's attempts within a delivery round."""

    use_plain: bool = False
    failures: int = 0
    rate_limited: int = 0


class Outbox:
    """Records and sends replies. `available(platform)` is False while the supervisor knows an
    adapter is not serving; its chunks then stay pending until `deliver_pending(platform)` runs when
    it is back."""

    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, Adapter],
        facts: Mapping[str, PlatformFacts],
        pacing: Pacing,
        *,
        retry: RetryPolicy = RetryPolicy(),
        metrics: Metrics | None = None,
        previews: PreviewBook | None = None,
    ) -> None:
        self.store = store
        self.previews = previews  # live previews the answer replaces (gateway/delivery/stream.py)
        self.adapters = adapters
        self.facts = facts
        self.clock = pacing.clock
        self.sleep = pacing.sleep
        self.backoff = pacing.backoff
        self.rng = pacing.rng or random.Random()
        self.limiter = pacing.limiter or RateLimiter(sleep=pacing.sleep)
        self.available = retry.available or (lambda platform: True)
        self.max_rounds = retry.max_rounds
        self.max_rate_limited = retry.max_rate_limited
        self.metrics = metrics
        self._locks: weakref.WeakValueDictionary[ChatKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._background: set[asyncio.Task[None]] = set()
        self.voice: VoiceReplies | None = None  # replies' spoken copies (gateway/delivery/voice.py)
        self.files: ChatFiles | None = None  # files for the chat (gateway/delivery/files.py)
        self.choices: list[Callable[[OutboundRow], Choices | None]] = []  # buttons: approvals/

    def rows_for(
        self,
        turn_id: str,
        chat: ChatRef,
        markdown: str,
        *,
        kind: OutboundKind = OutboundKind.REPLY,
        reply_to_id: str | None = None,
    ) -> list[dict[str, object]]:
        facts = self.facts.get(chat.platform) or self.facts["cli"]
        return render_rows(turn_id, chat, markdown, facts, kind=kind, reply_to_id=reply_to_id)

    async def post(
        self,
        turn_id: str,
        chat: ChatRef,
        markdown: str,
        *,
        kind: OutboundKind = OutboundKind.NOTICE,
        reply_to_id: str | None = None,
    ) -> list[str]:
        """Record and send a message that is not part
        of a stored turn (notices, command answers)."""
        rows = self.rows_for(turn_id, chat, markdown, kind=kind, reply_to_id=reply_to_id)
        self.store.insert_outbound(rows, now=self.clock())
        return await self.deliver(turn_id)

    def post_soon(
        self,
        turn_id: str,
        chat: ChatRef,
        markdown: str,
        *,
        kind: OutboundKind = OutboundKind.NOTICE,
        reply_to_id: str | None = None,
        unrecorded: bool = True,
    ) -> None:
        """Record now, send in the background: for callers on a platform's ack path (Slack wants its
        ack within 3 s; a 429 pause must not hold it). Order is still per chat: every flush sends in
        recorded order. A notice that cannot be recorded (the database takes no writes) is sent
        unrecorded rather than not at all, unless `unrecorded` is False: then StoreUnavailable is
        raised, for a caller that will post it again later (sent unrecorded each time, it would
        reach the chat once per try)."""
        rows = self.rows_for(turn_id, chat, markdown, kind=kind, reply_to_id=reply_to_id)
        try:
            self.store.insert_outbound(rows, now=self.clock())
        except StoreUnavailable:
            if not unrecorded:
                raise
            self.send_unrecorded(chat, markdown, reply_to_id=reply_to_id)
            return
        self.deliver_soon(turn_id)

    def send_unrecorded(
        self, chat: ChatRef, markdown: str, *, reply_to_id: str | None = None
    ) -> None:
        """Send a notice now without recording it, for when nothing can be recorded (the database
        takes no writes): best effort, in the background, never retried or resent after a
        restart."""
        adapter = self.adapters.get(chat.adapter_key)
        if adapter is None:
            return
        rows = self.rows_for(
            "unrecorded", chat, markdown, kind=OutboundKind.NOTICE, reply_to_id=reply_to_id
        )
        messages = [
            OutboundMessage(
                chat=chat,
                text=str(r["text"]),
                plain=str(r["plain"]),
                reply_to_id=reply_to_id,
                kind=OutboundKind.NOTICE,
                chunk_index=i,
                chunk_count=len(rows),
                entities=tuple(TextEntity(**e) for e in json.loads(str(r["entities"] or "[]"))),
            )
            for i, r in enumerate(rows)
        ]
        task = asyncio.get_running_loop().create_task(
            self._send_all(adapter, messages), name="send-unrecorded"
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_all(self, adapter: Adapter, messages: list[OutboundMessage]) -> None:
        try:
            for message in messages:
                await adapter.send(message)
        except Exception as exc:  # noqa: BLE001 (best effort: the user may not hear it, nothing else breaks)
            log.warning(
                "an unrecorded notice to %s could not be sent: %s", messages[0].chat.platform, exc
            )

    def deliver_soon(self, turn_id: str) -> None:
        """Send an already recorded turn in the background (its rows stay pending for the retry
        round if it fails)."""
        task = asyncio.get_running_loop().create_task(
            self._deliver_logged(turn_id), name=f"deliver:{turn_id}"
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def wait_background(self) -> None:
        """Wait for the background sends started by
        `post_soon` / `deliver_soon` (tests and drain)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def cancel_background(self) -> None:
        """Stop background sends (shutdown past the drain deadline); their chunks stay pending for
        the next boot."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)

    async def _deliver_logged(self, turn_id: str) -> None:
        try:
            await self.deliver(turn_id)
        except Exception:
            log.exception("delivering %s failed; it stays pending", turn_id)

    async def deliver(self, turn_id: str) -> list[str]:
        """Send the turn's unsent chunks (after any older unsent ones in its chat); returns the sent
        chunks' ids."""
        key = self.store.outbound_chat(turn_id)
        if key is None:
            return []
        await self._flush(key)
        return [
            r.platform_message_id or ""
            for r in self.store.outbound_for_turn(turn_id)
            if r.status == "sent"
        ]

    async def deliver_chat(self, chat: ChatRef) -> int:
        """Send the chat's unsent chunks in order (a turn that just recorded its reply: `deliver`
        without the reads that find its chat and report its ids); returns how many went. A voice row
        goes on in the background: speech takes seconds, and the session's next turn need not wait
        for it."""
        return await self._flush((chat.platform, chat.account, chat.chat_id), voice_later=True)

    async def deliver_pending(self, platform: str | None = None) -> int:
        """Send every recorded-but-unsent chunk (of one adapter, `platform` or `platform@account`,
        or all), chats in parallel; returns how many went."""
        chats: dict[ChatKey, None] = {}
        for row in self.store.pending_outbound():
            via = adapter_key(row.platform, row.account)
            if (platform is None or via == platform) and via in self.adapters:
                chats[(row.platform, row.account, row.chat_id)] = None
        sent = await asyncio.gather(*(self._flush(key) for key in chats))
        return sum(sent)

    async def retry_pending(self, every: float) -> None:
        """Run forever: a chunk left pending (platform down, retries exhausted) gets another round
        every `every` s."""
        while True:
            await self.sleep(every)
            try:
                await self.deliver_pending()
            except Exception:
                log.exception("retrying pending replies failed")

    async def _flush(self, key: ChatKey, *, voice_later: bool = False) -> int:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        sent = 0
        async with lock:
            while (row := self._next_pending(key)) is not None:
                if voice_later and row.kind == OutboundKind.VOICE.value:
                    self.deliver_soon(row.turn_id)  # in order still: it waits for this lock
                    break
                outcome = await self._send_row(row)
                if outcome is _Outcome.LATER:
                    break  # what follows in this chat would overtake it
                if outcome is _Outcome.FAILED:
                    self._fail_rest_of_turn(row)
                else:
                    sent += 1
        return sent

    def _next_pending(self, key: ChatKey) -> OutboundRow | None:
        # Re-read every time: a turn that finished meanwhile in this chat queues behind what is
        # already here.
        return self.store.next_pending_outbound(*key)

    def _fail_rest_of_turn(self, failed: OutboundRow) -> None:
        """A reply with a hole in the middle would mislead; the chunks after a failed one are not
        sent either."""
        for row in self.store.outbound_for_turn(failed.turn_id):
            if row.status == "pending" and row.chunk_index > failed.chunk_index:
                self.store.mark_outbound(
                    row.id,
                    "failed",
                    now=self.clock(),
                    error=f"not sent: chunk {failed.chunk_index} failed",
                )

    async def _send_row(self, row: OutboundRow) -> _Outcome:
        adapter = self._adapter_for(row)
        if isinstance(adapter, _Outcome):
            return adapter
        chat, tries = row_chat(row), _Tries()
        while True:
            await self.limiter.acquire(chat)
            try:
                message = self._with_choices(row, row_message(row, use_plain=tries.use_plain))
                if row.kind in PAYLOADS:
                    mid = await self._send_payload(adapter, row, message)
                elif self.previews is None:
                    mid = await adapter.send(message)
                else:
                    mid = await self.previews.deliver(adapter, row.turn_id, message)
            except Exception as exc:  # noqa: BLE001 (each kind is handled or logged in _after_failure)
                outcome = await self._after_failure(row, chat, exc, tries)
                if outcome is None:
                    continue
                return outcome
            # It is out: recording that must not be lost to a moment's lock or a full disk, or the
            # chunk would be sent again. The store's health waits (without blocking the loop) until
            # the record is written.
            await self.store.health.write(partial(self._mark, row, "sent", platform_message_id=mid))
            if self.previews is not None and row.chunk_index == row.chunk_count - 1:
                await self.previews.settle(adapter, row.turn_id, row.chunk_count, chat)
            return _Outcome.SENT

    def _with_choices(self, row: OutboundRow, message: OutboundMessage) -> OutboundMessage:
        """The last chunk of a message that has buttons carries them."""
        if row.chunk_index != row.chunk_count - 1 or row.kind in PAYLOADS:
            return message
        found = next((c for c in (source(row) for source in self.choices) if c is not None), None)
        return message if found is None else replace(message, choices=found)

    async def _send_payload(
        self, adapter: Adapter, row: OutboundRow, message: OutboundMessage
    ) -> str:
        """A voice note (`voice`) or a file (`files`): its bytes made or read as it is sent."""
        sender = self.voice if row.kind == OutboundKind.VOICE.value else self.files
        if sender is None:
            raise NotSendable(f"{row.kind} replies are no longer configured")
        return await sender.send(adapter, row, message)

    def _adapter_for(self, row: OutboundRow) -> Adapter | _Outcome:
        """The adapter to send this row with, or why not
        now (platform not serving, or too many rounds)."""
        via = adapter_key(row.platform, row.account)
        adapter = self.adapters.get(via)
        if adapter is None or not self.available(via):
            log.info(
                "%s is not serving; turn %s chunk %s stays pending",
                via,
                row.turn_id,
                row.chunk_index,
            )
            return _Outcome.LATER
        if row.attempts >= self.max_rounds:
            log.warning(
                "%s: giving up on turn %s chunk %s after %s rounds (last error: %s)",
                row.platform,
                row.turn_id,
                row.chunk_index,
                row.attempts,
                row.last_error,
            )
            self._mark(
                row, "failed", error=f"gave up after {row.attempts} rounds: {row.last_error}"
            )
            return _Outcome.FAILED
        return adapter

    async def _after_failure(
        self, row: OutboundRow, chat: ChatRef, exc: Exception, tries: _Tries
    ) -> _Outcome | None:
        """What a failed send means for this row: None = try again now, else the round's outcome."""
        if isinstance(exc, MarkupRejected):
            return self._markup_rejected(row, exc, tries)
        if isinstance(exc, RateLimited):
            return self._rate_limited(row, chat, exc, tries)
        if isinstance(exc, NotSendable):  # a voice note that could not be made, a file that is gone
            self._count_error(exc)
            self._mark(row, "failed", error=str(exc))
            return _Outcome.FAILED
        if isinstance(exc, RecipientUnavailable):
            self._count_error(exc)
            log.warning("%s: cannot deliver to chat %s: %s", row.platform, row.chat_id, exc)
            self._mark(row, "failed", error=str(exc))
            return _Outcome.FAILED
        return await self._send_failed(row, exc, tries)

    def _markup_rejected(
        self, row: OutboundRow, exc: MarkupRejected, tries: _Tries
    ) -> _Outcome | None:
        self._count_error(exc)
        if tries.use_plain:
            self._mark(row, "failed", error=f"plain text rejected too: {exc}")
            return _Outcome.FAILED
        log.warning(
            "%s rejected the markup of turn %s chunk %s (%s); resending it as plain text",
            row.platform,
            row.turn_id,
            row.chunk_index,
            exc,
        )
        tries.use_plain = True
        return None

    def _rate_limited(
        self, row: OutboundRow, chat: ChatRef, exc: RateLimited, tries: _Tries
    ) -> _Outcome | None:
        self._count_error(exc)
        tries.rate_limited += 1
        scope = "the bot" if exc.is_global else f"chat {row.chat_id}"
        log.info("%s: 429, pausing %s for %.3gs", row.platform, scope, exc.retry_after)
        self.limiter.pause(chat, exc.retry_after, is_global=exc.is_global)
        if tries.rate_limited > self.max_rate_limited:
            self._mark(row, "pending", error=str(exc))
            return _Outcome.LATER
        return None

    async def _send_failed(
        self, row: OutboundRow, exc: Exception, tries: _Tries
    ) -> _Outcome | None:
        """A 5xx, a dropped connection or a bug in the adapter:
        back off and retry, then keep it for later."""
        tries.failures += 1
        known = isinstance(exc, AdapterError)
        self._count_error(exc if known else "send_crash")
        up = self.available(adapter_key(row.platform, row.account))
        if tries.failures >= self.backoff.attempts or not up:
            log.warning(
                "%s: turn %s chunk %s not sent (%s); kept for a later round",
                row.platform,
                row.turn_id,
                row.chunk_index,
                exc,
                exc_info=not known,
            )
            self._mark(row, "pending", error=str(exc) or type(exc).__name__)
            return _Outcome.LATER
        delay = self.backoff.delay(tries.failures - 1, self.rng)
        log.warning(
            "%s send failed (%s); retry in %.2fs", row.platform, exc, delay, exc_info=not known
        )
        await self.sleep(delay)
        return None

    def _mark(
        self,
        row: OutboundRow,
        status: str,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> None:
        self.store.mark_outbound(
            row.id, status, now=self.clock(), platform_message_id=platform_message_id, error=error
        )
        if self.metrics is not None and status == "sent":
            self.metrics.message_out(row.platform, row.kind)
        elif self.metrics is not None and status == "failed":
            self.metrics.error("send_failed")

    def _count_error(self, error: BaseException | str) -> None:
        if self.metrics is not None:
            self.metrics.error(error if isinstance(error, str) else error_kind(error))

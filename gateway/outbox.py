"""Durable outbound delivery: a reply is rendered and split once, every chunk is recorded, then sent in order.

Each chunk's state lives in the `outbound` table, so a retry after an error or a restart sends exactly the
chunks that were not sent yet. Platform weather (429 retry_after, 5xx backoff, rejected markup) is handled
here per chat, so one slow chat never holds up another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gateway.chunking import render_chunks
from gateway.errors import AdapterError, MarkupRejected, PlatformUnavailable, RateLimited, RecipientUnavailable
from gateway.events import Adapter, ChatRef, OutboundKind, OutboundMessage, TextEntity
from gateway.hints import PlatformFacts
from gateway.markup import to_plain
from gateway.store import OutboundRow, Store

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter, bounded."""

    first: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    attempts: int = 6

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.maximum, self.first * self.factor ** attempt))


def render_rows(turn_id: str, chat: ChatRef, markdown: str, facts: PlatformFacts, *,
                kind: OutboundKind, reply_to_id: str | None) -> list[dict[str, object]]:
    """Split one reply into chunk rows for the outbound table (pure; the same input gives the same rows)."""
    if facts.flavor == "markdown":
        chunks = [(markdown, to_plain(markdown), ())] if markdown.strip() else []
    else:
        rendered = render_chunks(markdown, facts.flavor, limit=facts.max_length,  # type: ignore[arg-type]
                                 unit=facts.length_unit, max_lines=facts.max_lines)  # type: ignore[arg-type]
        chunks = [(c.text, c.plain, c.entities) for c in rendered]
    if not chunks:
        chunks = [("(empty reply)", "(empty reply)", ())]
    rows: list[dict[str, object]] = []
    for i, (text, plain, entities) in enumerate(chunks):
        rows.append({
            "turn_id": turn_id, "chunk_index": i, "chunk_count": len(chunks), "platform": chat.platform,
            "chat_type": chat.chat_type, "chat_id": chat.chat_id, "thread_id": chat.thread_id,
            "kind": kind.value, "text": text, "plain": plain, "reply_to_id": reply_to_id,
            "entities": json.dumps([e.__dict__ if hasattr(e, "__dict__") else _entity_dict(e) for e in entities])
            if entities else None,
        })
    return rows


def _entity_dict(e: object) -> dict[str, object]:
    return {k: getattr(e, k) for k in ("type", "offset", "length", "url", "language")}


def row_message(row: OutboundRow, *, use_plain: bool = False) -> OutboundMessage:
    entities = tuple(TextEntity(**e) for e in json.loads(row.entities)) if row.entities else ()
    chat = ChatRef(row.platform, row.chat_type, row.chat_id, row.thread_id)  # type: ignore[arg-type]
    return OutboundMessage(chat=chat, text=row.text, plain=row.plain, entities=entities,
                           reply_to_id=row.reply_to_id, kind=OutboundKind(row.kind), chunk_index=row.chunk_index,
                           chunk_count=row.chunk_count, use_plain=use_plain)


class Outbox:
    def __init__(self, store: Store, adapters: Mapping[str, Adapter], facts: Mapping[str, PlatformFacts], *,
                 clock: Clock, sleep: Sleep = asyncio.sleep, backoff: Backoff = Backoff(),
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.adapters = adapters
        self.facts = facts
        self.clock = clock
        self.sleep = sleep
        self.backoff = backoff
        self.rng = rng or random.Random()
        self._chat_locks: dict[tuple[str, str, str | None], asyncio.Lock] = {}
        self._paused_until: dict[tuple[str, str] | str, float] = {}

    def rows_for(self, turn_id: str, chat: ChatRef, markdown: str, *, kind: OutboundKind = OutboundKind.REPLY,
                 reply_to_id: str | None = None) -> list[dict[str, object]]:
        facts = self.facts.get(chat.platform) or self.facts["cli"]
        return render_rows(turn_id, chat, markdown, facts, kind=kind, reply_to_id=reply_to_id)

    async def post(self, turn_id: str, chat: ChatRef, markdown: str, *, kind: OutboundKind = OutboundKind.NOTICE,
                   reply_to_id: str | None = None) -> list[str]:
        """Record and send a message that is not part of a stored turn (notices, command answers)."""
        rows = self.rows_for(turn_id, chat, markdown, kind=kind, reply_to_id=reply_to_id)
        self.store.insert_outbound(rows, now=self.clock())
        return await self.deliver(turn_id)

    async def deliver(self, turn_id: str) -> list[str]:
        """Send every unsent chunk of a turn, in order; returns the platform ids of all sent chunks."""
        rows = self.store.outbound_for_turn(turn_id)
        if not rows:
            return []
        key = (rows[0].platform, rows[0].chat_id, rows[0].thread_id)
        lock = self._chat_locks.setdefault(key, asyncio.Lock())
        async with lock:
            sent: list[str] = []
            for row in self.store.outbound_for_turn(turn_id):
                if row.status == "sent":
                    sent.append(row.platform_message_id or "")
                    continue
                if row.status == "failed":
                    break
                mid = await self._send_row(row)
                if mid is None:
                    break  # later chunks would arrive out of order; they stay pending for a later retry
                sent.append(mid)
            return sent

    async def deliver_pending(self) -> int:
        """Restart replay: send every chunk recorded but not sent, oldest turn first."""
        turns: list[str] = []
        for row in self.store.pending_outbound():
            if row.turn_id not in turns:
                turns.append(row.turn_id)
        for turn_id in turns:
            await self.deliver(turn_id)
        return len(turns)

    async def _send_row(self, row: OutboundRow) -> str | None:
        adapter = self.adapters.get(row.platform)
        if adapter is None:
            log.warning("no adapter for %s; chunk %s of turn %s stays pending", row.platform, row.chunk_index,
                        row.turn_id)
            return None
        use_plain = False
        for attempt in range(self.backoff.attempts):
            try:
                mid = await adapter.send(row_message(row, use_plain=use_plain))
            except MarkupRejected as exc:
                if use_plain:
                    self.store.mark_outbound(row.id, "failed", now=self.clock(), error=str(exc))
                    return None
                log.warning("%s rejected markup for turn %s chunk %s; resending as plain text",
                            row.platform, row.turn_id, row.chunk_index)
                use_plain = True
                continue
            except RateLimited as exc:
                log.info("%s rate limited chat %s for %.2fs", row.platform, row.chat_id, exc.retry_after)
                await self.sleep(exc.retry_after)
                continue
            except RecipientUnavailable as exc:
                log.warning("%s: recipient unavailable for chat %s: %s", row.platform, row.chat_id, exc)
                self.store.mark_outbound(row.id, "failed", now=self.clock(), error=str(exc))
                return None
            except (PlatformUnavailable, AdapterError) as exc:
                delay = self.backoff.delay(attempt, self.rng)
                log.warning("%s send failed (%s); retry in %.2fs", row.platform, exc, delay)
                await self.sleep(delay)
                continue
            self.store.mark_outbound(row.id, "sent", now=self.clock(), platform_message_id=mid)
            return mid
        self.store.mark_outbound(row.id, "pending", now=self.clock(), error="gave up for now after retries")
        return None

"""Once a request is answered, its message shows the outcome and who decided instead of its buttons:
an edit through the adapter's `Interactive` ability, in the background, tried again after a 429 or
while the platform is down. A request whose message had not gone out yet is never sent (its buttons
would be stale).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

from gateway.approvals.book import ApprovalBook, ApprovalRow
from gateway.delivery.outbox import Outbox
from gateway.errors import AdapterError, RateLimited, StoreUnavailable
from gateway.events import (
    Adapter,
    ChatRef,
    Interactive,
    OutboundKind,
    OutboundMessage,
    TextEntity,
    adapter_key,
)

log = logging.getLogger(__name__)

RETRY_S = (1.0, 5.0, 15.0, 60.0, 300.0)


class Closer:
    def __init__(
        self,
        book: ApprovalBook,
        outbox: Outbox,
        adapters: Mapping[str, Adapter],
        *,
        clock: Callable[[], datetime],
        sleep: Callable[[float], Awaitable[None]],
        minutes: float,
    ) -> None:
        self.book = book
        self.outbox = outbox
        self.adapters = adapters
        self.clock = clock
        self.sleep = sleep
        self.minutes = minutes
        self._tasks: set[asyncio.Task[None]] = set()

    def close_soon(self, row: ApprovalRow, shown: str, line: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self._close(row, f"{shown}\n\n{line}"), name=f"approval-close:{row.id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Until the edits started so far are done (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _close(self, row: ApprovalRow, text: str) -> None:
        for delay in (*RETRY_S, None):
            try:
                await self._edit(row, text)
                self.book.closed(row.id, now=self.clock())
                return
            except RateLimited as exc:
                wait = max(exc.retry_after, delay or 0.0)
            except (AdapterError, StoreUnavailable) as exc:
                log.info("request %s: its message not updated yet (%s)", row.id, exc)
                wait = delay or 0.0
            # a task root: the decision stands, only its message keeps its buttons
            except Exception:
                log.exception("request %s: its message could not be updated", row.id)
                return
            if delay is None:
                log.warning(
                    "request %s: gave up updating its message; it keeps its buttons (a tap"
                    " on them is answered: already decided)",
                    row.id,
                )
                return
            await self.sleep(wait)

    async def _edit(self, row: ApprovalRow, text: str) -> None:
        store = self.book.store
        chunks = store.outbound_for_turn(row.message_turn)
        unsent = [c for c in chunks if c.status == "pending"]
        # answered before it went out (a /stop, the expiry, a restart): never send it
        for chunk in unsent:
            store.mark_outbound(
                chunk.id, "failed", now=self.clock(), error="answered before it was sent"
            )
        last = chunks[-1] if chunks else None
        if unsent or last is None or last.status != "sent" or not last.platform_message_id:
            return
        adapter = self.adapters.get(adapter_key(last.platform, last.account))
        if not isinstance(adapter, Interactive):
            return  # shown as text: the answer to /approve or /deny said what happened
        message = message_for(self.outbox, row.chat, text)
        await adapter.close_choices(message, chunks[-1].platform_message_id)


def message_for(outbox: Outbox, chat: ChatRef, markdown: str) -> OutboundMessage:
    """`markdown` rendered for the chat's platform as one message (its first chunk): an edit's
    new text."""
    row = outbox.rows_for("edit", chat, markdown, kind=OutboundKind.NOTICE)[0]
    entities = tuple(TextEntity(**e) for e in json.loads(str(row["entities"] or "[]")))
    return OutboundMessage(
        chat=chat,
        text=str(row["text"]),
        plain=str(row["plain"]),
        entities=entities,
        kind=OutboundKind.NOTICE,
    )

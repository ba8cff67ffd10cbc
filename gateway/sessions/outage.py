"""The session manager while the database takes no writes
(busy past a moment, disk full, read-only, I/O).

What is accepted is never lost: a turn that cannot store waits (without blocking the loop) and runs
again, its answer is stored once the database takes writes. What cannot be stored is not accepted:
submit raises (so a platform that delivers unconfirmed messages again still can) and the sender
hears so once per chat and outage, straight through the adapter (nothing can be recorded to send it
later).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from gateway.delivery.outbox import Outbox
from gateway.errors import StoreUnavailable
from gateway.events import Inbound
from gateway.llm.types import LLMReply
from gateway.store.database import Store
from gateway.store.rows import ModelCall
from gateway.store.transcript import encode_inbound

log = logging.getLogger("gateway.sessions.manager")

T = TypeVar("T")
# how long a new message waits for another process's write lock before it is refused
SUBMIT_WAIT_S = 10.0
NOT_STORED_TEXT = (
    "I couldn't save your message: the server's storage is not taking writes right now (it may be "
    "full), so I can't answer it. Please send it again later."
)


class StoreOutage:
    def __init__(self, store: Store, outbox: Outbox, *, submit_wait: float = SUBMIT_WAIT_S) -> None:
        self.store = store
        self.health = store.health
        self.outbox = outbox
        self.submit_wait = submit_wait
        # (platform, chat) → the outage they were told about
        self._told: dict[tuple[str, str], int] = {}

    async def write(self, call: Callable[[], T], *, on_submit: bool = False) -> T:
        """A store write that waits while the database is unavailable: for ever (until cancelled)
        inside a turn, `submit_wait` for another process's lock on the submit path, not at all there
        for a full or broken disk."""
        return await self.health.write(call, deadline=self.submit_wait if on_submit else None)

    async def intake(self, inbound: Inbound, *, status: str = "pending") -> int | None:
        """Store a new inbound row (write-ahead); its id, or None for a duplicate. `status` is
        `running` for a message whose turn starts at once (nothing queued before it), so its turn
        need not write that itself."""
        chat = inbound.chat
        payload = encode_inbound(inbound)
        return await self.write(
            lambda: self.store.insert_inbound(
                platform=chat.platform,
                chat_type=chat.chat_type,
                chat_id=chat.chat_id,
                thread_id=chat.thread_id,
                platform_message_id=inbound.message_id,
                user_id=inbound.user_id,
                user_name=inbound.user_name,
                text=inbound.text,
                payload=payload,
                received_at=inbound.received_at,
                account=chat.account,
                status=status,
            ),
            on_submit=True,
        )

    def not_stored(self, inbound: Inbound, exc: StoreUnavailable) -> None:
        """The message could not be stored: its chat hears so once per outage. The caller re-raises,
        so an adapter whose platform delivers again what it does not confirm (Slack, Telegram) still
        can."""
        chat = inbound.chat
        log.warning(
            "message not stored, the database takes no writes (%s) platform=%s chat=%s",
            exc,
            chat.platform,
            chat.chat_id,
        )
        where = (chat.adapter_key, chat.chat_id)
        if self._told.get(where) != self.health.outages and inbound.is_addressed:
            self._told[where] = self.health.outages
            self.outbox.send_unrecorded(chat, NOT_STORED_TEXT, reply_to_id=inbound.message_id)

    def record_usage(self, session_id: int, call: ModelCall, now: datetime) -> bool:
        """A model call on record now (a turn's tool steps may run long); False when the store took
        no write: the call goes into the turn's own transaction then, or is lost with a turn that
        is run again."""
        try:
            self.store.add_usage(
                session_id,
                call.usage,
                purpose=call.purpose,
                provider=call.provider,
                model=call.model,
                now=now,
            )
        except StoreUnavailable:
            return False
        return True

    async def turn(self, run: Callable[[], Awaitable[None]]) -> None:
        """Run a turn; when it could not store something, wait and run it again (its inbound row is
        still pending or running, so nothing the user sent is lost; a drain cancels the wait and
        replay takes over)."""
        attempt = 0
        while True:
            try:
                return await run()
            except StoreUnavailable as exc:
                attempt += 1
                if attempt == 1:
                    log.warning(
                        "a turn could not store its work (%s); it runs again when the database "
                        "takes writes",
                        exc,
                    )
                await self.health.pause(attempt)


def model_call(reply: LLMReply) -> ModelCall:
    """A turn's model call as its `llm_calls` row."""
    return ModelCall(reply.usage, purpose="turn", provider=reply.provider, model=reply.model)

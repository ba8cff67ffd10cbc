"""Telegram's pacing per chat: one request on the wire
at a time, and the flood wait a 429 announced.

A 429 answers one method, but Telegram's flood wait covers the chat: a sendMessage inside a wait
that a sendChatAction 429 started is refused too. So every request to a chat (a message or
"typing…") takes the chat's slot first and checks the wait there, and a 429 is always known before
that chat's next request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

# the longest a chat's request waits for its previous one (see ChatPacing.one_request)
REQUEST_WAIT_S = 10.0
# past this many chats with a wait noted, the waits that are over are forgotten
FLOOD_WAITS_KEPT = 1000


class ChatPacing:
    """Per chat: the request now on the wire, and the
    clock time until which Telegram told us to wait."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._flood_until: dict[str, float] = {}
        self._in_flight: dict[str, asyncio.Future[None]] = {}

    @asynccontextmanager
    async def one_request(self, chat_id: str) -> AsyncIterator[None]:
        """One request per chat on the wire at a time (the outbox already sends a chat's messages
        one by one; this keeps typing out of their way), so a 429 is always known before that chat's
        next request."""
        while (busy := self._in_flight.get(chat_id)) is not None:
            await asyncio.wait({busy}, timeout=REQUEST_WAIT_S)
            if not busy.done():
                break  # a stuck request does not hold the chat for ever
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._in_flight[chat_id] = done
        try:
            yield
        finally:
            done.set_result(None)
            if self._in_flight.get(chat_id) is done:
                del self._in_flight[chat_id]

    def flood_left(self, chat_id: str) -> float:
        """Seconds of the chat's flood wait still to sit out (0 or less: none)."""
        until = self._flood_until.get(chat_id)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._flood_until[chat_id]
        return left

    def note_flood(self, chat_id: str, retry_after: float) -> None:
        now = self._clock()
        if len(self._flood_until) > FLOOD_WAITS_KEPT:  # waits of chats that never sent again
            self._flood_until = {c: t for c, t in self._flood_until.items() if t > now}
        until = now + retry_after
        if until > self._flood_until.get(chat_id, 0.0):
            self._flood_until[chat_id] = until

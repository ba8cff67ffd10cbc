"""Which platform message shows which part of a turn's answer, kept durably so the final answer
replaces it.

The stream records a part's message the moment the platform names it, before that message is ever
edited; the outbox looks the part up when it sends chunk i of that turn and edits the message
instead of posting a new one, after a restart too. Parts the final answer does not need come down
once its last chunk went out. The table is small (only answers not yet out) and mirrored in memory,
so a turn without a preview costs the outbox one lookup.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from gateway.delivery.pacing import ChatPacer
from gateway.errors import PreviewGone
from gateway.events import Adapter, ChatRef, LivePreview, OutboundMessage
from gateway.store.database import Store

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]
# parts of turns that never finished (interrupted, given up) are forgotten
KEEP_STALE = timedelta(days=2)


class PreviewBook:
    def __init__(
        self, store: Store, pacer: ChatPacer, *, clock: Clock, sleep: Sleep = asyncio.sleep
    ) -> None:
        self.store = store
        self.pacer = pacer
        self.clock = clock
        self.sleep = sleep
        store.prune_previews(clock() - KEEP_STALE)
        self._parts: dict[str, dict[int, str]] = store.previews()
        # (turn, part) → hash of what its message shows now
        self._shown: dict[tuple[str, int], int] = {}

    def parts(self, turn_id: str) -> dict[int, str]:
        return dict(self._parts.get(turn_id, {}))

    def part(self, turn_id: str, index: int) -> str | None:
        found = self._parts.get(turn_id)
        return found.get(index) if found else None

    def has(self, turn_id: str) -> bool:
        return turn_id in self._parts

    def record(self, turn_id: str, index: int, chat: ChatRef, platform_message_id: str) -> None:
        self.store.put_preview(
            turn_id,
            index,
            chat.platform,
            chat.chat_id,
            platform_message_id,
            now=self.clock(),
            account=chat.account,
        )
        self._parts.setdefault(turn_id, {})[index] = platform_message_id

    def showing(self, turn_id: str, index: int, text: str, entities: object) -> None:
        """What part `index` of the turn's preview shows now (this process only): a final chunk that
        is exactly that needs no edit."""
        self._shown[(turn_id, index)] = hash((text, entities))

    def forget_part(self, turn_id: str, index: int) -> None:
        self._shown.pop((turn_id, index), None)
        found = self._parts.get(turn_id)
        if found is not None and found.pop(index, None) is not None:
            self.store.forget_previews(turn_id, index)
            if not found:
                del self._parts[turn_id]

    def forget_turn(self, turn_id: str) -> None:
        for index in self._parts.get(turn_id, {}):
            self._shown.pop((turn_id, index), None)
        if self._parts.pop(turn_id, None) is not None:
            self.store.forget_previews(turn_id)

    async def deliver(self, adapter: Adapter, turn_id: str, message: OutboundMessage) -> str:
        """The outbox's send of one chunk: the part of the preview that showed it becomes it (an
        edit, no second message, no sooner than the chat's preview pacing allows), else it is sent:
        at once after a draft (that is how a draft ends), a pacing interval after a preview's edit
        in the chat (another answer's, say)."""
        key = (message.chat.adapter_key, message.chat.chat_id)
        try:
            mid = self.part(turn_id, message.chunk_index)
            if (
                mid is not None
                and self._shown.get((turn_id, message.chunk_index))
                == hash((message.text, message.entities))
                and not message.use_plain
            ):
                return mid  # the preview already shows exactly this chunk
            if mid is not None and isinstance(adapter, LivePreview):
                if (wait := self.pacer.delay(key)) > 0:  # an edit, paced like the preview's own
                    await self.sleep(wait)
                try:
                    return await adapter.finish_preview(message, mid)
                except PreviewGone:
                    log.info(
                        "%s: the preview of %s part %s is gone; sent anew",
                        key[0],
                        turn_id,
                        message.chunk_index,
                    )
                    self.forget_part(turn_id, message.chunk_index)
            if (wait := self.pacer.delay(key, send=True)) > 0:
                # not on top of another answer's preview edit
                await self.sleep(wait)
            return await adapter.send(message)
        finally:
            self.pacer.note(key)

    async def settle(self, adapter: Adapter, turn_id: str, chunk_count: int, chat: ChatRef) -> None:
        """The answer is out: parts past its last chunk come down (the progress line stays), the
        rows go."""
        if turn_id not in self._parts:
            return
        for index, mid in sorted(self.parts(turn_id).items()):
            if index < chunk_count:
                continue
            try:
                await adapter.drop_preview(chat, mid)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 (a stale part is all that is left)
                log.info(
                    "%s: leftover preview part %s of %s not removed: %s",
                    chat.platform,
                    index,
                    turn_id,
                    exc,
                )
        self.forget_turn(turn_id)

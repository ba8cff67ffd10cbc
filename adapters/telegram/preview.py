"""Telegram live previews: `sendMessageDraft` in private chats, a message edited in place in groups.

A draft is Telegram's own ephemeral preview (gone after ~30 s or when the bot sends a message), so
in a private chat nothing is left to replace: the answer is a normal sendMessage. In a group the
preview is a real message, edited into the answer at the end. Every call takes the chat's slot in
`pacing` and never goes out inside a flood wait; the core paces them about one a second per chat. A
Bot API without drafts (a 400 or 404 for the method) makes private chats preview by edits too, from
then on.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any

from aiogram.exceptions import AiogramError, TelegramAPIError, TelegramBadRequest, TelegramNotFound

from adapters.telegram.outbound import Outbound
from adapters.telegram.text import PLATFORM, entity
from gateway.errors import PlatformUnavailable, PreviewGone, RateLimited
from gateway.events import ChatRef, OutboundMessage, PreviewPart, PreviewStyle, TextEntity

log = logging.getLogger("adapters.telegram.adapter")

# "avoid sending more than one message per second" in a chat (Bot FAQ); edits and drafts count too.
# A little over, so a clock that runs slightly apart from Telegram's never lands two calls inside
# one second.
INTERVAL_S = 1.1
# "a temporary 30-second preview" (Bot API, sendMessageDraft): a draft not updated for 30 s vanishes
DRAFT_TTL_S = 30.0
DRAFT_STYLE = PreviewStyle(INTERVAL_S, ephemeral=True, lasts_s=DRAFT_TTL_S)
EDIT_STYLE = PreviewStyle(INTERVAL_S)
# "In a group, bots are not able to send more than 20 messages per minute" (Bot FAQ), and edits
# share that budget (TDLib's maintainer: editing limits "are the same as for message sending ...
# about 20 times per minute"): a little over 3 s apart, a group's preview (and the answer's edit or
# send after it) stays under 20 a minute.
GROUP_STYLE = PreviewStyle(3.1)
_UNCHANGED = "message is not modified"
_GONE = ("message to edit not found", "message can't be edited", "message to delete not found")


class TelegramPreview:
    """Drafts and edits for the adapter's LivePreview
    ability, through its `Outbound` (bot, pacing, errors)."""

    def __init__(self, outbound: Outbound) -> None:
        self.out = outbound
        self.drafts = True  # until the Bot API says it has no sendMessageDraft

    def style(self, chat: ChatRef) -> PreviewStyle:
        if chat.chat_type != "dm":
            return GROUP_STYLE
        return DRAFT_STYLE if self.drafts else EDIT_STYLE

    async def show(self, part: PreviewPart) -> str:
        if self._drafting(part) and await self._draft(part):
            return ""
        if part.platform_message_id is None:
            # open the part's message: a reply to the asker, as chunk 0 is
            return await self.out.send(
                OutboundMessage(
                    chat=part.chat,
                    text=part.text,
                    plain=part.text,
                    entities=part.entities,
                    reply_to_id=part.reply_to_id,
                    chunk_index=max(part.index, 0),
                )
            )
        return await self._edit(part.chat, part.platform_message_id, part.text, part.entities)

    async def finish(self, message: OutboundMessage, platform_message_id: str) -> str:
        if message.use_plain:
            return await self._edit(message.chat, platform_message_id, message.plain, ())
        return await self._edit(message.chat, platform_message_id, message.text, message.entities)

    async def drop(self, chat: ChatRef, platform_message_id: str) -> None:
        bot = self._bot()
        async with self.out.pacing.one_request(chat.chat_id):
            try:
                await bot.delete_message(int(chat.chat_id), int(platform_message_id))
            except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
                log.info(
                    "telegram: preview %s in chat %s not deleted: %s",
                    platform_message_id,
                    chat.chat_id,
                    exc,
                )

    def _drafting(self, part: PreviewPart) -> bool:
        """A private chat's answer is drafted (the progress
        line is a message: it stays, as a record)."""
        return (
            part.platform_message_id is None
            and part.chat.chat_type == "dm"
            and self.drafts
            and not part.is_progress
        )

    # ------------------------------------------------------------------ the calls
    async def _draft(self, part: PreviewPart) -> bool:
        """One sendMessageDraft; False when this Bot API
        has none (then the caller opens a message)."""
        bot = self._bot()
        async with self.out.pacing.one_request(part.chat.chat_id):
            self._not_in_flood_wait(part.chat.chat_id)
            try:
                await bot.send_message_draft(
                    int(part.chat.chat_id),
                    draft_id(part.key),
                    text=part.text,
                    parse_mode=None,
                    entities=_entities(part.entities),
                    message_thread_id=_thread(part.chat),
                )
            except (TelegramNotFound, TelegramBadRequest) as exc:
                if "entit" in str(exc).lower():
                    raise self.out.translate_error(exc, part.chat.chat_id) from None
                log.warning(
                    "telegram: sendMessageDraft refused (%s); previews in private chats are edited "
                    "messages from now on",
                    exc,
                )
                self.drafts = False
                return False
            except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
                raise self.out.translate_error(exc, part.chat.chat_id) from None
        return True

    async def _edit(
        self, chat: ChatRef, platform_message_id: str, text: str, entities: tuple[TextEntity, ...]
    ) -> str:
        bot = self._bot()
        async with self.out.pacing.one_request(chat.chat_id):
            self._not_in_flood_wait(chat.chat_id)
            try:
                await bot.edit_message_text(
                    text=text,
                    chat_id=int(chat.chat_id),
                    message_id=int(platform_message_id),
                    parse_mode=None,
                    entities=_entities(entities),
                )
            except TelegramBadRequest as exc:
                if _UNCHANGED in str(exc):
                    return platform_message_id
                if any(gone in str(exc) for gone in _GONE):
                    raise PreviewGone(PLATFORM, str(exc)) from None
                raise self.out.translate_error(exc, chat.chat_id) from None
            except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
                raise self.out.translate_error(exc, chat.chat_id) from None
        return platform_message_id

    def _not_in_flood_wait(self, chat_id: str) -> None:
        left = self.out.pacing.flood_left(chat_id)
        if left > 0:  # never spend a request inside a flood wait: it would only lengthen it
            raise RateLimited(PLATFORM, left)

    def _bot(self) -> Any:
        if self.out.bot is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        return self.out.bot


def draft_id(key: str) -> int:
    """A non-zero 31-bit id, the same for every update of one part of one answer (so Telegram
    animates them)."""
    return zlib.crc32(key.encode()) % 2_147_483_646 + 1


def _entities(entities: tuple[TextEntity, ...]) -> list[Any] | None:
    return [entity(e) for e in entities] or None


def _thread(chat: ChatRef) -> int | None:
    return int(chat.thread_id) if chat.thread_id else None

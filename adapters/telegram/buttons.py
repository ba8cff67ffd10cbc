"""Telegram buttons (the `Interactive` ability): choices as an inline keyboard (text.keyboard), a
callback query as a tap (an `Inbound` with `picked`) answered with answerCallbackQuery, and a
decided request's keyboard replaced by its outcome with editMessageText.

"After the user presses a callback button, Telegram clients will display a progress bar until you
call answerCallbackQuery. It is, therefore, necessary to react by calling answerCallbackQuery even
if no notification to the user is needed" (Bot API, CallbackQuery); its `text` is 0-200 characters,
shown to the tapper alone.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from aiogram.exceptions import AiogramError, TelegramAPIError, TelegramBadRequest
from aiogram.types import CallbackQuery, Message

from adapters.telegram.outbound import Outbound
from adapters.telegram.text import CHAT_TYPES, PLATFORM, entity
from gateway.errors import PlatformUnavailable
from gateway.events import ChatRef, Inbound, OutboundMessage, Submit
from gateway.events.choices import parse_choice

log = logging.getLogger("adapters.telegram.adapter")

ANSWER_TEXT_MAX = 200  # answerCallbackQuery: "text ... 0-200 characters"
FAILED_TEXT = "Sorry, that did not work on my side; please try again."
_UNCHANGED = "message is not modified"


def tap_inbound(query: CallbackQuery) -> Inbound | None:
    """A tap on one of our buttons as the core sees it; None for data that is not ours."""
    picked = parse_choice(query.data)
    message = query.message
    if picked is None or message is None:
        return None
    chat_type = CHAT_TYPES.get(message.chat.type)
    if chat_type is None:
        return None
    topic = None
    if isinstance(message, Message) and message.is_topic_message:
        topic = message.message_thread_id
    user = query.from_user
    return Inbound(
        chat=ChatRef(PLATFORM, chat_type, str(message.chat.id), str(topic) if topic else None),
        user_id=str(user.id),
        text="",
        message_id=f"cb{query.id}",
        received_at=datetime.now(UTC),
        user_name=user.full_name,
        username=user.username,
        picked=picked,
    )


class Buttons:
    def __init__(self, outbound: Outbound) -> None:
        self.out = outbound

    async def tap(self, query: CallbackQuery, submit: Submit | None) -> None:
        """Hand the tap to the core, then answer the query with what the core said to the tapper."""
        inbound = tap_inbound(query)
        notice = ""
        if inbound is not None and submit is not None:
            try:
                notice = (await submit(inbound)).notice
            # a task root for one tap: the spinner must stop, the tapper hears it failed
            except Exception:
                log.exception("telegram: a tap in chat %s not handled", inbound.chat.chat_id)
                notice = FAILED_TEXT
        if self.out.bot is None:
            return
        text = notice if len(notice) <= ANSWER_TEXT_MAX else notice[: ANSWER_TEXT_MAX - 1] + "…"
        try:
            await self.out.bot.answer_callback_query(query.id, text=text or None)
        # too old, or Telegram is away
        except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
            log.info("telegram: callback query %s not answered: %s", query.id, exc)

    async def close(self, message: OutboundMessage, platform_message_id: str) -> None:
        """The message's text becomes `message` (its outcome) and its keyboard goes."""
        bot = self.out.bot
        if bot is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        chat_id = message.chat.chat_id
        async with self.out.pacing.one_request(chat_id):
            try:
                await bot.edit_message_text(
                    text=message.text,
                    chat_id=int(chat_id),
                    message_id=int(platform_message_id),
                    parse_mode=None,
                    entities=[entity(e) for e in message.entities] or None,
                )
            except TelegramBadRequest as exc:
                if _UNCHANGED not in str(exc):
                    raise self.out.translate_error(exc, chat_id) from None
            except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
                raise self.out.translate_error(exc, chat_id) from None

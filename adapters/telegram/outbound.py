"""Telegram outbound: a chunk → sendMessage, and "typing…"
(sendChatAction) refreshed while a turn runs.

Both take the chat's slot in `pacing` first, so neither spends a request inside a flood wait the
other was told about, and a reply never overtakes a typing request already on the wire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiogram import Bot
from aiogram.enums import ChatAction
from aiogram.exceptions import (
    AiogramError,
    TelegramAPIError,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramRetryAfter,
)
from aiogram.types import ReplyParameters

from adapters.telegram.pacing import ChatPacing
from adapters.telegram.text import PLATFORM, entity, keyboard, platform_message_id, send_error
from gateway.errors import AdapterError, PlatformUnavailable, RateLimited, RecipientUnavailable
from gateway.events import ChatRef, OutboundMessage

# one logger for the Telegram adapter, whichever module speaks
log = logging.getLogger("adapters.telegram.adapter")

TYPING_INTERVAL_S = 4.0  # Telegram shows "typing…" for 5 s per sendChatAction
# a "typing…" request that takes longer is not worth holding the chat's reply for
TYPING_TIMEOUT_S = 5


class Outbound:
    """What goes to a chat. `bot` is set once the adapter's `start` has made it; a chat whose 403
    was logged is remembered, so the warning comes once until `reachable` says the bot is back in
    it."""

    def __init__(
        self, clock: Callable[[], float], typing_interval: float = TYPING_INTERVAL_S
    ) -> None:
        self.bot: Bot | None = None

        self.typing_interval = typing_interval
        self.pacing = ChatPacing(clock)
        self._unavailable: set[str] = set()  # chats whose 403 was already logged
        self._typing_tasks: set[asyncio.Task[None]] = set()
        # may outlive their turn (see _keep_typing)
        self._typing_requests: set[asyncio.Future[float | None]] = set()

    def reachable(self, chat_id: str) -> None:
        self._unavailable.discard(chat_id)

    def close(self) -> None:
        for task in list(self._typing_tasks):
            task.cancel()
        for request in list(self._typing_requests):
            request.cancel()

    # ------------------------------------------------------------------ messages
    async def send(self, message: OutboundMessage) -> str:
        if self.bot is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        async with self.pacing.one_request(message.chat.chat_id):
            left = self.pacing.flood_left(message.chat.chat_id)
            if left > 0:
                raise RateLimited(PLATFORM, left)
            return await self._send_now(message)

    async def _send_now(self, message: OutboundMessage) -> str:
        assert self.bot is not None
        chat_id = int(message.chat.chat_id)
        kwargs: dict[str, Any] = {}
        if message.chat.thread_id:
            kwargs["message_thread_id"] = int(message.chat.thread_id)
        target = platform_message_id(message.reply_to_id)
        if message.chat.is_group and target is not None and message.chunk_index == 0:
            kwargs["reply_parameters"] = ReplyParameters(
                message_id=target, allow_sending_without_reply=True
            )
        if message.use_plain or not message.entities:
            text, entities = (message.plain if message.use_plain else message.text), None
        else:
            text, entities = message.text, [entity(e) for e in message.entities]
        # buttons (the Interactive ability: adapters/telegram/buttons.py)
        if message.choices is not None:
            kwargs["reply_markup"] = keyboard(message.choices)
        try:
            try:
                sent = await self.bot.send_message(
                    chat_id, text, entities=entities, parse_mode=None, **kwargs
                )
            except TelegramMigrateToChat as exc:  # the group became a supergroup with a new id
                log.info("telegram: chat %s migrated to %s", chat_id, exc.migrate_to_chat_id)
                sent = await self.bot.send_message(
                    exc.migrate_to_chat_id, text, entities=entities, parse_mode=None, **kwargs
                )
        except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
            raise self.translate_error(exc, message.chat.chat_id) from None
        self._unavailable.discard(message.chat.chat_id)
        return str(sent.message_id)

    def translate_error(self, exc: BaseException, chat_id: str) -> AdapterError:
        error = send_error(exc)
        if isinstance(error, RateLimited):
            # the outbox pauses the chat's sends; typing must pause too
            self.pacing.note_flood(chat_id, error.retry_after)
        if isinstance(error, RecipientUnavailable) and chat_id not in self._unavailable:
            self._unavailable.add(chat_id)
            log.warning(
                "telegram: cannot write to chat %s (%s); its replies are dropped", chat_id, exc
            )
        return error

    # ------------------------------------------------------------------ typing
    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """Refresh "typing…" every few seconds while the turn runs; stop the moment it ends."""
        task = asyncio.get_running_loop().create_task(
            self._keep_typing(chat), name=f"telegram-typing:{chat.chat_id}"
        )
        self._typing_tasks.add(task)
        task.add_done_callback(self._typing_tasks.discard)
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def typing_active(self) -> int:
        return len(self._typing_tasks)

    async def _keep_typing(self, chat: ChatRef) -> None:
        if self.bot is None:
            return
        thread = int(chat.thread_id) if chat.thread_id else None
        while True:
            on_wire = asyncio.Event()
            request = asyncio.ensure_future(self._typing_once(chat, thread, on_wire))
            self._typing_requests.add(request)
            request.add_done_callback(self._typing_requests.discard)
            try:
                wait = await asyncio.shield(request)
            except asyncio.CancelledError:
                # The turn ended. A request already on the wire is left to finish: it still holds
                # the chat's slot, so the reply's send cannot overtake it, and a 429 it gets is
                # noted before that send.
                if not on_wire.is_set():
                    request.cancel()
                raise
            if wait is None:
                return
            await asyncio.sleep(wait or self.typing_interval)

    async def _typing_once(
        self, chat: ChatRef, thread: int | None, on_wire: asyncio.Event
    ) -> float | None:
        """One sendChatAction in the chat's slot; returns the flood wait to sit out (0: none), None
        to stop."""
        assert self.bot is not None
        async with self.pacing.one_request(chat.chat_id):
            left = self.pacing.flood_left(chat.chat_id)
            if left > 0:  # never spend a request inside a flood wait: it would only lengthen it
                return left
            on_wire.set()
            try:
                await self.bot.send_chat_action(
                    int(chat.chat_id),
                    ChatAction.TYPING,
                    message_thread_id=thread,
                    request_timeout=TYPING_TIMEOUT_S,
                )
            except TelegramForbiddenError:
                return None
            except TelegramRetryAfter as exc:
                self.pacing.note_flood(chat.chat_id, float(exc.retry_after))
                log.info(
                    "telegram: typing in chat %s hit a flood wait of %ss; sends there wait too",
                    chat.chat_id,
                    exc.retry_after,
                )
                return float(exc.retry_after)
            except (TelegramAPIError, AiogramError, OSError) as exc:
                log.debug("telegram: typing indicator for chat %s failed: %s", chat.chat_id, exc)
            return 0.0

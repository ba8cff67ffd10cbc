"""Telegram adapter on aiogram 3: one Bot, one Dispatcher,
one Router; updates → `Inbound`, chunks → sendMessage.

An update is acknowledged to Telegram (polling offset, webhook 200) only after `submit` has stored
it, so a crash between receiving and storing makes Telegram deliver it again; the store's dedupe
answers it once. This module holds the lifecycle (polling or webhook) and the inbound side; the
webhook's HTTP server is in `webhook`, sending and "typing…" in `outbound` (paced per chat by
`pacing`), live previews of an answer being written in `preview`, the pure translation (addressing,
senders, keys, error mapping) in `text`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from typing import Any

from aiogram import Bot, Dispatcher, Router
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNotFound,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, CallbackQuery, ChatMemberUpdated, Message, User
from aiogram.utils.token import TokenValidationError

from adapters.telegram.albums import Albums
from adapters.telegram.buttons import Buttons
from adapters.telegram.files import file_chunks
from adapters.telegram.outbound import TYPING_INTERVAL_S, Outbound
from adapters.telegram.preview import TelegramPreview
from adapters.telegram.text import (
    CHAT_TYPES,
    PLATFORM,
    Addressing,
    addressing,
    attachments,
    forwarded_from,
    message_key,
    real_reply,
    sender_handle,
    sender_id,
    sender_name,
    utc,
)
from adapters.telegram.voice import send_document, send_voice
from adapters.telegram.webhook import NotStored, WebhookServer
from gateway.config.settings import TelegramConfig
from gateway.errors import AdapterError, AdapterFatal, MediaUnavailable
from gateway.events import (
    DEFAULT_ACCOUNT,
    Attachment,
    ChatRef,
    Inbound,
    OutboundAudio,
    OutboundFile,
    OutboundMessage,
    PreviewPart,
    PreviewStyle,
    ServeHttp,
    Submit,
    SubmitOutcome,
    SubmitResult,
    on_account,
)

__all__ = ["COMMANDS", "Addressing", "TelegramAdapter", "addressing"]

log = logging.getLogger(__name__)

SUBMIT_RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0)
COMMANDS: tuple[tuple[str, str], ...] = (
    ("new", "Start a new conversation"),
    ("reset", "Start a new conversation (same as /new)"),
    ("status", "Show the session, model and token usage"),
    ("usage", "Show token usage of this session"),
    ("stop", "Stop the answer in progress"),
    ("retry", "Answer your last message again"),
    ("undo", "Forget the last exchange"),
    ("jobs", "Your scheduled jobs (/jobs cancel ID stops one)"),
    ("voice", "Voice replies in this chat: /voice on or off"),
    ("model", "List the models, or switch: /model NAME"),
    ("link", "Link this account with yours on another platform"),
    ("help", "List the commands"),
)


class TelegramAdapter:
    """`start` checks the token (getMe), registers
    commands and begins polling or serving the webhook."""

    platform = PLATFORM
    space_noun = "group"  # where a job's creator must still be (gateway.events.MemberRoles)

    def __init__(
        self,
        config: TelegramConfig,
        *,
        typing_interval: float = TYPING_INTERVAL_S,
        submit_retry_delays: Sequence[float] = SUBMIT_RETRY_DELAYS_S,
        clock: Callable[[], float] = time.monotonic,
        serve: ServeHttp | None = None,
        account: str = DEFAULT_ACCOUNT,
    ) -> None:
        self.config = config
        self.account = account  # the bot account (one adapter each): what it hands in names it
        self.submit_retry_delays = tuple(submit_retry_delays)
        self._submit: Submit | None = None
        self._bot: Bot | None = None
        self._dp: Dispatcher | None = None
        self._me: User | None = None
        self._polling: asyncio.Task[None] | None = None
        self._webhook = WebhookServer(config, serve)
        # sendMessage and "typing…", paced per chat
        self._outbound = Outbound(clock, typing_interval)
        # a group's albums: which speak to us, and the parts before the one that does
        self._albums = Albums()
        self._preview = TelegramPreview(self._outbound)  # drafts in private chats, edits in groups
        self._buttons = Buttons(self._outbound)  # inline keyboards and their callback queries

    # ------------------------------------------------------------------ lifecycle
    async def start(self, submit: Submit) -> None:
        self._submit = on_account(submit, self.account)
        bot = self._bot = self._outbound.bot = self._make_bot()
        try:
            self._me = await self._get_me(bot)
            self._dp = Dispatcher(disable_fsm=True)  # no states used; its storage grows per chat
            self._dp.include_router(self._router())
            await self._set_commands(bot)
            if self.config.mode == "webhook":
                await self._start_webhook(bot, self._dp)
            else:
                await self._call(bot.delete_webhook(drop_pending_updates=False), "deleteWebhook")
                self._polling = asyncio.get_running_loop().create_task(
                    self._poll(bot), name="telegram-polling"
                )
        except BaseException:
            await bot.session.close()
            raise
        log.info("telegram: @%s ready (%s)", self._me.username, self.config.mode)

    async def stop(self) -> None:
        self._outbound.close()
        if self._polling is not None and self._dp is not None:
            with suppress(RuntimeError):  # polling already ended on its own
                await self._dp.stop_polling()
            await asyncio.gather(self._polling, return_exceptions=True)
            self._polling = None
        await self._webhook.close()
        if self._bot is not None:
            await self._bot.session.close()

    async def wait_closed(self) -> None:
        """Return (or raise why) once polling ended on its own, so the supervisor restarts us; a
        webhook server and a healthy polling loop never end by themselves."""
        task = self._polling
        if task is None:
            await asyncio.Future()
            return
        await asyncio.wait([task])  # never cancels the polling task itself
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """An attachment's bytes through getFile (the core bounds size and time; see `files`)."""
        if self._bot is None:
            raise MediaUnavailable("Telegram is not connected")
        return file_chunks(self._bot, attachment, local=self.config.local_api)

    def _make_bot(self) -> Bot:
        api = TelegramAPIServer.from_base(
            self.config.api_server.rstrip("/"), is_local=self.config.local_api
        )
        try:
            return Bot(self.config.token.value, session=AiohttpSession(api=api))
        except TokenValidationError:
            raise AdapterFatal(
                PLATFORM, "token rejected (malformed) — check TELEGRAM_BOT_TOKEN"
            ) from None

    async def _get_me(self, bot: Bot) -> User:
        try:
            return await bot.me()
        except (TelegramUnauthorizedError, TelegramNotFound):
            raise AdapterFatal(
                PLATFORM, "token rejected (401) — check TELEGRAM_BOT_TOKEN"
            ) from None
        except (TelegramAPIError, AiogramError, OSError) as exc:
            raise AdapterError(
                PLATFORM, f"cannot reach the Bot API at {self.config.api_server}: {exc}"
            ) from None

    async def _set_commands(self, bot: Bot) -> None:
        commands = [BotCommand(command=name, description=text) for name, text in COMMANDS]
        try:
            await bot.set_my_commands(commands)
        except (TelegramAPIError, AiogramError) as exc:
            log.warning("telegram: setMyCommands failed (%s); the command menu may be stale", exc)

    async def _call(self, call: Any, what: str) -> Any:
        try:
            return await call
        except (TelegramAPIError, AiogramError) as exc:
            raise AdapterError(PLATFORM, f"{what} failed: {exc}") from None

    def _router(self) -> Router:
        router = Router(name="gateway")
        router.message.register(self._on_message)
        if self.config.answer_edited:
            router.edited_message.register(self._on_message)
        if self.config.answer_channel_posts:
            router.channel_post.register(self._on_message)
        router.my_chat_member.register(self._on_membership)
        router.callback_query.register(self._on_callback)
        return router

    async def _poll(self, bot: Bot) -> None:
        """aiogram sends the next offset only after the
        handler returns, and the handler awaits `submit`."""
        assert self._dp is not None
        await self._dp.start_polling(
            bot,
            polling_timeout=self.config.polling_timeout,
            handle_as_tasks=False,
            handle_signals=False,
            close_bot_session=False,
        )

    async def _start_webhook(self, bot: Bot, dp: Dispatcher) -> None:
        cfg = self.config
        await self._webhook.serve(bot, dp)
        await self._call(
            bot.set_webhook(
                url=cfg.webhook_url or "",
                secret_token=self._webhook.secret,
                allowed_updates=dp.resolve_used_update_types(),
                drop_pending_updates=False,
            ),
            "setWebhook",
        )
        log.info(
            "telegram: webhook listening on %s:%s%s", cfg.listen_host, self._webhook.port, cfg.path
        )

    @property
    def webhook_port(self) -> int | None:
        return self._webhook.port

    # ------------------------------------------------------------------ inbound
    async def _on_message(self, message: Message) -> None:
        inbound = self.translate(message)
        if inbound is None:
            return
        if inbound.group_id and inbound.chat.chat_type != "dm":
            # an album's earlier parts, held until now
            for part in self._albums.address((message.chat.id, inbound.group_id)):
                await self._submit_stored(part)
        # /start too: the gate pairs a stranger, the commands greet a known user
        await self._submit_stored(inbound)

    def translate(self, message: Message) -> Inbound | None:
        """The message as the core sees it, or None when it is not for us (dropped at the edge)."""
        assert self._me is not None
        cfg = self.config
        chat_type = CHAT_TYPES.get(message.chat.type)
        sender = message.from_user
        if chat_type is None or (
            sender is not None
            and sender.is_bot
            and not cfg.answer_bots
            and message.sender_chat is None
        ):
            return None
        files = attachments(message)
        raw_text = message.text if message.text is not None else (message.caption or "")
        if not raw_text.strip() and not files:
            return None  # service message: joins, pins, topic changes …
        said = addressing(raw_text, message.entities or message.caption_entities or (), self._me)
        if said.for_other_bot:
            return None
        replied = real_reply(message)
        to_us = (
            replied is not None
            and replied.from_user is not None
            and replied.from_user.id == self._me.id
        )
        album = (message.chat.id, message.media_group_id) if message.media_group_id else None
        addressed = (
            chat_type == "dm"
            or said.mentioned
            or said.command
            or to_us
            or bool(album and self._albums.addressed(album))
        )
        inbound = Inbound(
            chat=ChatRef(
                PLATFORM,
                chat_type,
                str(message.chat.id),
                str(message.message_thread_id)
                if message.is_topic_message and message.message_thread_id
                else None,
            ),
            user_id=sender_id(message),
            user_name=sender_name(message),
            username=sender_handle(message),
            text=said.text,
            message_id=message_key(message),
            received_at=utc(message.edit_date or message.date),
            reply_to_id=str(replied.message_id) if replied is not None else None,
            attachments=files,
            group_id=message.media_group_id,
            forwarded_from=forwarded_from(message),
            is_addressed=addressed,
            is_bot=bool(sender and sender.is_bot and message.sender_chat is None),
            chat_title=message.chat.title,
            space_id=str(message.chat.id) if chat_type != "dm" else None,
        )
        if chat_type != "dm" and cfg.require_mention and not addressed:
            if album is not None and files:
                self._albums.hold(album, inbound)  # a later part of its album may still @mention us
            return None
        return inbound

    async def member_roles(self, space_id: str, user_id: str) -> tuple[str, ...] | None:
        """Whether a job's creator is still in the group it posts to (a group is the space here;
        Telegram has no roles): () when they are, None when they left, were removed, or the bot was;
        AdapterError when Telegram cannot say. An anonymous admin or a channel (a chat id) cannot be
        asked: ()."""
        if self._bot is None:
            raise AdapterError(PLATFORM, "not connected")
        if not user_id.isdigit():
            return ()
        try:
            member = await self._bot.get_chat_member(int(space_id), int(user_id))
        except TelegramBadRequest:  # "chat not found", "user not found", "member not found"
            return None
        except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
            raise AdapterError(PLATFORM, f"cannot look up member {user_id}: {exc}") from None
        gone = member.status in ("left", "kicked") or getattr(member, "is_member", True) is False
        return None if gone else ()

    async def _submit_stored(self, inbound: Inbound) -> SubmitResult:
        """Return only once the inbound is stored (or refused
        for good); until then the update stays unconfirmed."""
        assert self._submit is not None
        for attempt, delay in enumerate((*self.submit_retry_delays, None)):
            try:
                result = await self._submit(inbound)
            except Exception as exc:
                if self.config.mode == "webhook" or delay is None:
                    log.error(
                        "telegram: message %s in chat %s not stored (%s); %s",
                        inbound.message_id,
                        inbound.chat.chat_id,
                        exc,
                        "giving up" if delay is None else "Telegram will resend",
                    )
                    raise
                log.warning(
                    "telegram: storing message %s failed (%s); retry %s in %.0fs",
                    inbound.message_id,
                    exc,
                    attempt + 1,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
                log.info(
                    "telegram: shutting down; message %s in chat "
                    "%s stays with Telegram for the next run",
                    inbound.message_id,
                    inbound.chat.chat_id,
                )
                if self.config.mode == "webhook":
                    raise NotStored
                await asyncio.Future()  # hold the offset until stop() cancels polling
            return result
        raise AssertionError("unreachable")

    async def _on_callback(self, query: CallbackQuery) -> None:
        """A tap on one of our buttons: handed to the core, then answered (buttons.py)."""
        await self._buttons.tap(query, self._submit)

    async def close_choices(self, message: OutboundMessage, platform_message_id: str) -> None:
        """A decided request: its keyboard goes, its text shows the outcome."""
        await self._buttons.close(message, platform_message_id)

    async def _on_membership(self, event: ChatMemberUpdated) -> None:
        status = event.new_chat_member.status
        if status in ("kicked", "left"):
            log.warning(
                "telegram: the bot was %s chat %s (%s)",
                "blocked in" if event.chat.type == "private" else "removed from",
                event.chat.id,
                event.chat.title or "private chat",
            )
        elif status in ("member", "administrator"):
            self._outbound.reachable(str(event.chat.id))
            log.info(
                "telegram: the bot is now %s of chat %s (%s)",
                status,
                event.chat.id,
                event.chat.title or "private chat",
            )

    # ------------------------------------------------------------------ outbound (in `outbound`)
    async def send(self, message: OutboundMessage) -> str:
        return await self._outbound.send(message)

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        """Refresh "typing…" every few seconds while the turn runs; stop the moment it ends."""
        return self._outbound.typing(chat)

    async def send_audio(self, audio: OutboundAudio) -> str:
        """A voice reply (sendVoice; in `voice`)."""
        return await send_voice(self._outbound, audio)

    async def send_file(self, file: OutboundFile) -> str:
        """A file as a document (sendDocument; in `voice`)."""
        return await send_document(self._outbound, file)

    # ----------------------------------------------------------------- live previews (in `preview`)
    def preview_style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle:
        return self._preview.style(chat)

    async def show_preview(self, part: PreviewPart) -> str:
        return await self._preview.show(part)

    async def finish_preview(self, message: OutboundMessage, platform_message_id: str) -> str:
        return await self._preview.finish(message, platform_message_id)

    async def drop_preview(self, chat: ChatRef, platform_message_id: str) -> None:
        await self._preview.drop(chat, platform_message_id)

    @property
    def typing_active(self) -> int:
        return self._outbound.typing_active

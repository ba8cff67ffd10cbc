"""Telegram adapter on aiogram 3: one Bot, one Dispatcher, one Router; updates → `Inbound`, chunks → sendMessage.

An update is acknowledged to Telegram (polling offset, webhook 200) only after `submit` has stored it, so a
crash between receiving and storing makes Telegram deliver it again; the store's dedupe answers it once.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiogram import Bot, Dispatcher, Router
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ChatAction
from aiogram.exceptions import (AiogramError, TelegramAPIError, TelegramBadRequest, TelegramForbiddenError,
                                TelegramMigrateToChat, TelegramNetworkError, TelegramNotFound, TelegramRetryAfter,
                                TelegramServerError, TelegramUnauthorizedError)
from aiogram.types import (BotCommand, ChatMemberUpdated, Message, MessageEntity, ReplyParameters, Update, User)
from aiogram.utils.token import TokenValidationError
from aiohttp import web

from gateway.config import TelegramConfig
from gateway.errors import (AdapterError, AdapterFatal, MarkupRejected, PlatformUnavailable, RateLimited,
                            RecipientUnavailable)
from gateway.events import (Attachment, ChatRef, ChatType, Inbound, OutboundMessage, Submit, SubmitOutcome,
                            SubmitResult)

log = logging.getLogger(__name__)

PLATFORM = "telegram"
TYPING_INTERVAL_S = 4.0  # Telegram shows "typing…" for 5 s per sendChatAction
SUBMIT_RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0)
COMMANDS: tuple[tuple[str, str], ...] = (
    ("new", "Start a new conversation"),
    ("reset", "Start a new conversation (same as /new)"),
    ("status", "Show the session, model and token usage"),
    ("usage", "Show token usage of this session"),
    ("stop", "Stop the answer in progress"),
    ("retry", "Answer your last message again"),
    ("undo", "Forget the last exchange"),
    ("help", "List the commands"),
)
_CHAT_TYPES: dict[str, ChatType] = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}


class _NotStored(Exception):
    """The gateway did not store the update (shutting down): Telegram must deliver it again."""


@dataclass(frozen=True, slots=True)
class Addressing:
    """What the message says to whom: the text with our @mention removed, and the verdicts."""

    text: str
    mentioned: bool = False
    command: bool = False
    for_other_bot: bool = False


class TelegramAdapter:
    """`start` checks the token (getMe), registers commands and begins polling or serving the webhook."""

    platform = PLATFORM

    def __init__(self, config: TelegramConfig, *, typing_interval: float = TYPING_INTERVAL_S,
                 submit_retry_delays: Sequence[float] = SUBMIT_RETRY_DELAYS_S) -> None:
        self.config = config
        self.typing_interval = typing_interval
        self.submit_retry_delays = tuple(submit_retry_delays)
        self.webhook_port: int | None = None
        self._submit: Submit | None = None
        self._bot: Bot | None = None
        self._dp: Dispatcher | None = None
        self._me: User | None = None
        self._polling: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self._secret = ""
        self._unavailable: set[str] = set()  # chats whose 403 was already logged
        self._typing_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle
    async def start(self, submit: Submit) -> None:
        self._submit = submit
        bot = self._bot = self._make_bot()
        try:
            self._me = await self._get_me(bot)
            self._dp = Dispatcher()
            self._dp.include_router(self._router())
            await self._set_commands(bot)
            if self.config.mode == "webhook":
                await self._start_webhook(bot)
            else:
                await self._call(bot.delete_webhook(drop_pending_updates=False), "deleteWebhook")
                self._polling = asyncio.get_running_loop().create_task(self._poll(bot), name="telegram-polling")
        except BaseException:
            await bot.session.close()
            raise
        log.info("telegram: @%s ready (%s)", self._me.username, self.config.mode)

    async def stop(self) -> None:
        for task in list(self._typing_tasks):
            task.cancel()
        if self._polling is not None and self._dp is not None:
            with suppress(RuntimeError):  # polling already ended on its own
                await self._dp.stop_polling()
            await asyncio.gather(self._polling, return_exceptions=True)
            self._polling = None
        if self._runner is not None:
            await self._runner.cleanup()  # the webhook stays set: Telegram keeps updates until we are back
            self._runner = None
        if self._bot is not None:
            await self._bot.session.close()

    async def wait_closed(self) -> None:
        """Return (or raise why) once polling ended on its own, so the supervisor restarts us; a webhook server
        and a healthy polling loop never end by themselves."""
        task = self._polling
        if task is None:
            await asyncio.Future()
            return
        await asyncio.wait([task])  # never cancels the polling task itself
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    def _make_bot(self) -> Bot:
        api = TelegramAPIServer.from_base(self.config.api_server.rstrip("/"))
        try:
            return Bot(self.config.token.value, session=AiohttpSession(api=api))
        except TokenValidationError:
            raise AdapterFatal(PLATFORM, "token rejected (malformed) — check TELEGRAM_BOT_TOKEN") from None

    async def _get_me(self, bot: Bot) -> User:
        try:
            return await bot.me()
        except (TelegramUnauthorizedError, TelegramNotFound):
            raise AdapterFatal(PLATFORM, "token rejected (401) — check TELEGRAM_BOT_TOKEN") from None
        except (TelegramAPIError, AiogramError, OSError) as exc:
            raise AdapterError(PLATFORM, f"cannot reach the Bot API at {self.config.api_server}: {exc}") from None

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
        return router

    async def _poll(self, bot: Bot) -> None:
        """aiogram sends the next offset only after the handler returns, and the handler awaits `submit`."""
        assert self._dp is not None
        await self._dp.start_polling(bot, polling_timeout=self.config.polling_timeout, handle_as_tasks=False,
                                     handle_signals=False, close_bot_session=False)

    async def _start_webhook(self, bot: Bot) -> None:
        cfg = self.config
        # Without a configured secret, a fresh random one still keeps strangers from posting fake updates.
        self._secret = cfg.secret_token.value if cfg.secret_token else secrets.token_urlsafe(32)
        app = web.Application()
        app.router.add_post(cfg.path, self._on_webhook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.listen_host, cfg.listen_port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or ()
        self.webhook_port = sockets[0].getsockname()[1] if sockets else None
        assert self._dp is not None
        await self._call(bot.set_webhook(url=cfg.webhook_url or "", secret_token=self._secret,
                                         allowed_updates=self._dp.resolve_used_update_types(),
                                         drop_pending_updates=False), "setWebhook")
        log.info("telegram: webhook listening on %s:%s%s", cfg.listen_host, self.webhook_port, cfg.path)

    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            return web.Response(status=401, text="Unauthorized")
        assert self._bot is not None and self._dp is not None
        try:
            update = Update.model_validate(await request.json(), context={"bot": self._bot})
        except ValueError:
            return web.Response(status=400, text="not an Update")
        try:
            await self._dp.feed_update(self._bot, update)
        except _NotStored:
            return web.Response(status=503, text="shutting down")
        except Exception:  # noqa: BLE001 - a non-2xx answer makes Telegram deliver the update again
            log.exception("telegram: update %s not stored", update.update_id)
            return web.Response(status=500, text="not stored")
        return web.json_response({})

    # ------------------------------------------------------------------ inbound
    async def _on_message(self, message: Message) -> None:
        inbound = self.translate(message)
        if inbound is not None:  # /start too: the gate pairs a stranger, the commands greet a known user
            await self._submit_stored(inbound)

    def translate(self, message: Message) -> Inbound | None:
        """The message as the core sees it, or None when it is not for us (dropped at the edge)."""
        assert self._me is not None
        cfg = self.config
        chat_type = _CHAT_TYPES.get(message.chat.type)
        sender = message.from_user
        if chat_type is None or (sender is not None and sender.is_bot and not cfg.answer_bots
                                 and message.sender_chat is None):
            return None
        attachments = _attachments(message)
        raw_text = message.text if message.text is not None else (message.caption or "")
        if not raw_text.strip() and not attachments:
            return None  # service message: joins, pins, topic changes …
        said = addressing(raw_text, message.entities or message.caption_entities or (), self._me)
        if said.for_other_bot:
            return None
        replied = _real_reply(message)
        to_us = replied is not None and replied.from_user is not None and replied.from_user.id == self._me.id
        addressed = chat_type == "dm" or said.mentioned or said.command or to_us
        if chat_type != "dm" and cfg.require_mention and not addressed:
            return None
        return Inbound(
            chat=ChatRef(PLATFORM, chat_type, str(message.chat.id),
                         str(message.message_thread_id) if message.is_topic_message and message.message_thread_id
                         else None),
            user_id=_sender_id(message), user_name=_sender_name(message), username=_sender_handle(message),
            text=said.text,
            message_id=_message_key(message), received_at=_utc(message.edit_date or message.date),
            reply_to_id=str(replied.message_id) if replied is not None else None, attachments=attachments,
            is_addressed=addressed, is_bot=bool(sender and sender.is_bot and message.sender_chat is None),
            chat_title=message.chat.title)

    async def _submit_stored(self, inbound: Inbound) -> SubmitResult:
        """Return only once the inbound is stored (or refused for good); until then the update stays unconfirmed."""
        assert self._submit is not None
        for attempt, delay in enumerate((*self.submit_retry_delays, None)):
            try:
                result = await self._submit(inbound)
            except Exception as exc:  # noqa: BLE001 - storing failed: keep the update unconfirmed and retry
                if self.config.mode == "webhook" or delay is None:
                    log.error("telegram: message %s in chat %s not stored (%s); %s", inbound.message_id,
                              inbound.chat.chat_id, exc, "giving up" if delay is None else "Telegram will resend")
                    raise
                log.warning("telegram: storing message %s failed (%s); retry %s in %.0fs", inbound.message_id,
                            exc, attempt + 1, delay)
                await asyncio.sleep(delay)
                continue
            if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
                log.info("telegram: shutting down; message %s in chat %s stays with Telegram for the next run",
                         inbound.message_id, inbound.chat.chat_id)
                if self.config.mode == "webhook":
                    raise _NotStored
                await asyncio.Future()  # hold the offset until stop() cancels polling
            return result
        raise AssertionError("unreachable")

    async def _on_membership(self, event: ChatMemberUpdated) -> None:
        status = event.new_chat_member.status
        if status in ("kicked", "left"):
            log.warning("telegram: the bot was %s chat %s (%s)", "blocked in" if event.chat.type == "private"
                        else "removed from", event.chat.id, event.chat.title or "private chat")
        elif status in ("member", "administrator"):
            self._unavailable.discard(str(event.chat.id))
            log.info("telegram: the bot is now %s of chat %s (%s)", status, event.chat.id,
                     event.chat.title or "private chat")

    # ------------------------------------------------------------------ outbound
    async def send(self, message: OutboundMessage) -> str:
        if self._bot is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        chat_id = int(message.chat.chat_id)
        kwargs: dict[str, Any] = {}
        if message.chat.thread_id:
            kwargs["message_thread_id"] = int(message.chat.thread_id)
        target = _platform_message_id(message.reply_to_id)
        if message.chat.is_group and target is not None and message.chunk_index == 0:
            kwargs["reply_parameters"] = ReplyParameters(message_id=target, allow_sending_without_reply=True)
        if message.use_plain or not message.entities:
            text, entities = (message.plain if message.use_plain else message.text), None
        else:
            text, entities = message.text, [_entity(e) for e in message.entities]
        try:
            try:
                sent = await self._bot.send_message(chat_id, text, entities=entities, parse_mode=None, **kwargs)
            except TelegramMigrateToChat as exc:  # the group became a supergroup with a new id
                log.info("telegram: chat %s migrated to %s", chat_id, exc.migrate_to_chat_id)
                sent = await self._bot.send_message(exc.migrate_to_chat_id, text, entities=entities,
                                                    parse_mode=None, **kwargs)
        except (TelegramAPIError, AiogramError, asyncio.TimeoutError, OSError) as exc:
            raise self._translate_error(exc, message.chat.chat_id) from None
        self._unavailable.discard(message.chat.chat_id)
        return str(sent.message_id)

    def _translate_error(self, exc: BaseException, chat_id: str) -> AdapterError:
        if isinstance(exc, TelegramRetryAfter):
            return RateLimited(PLATFORM, float(exc.retry_after))
        text = str(exc).lower()
        if isinstance(exc, TelegramBadRequest) and ("can't parse entities" in text or "entit" in text):
            return MarkupRejected(PLATFORM, str(exc))
        gone = ("chat not found", "thread not found", "not enough rights", "have no rights", "bot was kicked")
        if isinstance(exc, TelegramForbiddenError) or (isinstance(exc, TelegramBadRequest)
                                                       and any(g in text for g in gone)):
            if chat_id not in self._unavailable:
                self._unavailable.add(chat_id)
                log.warning("telegram: cannot write to chat %s (%s); its replies are dropped", chat_id, exc)
            return RecipientUnavailable(PLATFORM, str(exc))
        if isinstance(exc, (TelegramServerError, TelegramNetworkError, asyncio.TimeoutError, OSError)):
            return PlatformUnavailable(PLATFORM, str(exc) or type(exc).__name__)
        if isinstance(exc, TelegramAPIError):
            return AdapterError(PLATFORM, str(exc))
        return PlatformUnavailable(PLATFORM, f"{type(exc).__name__}: {exc}")  # decode errors and the like

    # ------------------------------------------------------------------ typing
    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """Refresh "typing…" every few seconds while the turn runs; stop the moment it ends."""
        task = asyncio.get_running_loop().create_task(self._keep_typing(chat), name=f"telegram-typing:{chat.chat_id}")
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
        if self._bot is None:
            return
        thread = int(chat.thread_id) if chat.thread_id else None
        while True:
            try:
                await self._bot.send_chat_action(int(chat.chat_id), ChatAction.TYPING, message_thread_id=thread)
            except TelegramForbiddenError:
                return
            except (TelegramAPIError, AiogramError, OSError) as exc:
                log.debug("telegram: typing indicator for chat %s failed: %s", chat.chat_id, exc)
            await asyncio.sleep(self.typing_interval)


# ---------------------------------------------------------------------- pure translation helpers
def addressing(text: str, entities: Sequence[MessageEntity], me: User) -> Addressing:
    """Read mentions and a leading command from Telegram's entities (UTF-16 offsets); drop our @mention."""
    username = (me.username or "").lower()
    mentioned = command = other = False
    cuts: list[tuple[int, int, str]] = []  # (start, end, replacement) as str indices
    for entity in entities:
        start, end = _index(text, entity.offset), _index(text, entity.offset + entity.length)
        piece = text[start:end]
        if entity.type == "mention" and username and piece[1:].lower() == username:
            mentioned = True
            cuts.append((start, end, ""))
        elif entity.type == "text_mention" and entity.user is not None and entity.user.id == me.id:
            mentioned = True
        elif entity.type == "bot_command" and entity.offset == 0:
            name, _, target = piece.partition("@")
            if target and target.lower() != username:
                other = True
            else:
                command = True
                if target:
                    cuts.append((start, end, name))
    for start, end, replacement in sorted(cuts, reverse=True):
        text = _cut(text, start, end, replacement)
    return Addressing(text=text.strip(), mentioned=mentioned, command=command, for_other_bot=other)


def _cut(text: str, start: int, end: int, replacement: str) -> str:
    if replacement:
        return text[:start] + replacement + text[end:]
    before, after = text[:start], text[end:]
    if not before.strip():
        after = re.sub(r"^[,:;]?\s*", "", after)  # "@bot, what…" → "what…"
    elif before.endswith((" ", "\n")) and after.startswith(" "):
        after = after[1:]
    return before + after


def _index(text: str, utf16_offset: int) -> int:
    """The str index of a UTF-16 offset (characters outside the BMP count twice in Telegram's offsets)."""
    units = 0
    for i, ch in enumerate(text):
        if units >= utf16_offset:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(text)


def _real_reply(message: Message) -> Message | None:
    """In a forum topic every message "replies" to the topic's creation; that is not a reply."""
    replied = message.reply_to_message
    if replied is None or replied.forum_topic_created is not None:
        return None
    return replied


def _attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if message.photo:
        found.append(Attachment("photo", size=message.photo[-1].file_size))
    for kind, media in (("document", message.document), ("audio", message.audio), ("video", message.video)):
        if media is not None:
            found.append(Attachment(kind, name=getattr(media, "file_name", None),
                                    mime_type=getattr(media, "mime_type", None), size=media.file_size))
    if message.voice is not None:
        found.append(Attachment("audio", name="voice message", mime_type=message.voice.mime_type,
                                size=message.voice.file_size))
    if message.sticker is not None:
        found.append(Attachment("sticker", name=message.sticker.emoji))
    return tuple(found)


def _sender_id(message: Message) -> str:
    if message.sender_chat is not None:  # anonymous admin or channel: the chat speaks
        return str(message.sender_chat.id)
    return str(message.from_user.id) if message.from_user else str(message.chat.id)


def _sender_name(message: Message) -> str | None:
    if message.sender_chat is not None:
        return message.author_signature or message.sender_chat.title
    return message.from_user.full_name if message.from_user else None


def _sender_handle(message: Message) -> str | None:
    sender = message.sender_chat or message.from_user
    return sender.username if sender is not None else None


def _message_key(message: Message) -> str:
    """Telegram's message id; an edit gets its own key so the store does not take it for a redelivery."""
    if message.edit_date is not None:
        return f"{message.message_id}-e{int(_utc(message.edit_date).timestamp())}"
    return str(message.message_id)


def _platform_message_id(our_id: str | None) -> int | None:
    head = (our_id or "").split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _utc(value: datetime | int) -> datetime:
    if isinstance(value, int):
        return datetime.fromtimestamp(value, UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _entity(e: Any) -> MessageEntity:
    return MessageEntity(type=e.type, offset=e.offset, length=e.length, url=e.url, language=e.language)

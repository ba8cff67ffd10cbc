"""Telegram adapter on aiogram 3: one Bot, one Dispatcher, one Router; updates → `Inbound`, chunks → sendMessage.

An update is acknowledged to Telegram (polling offset, webhook 200) only after `submit` has stored it, so a
crash between receiving and storing makes Telegram deliver it again; the store's dedupe answers it once.
The pure translation (addressing, senders, keys, error mapping) is in `telegram_text`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

from aiogram import Bot, Dispatcher, Router
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.enums import ChatAction
from aiogram.exceptions import (
    AiogramError,
    TelegramAPIError,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, ChatMemberUpdated, Message, ReplyParameters, Update, User
from aiogram.utils.token import TokenValidationError
from aiohttp import web

from adapters.telegram.text import (
    CHAT_TYPES,
    PLATFORM,
    Addressing,
    addressing,
    attachments,
    entity,
    message_key,
    platform_message_id,
    real_reply,
    send_error,
    sender_handle,
    sender_id,
    sender_name,
    utc,
)
from gateway.config.settings import TelegramConfig
from gateway.errors import AdapterError, AdapterFatal, PlatformUnavailable, RateLimited, RecipientUnavailable
from gateway.events import ChatRef, Inbound, OutboundMessage, Submit, SubmitOutcome, SubmitResult

__all__ = ["COMMANDS", "Addressing", "TelegramAdapter", "addressing"]

log = logging.getLogger(__name__)

TYPING_INTERVAL_S = 4.0  # Telegram shows "typing…" for 5 s per sendChatAction
TYPING_TIMEOUT_S = 5      # a "typing…" request that takes longer is not worth holding the chat's reply for
REQUEST_WAIT_S = 10.0    # the longest a chat's request waits for its previous one (see _one_request)
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


class _NotStored(Exception):
    """The gateway did not store the update (shutting down): Telegram must deliver it again."""


class TelegramAdapter:
    """`start` checks the token (getMe), registers commands and begins polling or serving the webhook."""

    platform = PLATFORM

    def __init__(self, config: TelegramConfig, *, typing_interval: float = TYPING_INTERVAL_S,
                 submit_retry_delays: Sequence[float] = SUBMIT_RETRY_DELAYS_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
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
        self._typing_requests: set[asyncio.Future[float | None]] = set()  # may outlive their turn (see above)
        self._clock = clock
        # chat id -> clock time until which Telegram told us to wait. A 429 answers one method, but the flood
        # wait covers the chat: a sendMessage inside a wait that a sendChatAction 429 started is refused too.
        self._flood_until: dict[str, float] = {}
        self._in_flight: dict[str, asyncio.Future[None]] = {}  # chat id -> its request now on the wire

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
        for request in list(self._typing_requests):
            request.cancel()
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
        except Exception:
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
        chat_type = CHAT_TYPES.get(message.chat.type)
        sender = message.from_user
        if chat_type is None or (sender is not None and sender.is_bot and not cfg.answer_bots
                                 and message.sender_chat is None):
            return None
        files = attachments(message)
        raw_text = message.text if message.text is not None else (message.caption or "")
        if not raw_text.strip() and not files:
            return None  # service message: joins, pins, topic changes …
        said = addressing(raw_text, message.entities or message.caption_entities or (), self._me)
        if said.for_other_bot:
            return None
        replied = real_reply(message)
        to_us = replied is not None and replied.from_user is not None and replied.from_user.id == self._me.id
        addressed = chat_type == "dm" or said.mentioned or said.command or to_us
        if chat_type != "dm" and cfg.require_mention and not addressed:
            return None
        return Inbound(
            chat=ChatRef(PLATFORM, chat_type, str(message.chat.id),
                         str(message.message_thread_id) if message.is_topic_message and message.message_thread_id
                         else None),
            user_id=sender_id(message), user_name=sender_name(message), username=sender_handle(message),
            text=said.text,
            message_id=message_key(message), received_at=utc(message.edit_date or message.date),
            reply_to_id=str(replied.message_id) if replied is not None else None, attachments=files,
            is_addressed=addressed, is_bot=bool(sender and sender.is_bot and message.sender_chat is None),
            chat_title=message.chat.title)

    async def _submit_stored(self, inbound: Inbound) -> SubmitResult:
        """Return only once the inbound is stored (or refused for good); until then the update stays unconfirmed."""
        assert self._submit is not None
        for attempt, delay in enumerate((*self.submit_retry_delays, None)):
            try:
                result = await self._submit(inbound)
            except Exception as exc:
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
        async with self._one_request(message.chat.chat_id):
            left = self._flood_left(message.chat.chat_id)
            if left > 0:
                raise RateLimited(PLATFORM, left)
            return await self._send_now(message)

    async def _send_now(self, message: OutboundMessage) -> str:
        assert self._bot is not None
        chat_id = int(message.chat.chat_id)
        kwargs: dict[str, Any] = {}
        if message.chat.thread_id:
            kwargs["message_thread_id"] = int(message.chat.thread_id)
        target = platform_message_id(message.reply_to_id)
        if message.chat.is_group and target is not None and message.chunk_index == 0:
            kwargs["reply_parameters"] = ReplyParameters(message_id=target, allow_sending_without_reply=True)
        if message.use_plain or not message.entities:
            text, entities = (message.plain if message.use_plain else message.text), None
        else:
            text, entities = message.text, [entity(e) for e in message.entities]
        try:
            try:
                sent = await self._bot.send_message(chat_id, text, entities=entities, parse_mode=None, **kwargs)
            except TelegramMigrateToChat as exc:  # the group became a supergroup with a new id
                log.info("telegram: chat %s migrated to %s", chat_id, exc.migrate_to_chat_id)
                sent = await self._bot.send_message(exc.migrate_to_chat_id, text, entities=entities,
                                                    parse_mode=None, **kwargs)
        except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
            raise self._translate_error(exc, message.chat.chat_id) from None
        self._unavailable.discard(message.chat.chat_id)
        return str(sent.message_id)

    @asynccontextmanager
    async def _one_request(self, chat_id: str) -> AsyncIterator[None]:
        """One request per chat on the wire at a time (the outbox already sends a chat's messages one by one;
        this keeps typing out of their way), so a 429 is always known before that chat's next request."""
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

    def _flood_left(self, chat_id: str) -> float:
        until = self._flood_until.get(chat_id)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._flood_until[chat_id]
        return left

    def _note_flood(self, chat_id: str, retry_after: float) -> None:
        now = self._clock()
        if len(self._flood_until) > 1000:  # waits of chats that never sent again
            self._flood_until = {c: t for c, t in self._flood_until.items() if t > now}
        until = now + retry_after
        if until > self._flood_until.get(chat_id, 0.0):
            self._flood_until[chat_id] = until

    def _translate_error(self, exc: BaseException, chat_id: str) -> AdapterError:
        error = send_error(exc)
        if isinstance(error, RateLimited):  # the outbox pauses the chat's sends; typing must pause too
            self._note_flood(chat_id, error.retry_after)
        if isinstance(error, RecipientUnavailable) and chat_id not in self._unavailable:
            self._unavailable.add(chat_id)
            log.warning("telegram: cannot write to chat %s (%s); its replies are dropped", chat_id, exc)
        return error

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
            on_wire = asyncio.Event()
            request = asyncio.ensure_future(self._typing_once(chat, thread, on_wire))
            self._typing_requests.add(request)
            request.add_done_callback(self._typing_requests.discard)
            try:
                wait = await asyncio.shield(request)
            except asyncio.CancelledError:
                # The turn ended. A request already on the wire is left to finish: it still holds the chat's
                # slot, so the reply's send cannot overtake it, and a 429 it gets is noted before that send.
                if not on_wire.is_set():
                    request.cancel()
                raise
            if wait is None:
                return
            await asyncio.sleep(wait or self.typing_interval)

    async def _typing_once(self, chat: ChatRef, thread: int | None, on_wire: asyncio.Event) -> float | None:
        """One sendChatAction in the chat's slot; returns the flood wait to sit out (0: none), None to stop."""
        assert self._bot is not None
        async with self._one_request(chat.chat_id):
            left = self._flood_left(chat.chat_id)
            if left > 0:  # never spend a request inside a flood wait: it would only lengthen it
                return left
            on_wire.set()
            try:
                await self._bot.send_chat_action(int(chat.chat_id), ChatAction.TYPING, message_thread_id=thread,
                                                 request_timeout=TYPING_TIMEOUT_S)
            except TelegramForbiddenError:
                return None
            except TelegramRetryAfter as exc:
                self._note_flood(chat.chat_id, float(exc.retry_after))
                log.info("telegram: typing in chat %s hit a flood wait of %ss; sends there wait too",
                         chat.chat_id, exc.retry_after)
                return float(exc.retry_after)
            except (TelegramAPIError, AiogramError, OSError) as exc:
                log.debug("telegram: typing indicator for chat %s failed: %s", chat.chat_id, exc)
            return 0.0

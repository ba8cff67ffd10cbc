"""Slack adapter on slack-bolt (async): one AsyncApp over Socket Mode or the HTTP Events API; events → `Inbound`,
chunks → chat.postMessage (or a slash command's `respond`).

Stored, then acked: bolt runs our listener before it answers Slack (`process_before_response`), and the listener
only translates and hands the message to `submit` (which stores and queues; the turn runs later), so a message we
ack is on disk and one we could not store is not acked and comes again. Slack gives up after 3 s, so the listener
is bounded: lookups that enrich a message (conversations.info, users.info, a thread's history) get 1.5 s together;
what is not back by then is guessed from the id, left out, or, for a thread's history, shown with the thread's next
message (this one carries a note); and the listener returns by 2.5 s even when the core is still sending an inline
answer (a command's reply), which in any case waits until the ack is out. Slack's redeliveries are dropped here
by event id and, failing that, by the store's dedupe on channel + ts.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Hashable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from gateway.config import SlackConfig
from gateway.errors import (AdapterError, AdapterFatal, MarkupRejected, PlatformUnavailable, RateLimited,
                            RecipientUnavailable)
from gateway.events import (Attachment, ChatRef, ChatType, Inbound, OutboundKind, OutboundMessage, Submit,
                            SubmitOutcome, SubmitResult)

log = logging.getLogger(__name__)

PLATFORM = "slack"
DEFAULT_API_URL = "https://slack.com/api/"
THINKING_REACTION = "eyes"
ENRICH_BUDGET_S = 1.5          # names, channel type, thread history: what is not back by then is guessed or deferred
ACK_BUDGET_S = 2.5             # the listener returns by then, whatever the core is still doing (Slack waits 3 s)
ACK_HOLD_S = 5.0               # an answer waits at most this long for its message's ack before going anyway
THREAD_UNREAD_NOTE = ("[This message is part of a thread that began before you joined; its earlier messages could "
                      "not be read in time and will come with the next message here.]")
REMEMBERED = 4096              # event ids, message keys, threads, people: bounded memories
RESPONSE_URL_USES = 5          # a slash command's response_url takes 5 posts within 30 minutes
RESPONSE_URL_TTL_S = 30 * 60.0
REPLIES_PAGE = 200
REPLIES_MAX_PAGES = 5
CONTEXT_LINE_CHARS = 1000
COMMAND_WORDS = frozenset({"new", "reset", "status", "usage", "stop", "retry", "undo", "help"})
# Subtypes that are a person saying something; edits (message_changed), deletions, joins and the like are not.
USER_SUBTYPES = frozenset({"", "file_share", "thread_broadcast", "me_message"})
NETWORK_ERRORS: tuple[type[BaseException], ...] = (SlackClientError, aiohttp.ClientError, OSError, TimeoutError)
API_ERRORS: tuple[type[BaseException], ...] = (SlackApiError, *NETWORK_ERRORS)
_CHANNEL_TYPES: dict[str, ChatType] = {"im": "dm", "mpim": "group", "group": "group", "channel": "channel"}
_FATAL_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
                           "not_allowed_token_type"})
_MARKUP_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_too_long", "no_text",
                            "invalid_attachments", "too_many_attachments"})
_GONE_ERRORS = frozenset({"channel_not_found", "not_in_channel", "is_archived", "account_inactive",
                          "user_not_found", "user_not_in_channel", "cannot_dm_bot", "restricted_action",
                          "team_access_not_granted"})
_TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
_ANGLE = re.compile(r"<([^<>]*)>")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


# ---------------------------------------------------------------------- small data
@dataclass(frozen=True, slots=True)
class _Me:
    user_id: str
    bot_id: str
    team_id: str
    name: str


@dataclass(frozen=True, slots=True)
class _Person:
    name: str | None = None     # display name, shown to the model
    handle: str | None = None   # the Slack username


@dataclass(frozen=True, slots=True)
class _Target:
    """Where an event goes, decided from the event alone (before any network call)."""

    channel: str
    ts: str
    user_id: str
    channel_type: str
    thread_id: str | None
    is_dm: bool
    addressed: bool
    hydrate: str | None   # the thread to read once before submitting
    is_bot: bool


@dataclass(slots=True)
class _Responder:
    """A slash command's `respond` (its response_url), kept under our message id for the replies."""

    respond: Callable[..., Awaitable[Any]]
    user_id: str
    channel_id: str
    created: float
    uses: int = 0


class _AckWindow:
    """One request from Slack (an HTTP post or a Socket Mode envelope), from its arrival until its ack is out.

    Set by the transport around bolt's dispatch and read by the listener through `_WINDOW`: the listener's
    deadlines count from `started`, and an answer to the message waits in `hold` until `close` (so a slash
    command's response_url post never comes before the command's ack).
    """

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        self.parked: asyncio.Future[None] = loop.create_future()  # an answer is waiting for the ack
        self._acked = asyncio.Event()
        self._on_close: list[Callable[[], None]] = []

    def deadline(self, budget: float) -> float:
        return self.started + budget

    def on_close(self, callback: Callable[[], None]) -> None:
        self._on_close.append(callback)

    def close(self) -> None:
        """The ack is out (or will never be): answers may go."""
        self._acked.set()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()

    async def hold(self, limit: float) -> None:
        if not self.parked.done():
            self.parked.set_result(None)
        try:
            async with asyncio.timeout(limit):
                await self._acked.wait()
        except TimeoutError:
            log.warning("slack: an answer waited %.0fs for its message's ack; sending it anyway", limit)


_WINDOW: contextvars.ContextVar[_AckWindow | None] = contextvars.ContextVar("slack_ack_window", default=None)


class NotStored(AdapterError):
    """The core did not store a message (it is shutting down): it must not be acked, so Slack sends it again."""


class _Recent:
    """A bounded set: the oldest keys go first, so memory for ids never grows without end."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, None] = OrderedDict()

    def add(self, key: Hashable) -> bool:
        """True when the key is new."""
        if key in self._items:
            self._items.move_to_end(key)
            return False
        self._items[key] = None
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return True

    def discard(self, key: Hashable) -> None:
        self._items.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._items


def _put(mapping: OrderedDict[K, V], key: K, value: V, size: int = REMEMBERED) -> None:
    mapping[key] = value
    mapping.move_to_end(key)
    if len(mapping) > size:
        mapping.popitem(last=False)


# ---------------------------------------------------------------------- Socket Mode plumbing
class _SocketClient(SocketModeClient):
    """The SDK's Socket Mode client, telling us about each pong (the SDK only keeps the time it parsed from it)."""

    on_pong: Callable[[float], None] | None = None
    _pong_time: float | None = None

    @property
    def last_ping_pong_time(self) -> float | None:
        return self._pong_time

    @last_ping_pong_time.setter
    def last_ping_pong_time(self, value: float | None) -> None:
        self._pong_time = value
        if value is not None and self.on_pong is not None:
            self.on_pong(value)


class _SocketHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler over our client (its own constructor would build a second, unused one), with
    an ack window around each envelope. Bolt sends no ack when the listener raised (status 500)."""

    def __init__(self, app: AsyncApp, client: _SocketClient) -> None:  # no super().__init__: see above
        self.app = app
        self.app_token = client.app_token
        self.client = client
        client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        window = _AckWindow()
        token = _WINDOW.set(window)
        try:
            started = time.time()
            response = await run_async_bolt_app(self.app, req)
            await send_async_response(client, req, response, started)
        finally:
            _WINDOW.reset(token)
            window.close()


def _events_endpoint(app: AsyncApp) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Bolt's aiohttp handler with an ack window: the response is written before the window closes."""

    async def handle(request: web.Request) -> web.StreamResponse:
        window = _AckWindow()
        token = _WINDOW.set(window)
        try:
            response = await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))
            await response.prepare(request)
            await response.write_eof()
            return response
        finally:
            _WINDOW.reset(token)
            window.close()

    return handle


# ---------------------------------------------------------------------- the adapter
class SlackAdapter:
    """`start` checks the bot token (auth.test), then opens Socket Mode or serves the Events API over HTTP.

    Platform-private state stays here, keyed by our ids: the threads the bot takes part in (so follow-ups need
    no mention) with the chat type each started with, the newest triggering message per chat (for the thinking
    reaction), slash commands' `respond` callables, Web API lookups in flight and the requests not yet acked.
    """

    platform = PLATFORM

    def __init__(self, config: SlackConfig, *, ping_interval: float = 10.0, ping_timeout: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic,
                 thinking_reaction: str = THINKING_REACTION, enrich_budget: float = ENRICH_BUDGET_S,
                 ack_budget: float = ACK_BUDGET_S) -> None:
        self.config = config
        self.ping_interval = ping_interval  # the SDK's own websocket ping cadence
        self.ping_timeout = ping_timeout
        self.monotonic = monotonic
        self.thinking_reaction = thinking_reaction
        self.enrich_budget = enrich_budget
        self.ack_budget = ack_budget
        self.http_port: int | None = None
        self._submit: Submit | None = None
        self._client: AsyncWebClient | None = None
        self._me: _Me | None = None
        self._socket: _SocketHandler | None = None
        self._runner: web.AppRunner | None = None
        self._listeners: set[asyncio.Task[Any]] = set()   # listeners and hand-ins: stop() lets them finish
        self._lookups: dict[Hashable, asyncio.Task[Any]] = {}  # Web API lookups in flight, shared by events
        self._overdue: set[asyncio.Task[Any]] = set()          # lookups a message already gave up waiting for
        self._acking: dict[tuple[str, str], _AckWindow] = {}  # (chat, our message id) → its request, until acked
        self._pongs: dict[float, asyncio.Future[None]] = {}
        self._event_ids = _Recent()
        self._message_keys = _Recent()
        self._threads: OrderedDict[tuple[str, str], ChatType] = OrderedDict()  # keeps the type it started with
        self._unread: OrderedDict[tuple[str, str], asyncio.Task[str]] = OrderedDict()  # thread reads that were late
        self._chat_types: OrderedDict[str, ChatType] = OrderedDict()
        self._people: OrderedDict[str, _Person] = OrderedDict()
        self._latest: OrderedDict[tuple[str, str | None], str] = OrderedDict()
        self._responders: OrderedDict[str, _Responder] = OrderedDict()

    # ------------------------------------------------------------------ lifecycle
    async def start(self, submit: Submit) -> None:
        cfg = self.config
        self._submit = submit
        client = self._client = AsyncWebClient(token=cfg.bot_token.value, base_url=cfg.api_url or DEFAULT_API_URL)
        me = self._me = await self._auth_test(client)
        app = self._build_app(client)
        try:
            if cfg.mode == "http":
                await self._serve_http(app)
            else:
                await self._connect_socket(app, client)
        except BaseException:
            await self.stop()
            raise
        log.info("slack: @%s ready in team %s (%s mode)", me.name, me.team_id, cfg.mode)

    async def stop(self) -> None:
        if self._socket is not None:
            socket, self._socket = self._socket, None
            await socket.close_async()  # type: ignore[no-untyped-call]
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        self.http_port = None
        busy = [t for t in self._listeners if not t.done()]
        if busy:  # messages being stored (not acked: Slack sends again what we drop here) and inline answers
            _, late = await asyncio.wait(busy, timeout=5.0)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        lookups = [*self._lookups.values(), *self._unread.values()]
        for task in lookups:
            task.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        self._lookups.clear()
        self._unread.clear()

    async def _auth_test(self, client: AsyncWebClient) -> _Me:
        try:
            found = await client.auth_test()
        except SlackApiError as exc:
            raise _start_error(exc, "bot token", "SLACK_BOT_TOKEN") from None
        except NETWORK_ERRORS as exc:
            raise PlatformUnavailable(PLATFORM, f"cannot reach the Slack Web API at {client.base_url}: "
                                                f"{_describe(exc)}") from None
        return _Me(user_id=str(found.get("user_id") or ""), bot_id=str(found.get("bot_id") or ""),
                   team_id=str(found.get("team_id") or ""), name=str(found.get("user") or "bot"))

    def _build_app(self, client: AsyncWebClient) -> AsyncApp:
        cfg = self.config
        # process_before_response: bolt acks (HTTP 200 / envelope ack) only once the listener has returned, and
        # not at all (HTTP 500 / no ack) when it raised, so Slack redelivers a message we did not store.
        app = AsyncApp(client=client, signing_secret=cfg.signing_secret.value if cfg.signing_secret else "",
                       request_verification_enabled=cfg.mode == "http", process_before_response=True)

        # Bolt injects listener arguments by parameter name, so these are plain functions, not bound methods.
        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event(body, event, via_mention=False)

        async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event(body, event, via_mention=True)

        async def on_command(ack: Callable[[], Awaitable[None]], body: dict[str, Any],
                             respond: Callable[..., Awaitable[Any]]) -> None:
            await ack()  # recorded; bolt sends it when this returns (the prompt is stored by then)
            await self._on_command(body, respond)

        async def on_error(error: Exception, body: dict[str, Any]) -> None:
            what = body.get("command") or (body.get("event") or {}).get("type") or body.get("type")
            if isinstance(error, NotStored):
                log.warning("slack: %s not acked: %s; Slack sends events again (a slash command shows its user an "
                            "error)", what, error)
            else:
                log.error("slack: %s not handled, so not acked (%s)", what, _describe(error), exc_info=error)

        app.event("message")(on_message)
        app.event("app_mention")(on_mention)
        app.command(cfg.slash_command)(on_command)
        app.error(on_error)
        return app

    async def _serve_http(self, app: AsyncApp) -> None:
        cfg = self.config
        server = web.Application()
        server.router.add_post(cfg.path, _events_endpoint(app))
        runner = self._runner = web.AppRunner(server, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, cfg.listen_host, cfg.listen_port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or ()
        self.http_port = sockets[0].getsockname()[1] if sockets else None
        log.info("slack: Events API at http://%s:%s%s", cfg.listen_host, self.http_port, cfg.path)

    async def _connect_socket(self, app: AsyncApp, client: AsyncWebClient) -> None:
        token = self.config.app_token.value if self.config.app_token else ""
        # Open the first URL ourselves: the SDK's connect() retries a rejected app token forever.
        try:
            opened = await client.apps_connections_open(app_token=token)
        except SlackApiError as exc:
            raise _start_error(exc, "app token", "SLACK_APP_TOKEN") from None
        except NETWORK_ERRORS as exc:
            raise PlatformUnavailable(PLATFORM, f"apps.connections.open failed: {_describe(exc)}") from None
        sdk = _SocketClient(app_token=token, web_client=client, ping_interval=self.ping_interval,
                            logger=logging.getLogger(f"{__name__}.socket"))
        sdk.on_pong = self._on_pong
        sdk.message_listeners.append(self._on_socket_message)
        sdk.wss_uri = str(opened["url"])
        self._socket = _SocketHandler(app, sdk)
        await self._socket.connect_async()  # type: ignore[no-untyped-call]

    async def _on_socket_message(self, client: Any, message: dict[str, Any], raw: str | None) -> None:
        if message.get("type") == "goodbye":  # the SDK reconnects on `disconnect` by itself, not on this
            log.info("slack: Socket Mode said goodbye; reconnecting")
            await client.connect_to_new_endpoint(force=True)

    def _on_pong(self, marker: float) -> None:
        waiter = self._pongs.get(marker)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def ping(self) -> bool:
        """Socket Mode: one websocket ping answered within `ping_timeout` (the supervisor reconnects us when
        no event and no pong came for `liveness_minutes`). HTTP mode has no connection to check."""
        if self.config.mode == "http":
            return self._runner is not None
        session = self._socket.client.current_session if self._socket is not None else None
        if session is None or session.closed:
            return False
        marker = time.time()  # the SDK parses the pong's payload back into this float
        while marker in self._pongs:
            marker += 1e-6
        waiter = self._pongs[marker] = asyncio.get_running_loop().create_future()
        try:
            await session.ping(f"sdk-ping-pong:{marker}".encode())
            async with asyncio.timeout(self.ping_timeout):
                await waiter
            return True
        except (TimeoutError, ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
            log.info("slack: Socket Mode ping unanswered (%s)", _describe(exc))
            return False
        finally:
            self._pongs.pop(marker, None)

    # ------------------------------------------------------------------ inbound: events
    @contextmanager
    def _tracked(self) -> Iterator[None]:
        task = asyncio.current_task()
        if task is not None:
            self._listeners.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._listeners.discard(task)

    async def _on_event(self, body: Mapping[str, Any], event: Mapping[str, Any], *, via_mention: bool) -> None:
        event_id = str(body.get("event_id") or "")
        if event_id and not self._event_ids.add(event_id):
            log.debug("slack: event %s delivered again; dropped", event_id)
            return
        with self._tracked():
            try:
                await self._handle_event(body, event, via_mention)
            except BaseException:  # not stored, so bolt does not ack it: Slack's retry of it must get through
                self._event_ids.discard(event_id)
                raise

    async def _handle_event(self, body: Mapping[str, Any], event: Mapping[str, Any], via_mention: bool) -> None:
        target = self._target(event, via_mention)
        if target is None:
            return
        key = (target.channel, target.ts)
        if not self._message_keys.add(key):  # a mention arrives as `app_mention` and as `message`
            return
        try:
            inbound = await self._inbound(body, event, target)
            if inbound is not None:
                await self._store(inbound, lambda result: self._accepted(inbound, target, result))
        except BaseException:
            self._message_keys.discard(key)
            raise

    def _accepted(self, inbound: Inbound, target: _Target, result: SubmitResult) -> None:
        """A message that gets a turn: its thread is ours from now on, and it gets the thinking mark."""
        if result.outcome is not SubmitOutcome.ACCEPTED or result.reason == "command":
            return
        chat = inbound.chat
        if chat.thread_id:
            _put(self._threads, (chat.chat_id, chat.thread_id), chat.chat_type)
        _put(self._latest, (chat.chat_id, chat.thread_id), target.ts)

    def _target(self, event: Mapping[str, Any], via_mention: bool) -> _Target | None:
        """Is this event for us, and where does its answer go? None drops it at the edge."""
        assert self._me is not None
        me, cfg = self._me, self.config
        subtype = str(event.get("subtype") or "")
        is_bot = bool(event.get("bot_id")) or subtype == "bot_message"
        if event.get("hidden") or (subtype not in USER_SUBTYPES and subtype != "bot_message"):
            return None
        if event.get("user") == me.user_id or (is_bot and event.get("bot_id") == me.bot_id):
            return None
        if is_bot and not cfg.answer_bots:
            return None
        channel, ts = str(event.get("channel") or ""), str(event.get("ts") or "")
        user = str(event.get("user") or event.get("bot_id") or "")
        if not (channel and ts and user):
            return None
        channel_type = str(event.get("channel_type") or "")
        thread_ts = str(event.get("thread_ts") or "") or None
        if channel_type == "im" or channel.startswith("D"):
            return _Target(channel, ts, user, "im", None, is_dm=True, addressed=True, hydrate=None, is_bot=is_bot)
        mentioned = via_mention or f"<@{me.user_id}>" in str(event.get("text") or "")
        known = thread_ts is not None and (channel, thread_ts) in self._threads
        if cfg.require_mention and not (mentioned or known):
            return None
        thread = thread_ts or (ts if cfg.reply_in_thread == "always" else None)
        hydrate = thread_ts if thread_ts and thread_ts != ts and not known else None
        return _Target(channel, ts, user, channel_type, thread, is_dm=False, addressed=mentioned or known,
                       hydrate=hydrate, is_bot=is_bot)

    async def _inbound(self, body: Mapping[str, Any], event: Mapping[str, Any], target: _Target) -> Inbound | None:
        assert self._me is not None
        raw = str(event.get("text") or "")
        attachments = _attachments(event)
        if not slack_to_text(raw, self._me.user_id, {}) and not attachments:
            return None
        people = (mentioned_users(raw) - {self._me.user_id}) | (set() if target.is_bot else {target.user_id})
        thread = (target.channel, target.thread_id) if target.thread_id else None
        late = self._unread.pop(thread, None) if thread else None
        history = late
        if history is None and target.hydrate:
            history = self._lookup(("thread", target.channel, target.hydrate, target.ts), functools.partial(
                self._thread_context, target.channel, target.hydrate, target.ts))
        chat_type, names = await self._enrich(target.channel, self._known_type(target), people,
                                              () if history is None else (history,))
        text = slack_to_text(raw, self._me.user_id, names)
        if history is not None:
            text = self._with_history(text, history, thread, noted=late is not None)
        person = self._people.get(target.user_id, _Person()) if not target.is_bot else \
            _Person(name=str(event.get("username") or (event.get("bot_profile") or {}).get("name") or "") or None)
        return Inbound(
            chat=ChatRef(PLATFORM, chat_type, target.channel, target.thread_id), user_id=target.user_id, text=text,
            message_id=target.ts, received_at=_received_at(target.ts), user_name=person.name,
            attachments=attachments, is_addressed=target.addressed, is_bot=target.is_bot, username=person.handle,
            space_id=str(body.get("team_id") or event.get("team") or self._me.team_id) or None)

    def _with_history(self, text: str, history: asyncio.Task[str], thread: tuple[str, str] | None, *,
                      noted: bool) -> str:
        """The thread's earlier messages in front of the text; while reading them is still under way, a note
        (once) now, and the transcript with the thread's next message."""
        if history.done():
            context = _result(history, "")
            return f"{context}\n\n{text}" if context else text
        if thread is not None:
            _put(self._unread, thread, history)
        if noted:
            return text
        log.info("slack: thread %s in %s not read within %.1fs; answering without it for now",
                 thread[1] if thread else "?", thread[0] if thread else "?", self.enrich_budget)
        return f"{THREAD_UNREAD_NOTE}\n\n{text}"

    def _known_type(self, target: _Target) -> ChatType | None:
        """The chat's type without asking Slack, if we can; a thread keeps the type it started with, so a
        guess on its first message does not split its session."""
        if target.is_dm:
            return "dm"
        if target.thread_id and (target.channel, target.thread_id) in self._threads:
            return self._threads[(target.channel, target.thread_id)]
        return self._cached_type(target.channel, target.channel_type)

    def _cached_type(self, channel: str, channel_type: str | None) -> ChatType | None:
        """`message` events say the channel's type; `app_mention` and slash commands do not, so it is asked once."""
        if channel_type in _CHANNEL_TYPES:
            _put(self._chat_types, channel, _CHANNEL_TYPES[channel_type])
        if channel.startswith("D"):
            return "dm"
        return self._chat_types.get(channel)

    async def _enrich(self, channel: str, chat_type: ChatType | None, people: set[str],
                      more: Collection[asyncio.Task[Any]] = ()) -> tuple[ChatType, dict[str, str | None]]:
        """The chat's type and people's names, from memory or else the Web API within the enrichment budget.
        Lookups still out by then go on in the background and are remembered for the next message; this one
        goes with a type guessed from the id and without those names."""
        kind = None if chat_type is not None else \
            self._lookup(("type", channel), functools.partial(self._chat_type, channel))
        lookups = [*([kind] if kind is not None else []),
                   *(self._lookup(("person", uid), functools.partial(self._person, uid))
                     for uid in sorted(people) if uid not in self._people)]
        waits = [*more, *(t for t in lookups if t not in self._overdue)]  # one message waits for a slow lookup
        if waits:
            loop = asyncio.get_running_loop()
            _, late = await asyncio.wait(waits, timeout=max(0.0, self._deadline(self.enrich_budget) - loop.time()))
            if late:
                self._overdue.update(t for t in late if t in lookups)
                log.info("slack: %d Web API lookup(s) for a message in %s took over %.1fs; going on without them",
                         len(late), channel, self.enrich_budget)
        if chat_type is None:
            assert kind is not None
            chat_type = _result(kind, None) or _guess_type(channel)
        return chat_type, {uid: self._people[uid].name if uid in self._people else None for uid in people}

    def _lookup(self, key: Hashable, call: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """One Web API lookup per key in flight, shared by the messages that need it. It runs on after a
        listener stopped waiting for it, so its answer is there for the next message."""
        task = self._lookups.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(_awaited(call), name=f"slack-lookup:{key}")
            self._lookups[key] = task
            task.add_done_callback(functools.partial(self._lookup_done, key))
        return task

    def _lookup_done(self, key: Hashable, task: asyncio.Task[Any]) -> None:
        self._overdue.discard(task)
        if self._lookups.get(key) is task:
            del self._lookups[key]
        if not task.cancelled() and task.exception() is not None:
            log.warning("slack: lookup %s failed (%s)", key, _describe(task.exception()))  # type: ignore[arg-type]

    def _deadline(self, budget: float) -> float:
        """Budgets count from the request's arrival (before bolt checked its signature)."""
        window = _WINDOW.get()
        return window.deadline(budget) if window is not None else asyncio.get_running_loop().time() + budget

    async def _store(self, inbound: Inbound, accepted: Callable[[SubmitResult], None] | None = None) -> None:
        """Hand the message in; return once it is stored, so bolt acks it, or raise, so bolt does not.

        Stored means: `submit` returned, or an answer to the message is already waiting for the ack (the core
        answers commands and strangers inline, after storing), or the ack budget ran out with `submit` still
        busy (it stores before anything that can take long). `submit` carries on in the background then."""
        loop = asyncio.get_running_loop()
        window = _WINDOW.get()
        key = (inbound.chat.chat_id, inbound.message_id)
        if window is not None:
            self._acking[key] = window
            window.on_close(functools.partial(_forget, self._acking, key, window))
        task = loop.create_task(self._hand_in(inbound, accepted), name=f"slack-submit:{inbound.message_id}")
        self._listeners.add(task)
        task.add_done_callback(self._listeners.discard)
        waits: list[asyncio.Future[Any]] = [task, *([window.parked] if window is not None else [])]
        try:
            await asyncio.wait(waits, timeout=max(0.0, self._deadline(self.ack_budget) - loop.time()),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():  # we stop watching it: its failure, if any, is logged there
                task.add_done_callback(_log_late_failure)
        if task.done():
            task.result()  # raises: not stored
            return
        if window is None or not window.parked.done():
            log.info("slack: submit of message %s in %s still busy after %.1fs; acking it (it is stored)",
                     inbound.message_id, inbound.chat.chat_id, self.ack_budget)

    async def _hand_in(self, inbound: Inbound,
                       accepted: Callable[[SubmitResult], None] | None = None) -> SubmitResult:
        assert self._submit is not None
        result = await self._submit(inbound)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            raise NotStored(PLATFORM, f"message {inbound.message_id} in {inbound.chat.chat_id} arrived while "
                                      "the gateway was shutting down")
        if accepted is not None:
            accepted(result)
        return result

    async def _chat_type(self, channel: str) -> ChatType:
        assert self._client is not None
        try:
            info = (await self._client.conversations_info(channel=channel)).get("channel") or {}
            found: ChatType = "dm" if info.get("is_im") else "group" if info.get("is_private") or info.get("is_mpim") \
                else "channel"
        except API_ERRORS as exc:
            log.info("slack: conversations.info for %s failed (%s); guessing from the id", channel, _describe(exc))
            found = _guess_type(channel)
            if not isinstance(exc, SlackApiError):
                return found  # not remembered: the next message asks again
        _put(self._chat_types, channel, found)
        return found

    async def _person(self, user_id: str) -> _Person:
        found = self._people.get(user_id)
        if found is not None:
            return found
        assert self._client is not None
        try:
            user = (await self._client.users_info(user=user_id)).get("user") or {}
            profile = user.get("profile") or {}
            found = _Person(name=profile.get("display_name") or profile.get("real_name") or user.get("real_name")
                            or user.get("name"), handle=user.get("name"))
        except SlackApiError as exc:  # no users:read scope, say: ids then
            log.debug("slack: users.info for %s failed (%s)", user_id, _describe(exc))
            found = _Person()
        except NETWORK_ERRORS as exc:  # not remembered: the next message asks again
            log.debug("slack: users.info for %s failed (%s)", user_id, _describe(exc))
            return _Person()
        _put(self._people, user_id, found)
        return found

    async def _names(self, user_ids: set[str]) -> dict[str, str | None]:
        waits = [self._lookup(("person", uid), functools.partial(self._person, uid))
                 for uid in sorted(user_ids) if uid not in self._people]
        if waits:  # shared lookups: waited for, never cancelled from here
            await asyncio.wait(waits)
        return {uid: self._people.get(uid, _Person()).name for uid in user_ids}

    async def _thread_context(self, channel: str, thread_ts: str, current_ts: str) -> str:
        """The thread so far as a compact transcript, for the first message we see in a thread we were not in."""
        limit = self.config.thread_history_limit
        if limit <= 0:
            return ""
        try:
            messages = await self._replies(channel, thread_ts)
        except API_ERRORS as exc:
            log.warning("slack: reading thread %s in %s failed (%s); answering without it", thread_ts, channel,
                        _describe(exc))
            return ""
        earlier = [m for m in messages if _ts_value(m.get("ts")) < _ts_value(current_ts)
                   and str(m.get("subtype") or "") in USER_SUBTYPES | {"bot_message"} and m.get("text")]
        if len(earlier) > limit:  # the root says what the thread is about; the rest are the latest words
            earlier = earlier[:1] + earlier[len(earlier) - limit + 1:] if limit > 1 else earlier[:1]
        if not earlier:
            return ""
        people = {str(m["user"]) for m in earlier if m.get("user")} | \
            {u for m in earlier for u in mentioned_users(str(m["text"]))}
        names = {**await self._names(people - {self._me_id}), self._me_id: "you"}  # "<@bot> thoughts?" → "@you …"
        lines = [f"{self._speaker(m, names)}: {_clip(slack_to_text(str(m['text']), '', names))}" for m in earlier]
        return "[Earlier in this thread, oldest first (\"you\" is you):\n" + "\n".join(lines) + "]"

    async def _replies(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        assert self._client is not None
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(REPLIES_MAX_PAGES):
            page = await self._client.conversations_replies(channel=channel, ts=thread_ts, limit=REPLIES_PAGE,
                                                            cursor=cursor)
            found.extend(m for m in page.get("messages") or () if isinstance(m, dict))
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return found

    @property
    def _me_id(self) -> str:
        return self._me.user_id if self._me else ""

    def _is_me(self, message: Mapping[str, Any]) -> bool:
        assert self._me is not None
        return message.get("user") == self._me.user_id or bool(
            message.get("bot_id") and message.get("bot_id") == self._me.bot_id)

    def _speaker(self, message: Mapping[str, Any], names: Mapping[str, str | None]) -> str:
        if self._is_me(message):
            return "you"
        if message.get("bot_id") and not message.get("user"):
            return str(message.get("username") or (message.get("bot_profile") or {}).get("name") or "a bot")
        user = str(message.get("user") or "")
        return names.get(user) or user or "someone"

    # ------------------------------------------------------------------ inbound: the slash command
    async def _on_command(self, body: Mapping[str, Any], respond: Callable[..., Awaitable[Any]]) -> None:
        with self._tracked():  # a failure raises: no ack, and Slack shows the user that the command failed
            await self._handle_command(body, respond)

    async def _handle_command(self, body: Mapping[str, Any], respond: Callable[..., Awaitable[Any]]) -> None:
        """`/agent new|status|help|…` become the in-chat commands; any other text is a prompt; none is help."""
        channel, user = str(body.get("channel_id") or ""), str(body.get("user_id") or "")
        text = str(body.get("text") or "").strip()
        if not text:
            text = "/help"
        elif text.lower() in COMMAND_WORDS:
            text = f"/{text.lower()}"
        message_id = f"cmd:{body.get('trigger_id') or time.time()}"
        _put(self._responders, message_id, _Responder(respond, user, channel, self.monotonic()))
        self._latest.pop((channel, None), None)  # no message to mark: the thinking reaction must not land elsewhere
        chat_type, _ = await self._enrich(channel, self._cached_type(channel, None), {user})
        person = self._people.get(user, _Person())
        assert self._me is not None
        await self._store(Inbound(
            chat=ChatRef(PLATFORM, chat_type, channel), user_id=user, text=text, message_id=message_id,
            received_at=datetime.now(UTC), user_name=person.name,
            username=str(body.get("user_name") or "") or person.handle,
            space_id=str(body.get("team_id") or self._me.team_id) or None))

    # ------------------------------------------------------------------ outbound
    async def send(self, message: OutboundMessage) -> str:
        client = self._client
        if client is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        window = self._acking.get((message.chat.chat_id, message.reply_to_id or ""))
        if window is not None:  # never answer a message before Slack has its ack (a response_url needs it)
            await window.hold(ACK_HOLD_S)
        text = message.plain if message.use_plain else message.text
        responder = self._responders.get(message.reply_to_id or "")
        if responder is not None:
            sent = await self._respond(responder, message, text)
            if sent is not None:
                return sent
            if message.kind is not OutboundKind.REPLY:  # the response_url is used up: stay private
                return await self._call(client.chat_postEphemeral(channel=responder.channel_id,
                                                                  user=responder.user_id, text=text), "message_ts")
        kwargs: dict[str, Any] = {"channel": message.chat.chat_id, "text": text, "mrkdwn": not message.use_plain}
        if message.chat.thread_id:
            kwargs["thread_ts"] = message.chat.thread_id
        return await self._call(client.chat_postMessage(**kwargs), "ts")

    async def _call(self, call: Awaitable[Any], id_field: str) -> str:
        try:
            response = await call
        except API_ERRORS as exc:
            raise _send_error(exc) from None
        return str(response.get(id_field) or "")

    async def _respond(self, responder: _Responder, message: OutboundMessage, text: str) -> str | None:
        """Post through the slash command's response_url: command answers privately, prompt answers for all."""
        if responder.uses >= RESPONSE_URL_USES or self.monotonic() - responder.created >= RESPONSE_URL_TTL_S:
            return None
        responder.uses += 1
        kind = "in_channel" if message.kind is OutboundKind.REPLY else "ephemeral"
        try:
            response = await responder.respond(text=text, response_type=kind, replace_original=False)
        except NETWORK_ERRORS as exc:
            responder.uses -= 1
            raise PlatformUnavailable(PLATFORM, f"response_url: {_describe(exc)}") from None
        status = int(getattr(response, "status_code", 200))
        if status == 429 or status >= 500:
            responder.uses -= 1  # not posted: the retry may use it
            raise RateLimited(PLATFORM, _retry_after(getattr(response, "headers", None)))
        if status >= 500:
            raise PlatformUnavailable(PLATFORM, f"response_url answered {status}")
        if status >= 400:  # expired or used up: the caller falls back to the Web API
            log.info("slack: response_url answered %s; falling back to the Web API", status)
            responder.uses = RESPONSE_URL_USES
            return None
        return f"{message.reply_to_id}:{responder.uses}"

    # ------------------------------------------------------------------ thinking indicator
    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """A reaction on the message being answered, added when the turn starts and removed when it ends:
        one mark per turn, however long it takes (no repeated "typing" calls)."""
        ts = self._latest.get((chat.chat_id, chat.thread_id))
        client = self._client
        added = bool(ts and client and self.thinking_reaction) and await self._react("add", chat.chat_id, ts or "")
        try:
            yield
        finally:
            if added:
                await self._react("remove", chat.chat_id, ts or "")

    async def _react(self, action: str, channel: str, ts: str) -> bool:
        assert self._client is not None
        call = self._client.reactions_add if action == "add" else self._client.reactions_remove
        try:
            await call(channel=channel, timestamp=ts, name=self.thinking_reaction)
        except SlackApiError as exc:
            if _error_code(exc) == "already_reacted":
                return False  # someone else's mark: leave it alone
            log.debug("slack: reactions.%s on %s/%s failed (%s)", action, channel, ts, _error_code(exc))
            return False
        except NETWORK_ERRORS as exc:
            log.debug("slack: reactions.%s on %s/%s failed (%s)", action, channel, ts, _describe(exc))
            return False
        return True


# ---------------------------------------------------------------------- pure translation helpers
def mentioned_users(text: str) -> set[str]:
    return {m.group(1)[1:].partition("|")[0] for m in _ANGLE.finditer(text) if m.group(1).startswith("@")}


def slack_to_text(text: str, bot_user_id: str, names: Mapping[str, str | None]) -> str:
    """Slack markup as a person reads it: our own mention dropped, `<@U1>` → `@name`, `<#C1|general>` →
    `#general`, `<url|label>` → `label (url)`, and `&amp;`, `&lt;`, `&gt;` unescaped."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "\x00", text)
        text = re.sub(r"^\s*\x00\s*[,:;]?\s*", "", text)  # "@bot, what…" → "what…"
        text = re.sub(r"[ \t]*\x00", "", text)

    def one(match: re.Match[str]) -> str:
        target, _, label = match.group(1).partition("|")
        if target.startswith("@"):
            return "@" + (names.get(target[1:]) or label or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            word = target[1:].split("^")[0]
            return f"@{word}" if word in ("here", "channel", "everyone") else (label or f"@{word}")
        address = target.removeprefix("mailto:")
        return f"{label} ({address})" if label and label != address else address

    text = _ANGLE.sub(one, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").strip()


def _attachments(event: Mapping[str, Any]) -> tuple[Attachment, ...]:
    found = []
    for item in event.get("files") or ():
        if not isinstance(item, dict):
            continue
        mime = str(item.get("mimetype") or "") or None
        major = (mime or "").split("/")[0]
        kind = {"image": "photo", "audio": "audio", "video": "video"}.get(major, "document")
        size = item.get("size")
        found.append(Attachment(kind=kind, name=item.get("name") or item.get("title"), mime_type=mime,
                                size=size if isinstance(size, int) else None))
    return tuple(found)


def _guess_type(channel: str) -> ChatType:
    return "group" if channel.startswith("G") else "channel"


def _result(task: asyncio.Task[Any], default: Any) -> Any:
    """A finished task's result, or `default` when it is still running, failed or was cancelled."""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return default
    return task.result()


async def _awaited(call: Callable[[], Awaitable[T]]) -> T:
    return await call()


def _forget(mapping: dict[Any, Any], key: Any, value: Any) -> None:
    if mapping.get(key) is value:
        del mapping[key]


def _log_late_failure(task: asyncio.Task[Any]) -> None:
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        log.error("slack: handing in a message failed after it was acked (%s)", _describe(exc), exc_info=exc)


def _received_at(ts: str) -> datetime:
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError):
        return datetime.now(UTC)


def _ts_value(ts: Any) -> float:
    try:
        return float(ts)
    except (TypeError, ValueError):
        return 0.0


def _clip(text: str, limit: int = CONTEXT_LINE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error_code(exc: SlackApiError) -> str:
    try:
        return str(exc.response.get("error") or "")
    except (AttributeError, TypeError):
        return ""


def _status(exc: SlackApiError) -> int:
    return int(getattr(exc.response, "status_code", 200) or 200)


def _retry_after(headers: Any) -> float:
    for name, value in dict(headers or {}).items():
        if str(name).lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                break
    return 1.0


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _start_error(exc: SlackApiError, what: str, variable: str) -> AdapterError:
    code = _error_code(exc)
    if code in _FATAL_ERRORS:
        return AdapterFatal(PLATFORM, f"{what} rejected ({code}) — check {variable}")
    if _status(exc) == 429 or code == "ratelimited" or _status(exc) >= 500 or code in _TRANSIENT_ERRORS:
        return PlatformUnavailable(PLATFORM, f"{what} check failed ({code or _status(exc)}); will retry")
    return AdapterError(PLATFORM, f"{what} check failed: {code or _status(exc)}")


def _send_error(exc: BaseException) -> AdapterError:
    """Slack's answer as the outbox understands it: wait, resend plain, give up on the chat, or retry."""
    if not isinstance(exc, SlackApiError):
        return PlatformUnavailable(PLATFORM, _describe(exc))
    code, status = _error_code(exc), _status(exc)
    if status == 429 or code == "ratelimited":
        return RateLimited(PLATFORM, _retry_after(exc.response.headers))
    if code in _MARKUP_ERRORS:
        return MarkupRejected(PLATFORM, code)
    if code in _GONE_ERRORS:
        return RecipientUnavailable(PLATFORM, code)
    if status >= 500 or code in _TRANSIENT_ERRORS:
        return PlatformUnavailable(PLATFORM, code or f"HTTP {status}")
    return AdapterError(PLATFORM, code or f"HTTP {status}")

"""Slack's store-before-ack plumbing: an ack window around each request (HTTP route and Socket Mode
handler), and the intake that hands a message to the core and returns once it is stored, within
Slack's 3 s."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from adapters.slack.text import PLATFORM, describe
from gateway.errors import AdapterError
from gateway.events import Caller, Inbound, RequestGate, Submit, SubmitOutcome, SubmitResult

# one logger for the Slack adapter, whichever module speaks
log = logging.getLogger("adapters.slack.adapter")

# an answer waits at most this long for its message's ack before going anyway
ACK_HOLD_S = 5.0
SIGNATURE_AGE_S = 300  # Slack's (and its verifier's) window for X-Slack-Request-Timestamp
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
STOP_WAIT_S = 5.0  # stop() lets messages being stored finish for this long


class AckWindow:
    """One request from Slack (an HTTP post or a Socket Mode envelope), from its arrival until its
    ack is out.

    Set by the transport around bolt's dispatch and read by the listener through `_WINDOW`: the
    listener's deadlines count from `started`, and an answer to the message waits in `hold` until
    `close` (so a slash command's response_url post never comes before the command's ack).
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
            log.warning(
                "slack: an answer waited %.0fs for its message's ack; sending it anyway", limit
            )


_WINDOW: contextvars.ContextVar[AckWindow | None] = contextvars.ContextVar(
    "slack_ack_window", default=None
)


def deadline(budget: float) -> float:
    """Budgets count from the request's arrival (before bolt checked its signature)."""
    window = _WINDOW.get()
    return (
        window.deadline(budget)
        if window is not None
        else asyncio.get_running_loop().time() + budget
    )


class NotStored(AdapterError):
    """The core did not store a message (it is shutting down): it must not be acked, so Slack sends
    it again."""


# ---------------------------------------------------------------------- transports
class SocketClient(SocketModeClient):
    """The SDK's Socket Mode client, telling us about each pong (the SDK only keeps the time it
    parsed from it)."""

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


class SocketHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler over our client (its own constructor would build a second, unused
    one), with an ack window around each envelope. Bolt sends no ack when the listener raised
    (status 500)."""

    def __init__(self, app: AsyncApp, client: SocketClient) -> None:
        # no super().__init__: see above
        self.app = app
        self.app_token = client.app_token
        self.client = client
        client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        window = AckWindow()
        token = _WINDOW.set(window)
        try:
            started = time.time()
            response = await run_async_bolt_app(self.app, req)
            await send_async_response(client, req, response, started)
        finally:
            _WINDOW.reset(token)
            window.close()


def events_endpoint(
    app: AsyncApp, signing_secret: str
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Bolt's aiohttp handler with an ack window: the response is written before the window closes.

    The signature is checked here, before anything parses the body: bolt parses it first (a 500 with
    a traceback for garbage) and logs every unsigned body at INFO. Unsigned gets 401, a signed body
    that is not one gets 400."""
    verifier = SignatureVerifier(signing_secret)

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            # the SDK's verifier decodes it too, raising
            text = (await request.read()).decode("utf-8")
        except UnicodeDecodeError:
            return web.Response(status=400, text="not a Slack request body\n")
        if not _signed(verifier, text, request.headers):
            log.warning("slack: refused a request without a valid signature")
            return web.Response(status=401, text="invalid request signature\n")
        try:
            bolt_request = AsyncBoltRequest(
                body=text,
                query=request.query_string,
                headers=request.headers,  # type: ignore[arg-type]
            )
        except (ValueError, TypeError, AttributeError):  # JSONDecodeError is a ValueError
            bolt_request = None
        if bolt_request is None or not _slack_shaped(bolt_request.body):
            return web.Response(status=400, text="not a Slack request body\n")
        window = AckWindow()
        token = _WINDOW.set(window)
        try:
            response = await to_aiohttp_response(await app.async_dispatch(bolt_request))
            await response.prepare(request)
            await response.write_eof()
            return response
        finally:
            _WINDOW.reset(token)
            window.close()

    return handle


def events_caller(path: str, *, clock: Callable[[], float] = time.time) -> RequestGate:
    """Judges a request to the Events endpoint by its headers: a POST to `path` whose signature has
    Slack's shape and whose timestamp is within the 5 minutes is CLAIMED (only its body can prove
    the signature, so the listener lets the body come at its minimum rate and closes the connection
    first when full); anything else is a stranger, refused before its body is read."""

    def caller(request: web.BaseRequest) -> Caller:
        if request.method != "POST" or request.path != path:
            return Caller.STRANGER
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        fresh = stamp.isascii() and stamp.isdigit() and abs(clock() - int(stamp)) <= SIGNATURE_AGE_S
        signed = _SIGNATURE.fullmatch(request.headers.get("X-Slack-Signature", ""))
        return Caller.CLAIMED if fresh and signed else Caller.STRANGER

    return caller


def _slack_shaped(body: object) -> bool:
    """The fields bolt reads before any check of its own (`type`, `event`): a signed body where they
    are not what Slack sends is not Slack's, and bolt would answer it with a 500 and a traceback."""
    return (
        isinstance(body, dict)
        and isinstance(body.get("type", ""), str)
        and isinstance(body.get("event", {}), dict)
    )


def _signed(verifier: SignatureVerifier, body: str, headers: Mapping[str, str]) -> bool:
    """Slack's v0 signature within its 5 minutes; headers that are not even ASCII digits/hex are
    simply wrong."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not (timestamp.isascii() and timestamp.isdigit() and signature.isascii()):
        return False
    return verifier.is_valid(body=body, timestamp=timestamp, signature=signature)


# ---------------------------------------------------------------------- the intake
class Intake:
    """Hands messages to `submit` so that an ack means stored; keeps the listeners still running
    (stop lets them finish) and, per (chat, our message id), the request not yet acked (an answer to
    it waits for the ack)."""

    def __init__(self, ack_budget: float) -> None:
        self.ack_budget = ack_budget
        self.submit: Submit | None = None
        self._listeners: set[asyncio.Task[Any]] = set()
        self._acking: dict[tuple[str, str], AckWindow] = {}

    @contextmanager
    def tracked(self) -> Iterator[None]:
        task = asyncio.current_task()
        if task is not None:
            self._listeners.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._listeners.discard(task)

    async def hold(self, chat_id: str, message_id: str) -> None:
        """Never answer a message before Slack has its ack (a response_url needs it)."""
        window = self._acking.get((chat_id, message_id))
        if window is not None:
            await window.hold(ACK_HOLD_S)

    async def drain(self) -> None:
        """Messages being stored (not acked: Slack sends
        again what we drop here) and inline answers."""
        busy = [t for t in self._listeners if not t.done()]
        if busy:
            _, late = await asyncio.wait(busy, timeout=STOP_WAIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def store(
        self, inbound: Inbound, accepted: Callable[[SubmitResult], None] | None = None
    ) -> None:
        """Hand the message in; return once it is stored,
        so bolt acks it, or raise, so bolt does not.

        Stored means: `submit` returned, or an answer to the message is already waiting for the ack
        (the core answers commands and strangers inline, after storing), or the ack budget ran out
        with `submit` still busy (it stores before anything that can take long). `submit` carries on
        in the background then."""
        loop = asyncio.get_running_loop()
        window = _WINDOW.get()
        key = (inbound.chat.chat_id, inbound.message_id)
        if window is not None:
            self._acking[key] = window
            window.on_close(functools.partial(_forget, self._acking, key, window))
        task = loop.create_task(
            self._hand_in(inbound, accepted), name=f"slack-submit:{inbound.message_id}"
        )
        self._listeners.add(task)
        task.add_done_callback(self._listeners.discard)
        waits: list[asyncio.Future[Any]] = [task, *([window.parked] if window is not None else [])]
        try:
            await asyncio.wait(
                waits,
                timeout=max(0.0, deadline(self.ack_budget) - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            if not task.done():  # we stop watching it: its failure, if any, is logged there
                task.add_done_callback(_log_late_failure)
        if task.done():
            task.result()  # raises: not stored
            return
        if window is None or not window.parked.done():
            log.info(
                "slack: submit of message %s in %s still "
                "busy after %.1fs; acking it (it is stored)",
                inbound.message_id,
                inbound.chat.chat_id,
                self.ack_budget,
            )

    async def _hand_in(
        self, inbound: Inbound, accepted: Callable[[SubmitResult], None] | None = None
    ) -> SubmitResult:
        assert self.submit is not None
        result = await self.submit(inbound)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            raise NotStored(
                PLATFORM,
                f"message {inbound.message_id} in {inbound.chat.chat_id} arrived while "
                "the gateway was shutting down",
            )
        if accepted is not None:
            accepted(result)
        return result


def _forget(mapping: dict[Any, Any], key: Any, value: Any) -> None:
    if mapping.get(key) is value:
        del mapping[key]


def _log_late_failure(task: asyncio.Task[Any]) -> None:
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        log.error(
            "slack: handing in a message failed after it was acked (%s)",
            describe(exc),
            exc_info=exc,
        )

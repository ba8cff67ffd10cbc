"""The daemon's HTTP listeners with bounds, so that slow, half-open or unauthenticated connections
cannot starve the rest (the web chat, the Telegram webhook and the Slack Events endpoint; handed to
those adapters as `serve`).

A connection must finish its request headers within `header_timeout` of opening (or of its last
answer). Then, before anything waits on a body, the listener's gate judges the request from its line
and headers alone (gateway.events.Caller): a stranger is answered at once (401, or the gate's own
refusal) and its body never read; a probe is served without its body; a known caller's body and a
claimed one's (Slack's signature, which only the body can prove) must arrive at `min_body_rate`
after `body_grace`, and within `body_timeout` in all, or the answer is 408 (a multipart upload is
streamed by its handler instead, which bounds its size and the wait for each chunk: web chat files).

At most `max_connections` are open at once. At the cap, room is made by closing the connection that
has been of no use the longest: one idle (no request yet, or done with its last) that never
authenticated, or one whose claimed request is still waiting for its body. One accepted moments ago
may hold a request not yet read: while there are such, newcomers wait in the kernel's backlog.
Probes being answered, authenticated clients and requests being handled are never closed; only when
nothing else is left is a newcomer turned away (503).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from gateway.events import Caller, RequestGate

log = logging.getLogger(__name__)
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
BODY_GRACE_S = 5.0
MIN_BODY_RATE = 1024.0  # bytes a second after the grace: far below any client, far above a drip
WANTED_NOFILE = 65536
MIN_IDLE_S = 0.25  # accepted this recently, it may hold a request not yet read: not closed for room
POLL_S = 0.02  # how often a full listener looks for room (a connection ends without telling it)
WARN_EVERY_S = 60.0
ACCEPT_RETRY_S = 0.1
# After an answer that left its body unread (a refusal, a probe), the rest is read and dropped for
# this long, so the client sees the answer rather than a reset; the connection is idle meanwhile
# (closed first when room is needed), then closed.
LINGER_S = 1.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
STRANGER_TEXT = "this endpoint needs its credential in the request's headers\n"


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 256
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S
    body_grace: float = BODY_GRACE_S
    min_body_rate: float = MIN_BODY_RATE


@dataclass(eq=False, slots=True)
class Listening:
    """A started listener (a gateway.events.HttpListener): its bound port, and `stop()`."""

    port: int
    runner: web.AppRunner
    connections: _Connections = field(repr=False)

    async def stop(self) -> None:
        await self.runner.cleanup()


@dataclass(slots=True)
class _InProgress:
    """A request being served: who, since when, and whether its body is still due."""

    caller: Caller
    since: float
    waiting_for_body: bool = False

    @property
    def evictable(self) -> bool:
        return self.caller is Caller.CLAIMED and self.waiting_for_body


class _Connections:
    """Which connections are open, since when each has been of no use to anyone (idle, or a claim
    still waiting for its body), which have a request in progress (whose), which authenticated."""

    def __init__(self, limits: Limits, name: str, gate: RequestGate) -> None:
        self.limits = limits
        self.name = name
        self.gate = gate
        self.busy: dict[RequestHandler, _InProgress] = {}
        self.known: set[RequestHandler] = set()  # carried an authenticated request: kept
        self.evicted = 0
        self.refused = 0
        self.strangers = 0
        self._idle_since: dict[RequestHandler, float] = {}  # accepted, or its last request ended
        self._changed = asyncio.Event()  # a request began or ended: room may have come
        self._warned: dict[str, tuple[int, float]] = {}  # what → (times not logged, last line at)

    @web.middleware
    async def track(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = request.protocol
        if not isinstance(connection, RequestHandler):
            return await handler(request)
        try:
            caller = self.gate(request)
        except web.HTTPException as refusal:
            return await self._refuse(request, refusal)
        if caller is Caller.STRANGER:
            return await self._refuse(request, web.HTTPUnauthorized(text=STRANGER_TEXT))
        if caller is Caller.KNOWN:
            self.known.add(connection)
        state = self.busy[connection] = _InProgress(caller, time.monotonic())
        self._changed.set()
        try:
            if caller is Caller.PROBE or not request.body_exists:  # a probe's body is never read
                return await handler(request)
            state.waiting_for_body = True
            if request.content_type != "multipart/form-data":  # its handler streams that body
                try:
                    if not await self._body_arrives(request):
                        return await _too_slow(request)
                except (ConnectionError, RuntimeError):  # RuntimeError: "Connection closed."
                    if connection.connected:
                        raise
                    return web.Response(status=408)  # closed for room, or the client left
                state.waiting_for_body = False
            return await handler(request)
        finally:
            if self.busy.get(connection) is state:
                del self.busy[connection]
            self._idle_since[connection] = time.monotonic()
            self._changed.set()

    async def _body_arrives(self, request: web.Request) -> bool:
        """Read the body (handlers then get it from the request's cache) unless it comes slower than
        `min_body_rate` after `body_grace`, or takes longer than `body_timeout` in all."""
        limits, loop = self.limits, asyncio.get_running_loop()
        started = loop.time()
        reading = asyncio.ensure_future(request.read())
        try:
            while True:
                got = request.content.total_bytes
                allowed = limits.body_grace + (got + 1) / limits.min_body_rate
                due = started + min(limits.body_timeout, allowed)
                done, _ = await asyncio.wait({reading}, timeout=max(0.0, due - loop.time()))
                if done:
                    reading.result()  # a body past the app's client_max_size raises its 413
                    return True
                if request.content.total_bytes == got:  # nothing came in time
                    return False
        finally:
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reading

    async def _refuse(self, request: web.Request, refusal: web.HTTPException) -> web.StreamResponse:
        """The gate's answer, at once: a body it came with is never waited for (see LINGER_S)."""
        self.strangers += 1
        headers = {k: v for k, v in refusal.headers.items() if k != hdrs.CONTENT_LENGTH}
        return web.Response(
            status=refusal.status, reason=refusal.reason, body=refusal.body, headers=headers
        )

    async def make_room(self, server: web.Server) -> bool:
        """Room for one more connection (one was just accepted). At the cap, close the connection
        that has been of no use the longest: one idle for MIN_IDLE_S (no complete request yet, or
        done with its last) that never authenticated, or a claim whose body has not come. One
        accepted less than MIN_IDLE_S ago is likely a request not yet read: while there are such,
        wait (the kernel's backlog holds the newcomers) rather than close it. False when nothing can
        make room: every connection is a probe being answered, an authenticated client or a request
        being handled."""
        while True:
            now = time.monotonic()
            open_now = [h for h in server.connections if h.transport is not None]
            self._forget_gone(open_now)
            if len(open_now) < self.limits.max_connections:
                return True
            useless, young = self._useless(open_now, now)
            if useless:
                self._evict(min(useless, key=lambda pair: pair[0])[1])
                return True
            if young is None:
                self.refused += 1
                self._warn(
                    "refused",
                    "%s: all %s connections are busy or authenticated "
                    "(daemon.max_connections): %s newcomer(s) refused %s",
                )
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                wait = min(POLL_S, max(0.001, young + MIN_IDLE_S - now))
                await asyncio.wait_for(self._changed.wait(), wait)

    def accepted(self, handler: RequestHandler) -> None:
        self._idle_since[handler] = time.monotonic()

    def _useless(
        self, open_now: list[RequestHandler], now: float
    ) -> tuple[list[tuple[float, RequestHandler]], float | None]:
        """The connections that may be closed for room, with since when they are of no use; and when
        the oldest of those idle too briefly to be closed yet was accepted (None: there is none)."""
        useless: list[tuple[float, RequestHandler]] = []
        young: float | None = None
        for connection in open_now:
            state = self.busy.get(connection)
            if state is not None:
                if state.evictable:
                    useless.append((state.since, connection))
            elif connection not in self.known:
                since = self._idle_since.get(connection, now)
                if now - since >= MIN_IDLE_S:
                    useless.append((since, connection))
                else:
                    young = since if young is None else min(young, since)
        return useless, young

    def _evict(self, connection: RequestHandler) -> None:
        self.evicted += 1
        self._warn(
            "evicted",
            "%s: %s connections open (daemon.max_connections): %s idle or "
            "unauthenticated one(s) closed to make room %s",
        )
        connection.force_close()

    def _warn(self, what: str, message: str) -> None:
        """One line for the first time, then at most one a minute with the count: a flood makes one
        of these per connection, and each line costs what a request does."""
        now = time.monotonic()
        count, since = self._warned.get(what, (0, -WARN_EVERY_S))
        if now - since < WARN_EVERY_S:
            self._warned[what] = (count + 1, since)
            return
        span = f"in the last {now - since:.0f} s" if count else "just now"
        log.warning(message, self.name, self.limits.max_connections, count + 1, span)
        self._warned[what] = (0, now)

    def _forget_gone(self, open_now: list[RequestHandler]) -> None:
        alive = set(open_now)
        self.known.intersection_update(alive)
        for gone in [h for h in self._idle_since if h not in alive]:
            del self._idle_since[gone]


async def _too_slow(request: web.Request) -> web.StreamResponse:
    """408, then hang up: the rest of the body is not worth waiting (or lingering) for."""
    response = web.Response(status=408, text="request body too slow\n")
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    if request.transport is not None:
        request.transport.close()
    return response


class _CappedSite(web.BaseSite):
    """A TCP site with its own accept loop: a connection goes to aiohttp once `make_room` says so
    (else answered 503), so a full listener leaves newcomers in the kernel's backlog instead of
    closing connections whose requests it has not read yet."""

    __slots__ = ("_accepting", "_connections", "_host", "_port", "_sockets")

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, connections: _Connections
    ) -> None:
        super().__init__(runner)
        self._host, self._port = host, port
        self._connections = connections
        self._sockets: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        return int(self._sockets[0].getsockname()[1]) if self._sockets else self._port

    async def start(self) -> None:
        await super().start()  # registers the site with its runner (cleanup stops it)
        loop = asyncio.get_running_loop()
        found = await loop.getaddrinfo(
            self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                port = self.port if self._sockets else address[1]  # "localhost": 2 sockets, 1 port
                sock.bind((address[0], port, *address[2:]))
                sock.listen(self._backlog)
                sock.setblocking(False)
            except OSError:
                sock.close()
                await self.stop()
                raise
            self._sockets.append(sock)
        server = self._runner.server
        assert server is not None
        self._accepting = [loop.create_task(self._accept(sock, server)) for sock in self._sockets]

    async def stop(self) -> None:
        for task in self._accepting:
            task.cancel()
        await asyncio.gather(*self._accepting, return_exceptions=True)
        for sock in self._sockets:
            sock.close()
        self._runner._check_site(self)
        self._runner._unreg_site(self)

    async def _accept(self, sock: socket.socket, server: web.Server) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:  # out of files: connections open now must end first
                log.warning("%s: cannot accept a connection (%s); trying again", self.name, exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if not await self._connections.make_room(server):
                with contextlib.suppress(OSError):
                    conn.send(REFUSAL)
                conn.close()
                continue
            handler = server()
            self._connections.accepted(handler)
            try:
                await loop.connect_accepted_socket(functools.partial(_same, handler), conn)
            except OSError:
                conn.close()


def _same(handler: RequestHandler) -> RequestHandler:
    return handler


class MalformedRequests(logging.Filter):
    """aiohttp logs a request it cannot even parse (a bad URL or header byte, a line past its
    limits) at ERROR with a traceback and the bytes sent. That is the client's doing, answered 400:
    one WARNING line without traceback, the same text whatever was sent or from where, so the repeat
    filter folds a flood of them into a count."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = (
                logging.WARNING,
                logging.getLevelName(logging.WARNING),
            )
            record.msg, record.args = (
                "malformed HTTP requests answered %s (%s)",
                (exc.code, type(exc).__name__),
            )
            record.exc_info = record.exc_text = None
        return True


def _quiet_malformed_requests() -> None:
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequests) for f in server_log.filters):
        server_log.addFilter(MalformedRequests())


async def serve(
    app: web.Application,
    host: str,
    port: int,
    gate: RequestGate,
    *,
    limits: Limits = Limits(),
    name: str = "http",
) -> Listening:
    """Serve `app` on host:port within `limits`, each request judged by `gate` before its body is
    awaited; call before anything else freezes the app."""
    _quiet_malformed_requests()
    connections = _Connections(limits, name, gate)
    app.middlewares.insert(0, connections.track)
    runner = web.AppRunner(
        app, access_log=None, keepalive_timeout=limits.header_timeout, lingering_time=LINGER_S
    )
    await runner.setup()
    site = _CappedSite(runner, host, port, connections)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return Listening(port=site.port, runner=runner, connections=connections)


def raise_fd_limit(wanted: int = WANTED_NOFILE) -> int:
    """Raise this process's soft open-file limit toward `wanted` (within the hard limit); returns
    the new soft limit. Each connection is a file: at the usual 1024 a flood ran accept() out of
    files before the cap acted."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %s to %s: %s", soft, target, exc)
    return soft

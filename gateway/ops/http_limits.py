"""The daemon's HTTP listeners with bounds, so that slow or half-open connections cannot starve the rest.

A connection must finish its request headers within `header_timeout` of opening (or of its last answer), a request
body must arrive within `body_timeout` (a multipart upload is streamed by its handler instead, which bounds its size
and the wait for each chunk: the web chat's files), and at most `max_connections` are open at once: at the cap, the oldest
connection with no request in progress is closed to make room, and only when every one is busy is the newcomer
turned away (503). Used for the web chat, the Telegram webhook and the Slack Events endpoint (handed to those
adapters as their `serve`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
WANTED_NOFILE = 65536
FRESH_S = 5.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 256
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S


@dataclass(eq=False, slots=True)
class Listening:
    """A started listener (a gateway.events.HttpListener): its bound port, and `stop()`."""

    port: int
    runner: web.AppRunner
    connections: _Connections = field(repr=False)

    async def stop(self) -> None:
        await self.runner.cleanup()


class _Connections:
    """Which connections are open and which have a request in progress (those are never evicted)."""

    def __init__(self, limits: Limits, name: str) -> None:
        self.limits = limits
        self.name = name
        self.busy: dict[asyncio.BaseTransport, int] = {}
        self.evicted = 0
        self.refused = 0
        self._fresh: dict[RequestHandler, float] = {}  # made by admit(), not yet connected

    @web.middleware
    async def track(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        if transport is None:
            return await handler(request)
        self.busy[transport] = self.busy.get(transport, 0) + 1
        try:
            if request.body_exists and request.content_type != "multipart/form-data":
                try:
                    await asyncio.wait_for(request.read(), self.limits.body_timeout)
                except TimeoutError:
                    return await _too_slow(request)
            return await handler(request)
        finally:
            left = self.busy[transport] - 1
            if left:
                self.busy[transport] = left
            else:
                del self.busy[transport]

    def admit(self, server: web.Server) -> asyncio.Protocol:
        """The protocol for a connection just accepted: aiohttp's, after making room for it if need be."""
        now = time.monotonic()
        connected = server.connections
        seen = set(connected)
        for handler, made in list(self._fresh.items()):  # connection_made comes a loop turn after this
            if handler in seen or now - made > FRESH_S:
                del self._fresh[handler]
        open_now = [h for h in connected if h.transport is not None]
        if len(open_now) + len(self._fresh) >= self.limits.max_connections and not self._make_room(open_now):
            self.refused += 1
            log.warning("%s: all %s connections are busy (daemon.max_connections); refusing new ones",
                        self.name, self.limits.max_connections)
            return _Refuse()
        handler = server()
        self._fresh[handler] = now
        return handler

    def _make_room(self, open_now: list[RequestHandler]) -> bool:
        """Close the oldest idle connection: an open one with no request in progress, else one accepted earlier in
        this same round (a burst the kernel queued is accepted before any of it is connected; those are idle too,
        and counting them as busy turned real requests away). False when every connection is busy."""
        idle = next((h for h in open_now if h.transport not in self.busy), None)
        if idle is None and not self._fresh:
            return False
        self.evicted += 1
        log.warning("%s: %s connections open (daemon.max_connections); closing the oldest idle ones",
                    self.name, self.limits.max_connections)
        if idle is not None:
            idle.force_close()
        else:
            fresh = next(iter(self._fresh))
            del self._fresh[fresh]
            # Its connection_made is already queued (its transport was made right after it): close it after that,
            # since aiohttp's handler closed before it is connected would keep the socket open.
            asyncio.get_running_loop().call_soon(_close_connected, fresh, 3)
        return True


def _close_connected(handler: RequestHandler, tries: int) -> None:
    if handler.transport is not None:
        handler.force_close()
    elif tries > 1:
        asyncio.get_running_loop().call_soon(_close_connected, handler, tries - 1)


async def _too_slow(request: web.Request) -> web.StreamResponse:
    """408, then hang up: the rest of the body is not worth waiting (or lingering) for."""
    response = web.Response(status=408, text="request body too slow\n")
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    if request.transport is not None:
        request.transport.close()
    return response


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSAL)
        transport.close()


class _CappedSite(web.TCPSite):
    """TCPSite whose accepted connections go through `_Connections.admit` first."""

    __slots__ = ("_connections",)

    def __init__(self, runner: web.AppRunner, host: str, port: int, connections: _Connections) -> None:
        super().__init__(runner, host, port)
        self._connections = connections

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner (cleanup stops it)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: self._connections.admit(server), self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)


class MalformedRequests(logging.Filter):
    """aiohttp logs a request it cannot even parse (a bad URL or header byte, a line past its limits) at ERROR with
    a traceback and the bytes sent. That is the client's doing, answered 400: one WARNING line without traceback,
    the same text whatever was sent or from where, so the repeat filter folds a flood of them into a count."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            record.msg, record.args = "malformed HTTP requests answered %s (%s)", (exc.code, type(exc).__name__)
            record.exc_info = record.exc_text = None
        return True


def _quiet_malformed_requests() -> None:
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequests) for f in server_log.filters):
        server_log.addFilter(MalformedRequests())


async def serve(app: web.Application, host: str, port: int, *, limits: Limits = Limits(),
                name: str = "http") -> Listening:
    """Serve `app` on host:port within `limits`; call before anything else freezes the app."""
    _quiet_malformed_requests()
    connections = _Connections(limits, name)
    app.middlewares.insert(0, connections.track)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.header_timeout)
    await runner.setup()
    site = _CappedSite(runner, host, port, connections)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    sockets = getattr(site._server, "sockets", None) or ()
    return Listening(port=sockets[0].getsockname()[1] if sockets else port, runner=runner, connections=connections)


def raise_fd_limit(wanted: int = WANTED_NOFILE) -> int:
    """Raise this process's soft open-file limit toward `wanted` (within the hard limit); returns the new soft
    limit. Each connection is a file: at the usual 1024 a flood ran accept() out of files before the cap acted."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %s to %s: %s", soft, target, exc)
    return soft

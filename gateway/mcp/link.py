"""One live connection to an MCP server on the official
SDK: stdio (a child process) or streamable HTTP.

The only module that imports `mcp`; gateway/mcp/hub.py imports it when a server is configured, so a
daemon without `mcp_servers` never loads the SDK. The connection must be opened and closed by the
same task (the SDK runs on anyio task groups): the hub's per-server task holds it, other tasks only
call through it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TextIO

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    Implementation,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.config.tools import McpServerConfig
from gateway.errors import ToolError

log = logging.getLogger("gateway.mcp.hub")

CLIENT_INFO = Implementation(name="agent-gateway", version="0.1")
MAX_PAGES = 50  # a paginator that never ends cannot hang a start
# A server that writes something other than JSON-RPC on stdout (a log line, a banner) is tolerated;
# one that does nothing else (a wrong command, a crash loop printing a traceback) is dropped after
# this many lines in a row, instead of the SDK logging a traceback per line (thousands a second)
# until the connect timeout ends it.
MAX_BAD_LINES = 20


@dataclass(frozen=True, slots=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = field(default_factory=dict)  # as the server sent them


class Link:
    """An entered `mcp.Client`; `closed` is set when the server's side of the connection ends,
    `changed` when the server says its tool list changed (`notifications/tools/list_changed`)."""

    def __init__(
        self,
        server: str,
        client: Client,
        closed: asyncio.Event,
        changed: asyncio.Event,
        read: _WatchedRead | None = None,
    ) -> None:
        self.server = server
        self._client = client
        self.closed = closed
        self.changed = changed
        self._read = read

    @property
    def why_closed(self) -> str | None:
        """Why the gateway ended the connection itself (the server sent only garbage), if it did."""
        return self._read.why_closed if self._read is not None else None

    async def watch_tools(self) -> None:
        """On a 2026-07-28 connection, change notifications come only on a `subscriptions/listen`
        stream the client opens: hold one open (each event sets `changed`, through the message
        handler too). Earlier protocol versions send them unasked, to the message handler; then this
        returns at once. Never raises."""
        if self._client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        try:
            async with self._client.listen(tools_list_changed=True) as subscription:
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        self.changed.set()
        except (MCPError, SubscriptionLost, ListenNotSupportedError, TimeoutError) as exc:
            log.info(
                "mcp server %s: no tool-change stream (%s); "
                "its tools are listed again when it reconnects",
                self.server,
                type(exc).__name__,
            )

    async def list_tools(self) -> list[ListedTool]:
        tools: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._client.list_tools(cursor=cursor)
            tools.extend(
                ListedTool(
                    t.name,
                    t.description or t.title or "",
                    dict(t.input_schema),
                    _annotations(t.annotations),
                )
                for t in page.tools
            )
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The result as plain JSON (`content`, `structuredContent`, `isError`); ToolError when
        there is none. The per-call timeout is the hub's (on the injected clock): it cancels this
        call."""
        try:
            result = await self._client.call_tool(tool, dict(arguments))
        except MCPError as exc:
            raise ToolError(self._failure(tool, exc)) from None
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped

    def _failure(self, tool: str, exc: MCPError) -> str:
        if exc.code == CONNECTION_CLOSED:
            self.closed.set()
            return (
                f"MCP server {self.server!r} stopped while running {tool} (connection closed); "
                "it is being restarted. Try again in a moment or do without it."
            )
        if exc.code == REQUEST_TIMEOUT:
            return f"MCP server {self.server!r} timed out running {tool}."
        return f"MCP server {self.server!r} refused {tool}: {exc.message[:300]}"


def _annotations(found: Any) -> dict[str, Any]:
    if found is None:
        return {}
    dumped: dict[str, Any] = found.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


@asynccontextmanager
async def open_link(
    server: str, config: McpServerConfig, *, errlog: TextIO | None = None
) -> AsyncIterator[Link]:
    """Connect (spawn or dial), negotiate, and yield the
    link; leaving closes it (and stops a child process)."""
    closed, changed = asyncio.Event(), asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    if config.command is not None:
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env={k: v.value for k, v in config.env.items()} or None,
            cwd=config.cwd,
        )
        watched = _Watched(stdio_client(params, errlog=errlog or sys.stderr), closed)
        async with (
            _explained(watched),
            Client(
                watched, client_info=CLIENT_INFO, cache=None, message_handler=on_message
            ) as client,
        ):
            yield Link(server, client, closed, changed, watched.read)
        return
    headers = {k: v.value for k, v in config.headers.items()}
    async with httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)
    ) as http:
        transport = streamable_http_client(config.url or "", http_client=http)
        watched = _Watched(transport, closed)
        async with (
            _explained(watched),
            Client(
                watched, client_info=CLIENT_INFO, cache=None, message_handler=on_message
            ) as client,
        ):
            yield Link(server, client, closed, changed, watched.read)


@asynccontextmanager
async def _explained(watched: _Watched) -> AsyncIterator[None]:
    """A connection the gateway dropped (the server wrote only garbage) fails with that reason, not
    with the SDK's bare 'connection closed' (raised by the handshake or a request, maybe inside a
    task group's ExceptionGroup)."""
    try:
        yield
    except Exception:
        if watched.read is not None and watched.read.why_closed:
            raise ToolError(watched.read.why_closed) from None
        raise


class _Watched:
    """A transport whose read stream sets `closed` when the SDK stops reading it (EOF: the server
    went away)."""

    def __init__(
        self, inner: AbstractAsyncContextManager[tuple[Any, Any]], closed: asyncio.Event
    ) -> None:
        self._inner = inner
        self._closed = closed
        self.read: _WatchedRead | None = None

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        self.read = _WatchedRead(read, self._closed)
        return self.read, write

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._closed.set()
        return await self._inner.__aexit__(kind, exc, tb)


class _WatchedRead:
    """The SDK's read stream, ended early (as if the server had gone) after MAX_BAD_LINES unparsable
    lines in a row: the SDK hands each one over as an exception value."""

    def __init__(self, inner: Any, closed: asyncio.Event) -> None:
        self._inner = inner
        self._closed = closed
        self._bad = 0
        self.why_closed: str | None = None

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        return self._count(await self._inner.receive())

    def _count(self, item: Any) -> Any:
        self._bad = self._bad + 1 if isinstance(item, Exception) else 0
        if self._bad >= MAX_BAD_LINES:
            self.why_closed = (
                f"it wrote {MAX_BAD_LINES} lines in a row on stdout that are not MCP messages "
                "(is the command an MCP server? its log lines belong on stderr)"
            )
            self._closed.set()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return self._count(await self._inner.__anext__())
        except StopAsyncIteration:
            self._closed.set()
            raise

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._closed.set()
        result: bool | None = await self._inner.__aexit__(kind, exc, tb)
        return result

"""One live connection to an MCP server on the official SDK: stdio (a child process) or streamable HTTP.

The only module that imports `mcp`; gateway/mcp/hub.py imports it when a server is configured, so a daemon
without `mcp_servers` never loads the SDK. The connection must be opened and closed by the same task (the SDK
runs on anyio task groups): the hub's per-server task holds it, other tasks only call through it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TextIO

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, Implementation, ToolListChangedNotification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.config.tools import McpServerConfig
from gateway.errors import ToolError

log = logging.getLogger("gateway.mcp.hub")

CLIENT_INFO = Implementation(name="agent-gateway", version="0.1")
MAX_PAGES = 50  # a paginator that never ends cannot hang a start


@dataclass(frozen=True, slots=True)
class ListedTool:
    name: str
    description: str
    input_schema: dict[str, Any]


class Link:
    """An entered `mcp.Client`; `closed` is set when the server's side of the connection ends, `changed` when the
    server says its tool list changed (`notifications/tools/list_changed`)."""

    def __init__(self, server: str, client: Client, closed: asyncio.Event, changed: asyncio.Event) -> None:
        self.server = server
        self._client = client
        self.closed = closed
        self.changed = changed

    async def watch_tools(self) -> None:
        """On a 2026-07-28 connection, change notifications come only on a `subscriptions/listen` stream the client
        opens: hold one open (each event sets `changed`, through the message handler too). Earlier protocol
        versions send them unasked, to the message handler; then this returns at once. Never raises."""
        if self._client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        try:
            async with self._client.listen(tools_list_changed=True) as subscription:
                async for event in subscription:
                    if isinstance(event, ToolsListChanged):
                        self.changed.set()
        except (MCPError, SubscriptionLost, ListenNotSupportedError, TimeoutError) as exc:
            log.info("mcp server %s: no tool-change stream (%s); its tools are listed again when it reconnects",
                     self.server, type(exc).__name__)

    async def list_tools(self) -> list[ListedTool]:
        tools: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._client.list_tools(cursor=cursor)
            tools.extend(ListedTool(t.name, t.description or t.title or "", dict(t.input_schema)) for t in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The result as plain JSON (`content`, `structuredContent`, `isError`); ToolError when there is none.
        The per-call timeout is the hub's (on the injected clock): it cancels this call."""
        try:
            result = await self._client.call_tool(tool, dict(arguments))
        except MCPError as exc:
            raise ToolError(self._failure(tool, exc)) from None
        dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped

    def _failure(self, tool: str, exc: MCPError) -> str:
        if exc.code == CONNECTION_CLOSED:
            self.closed.set()
            return (f"MCP server {self.server!r} stopped while running {tool} (connection closed); "
                    "it is being restarted. Try again in a moment or do without it.")
        if exc.code == REQUEST_TIMEOUT:
            return f"MCP server {self.server!r} timed out running {tool}."
        return f"MCP server {self.server!r} refused {tool}: {exc.message[:300]}"


@asynccontextmanager
async def open_link(server: str, config: McpServerConfig, *, errlog: TextIO | None = None) -> AsyncIterator[Link]:
    """Connect (spawn or dial), negotiate, and yield the link; leaving closes it (and stops a child process)."""
    closed, changed = asyncio.Event(), asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    if config.command is not None:
        params = StdioServerParameters(command=config.command, args=list(config.args),
                                       env={k: v.value for k, v in config.env.items()} or None,
                                       cwd=config.cwd)
        async with Client(_Watched(stdio_client(params, errlog=errlog or sys.stderr), closed),
                          client_info=CLIENT_INFO, cache=None, message_handler=on_message) as client:
            yield Link(server, client, closed, changed)
        return
    headers = {k: v.value for k, v in config.headers.items()}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http:
        transport = streamable_http_client(config.url or "", http_client=http)
        async with Client(_Watched(transport, closed), client_info=CLIENT_INFO, cache=None,
                          message_handler=on_message) as client:
            yield Link(server, client, closed, changed)


class _Watched:
    """A transport whose read stream sets `closed` when the SDK stops reading it (EOF: the server went away)."""

    def __init__(self, inner: AbstractAsyncContextManager[tuple[Any, Any]], closed: asyncio.Event) -> None:
        self._inner = inner
        self._closed = closed

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _WatchedRead(read, self._closed), write

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        self._closed.set()
        return await self._inner.__aexit__(kind, exc, tb)


class _WatchedRead:
    def __init__(self, inner: Any, closed: asyncio.Event) -> None:
        self._inner = inner
        self._closed = closed

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        return await self._inner.receive()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self._closed.set()
            raise

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        self._closed.set()
        result: bool | None = await self._inner.__aexit__(kind, exc, tb)
        return result

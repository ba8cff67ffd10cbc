"""Every configured MCP server kept connected: one task per server connects, lists its tools (again
whenever the server says they changed), waits until the connection ends, then reconnects with
backoff (1 s doubling to 60 s, on the sleep and clock the wiring injects, so tests drive it with a
fake clock). Calls go through whatever link is up; while a server is down its calls answer a tool
error at once. Nothing a server does reaches past its own task: one bad server never stops the
daemon or the other servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlsplit

from gateway.config.tools import McpServerConfig
from gateway.errors import ToolError
from gateway.mcp.content import ToolOutput, tool_output
from gateway.mcp.names import exposed_name
from gateway.mcp.vet import vet_tool

if TYPE_CHECKING:
    from gateway.mcp.link import Link, ListedTool

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")
State = Literal["starting", "up", "down", "disabled", "stopped"]
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
STABLE_S = 60.0  # up this long, and the next failure starts the backoff from the beginning again
LOG_CAP_BYTES = 1_000_000
MIN_SECRET_CHARS = 6  # as the log redactor: a shorter value would mask ordinary words
MASK = "***"


HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
MAX_TITLE = 200


@dataclass(frozen=True, slots=True)
class McpTool:
    server: str
    name: str  # the server's own name for it
    exposed: str  # what the model calls: mcp_<server>_<tool>
    description: str
    schema: dict[str, Any]
    # what the server says of it (readOnlyHint, destructiveHint, …): for the core, never the model
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ServerState:
    name: str
    transport: str
    state: State = "starting"
    error: str | None = None
    restarts: int = 0
    retry_in_s: float | None = None
    # by exposed name; kept while it restarts
    tools: dict[str, McpTool] = field(default_factory=dict)
    # exposed name → why (its text looks like an injection)
    withheld: dict[str, str] = field(default_factory=dict)


class McpHub:
    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        log_dir: Path | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_result_chars: int = 20_000,
    ) -> None:
        self.configs = dict(servers)
        self.log_dir = log_dir
        self.sleep = sleep
        self.clock = clock
        self.max_result_chars = max_result_chars
        self.states = {
            name: ServerState(name, c.transport, "starting" if c.enabled else "disabled")
            for name, c in sorted(self.configs.items())
        }
        self._links: dict[str, Link] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._tried: dict[str, asyncio.Event] = {name: asyncio.Event() for name in self.configs}
        self._stopping = asyncio.Event()
        self._reported: set[tuple[str, str]] = set()  # withheld tools already logged
        credentials = _credentials(self.configs.values())
        self._secrets = sorted(credentials, key=len, reverse=True)  # longest first: masked whole

    # ------------------------------------------------------------------ what the agent sees
    def tools(self) -> list[McpTool]:
        """Every server's tools as last listed (a restarting server keeps its list), sorted by
        exposed name."""
        found = [t for s in self.states.values() for t in s.tools.values()]
        return sorted(found, key=lambda t: t.exposed)

    def tool(self, exposed: str) -> McpTool | None:
        return next((s.tools[exposed] for s in self.states.values() if exposed in s.tools), None)

    def withheld(self, exposed: str) -> str | None:
        """Why a tool a server lists is kept from sessions (see gateway/mcp/vet.py), or None."""
        return next(
            (s.withheld[exposed] for s in self.states.values() if exposed in s.withheld), None
        )

    async def call(
        self, exposed: str, arguments: Mapping[str, Any], *, images: bool = False
    ) -> ToolOutput:
        """One call's result (with `images`, its pictures as bytes); ToolError when the tool or its
        server is not there."""
        tool = self.tool(exposed)
        if tool is None and (why := self.withheld(exposed)):
            raise ToolError(
                f"{exposed} is withheld: its description looks like a prompt injection ({why})."
            )
        if tool is None:
            raise ToolError(
                f"{exposed} is no longer offered by any MCP server (it was when this conversation "
                "started). Do without it."
            )
        link = self._links.get(tool.server)
        if link is None or link.closed.is_set():
            # closed: its task is about to notice and restart it
            raise ToolError(self.masked(self._unavailable(self.states[tool.server])))
        limit = self.configs[tool.server].timeout_s
        try:
            result = await self._within(
                link.call(tool.name, arguments),
                limit,
                f"MCP server {tool.server!r} did not answer {tool.name} within {limit:g} s.",
            )
        except ToolError as exc:
            raise ToolError(self.masked(str(exc))) from None
        out = tool_output(result, max_chars=self.max_result_chars, images=images)
        return dataclasses.replace(out, text=self.masked(out.text))

    def masked(self, text: str) -> str:
        """`text` without the credentials the servers were given (`env`, `headers`): a server or the
        API behind it may quote them (a 401 echoing the request), and what a tool answers reaches
        the model, then a chat."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    async def _within(self, call: Awaitable[T], seconds: float, late: str) -> T:
        """`call`'s result, or ToolError(late) once `seconds` have passed on the injected clock; the
        call is then cancelled (the SDK tells the server with notifications/cancelled)."""
        work = asyncio.ensure_future(call)
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if work.cancelled():
            raise ToolError(late)
        return work.result()

    def _unavailable(self, state: ServerState) -> str:
        why = f" ({state.error})" if state.error else " (it stopped; it is being restarted)"
        retry = f"; next restart attempt in {state.retry_in_s:g} s" if state.retry_in_s else ""
        return (
            f"MCP server {state.name!r} is not running right "
            f"now{why}{retry}. Try later or do without it."
        )

    # ------------------------------------------------------------------ lifecycle
    async def start(self, *, wait_s: float | None = None) -> None:
        """Start every enabled server; wait until each has
        connected or failed once (at most `wait_s`)."""
        loop = asyncio.get_running_loop()
        for name, config in self.configs.items():
            if config.enabled:
                self._tasks[name] = loop.create_task(self._keep(name, config), name=f"mcp:{name}")
        waits = [self._tried[n].wait() for n in self._tasks]
        if waits:
            limit = (
                wait_s
                if wait_s is not None
                else max(c.connect_timeout_s for c in self.configs.values()) + 1
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await asyncio.gather(*waits)
            for name in self._tasks:
                # still connecting (or still closing a child that ignores being stopped)
                state = self.states[name]
                if state.state == "starting" and state.error is None:
                    state.error = f"no answer within {limit:g} s"

    def not_up(self) -> list[ServerState]:
        """The enabled servers without a live connection: down, or still starting after start() gave
        up waiting."""
        return [s for s in self.states.values() if s.state in ("starting", "down")]

    async def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        for name, task in self._tasks.items():
            # still connecting: nothing to close gracefully, nothing to wait for
            if name not in self._links:
                task.cancel()
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for state in self.states.values():
            if state.state != "disabled":
                state.state = "stopped"

    async def _keep(self, name: str, config: McpServerConfig) -> None:
        attempt = 0
        state = self.states[name]
        while not self._stopping.is_set():
            started = self.clock()
            reason = await self._serve_once(name, config)
            if self._stopping.is_set():
                break
            attempt = 0 if self.clock() - started >= STABLE_S else attempt
            delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            attempt += 1
            state.state, state.error, state.retry_in_s = "down", reason, delay
            state.restarts += 1
            log.warning("mcp server %s down: %s; restarting in %gs", name, reason, delay)
            await self._first(self.sleep(delay), self._stopping.wait())

    async def _serve_once(self, name: str, config: McpServerConfig) -> str:
        """Connect, list, wait until the connection ends;
        returns why it ended. Never raises (a task root)."""
        state = self.states[name]
        try:
            # the SDK loads only here: see gateway/mcp/link.py
            from gateway.mcp.link import open_link

            with self._errlog(name) as errlog:
                async with asyncio.timeout(config.connect_timeout_s) as deadline:
                    async with open_link(name, config, errlog=errlog) as link:
                        listed = await link.list_tools()
                        deadline.reschedule(None)
                        self._up(state, link, listed)
                        return await self._serve(state, link, config)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            return f"no answer within {config.connect_timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - a task root for one server: the daemon and the others go on
            return _describe(exc)
        finally:
            self._links.pop(name, None)
            self._tried[name].set()

    def _up(self, state: ServerState, link: Link, listed: list[ListedTool]) -> None:
        tools, withheld = self._vetted(state.name, listed)
        self._log_change(state, tools)
        state.tools, state.withheld, state.state, state.error, state.retry_in_s = (
            tools,
            withheld,
            "up",
            None,
            None,
        )
        self._links[state.name] = link
        self._tried[state.name].set()

    def _vetted(
        self, server: str, listed: list[ListedTool]
    ) -> tuple[dict[str, McpTool], dict[str, str]]:
        """The listed tools the model may see, by exposed
        name, and those withheld with the reason."""
        tools: dict[str, McpTool] = {}
        withheld: dict[str, str] = {}
        for t in listed:
            exposed = exposed_name(server, t.name)
            if exposed in tools or exposed in withheld:
                log.warning(
                    "mcp server %s: tool %r clashes with another as %s; skipped",
                    server,
                    t.name,
                    exposed,
                )
                continue
            vetted = vet_tool(t.description, t.input_schema, mask=self.masked)
            if vetted.problem is None:
                tools[exposed] = McpTool(
                    server,
                    t.name,
                    exposed,
                    vetted.description,
                    vetted.schema,
                    hints_of(t.annotations),
                )
                continue
            withheld[exposed] = vetted.problem
            if (exposed, vetted.problem) not in self._reported:
                # once, not on every reconnect or re-list
                self._reported.add((exposed, vetted.problem))
                log.warning(
                    "mcp server %s: tool %s withheld from sessions: its description or schema "
                    "looks like a prompt injection (%s)",
                    server,
                    t.name,
                    vetted.problem,
                )
        return tools, withheld

    @staticmethod
    def _log_change(state: ServerState, tools: Mapping[str, McpTool]) -> None:
        if not state.tools:
            log.info("mcp server %s up (%s): %s tools", state.name, state.transport, len(tools))
            return
        old = {n: (t.description, t.schema, t.annotations) for n, t in state.tools.items()}
        new = {n: (t.description, t.schema, t.annotations) for n, t in tools.items()}
        if old != new:
            added, dropped = sorted(set(new) - set(old)), sorted(set(old) - set(new))
            changed = sorted(n for n in set(old) & set(new) if old[n] != new[n])
            log.info(
                "mcp server %s changed its tools (added %s, dropped %s, changed %s); new sessions "
                "get the new list, running ones keep theirs",
                state.name,
                added or "none",
                dropped or "none",
                changed or "none",
            )

    async def _serve(self, state: ServerState, link: Link, config: McpServerConfig) -> str:
        """Until the connection ends: list the tools again whenever the server says they changed."""
        watcher = asyncio.ensure_future(link.watch_tools())
        try:
            while True:
                await self._first(link.closed.wait(), self._stopping.wait(), link.changed.wait())
                if link.closed.is_set() or self._stopping.is_set():
                    break
                link.changed.clear()  # a notification during the listing below asks for one more
                await self._relist(state, link, config)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        return (
            "stopped"
            if self._stopping.is_set()
            else link.why_closed or "the server closed the connection"
        )

    async def _relist(self, state: ServerState, link: Link, config: McpServerConfig) -> None:
        """New sessions get the new list; running sessions keep the one stored with their prompt."""
        try:
            async with asyncio.timeout(config.connect_timeout_s):
                listed = await link.list_tools()
        except Exception as exc:  # noqa: BLE001 - the old list stays; a dead link is noticed by the loop
            log.warning(
                "mcp server %s said its tools changed, but "
                "listing them failed: %s; keeping the old list",
                state.name,
                _describe(exc),
            )
            return
        tools, state.withheld = self._vetted(state.name, listed)
        self._log_change(state, tools)
        state.tools = tools

    @staticmethod
    async def _first(*waits: Awaitable[Any]) -> None:
        """Wait until one of `waits` is done; cancel the others."""
        futures = [asyncio.ensure_future(w) for w in waits]
        try:
            await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in futures:
                future.cancel()

    @contextlib.contextmanager
    def _errlog(self, name: str) -> Any:
        """A stdio server's stderr goes to <log_dir>/<name>.log (cut when it passes 1 MB)."""
        if self.log_dir is None:
            yield None
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{name}.log"
        mode = "w" if path.exists() and path.stat().st_size > LOG_CAP_BYTES else "a"
        handle: IO[str]
        with open(path, mode, encoding="utf-8") as handle:
            yield handle

    def error_log(self, name: str, lines: int = 5) -> str:
        """The last lines a stdio server wrote to stderr, for `gateway doctor`."""
        if self.log_dir is None or not (self.log_dir / f"{name}.log").exists():
            return ""
        text = (self.log_dir / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])


def hints_of(found: Mapping[str, Any]) -> dict[str, Any]:
    """The MCP tool annotations the core reads: the four hints (booleans) and a short title."""
    kept: dict[str, Any] = {k: found[k] for k in HINTS if isinstance(found.get(k), bool)}
    title = found.get("title")
    if isinstance(title, str) and title.strip():
        kept["title"] = " ".join(title.split())[:MAX_TITLE]
    return kept


def _credentials(configs: Iterable[McpServerConfig]) -> set[str]:
    """Every env and header value, a header's last word (the token of `Bearer <token>`), and what a
    `url` carries that is not its address: a password and query values (`?api_key=…`: some servers
    take their key that way)."""
    found: set[str] = set()
    for config in configs:
        for secret in (*config.env.values(), *config.headers.values()):
            found.update(
                v for v in (secret.value, *secret.value.split()[-1:]) if len(v) >= MIN_SECRET_CHARS
            )
        if config.url:
            parts = urlsplit(config.url)
            carried = [parts.password or "", *(v for _, v in parse_qsl(parts.query))]
            found.update(v for v in carried if len(v) >= MIN_SECRET_CHARS)
    return found


def _describe(exc: BaseException) -> str:
    """One line for an exception the SDK raised, often an ExceptionGroup around the real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, ToolError):  # already a sentence for the operator
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__

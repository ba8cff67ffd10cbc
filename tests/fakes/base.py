"""Shared plumbing for the wire fakes: an aiohttp server on 127.0.0.1:0, the ordered request record,
`wait_for_call`, and the per-endpoint fault queue. It knows nothing about any platform's
protocol."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Call:
    """One request as the fake received it. `name` is the fake's logical name for the endpoint
    (Telegram: lowercase Bot API method; Slack: `chat.postMessage`; Discord: `"POST
    /channels/1/messages"`;
    LLM: the path). `at` comes from the fake's clock (monotonic by default)."""

    method: str
    path: str
    name: str
    body: Any
    headers: Mapping[str, str]
    query: Mapping[str, str]
    at: float
    # the body byte for byte, where a fake keeps it (the LLM fake: to search every byte sent)
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class Fault:
    """Answer with this HTTP status instead of the real result. `body` (dict → JSON, str/bytes → as
    is) defaults to the platform's own error envelope for that status."""

    status: int
    body: Any = None
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Delay:
    """Wait `seconds` before answering; then answer with `then` (None: the normal answer)."""

    seconds: float
    then: Any = None


@dataclass(frozen=True, slots=True)
class Malformed:
    """Answer 200 with a body that is not valid JSON."""

    body: bytes = b'{"ok": tru'


@dataclass(frozen=True, slots=True)
class ConnectionReset:
    """Close the TCP connection without sending any response."""


FaultStep = Fault | Delay | Malformed | ConnectionReset


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    # Exactly "application/json" (no charset): discord.py only parses that content type as JSON.
    return web.Response(
        body=dumps(obj), status=status, headers=dict(headers or {}), content_type="application/json"
    )


async def reset_connection(request: web.Request) -> web.StreamResponse:
    """Drop the socket mid-request. The returned
    response is never written: the transport is gone."""
    if request.transport is not None:
        request.transport.abort()
    # aiohttp treats a cancelled handler on a lost peer as a normal disconnect
    raise asyncio.CancelledError


class FakeServer:
    """Base of every fake: lifecycle, request record and
    fault queues. Subclasses add routes to `self.app`."""

    # how long a `wait_*` helper waits by default: for real I/O through a real client library (a
    # login, a websocket, a request and its answer), which takes seconds on a loaded 2-CPU machine,
    # tens of them with two busy processes beside the suite (scripts/busy_suite.sh); a wait that is
    # met returns at once
    WAIT_S = 90.0

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.calls: list[Call] = []
        self.clock = clock
        self.base_url = ""
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._faults: dict[str, deque[Any]] = defaultdict(deque)
        self._changed = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> str:
        self._runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, shutdown_timeout=0.25
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        assert sockets, "the site did not bind"
        self.port = sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        return self.base_url

    async def stop(self) -> None:
        await self._before_stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _before_stop(self) -> None:
        """Hook: close websockets and wake long polls so cleanup does not wait for them."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- record --------------------------------------------------------------------------------
    def record(self, request: web.Request, name: str, body: Any, raw: bytes = b"") -> Call:
        call = Call(
            method=request.method,
            path=request.path,
            name=name,
            body=body,
            headers=dict(request.headers),
            query=dict(request.query),
            at=self.clock(),
            raw=raw,
        )
        self.calls.append(call)
        self.notify()
        return call

    def notify(self) -> None:
        """Wake every `wait_*` helper; call after any change to the record."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _matches(self, call: Call, key: str | Callable[[Call], bool]) -> bool:
        if callable(key):
            return bool(key(call))
        return key in (call.name, call.path, f"{call.method} {call.path}")

    def calls_to(self, key: str | Callable[[Call], bool]) -> list[Call]:
        """Calls whose name, path or "METHOD path" equals
        `key` (or for which `key(call)` is true)."""
        return [c for c in self.calls if self._matches(c, key)]

    async def wait_for_call(
        self, key: str | Callable[[Call], bool], count: int = 1, timeout: float = WAIT_S
    ) -> Call:
        """Return the `count`-th matching call, waiting for it to arrive."""
        await self.wait_until(
            lambda: len(self.calls_to(key)) >= count,
            timeout,
            lambda: f"{key!r} x{count} not seen; calls: {[c.name for c in self.calls]}",
        )
        return self.calls_to(key)[count - 1]

    async def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float = WAIT_S,
        describe: Callable[[], str] | None = None,
    ) -> None:
        """Re-check `predicate` every time the fake records something (and every 50 ms)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(describe() if describe else "condition not met")
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.05))
            except TimeoutError:
                pass

    # -- faults --------------------------------------------------------------------------------
    def fail(self, name: str, *steps: Any) -> None:
        """Queue steps for endpoint `name` ("*" = any endpoint); each request consumes one."""
        self._faults[name].extend(steps)

    def clear_faults(self) -> None:
        self._faults.clear()

    def pending_faults(self, name: str | None = None) -> int:
        if name is not None:
            return len(self._faults.get(name, ()))
        return sum(len(q) for q in self._faults.values())

    def take_fault(self, names: Iterable[str]) -> Any | None:
        for name in (*names, "*"):
            queue = self._faults.get(name)
            if queue:
                return queue.popleft()
        return None

    async def apply_fault(
        self, request: web.Request, step: Any, error_body: Callable[[int], Any]
    ) -> web.StreamResponse | None:
        """Turn a fault step into a response; None means "carry on with the normal answer"."""
        while isinstance(step, Delay):
            await asyncio.sleep(step.seconds)
            step = step.then
        if step is None:
            return None
        if isinstance(step, ConnectionReset):
            return await reset_connection(request)
        if isinstance(step, Malformed):
            return web.Response(body=step.body, content_type="application/json")
        if isinstance(step, Fault):
            body = step.body if step.body is not None else error_body(step.status)
            headers = dict(step.headers or {})
            if isinstance(body, (bytes, str)):
                raw = body.encode() if isinstance(body, str) else body
                return web.Response(body=raw, status=step.status, headers=headers)
            return json_response(body, status=step.status, headers=headers)
        raise TypeError(f"not a fault step: {step!r}")


@dataclass(slots=True)
class Counter:
    """Deterministic id source (no randomness anywhere in the fakes)."""

    next_value: int
    step: int = 1

    def __call__(self) -> int:
        value = self.next_value
        self.next_value += self.step
        return value

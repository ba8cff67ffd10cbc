"""The dashboard on the daemon's web listener: the page, its static files, its data, live updates
(SSE) and the owner's pairing decisions.

Every route here is the owner's: gateway/ops/web_guard.py stands in front of all of them (login
secret, Host and Origin checks), so nothing here checks who calls. The POSTs also insist on a JSON
body, which no cross-site form can send. Nothing here writes except the two pairing actions.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from aiohttp import web

from gateway.access.pairing import PairingBook
from gateway.errors import StoreUnavailable
from gateway.events import AdapterHealth
from gateway.store.database import Store
from gateway.store.rows import iso
from gateway.webui import panels
from gateway.webui.panels import ModelView, Redact
from gateway.webui.series import DEFAULT_WINDOW, WINDOWS, series, series_json

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]
# how often an open dashboard is sent the state (its times and uptime move every time)
PUSH_EVERY_S = 2.0
STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}


@dataclass(frozen=True, slots=True)
class StatusSources:
    """What the status panel reads from the running daemon: each adapter's health, the model in use,
    readiness and the package version."""

    health: Callable[[], Mapping[str, AdapterHealth]]
    model: ModelView
    ready: Callable[[], bool]
    version: str


class Dashboard:
    """Built by the daemon with what it reads; `attach(app)` before the guard protects the app."""

    def __init__(
        self,
        *,
        store: Store,
        book: PairingBook,
        status: StatusSources,
        redact: Redact,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.store = store
        self.book = book
        self.health = status.health
        self.model = status.model
        self.ready = status.ready
        self.version = status.version
        self.redact = redact
        self.clock = clock
        self.sleep = sleep
        self.started_at = clock()
        self._stopping = asyncio.Event()

    def attach(self, app: web.Application) -> None:
        app.router.add_get("/dashboard", self._page)
        app.router.add_get("/dashboard/static/{name}", self._static)
        app.router.add_get("/dashboard/api/state", self._state)
        app.router.add_get("/dashboard/api/events", self._events)
        app.router.add_post("/dashboard/api/pairing/approve", _writes(self._approve))
        app.router.add_post("/dashboard/api/pairing/deny", _writes(self._deny))
        app.on_shutdown.append(self._close_streams)

    # ------------------------------------------------------------------ the data
    def state(self, window: str = DEFAULT_WINDOW) -> dict[str, Any]:
        now = self.clock()
        return {
            "version": self.version,
            "now": iso(now),
            "uptime_s": round((now - self.started_at).total_seconds()),
            "ready": self.ready(),
            "model": {
                "name": self.model.name,
                "source": self.model.source,
                "problem": self.model.problem,
            },
            "adapters": panels.adapters(self.health(), now, self.redact),
            "sessions": panels.sessions(self.store),
            "flushes": panels.flushes(self.store, self.redact),
            "pairing": panels.pairing(self.book, now),
            "jobs": panels.jobs(self.store),
            "approvals": panels.approvals(self.store, self.redact),
            "series": series_json(series(self.store, now, window), window),
        }

    # ------------------------------------------------------------------ routes
    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(
            text=_asset("dashboard.html"),
            content_type="text/html",
            headers={"Cache-Control": "no-store"},
        )

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(text=_asset(name), content_type=STATIC[name])

    async def _state(self, request: web.Request) -> web.Response:
        return web.json_response(self.state(_window(request)))

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the state at once, then every PUSH_EVERY_S. No "only when changed":
        the state carries the time and every "… ago" is relative to it, so it always has."""
        window = _window(request)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        try:
            while not self._stopping.is_set():
                body = json.dumps(self.state(window), separators=(",", ":"))
                await response.write(f"event: state\ndata: {body}\n\n".encode())
                await self._pause()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    async def _pause(self) -> None:
        """The push interval, cut short when the daemon stops: an open dashboard must not hold up
        the drain."""
        tick = asyncio.ensure_future(self.sleep(PUSH_EVERY_S))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({tick, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (tick, stop):
                task.cancel()

    async def _close_streams(self, app: web.Application) -> None:
        self._stopping.set()

    async def _approve(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        code = str(body.get("code", "")).strip()
        if not code:
            return web.json_response(
                {"ok": False, "text": "Type the code the person was given."}, status=400
            )
        # Recorded as an access change: the daemon's access watch welcomes the person, once (it did
        # twice when this page sent a welcome of its own as well).
        approval = self.book.approve(code, by="web", now=self.clock())
        log.info("access: approval from the dashboard: %s", approval.status)
        return web.json_response({"ok": approval.status == "approved", "text": approval.describe()})

    async def _deny(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        platform, user_id = str(body.get("platform", "")), str(body.get("user_id", ""))
        denied = self.book.deny(platform, user_id, now=self.clock())
        log.info(
            "access: pairing request denied from the dashboard platform=%s user=%s",
            platform,
            user_id,
        )
        text = (
            f"Denied {platform}:{user_id}: their code no longer works, and for an hour they get no "
            "new one (access.unknown_dm: ignore stops codes altogether)."
            if denied
            else f"No pending request from {platform}:{user_id}."
        )
        return web.json_response({"ok": denied, "text": text}, status=200 if denied else 404)


def _writes(
    handler: Callable[[web.Request], Awaitable[web.Response]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A decision the database cannot take now (another process holds its lock, the disk is full) is
    a 503 the page shows, not a 500: nothing was changed, the owner can try again."""

    async def guarded(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except StoreUnavailable as exc:
            log.warning("dashboard: %s %s not done: %s", request.method, request.path, exc)
            return web.json_response(
                {
                    "ok": False,
                    "text": "The database takes no writes right now (another program "
                    "holds it, or the disk is full); nothing was changed. Try again in a moment.",
                },
                status=503,
            )

    return guarded


async def _json_body(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(text="send application/json")
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="malformed JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="expected a JSON object")
    return body


def _window(request: web.Request) -> str:
    window = request.query.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        raise web.HTTPBadRequest(text=f"window: one of {', '.join(WINDOWS)}")
    return window


def _asset(name: str) -> str:
    return resources.files("gateway.webui").joinpath(f"static/{name}").read_text(encoding="utf-8")

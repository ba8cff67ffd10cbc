"""The local web chat (`web`): a page served by aiohttp and one WebSocket per browser tab.

Each browser keeps a random client id (localStorage), which is its chat id, so a reload continues the same
session. Replies arrive over the socket as Markdown; the page renders them.
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import resources

from aiohttp import WSMsgType, web

from gateway.events import ChatRef, Inbound, OutboundMessage, Submit, SubmitOutcome

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 100_000
# The current session's (role, text) pairs for a client id, so a reloaded tab shows the conversation so far.
HistorySource = Callable[[str], Sequence[tuple[str, str]]]


class WebChatAdapter:
    platform = "web"

    def __init__(self) -> None:
        self._submit: Submit | None = None
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}
        self._sent = 0
        self._history: HistorySource | None = None
        # Inbound ids: unique across restarts (the store dedupes on them) without a uuid4 per message.
        self._boot = uuid.uuid4().hex[:16]
        self._received = itertools.count(1)

    def attach(self, app: web.Application, *, history: HistorySource | None = None) -> None:
        self._history = history
        app.router.add_get("/", self._page)
        app.router.add_get("/ws", self._socket)

    async def start(self, submit: Submit) -> None:
        self._submit = submit

    async def stop(self) -> None:
        for sockets in list(self._sockets.values()):
            for ws in list(sockets):
                await ws.close()

    async def send(self, message: OutboundMessage) -> str:
        self._sent += 1
        mid = f"web-{self._sent}"
        payload = json.dumps({"type": "message", "id": mid, "kind": message.kind.value, "text": message.text,
                              "reply_to": message.reply_to_id})
        for ws in list(self._sockets.get(message.chat.chat_id, ())):
            if not ws.closed:
                await ws.send_str(payload)
        # A closed tab still counts as delivered: the reply is stored and shown in the session history.
        return mid

    # Who may open the page or the socket (the owner only, from this page's own origin) is checked for every route
    # by the daemon's guard (gateway/ops/web_guard.py) before these run.
    async def _page(self, request: web.Request) -> web.Response:
        html = resources.files("adapters").joinpath("static/webchat.html").read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        client = request.query.get("client") or uuid.uuid4().hex
        client = "".join(ch for ch in client if ch.isalnum() or ch in "-_")[:64] or uuid.uuid4().hex
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=4 * MAX_MESSAGE_CHARS)
        await ws.prepare(request)
        self._sockets.setdefault(client, set()).add(ws)
        if self._history is not None:
            past = [{"role": role, "text": text} for role, text in self._history(client)]
            await ws.send_str(json.dumps({"type": "history", "messages": past}))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                await self._handle(client, ws, msg.data)
        finally:
            self._sockets.get(client, set()).discard(ws)
        return ws

    async def _handle(self, client: str, ws: web.WebSocketResponse, data: str) -> None:
        try:
            text = str(json.loads(data).get("text", ""))
        except (ValueError, AttributeError):
            await ws.send_str(json.dumps({"type": "error", "text": "malformed message"}))
            return
        if not text.strip():
            return
        if len(text) > MAX_MESSAGE_CHARS:
            await ws.send_str(json.dumps({"type": "error", "text": f"message too long (limit {MAX_MESSAGE_CHARS:,})"}))
            return
        if self._submit is None:
            await ws.send_str(json.dumps({"type": "error", "text": "the gateway is not ready"}))
            return
        inbound = Inbound(chat=ChatRef("web", "dm", client), user_id=client, text=text, message_id=f"{self._boot}-{next(self._received)}",
                          received_at=datetime.now(UTC), user_name=None)
        result = await self._submit(inbound)
        await ws.send_str(json.dumps({"type": "ack", "id": inbound.message_id, "outcome": result.outcome.value}))
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            await ws.send_str(json.dumps({"type": "error", "text": "the gateway is shutting down"}))

"""The local web chat (`web`): a page served by aiohttp and one WebSocket per browser tab.

Each browser keeps a random client id (localStorage), which is its chat id, so a reload continues
the same session. Replies arrive over the socket as Markdown; the page renders them. While an answer
is written, its text arrives as it comes: a `draft` frame (the text so far), then `delta` frames
(what was added); the reply's `message` frame names the draft it `replaces`. `progress` frames carry
the tool line, `retract` takes a draft down. The page names each message it sends (a random id), so
it can match answers, drafts and errors to it in any order (`reply_to`), and a message sent twice (a
resend after a dropped connection) is stored once. On connect a tab hears which model answers (or
how to configure one) and the session so far, failed messages included, which it can send again
(`retry_of`). A voice reply comes as an `audio` frame after its answer (the page shows a player).
A message with buttons (`choices`: a request waiting for the person) carries them; a click is a
`choice` frame (token, value) handed to the core like a tap on any platform, its refusal comes back
as a `notice` to that tab, and once the request is answered an `update` frame replaces the
message's text and takes its buttons away. Files (a picture, a PDF, a recording) are uploaded
first (`POST /upload`, streamed to disk and bounded like every attachment), then named by their
upload ids in the socket message; the core fetches them through `media` like any platform's files.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import itertools
import json
import logging
import os
import re
import unicodedata
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path, PureWindowsPath

from aiohttp import BodyPartReader, WSMsgType, web

from gateway.errors import MediaUnavailable, StoreUnavailable
from gateway.events import (
    Attachment,
    ChatRef,
    Choices,
    Inbound,
    OutboundAudio,
    OutboundMessage,
    Picked,
    PreviewPart,
    PreviewStyle,
    Submit,
    SubmitOutcome,
)

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 100_000
MAX_FILES = 10  # per message
UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")
_TOKEN = r"[a-z0-9][a-z0-9!#$&^_.+-]"
MEDIA_TYPE = re.compile(rf"{_TOKEN}{{0,63}}/{_TOKEN}{{0,126}}")  # RFC 6838: type/subtype
MAX_NAME_CHARS = 200
CHUNK = 64 * 1024
# an upload that sends nothing for this long is dropped (the listener leaves it to us)
UPLOAD_STALL_S = 30.0
# The current session of a client id as a reloaded tab shows it: {"role", "text"}, and for a message
# of the person's its "id"; a message that failed also has the "error" it got.
HistorySource = Callable[[str], Sequence[Mapping[str, object]]]
# (client id, message id): a failed message was sent again; forget it
Retried = Callable[[str, str], object]
# what a tab hears first: {"model": name or None, "notice": text or None}
Hello = Callable[[], Mapping[str, object]]
CLIENT_MESSAGE_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
# No limits to keep under, and the page renders Markdown itself: every delta goes out as it arrives.
PREVIEW_STYLE = PreviewStyle(interval_s=0.0, raw=True)
MAX_DRAFTS = 1000  # drafts whose answer never came (a crash) are forgotten past this many


class WebChatAdapter:
    platform = "web"

    def __init__(
        self, *, uploads: Path | None = None, max_upload_bytes: int = 20 * 1024 * 1024
    ) -> None:
        # where uploaded files wait for their turn (GATEWAY_HOME/media/uploads); None: off
        self.uploads = uploads
        self.max_upload_bytes = max_upload_bytes
        self.upload_stall_s = UPLOAD_STALL_S
        self._submit: Submit | None = None
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}
        self._sent = 0
        self._history: HistorySource | None = None
        self._retried: Retried | None = None
        self._hello: Hello | None = None
        # Inbound ids: unique across restarts (the store
        # dedupes on them) without a uuid4 per message.
        self._boot = uuid.uuid4().hex[:16]
        self._received = itertools.count(1)
        # id → (text so far, tabs told)
        self._drafts: dict[str, tuple[str, set[web.WebSocketResponse]]] = {}

    def attach(
        self,
        app: web.Application,
        *,
        history: HistorySource | None = None,
        retried: Retried | None = None,
        hello: Hello | None = None,
    ) -> None:
        self._history = history
        self._retried = retried
        self._hello = hello
        app.router.add_get("/", self._page)
        app.router.add_get("/ws", self._socket)
        app.router.add_post("/upload", self._upload)

    async def start(self, submit: Submit) -> None:
        self._submit = submit

    async def stop(self) -> None:
        for sockets in list(self._sockets.values()):
            for ws in list(sockets):
                await ws.close()

    async def send(self, message: OutboundMessage) -> str:
        return await self._message(message, replaces=None)

    async def _message(self, message: OutboundMessage, *, replaces: str | None) -> str:
        self._sent += 1
        # A message with buttons is updated later, maybe by the next process: its id names this one
        # too.
        mid = f"web-{self._sent}"
        if message.choices is not None:
            mid = f"web-{self._boot[:8]}-{self._sent}"
        frame: dict[str, object] = {
            "type": "message",
            "id": mid,
            "kind": message.kind.value,
            "text": message.text,
            "reply_to": message.reply_to_id,
        }
        if replaces is not None:
            frame["replaces"] = replaces
        if message.choices is not None:
            frame["choices"] = choices_frame(message.choices)
        await self._to_tabs(message.chat.chat_id, frame)
        # A closed tab still counts as delivered: the reply is stored and shown in the session
        # history.
        return mid

    async def _to_tabs(self, client: str, frame: dict[str, object]) -> None:
        payload = json.dumps(frame)
        for ws in list(self._sockets.get(client, ())):
            if not ws.closed:
                await ws.send_str(payload)

    async def close_choices(self, message: OutboundMessage, platform_message_id: str) -> None:
        """A decided request: the tabs show its outcome instead of its buttons."""
        await self._to_tabs(
            message.chat.chat_id,
            {"type": "update", "id": platform_message_id, "text": message.text},
        )

    async def send_audio(self, audio: OutboundAudio) -> str:
        """A voice reply: the page plays it in an audio player under the answer (the note travels in
        the frame, so a reload shows the text only)."""
        self._sent += 1
        mid = f"web-{self._sent}"
        src = "data:" + audio.mime_type + ";base64," + base64.b64encode(audio.data).decode()
        await self._to_tabs(
            audio.chat.chat_id,
            {
                "type": "audio",
                "id": mid,
                "reply_to": audio.reply_to_id,
                "src": src,
                "duration": audio.duration_s,
                "transcript": audio.transcript,
            },
        )
        return mid

    # ------------------------------------------------------------------ live previews
    def preview_style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle:
        return PREVIEW_STYLE

    async def show_preview(self, part: PreviewPart) -> str:
        """A tab that saw this draft gets what was added;
        one that did not (opened since) the whole text."""
        draft_id = part.platform_message_id or f"wd-{self._boot[:8]}-{next(self._received)}"
        shown, told = self._drafts.pop(draft_id, ("", set()))
        self._drafts[draft_id] = (part.text, told)
        while len(self._drafts) > MAX_DRAFTS:
            del self._drafts[next(iter(self._drafts))]
        growing = bool(shown) and part.text.startswith(shown) and not part.is_progress
        kind = "progress" if part.is_progress else "draft"
        for ws in list(self._sockets.get(part.chat.chat_id, ())):
            if ws.closed:
                continue
            if growing and ws in told:
                await ws.send_str(
                    json.dumps(
                        {
                            "type": "delta",
                            "id": draft_id,
                            "text": part.text[len(shown) :],
                            "reply_to": part.reply_to_id,
                        }
                    )
                )
            else:
                await ws.send_str(
                    json.dumps(
                        {
                            "type": kind,
                            "id": draft_id,
                            "text": part.text,
                            "reply_to": part.reply_to_id,
                        }
                    )
                )
                told.add(ws)
        return draft_id

    async def finish_preview(self, message: OutboundMessage, platform_message_id: str) -> str:
        self._drafts.pop(platform_message_id, None)
        return await self._message(message, replaces=platform_message_id)

    async def drop_preview(self, chat: ChatRef, platform_message_id: str) -> None:
        self._drafts.pop(platform_message_id, None)
        payload = json.dumps({"type": "retract", "id": platform_message_id})
        for ws in list(self._sockets.get(chat.chat_id, ())):
            if not ws.closed:
                await ws.send_str(payload)

    # Who may open the page or the socket (the owner only, from this page's own origin) is checked
    # for every route by the daemon's guard (gateway/ops/web_guard.py) before these run.
    async def _page(self, request: web.Request) -> web.Response:
        html = (
            resources.files("adapters").joinpath("static/webchat.html").read_text(encoding="utf-8")
        )
        return web.Response(text=html, content_type="text/html")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        client = request.query.get("client") or uuid.uuid4().hex
        client = "".join(ch for ch in client if ch.isalnum() or ch in "-_")[:64] or uuid.uuid4().hex
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=4 * MAX_MESSAGE_CHARS)
        await ws.prepare(request)
        self._sockets.setdefault(client, set()).add(ws)
        if self._hello is not None:
            await ws.send_str(json.dumps({"type": "hello", **self._hello()}))
        if self._history is not None:
            await ws.send_str(
                json.dumps({"type": "history", "messages": list(self._history(client))})
            )
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
            frame = json.loads(data)
            if isinstance(frame, dict) and frame.get("type") == "choice":
                return await self._choice(client, ws, frame)
            text = str(frame.get("text", ""))
            files = self._files(frame.get("files") or [])
        except (ValueError, AttributeError, TypeError) as exc:
            await ws.send_str(
                json.dumps(
                    {
                        "type": "error",
                        "text": str(exc) if isinstance(exc, _BadFiles) else "malformed message",
                    }
                )
            )
            return
        if not text.strip() and not files:
            return
        if len(text) > MAX_MESSAGE_CHARS:
            await ws.send_str(
                json.dumps(
                    {"type": "error", "text": f"message too long (limit {MAX_MESSAGE_CHARS:,})"}
                )
            )
            return
        if self._submit is None:
            await ws.send_str(json.dumps({"type": "error", "text": "the gateway is not ready"}))
            return
        given = str(frame.get("id") or "")
        message_id = (
            given if CLIENT_MESSAGE_ID.fullmatch(given) else f"{self._boot}-{next(self._received)}"
        )
        inbound = Inbound(
            chat=ChatRef("web", "dm", client),
            user_id=client,
            text=text,
            message_id=message_id,
            received_at=datetime.now(UTC),
            user_name=None,
            attachments=files,
        )
        try:
            result = await self._submit(inbound)
        except Exception as exc:  # noqa: BLE001 (not stored, for whatever reason: the tab must hear it)
            log.warning("web: message %s not stored (%s)", inbound.message_id, exc)
            await ws.send_str(
                json.dumps(
                    {
                        "type": "ack",
                        "id": inbound.message_id,
                        "outcome": "refused",
                        "reason": "not stored",
                    }
                )
            )
            if not isinstance(exc, StoreUnavailable):
                # the core tells the chat itself when storage failed
                await ws.send_str(
                    json.dumps(
                        {
                            "type": "error",
                            "text": "your message could not be stored; please send it again",
                        }
                    )
                )
            return
        await ws.send_str(
            json.dumps(
                {
                    "type": "ack",
                    "id": inbound.message_id,
                    "outcome": result.outcome.value,
                    "reason": result.reason,
                }
            )
        )
        retry_of = str(frame.get("retry_of") or "")
        if retry_of and self._retried is not None and result.outcome is not SubmitOutcome.REFUSED:
            # only once the new one is stored: a refused retry keeps the old
            self._retried(client, retry_of)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            await ws.send_str(json.dumps({"type": "error", "text": "the gateway is shutting down"}))

    async def _choice(
        self, client: str, ws: web.WebSocketResponse, frame: dict[str, object]
    ) -> None:
        """A click on one of a message's buttons: a tap, as on any platform; a refusal is told to
        this tab."""
        token, value = str(frame.get("token") or ""), str(frame.get("value") or "")
        if self._submit is None or not token or not value:
            return
        inbound = Inbound(
            chat=ChatRef("web", "dm", client),
            user_id=client,
            text="",
            message_id=f"{self._boot}-c{next(self._received)}",
            received_at=datetime.now(UTC),
            picked=Picked(token[:64], value[:16]),
        )
        try:
            result = await self._submit(inbound)
        except Exception as exc:  # noqa: BLE001 (the tab must hear that its click did nothing)
            log.warning("web: a click not handled (%s)", exc)
            await ws.send_str(
                json.dumps({"type": "notice", "text": "That did not work; please try again."})
            )
            return
        if result.notice:
            await ws.send_str(json.dumps({"type": "notice", "text": result.notice}))

    # ------------------------------------------------------------------ files
    async def _upload(self, request: web.Request) -> web.Response:
        """One file (multipart field `file`), streamed to
        disk; 413 past the limit, nothing kept of it."""
        if self.uploads is None:
            return web.json_response({"error": "uploads are off"}, status=404)
        try:
            reader = await request.multipart()
            part = await reader.next()
        except (ValueError, AssertionError):
            part = None
        if not isinstance(part, BodyPartReader) or part.name != "file":
            return web.json_response(
                {"error": "expected a multipart body with one `file`"}, status=400
            )
        upload_id = uuid.uuid4().hex
        try:
            size = await self._store(part, self.uploads / upload_id)
        except _TooLarge:
            return web.json_response(
                {"error": f"the file is larger than {self.max_upload_bytes:,} bytes"}, status=413
            )
        except TimeoutError:
            return web.json_response(
                {"error": f"the upload stalled (nothing for {self.upload_stall_s:g} s)"}, status=408
            )
        except OSError as exc:  # the disk is full, or the folder cannot be written: nothing kept
            log.warning("web: an upload could not be kept: %s", exc)
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            why = "the disk is full" if full else f"it cannot be written ({exc.strerror or exc})"
            return web.json_response(
                {"error": f"the file could not be kept: {why}"}, status=507 if full else 500
            )
        name = _file_name(part.filename)
        kind = _media_type(part.headers.get("Content-Type"))
        return web.json_response({"id": upload_id, "name": name, "type": kind, "size": size})

    async def _store(self, part: BodyPartReader, path: Path) -> int:
        assert self.uploads is not None
        for folder in (self.uploads.parent, self.uploads):
            # GATEWAY_HOME/media/uploads: the owner's files, 0700
            folder.mkdir(exist_ok=True, mode=0o700)
        size = 0
        try:
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                while chunk := await asyncio.wait_for(part.read_chunk(CHUNK), self.upload_stall_s):
                    size += len(chunk)
                    if size > self.max_upload_bytes:
                        raise _TooLarge
                    out.write(chunk)
        except BaseException:
            # too big, stalled, or the connection dropped: no half file stays behind
            path.unlink(missing_ok=True)
            raise
        return size

    def _files(self, items: object) -> tuple[Attachment, ...]:
        """The socket message's `files`: [{id, name, type, size}] as the upload answered them."""
        if not isinstance(items, list) or len(items) > MAX_FILES:
            raise _BadFiles(f"at most {MAX_FILES} files per message")
        found = []
        for item in items:
            upload_id = str(item.get("id") or "") if isinstance(item, dict) else ""
            if (
                not UPLOAD_ID.match(upload_id)
                or self.uploads is None
                or not (self.uploads / upload_id).is_file()
            ):
                raise _BadFiles(
                    "a file of this message was not uploaded (or is gone); attach it again"
                )
            kind = _media_type(str(item.get("type") or ""))
            found.append(
                Attachment(
                    _kind(kind),
                    name=_file_name(str(item.get("name") or "")),
                    mime_type=kind,
                    size=(self.uploads / upload_id).stat().st_size,
                    ref=upload_id,
                )
            )
        return tuple(found)

    async def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """An uploaded file's bytes (the core bounds size and time)."""
        ref = attachment.ref or ""
        if self.uploads is None or not UPLOAD_ID.match(ref):
            raise MediaUnavailable("the upload is unknown")
        try:
            with (self.uploads / ref).open("rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk
        except FileNotFoundError:
            raise MediaUnavailable("the upload is gone (removed by the retention)") from None


def choices_frame(choices: Choices) -> dict[str, object]:
    return {
        "token": choices.token,
        "options": [
            {"label": c.label, "value": c.value, "style": c.style} for c in choices.options
        ],
    }


class _TooLarge(Exception):
    pass


class _BadFiles(ValueError):
    pass


def _file_name(given: str | None) -> str:
    """What a file may be called here: the last part of any path (a browser may send a whole one,
    with either separator), on one line, without characters a reader cannot see; "file" when nothing
    is left. The name is shown, never used as a path (files are kept under their upload id)."""
    base = PureWindowsPath(given or "").name
    visible = "".join(
        ch if ch == "\u200d" or unicodedata.category(ch)[0] != "C" else " " for ch in base
    )
    name = " ".join(visible.split())[:MAX_NAME_CHARS]
    return name if name.strip(".") else "file"


def _media_type(given: str | None) -> str:
    """`type/subtype` as the sender declared it, or application/octet-stream for anything else; only
    a hint: what the file really is, the readers find out from its bytes."""
    kind = (given or "").split(";")[0].strip().lower()
    return kind if MEDIA_TYPE.fullmatch(kind) else "application/octet-stream"


def _kind(mime: str) -> str:
    major = mime.split("/", 1)[0]
    return {"image": "photo", "audio": "audio", "video": "video"}.get(major, "document")

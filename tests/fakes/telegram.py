"""Fake Telegram Bot API (`/bot{token}/{method}`) for aiogram: long-polled updates, sent/edited
messages as a user would see them (markup parsed like Telegram does), flood control and injectable
faults."""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.base import (
    Call,
    Clock,
    ConnectionReset,
    Counter,
    Delay,
    FakeServer,
    Fault,
    Malformed,
    json_response,
)
from tests.fakes.files import FileShelf
from tests.fakes.tg_markup import EntityParseError, parse, u16len

__all__ = [
    "BOT_ID",
    "BOT_USERNAME",
    "TOKEN",
    "Call",
    "ConnectionReset",
    "Delay",
    "Draft",
    "FakeTelegram",
    "Fault",
    "Malformed",
    "SentMessage",
    "bad_request",
    "forbidden",
    "make_update_entities",
    "retry_after",
    "server_error",
    "tg_error",
]

BOT_ID = 4242
BOT_USERNAME = "gw_test_bot"
TOKEN = f"{BOT_ID}:AAtest-token-for-the-fake-bot-api-0000"
MAX_TEXT = 4096
# getFile on the cloud Bot API: "Bad Request: file is too big" past this
MAX_DOWNLOAD = 20 * 1024 * 1024
MAX_CAPTION = 1024
DEFAULT_UPDATE_TYPES = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "inline_query",
    "chosen_inline_result",
    "callback_query",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
)
CHAT_ACTIONS = {
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
}
# Calls that put text in front of a person: Telegram asks bots for about one a second per chat. The
# fake refuses an edit or a draft that comes sooner than that after the chat's previous one (and a
# send right after an edit), with a 429 that also counts as a flood violation: a preview must be
# paced, never hit a flood wait.
MESSAGE_CALLS = ("sendmessage", "editmessagetext", "sendmessagedraft")
PREVIEW_CALLS = ("editmessagetext", "sendmessagedraft")
EDIT_INTERVAL_S = 1.0
# "the streamed draft is ephemeral and acts as a temporary 30-second preview" (Bot API,
# sendMessageDraft): clients drop a live draft message_typing_draft_ttl (30 s) after its last
# update, or when a normal message arrives in the same chat and topic
# (core.telegram.org/api/bots/ai). A new update of the draft starts its 30 s again.
DRAFT_TTL_S = 30.0
# "In a group, bots are not able to send more than 20 messages per minute" (Bot FAQ), and edits
# share that budget (TDLib's maintainer: "the limits for message editing are the same as for message
# sending ... about 20 times per minute in a specific chat"). The fake holds a group to 20 sends and
# edits in any 60 s of its clock.
GROUP_PER_MINUTE = 20
GROUP_WINDOW_S = 60.0
GROUP_CALLS = (
    "sendmessage",
    "editmessagetext",
    "senddocument",
    "sendphoto",
    "sendvoice",
    "sendaudio",
)
# sendVoice: "your audio must be in an .OGG file encoded with OPUS, or in .MP3 format, or in .M4A
# format (other formats may be sent as Audio or Document)"; a user whose privacy settings refuse
# voice messages makes it a 400 VOICE_MESSAGES_FORBIDDEN (see `forbid_voice`).
MAX_VOICE_BYTES = 50 * 1024 * 1024
# "Bots can currently send files of any type of up to 50 MB in size" (sendDocument): 413 above.
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
# InlineKeyboardButton.callback_data: "Data to be sent in a callback query to the bot when the
# button is pressed, 1-64 bytes"; answerCallbackQuery.text: "0-200 characters" (Bot API). A query is
# answered once.
CALLBACK_DATA_MAX = 64
CALLBACK_TEXT_MAX = 200
QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)


# ------------------------------------------------------------------------------------------- faults
def tg_error(status: int, description: str, **parameters: Any) -> Fault:
    """A Bot API error envelope, e.g. `tg_error(400,
    "Bad Request: ...", migrate_to_chat_id=-100123)`."""
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return Fault(status, body)


def retry_after(seconds: int) -> Fault:
    return tg_error(429, f"Too Many Requests: retry after {seconds}", retry_after=seconds)


def bad_request(
    description: str = "Bad Request: can't parse entities: Can't find end of the entity starting "
    "at byte offset 0",
) -> Fault:
    return tg_error(
        400, description if description.startswith("Bad Request") else f"Bad Request: {description}"
    )


def forbidden(description: str = "Forbidden: bot was blocked by the user") -> Fault:
    return tg_error(403, description)


def server_error(status: int = 500) -> Fault:
    return tg_error(
        status,
        {500: "Internal Server Error", 502: "Bad Gateway"}.get(status, "Internal Server Error"),
    )


class _ApiError(Exception):
    def __init__(self, status: int, description: str, **parameters: Any) -> None:
        super().__init__(description)
        self.status, self.description, self.parameters = status, description, parameters


# --------------------------------------------------------------------------------------------- data
@dataclass(frozen=True, slots=True)
class SentMessage:
    """A message the bot sent, as the user sees it now
    (edits applied; `edits` keeps older texts)."""

    chat_id: int
    message_id: int
    text: str
    entities: tuple[dict[str, Any], ...] = ()
    parse_mode: str | None = None
    raw_text: str = ""
    message_thread_id: int | None = None
    reply_to_message_id: int | None = None
    reply_markup: Any = None
    method: str = "sendmessage"
    document: Mapping[str, Any] | None = None
    edits: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Draft:
    """One sendMessageDraft as the user saw it: the streamed text so far, in a private chat."""

    chat_id: int
    draft_id: int
    text: str
    entities: tuple[dict[str, Any], ...] = ()
    message_thread_id: int | None = None
    at: float = 0.0


def make_update_entities(text: str) -> list[dict[str, Any]]:
    """bot_command and mention entities the way Telegram adds them to incoming text."""
    found = []
    for match in re.finditer(r"(?<!\S)/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w@])", text):
        found.append(("bot_command", match.start(), match.end()))
    for match in re.finditer(r"(?<![\w@/])@[A-Za-z0-9_]{4,32}(?![\w@])", text):
        found.append(("mention", match.start(), match.end()))
    return [
        {"type": kind, "offset": u16len(text[:start]), "length": u16len(text[start:end])}
        for kind, start, end in sorted(found, key=lambda f: f[1])
    ]


# --------------------------------------------------------------------------------------------- fake
class FakeTelegram(FakeServer):
    """`Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))`."""

    def __init__(
        self,
        *,
        token: str = TOKEN,
        bot_id: int = BOT_ID,
        bot_username: str = BOT_USERNAME,
        bot_first_name: str = "Gateway Test Bot",
        enforce_retry_after: bool = True,
        drafts_supported: bool = True,
        clock: Clock = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock=clock)
        self.token = token
        self.bot_user = {
            "id": bot_id,
            "is_bot": True,
            "first_name": bot_first_name,
            "username": bot_username,
        }
        self.enforce_retry_after = enforce_retry_after
        self.wall_clock = wall_clock
        self.updates: list[dict[str, Any]] = []  # not yet confirmed by an offset
        self.injected: dict[int, dict[str, Any]] = {}  # update_id → update, kept forever
        self.allowed_updates: list[str] | None = None
        self.webhook: dict[str, Any] | None = None
        self.commands: dict[str, list[dict[str, Any]]] = {}  # json(scope)+language → commands
        self.chats: dict[int, dict[str, Any]] = {}
        self.members: dict[tuple[int, int], str] = {}  # (chat, user) → status for getChatMember
        self.blocked_chats: set[int] = set()
        self.voice_forbidden: set[int] = set()  # users who refuse voice messages (Premium privacy)
        # requests that came before a served retry_after expired
        self.flood_violations: list[Call] = []
        # False: an older Bot API without sendMessageDraft (404)
        self.drafts_supported = drafts_supported
        self.drafts: list[Draft] = []
        # drafts the user saw vanish by themselves (30 s without an update)
        self.expired_drafts: list[Draft] = []
        # (chat, topic) → the draft shown there now
        self._live_drafts: dict[tuple[int, int | None], Draft] = {}
        # every error answer the fake gave, with its description
        self.refused: list[tuple[Call, int, str]] = []
        # chat → (when, method) of its last text call
        self._last_message_call: dict[str, tuple[float, str]] = {}
        # group → when its sends and edits went, last minute
        self._group_calls: dict[str, list[float]] = {}
        self._flood_until: dict[str, float] = {}
        self._sent: list[SentMessage] = []
        # (chat, message_id) → message (any sender)
        self._messages: dict[tuple[int, int], dict[str, Any]] = {}
        self._msg_ids: dict[int, Counter] = defaultdict(lambda: Counter(1))
        self._update_ids = Counter(1000)
        self._poll_generation = 0
        self._stopping = False
        self.app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self.app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self.shelf = FileShelf()  # file_path → bytes, served under /file/bot<token>/<file_path>
        # set: a local Bot API server (files on disk, no 20 MB cap)
        self.local_dir: Path | None = None
        self._file_ids: dict[str, tuple[str, str]] = {}  # file_id → (file_unique_id, file_path)
        # query id → the callback_query sent to the bot
        self.callback_queries: dict[str, dict[str, Any]] = {}
        # query id → the answerCallbackQuery it got
        self.callback_answers: dict[str, dict[str, Any]] = {}
        self._query_ids = Counter(9000)

    # -- test API: inbound ----------------------------------------------------------------------
    def inject_message(
        self,
        chat_id: int,
        text: str,
        *,
        chat_type: str = "private",
        user_id: int = 1001,
        username: str | None = "alice",
        first_name: str = "Alice",
        last_name: str | None = None,
        message_thread_id: int | None = None,
        is_topic: bool = False,
        reply_to_message: int | Mapping[str, Any] | None = None,
        entities: list[dict[str, Any]] | None = None,
        from_bot: bool = False,
        edited: bool = False,
        message_id: int | None = None,
        chat_title: str | None = None,
        date: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> int:
        """Queue a user's message (or its edit) for getUpdates; returns the update_id."""
        chat = self._chat_obj(
            chat_id, chat_type, user_id, username, first_name, chat_title, is_topic
        )
        sender: dict[str, Any] = {
            "id": user_id,
            "is_bot": from_bot,
            "first_name": first_name,
            "language_code": "en",
        }
        if username:
            sender["username"] = username
        if last_name:
            sender["last_name"] = last_name
        if message_id is None:
            message_id = self._msg_ids[chat_id]()
        msg: dict[str, Any] = {
            "message_id": message_id,
            "date": date or int(self.wall_clock()),
            "chat": chat,
            "from": sender,
            "text": text,
        }
        auto = make_update_entities(text) if entities is None else entities
        if auto:
            msg["entities"] = auto
        if message_thread_id is not None:
            msg["message_thread_id"] = message_thread_id
        if is_topic:
            msg["is_topic_message"] = True
        if reply_to_message is not None:
            msg["reply_to_message"] = self._lookup(chat_id, reply_to_message)
        if edited:
            msg["edit_date"] = int(self.wall_clock())
        msg.update(extra or {})
        self._messages[(chat_id, message_id)] = msg
        return self.inject_update({"edited_message" if edited else "message": msg})

    def inject_update(self, update: Mapping[str, Any]) -> int:
        """Queue a raw update dict (update_id is assigned when missing); returns the update_id."""
        body = dict(update)
        body.setdefault("update_id", self._update_ids())
        self._update_ids.next_value = max(self._update_ids.next_value, body["update_id"] + 1)
        self.updates.append(body)
        self.injected[body["update_id"]] = body
        self.notify()
        return int(body["update_id"])

    def tap(
        self,
        chat_id: int,
        message_id: int,
        label: str,
        *,
        user_id: int = 1001,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> str:
        """A person taps the button labelled `label` under one of the bot's messages: a
        callback_query update with that button's data; returns the query id. LookupError when the
        message shows no such button now (nobody can tap a button the message no longer has)."""
        sent = next(
            (m for m in self._sent if (m.chat_id, m.message_id) == (chat_id, message_id)), None
        )
        shown = [b for row in _keyboard(sent.reply_markup if sent else None) for b in row]
        data = next((b.get("callback_data") for b in shown if b.get("text") == label), None)
        if sent is None or data is None:
            raise LookupError(
                f"message {message_id} in chat {chat_id} shows no button {label!r}: "
                f"{self.buttons(chat_id, message_id)}"
            )
        return self.inject_callback(
            chat_id,
            message_id,
            str(data),
            user_id=user_id,
            username=username,
            first_name=first_name,
        )

    def inject_callback(
        self,
        chat_id: int,
        message_id: int,
        data: str,
        *,
        user_id: int = 1001,
        username: str | None = "alice",
        first_name: str = "Alice",
    ) -> str:
        """A callback_query with any data, as a client that still shows an old keyboard (or a
        forger) sends it."""
        query_id = str(self._query_ids())
        sender: dict[str, Any] = {
            "id": user_id,
            "is_bot": False,
            "first_name": first_name,
            "language_code": "en",
        }
        if username:
            sender["username"] = username
        chat = self.chats.get(chat_id, {"id": chat_id})
        message = self._messages.get((chat_id, message_id)) or {
            "message_id": message_id,
            "date": 0,
            "chat": chat,
        }
        query = {
            "id": query_id,
            "from": sender,
            "message": message,
            "chat_instance": f"ci{chat_id}",
            "data": data,
        }
        self.callback_queries[query_id] = query
        self.inject_update({"callback_query": query})
        return query_id

    def buttons(self, chat_id: int, message_id: int) -> list[str]:
        """The labels of the buttons the message shows now (none once its keyboard was edited
        away)."""
        sent = next(
            (m for m in self._sent if (m.chat_id, m.message_id) == (chat_id, message_id)), None
        )
        keyboard = _keyboard(sent.reply_markup if sent else None)
        return [b.get("text", "") for row in keyboard for b in row]

    async def wait_for_answer(
        self, query_id: str, timeout: float = FakeServer.WAIT_S
    ) -> dict[str, Any]:
        await self.wait_until(
            lambda: query_id in self.callback_answers,
            timeout,
            lambda: f"callback query {query_id} was never answered",
        )
        return self.callback_answers[query_id]

    def add_file(
        self,
        data: bytes,
        *,
        name: str = "file.bin",
        mime_type: str = "application/octet-stream",
        folder: str = "documents",
    ) -> dict[str, Any]:
        """A file users can send: returns its Bot API object (file_id, file_unique_id, file_size)
        for an update."""
        n = len(self._file_ids) + 1
        file_id, unique = f"AgAC{n:04d}file", f"AQAD{n:04d}"
        path = f"{folder}/file_{n}{Path(name).suffix}"
        self._file_ids[file_id] = (unique, path)
        self.shelf.put(path, data, name, mime_type)
        if self.local_dir is not None:
            (self.local_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (self.local_dir / path).write_bytes(data)
        return {"file_id": file_id, "file_unique_id": unique, "file_size": len(data)}

    def forbid_voice(self, chat_id: int) -> None:
        """This user's privacy settings refuse voice messages: sendVoice gets a 400
        VOICE_MESSAGES_FORBIDDEN."""
        self.voice_forbidden.add(chat_id)

    def voice_notes(self, chat_id: int | None = None) -> list[SentMessage]:
        """What was sent with sendVoice and shows as a voice message (OGG/Opus, MP3 or M4A)."""
        return [
            m
            for m in self.sent_messages(chat_id)
            if m.method == "sendvoice" and m.document is not None and m.document.get("as_voice")
        ]

    def block_chat(self, chat_id: int) -> None:
        """From now on every send to this chat is 403 "bot was blocked by the user"."""
        self.blocked_chats.add(chat_id)

    # -- test API: what the user sees ------------------------------------------------------------
    def sent_messages(self, chat_id: int | None = None) -> list[SentMessage]:
        return [m for m in self._sent if chat_id is None or m.chat_id == chat_id]

    def sent_texts(self, chat_id: int | None = None) -> list[str]:
        return [m.text for m in self.sent_messages(chat_id)]

    async def wait_for_sent(
        self, chat_id: int | None = None, count: int = 1, timeout: float = FakeServer.WAIT_S
    ) -> SentMessage:
        await self.wait_until(
            lambda: len(self.sent_messages(chat_id)) >= count,
            timeout,
            lambda: f"{count} messages to {chat_id} not sent; got {self.sent_texts(chat_id)}",
        )
        return self.sent_messages(chat_id)[count - 1]

    def names(self, skip_polling: bool = True) -> list[str]:
        return [c.name for c in self.calls if not (skip_polling and c.name == "getupdates")]

    def fail(self, name: str, *steps: Any) -> None:
        """Queue faults for a Bot API method (any case:
        "sendMessage" == "sendmessage"; "*" = any)."""
        super().fail(name.lower(), *steps)

    def _matches(self, call: Call, key: str | Callable[[Call], bool]) -> bool:
        return super()._matches(call, key) or (isinstance(key, str) and key.lower() == call.name)

    # -- HTTP ---------------------------------------------------------------------------------
    async def _before_stop(self) -> None:
        self._stopping = True
        self.notify()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"].lower()
        params = await self._params(request)
        call = self.record(request, method, params)
        if request.match_info["token"] != self.token:
            return _envelope_error(401, "Unauthorized")
        flood = (
            self._flood_check(call, params)
            or self._pace_check(call, method, params)
            or self._group_check(call, method, params)
        )
        if flood is not None:
            return flood
        step = self.take_fault([method])
        if step is not None:
            response = await self.apply_fault(
                request, step, lambda s: {"ok": False, "error_code": s, "description": f"Error {s}"}
            )
            if response is not None:
                self._note_flood(step, params)
                return response
        handler = getattr(self, f"_m_{method}", None)
        if handler is None or (method == "sendmessagedraft" and not self.drafts_supported):
            self.refused.append((call, 404, "Not Found"))
            return _envelope_error(404, "Not Found")
        try:
            result = await handler(params)
        except _ApiError as e:
            self.refused.append((call, e.status, e.description))
            return _envelope_error(e.status, e.description, **e.parameters)
        if method in MESSAGE_CALLS:  # what the pacing counts: text that reached the chat
            self._last_message_call[str(params.get("chat_id"))] = (call.at, method)
        return json_response({"ok": True, "result": result})

    async def _params(self, request: web.Request) -> dict[str, Any]:
        out: dict[str, Any] = dict(request.query)
        if not request.can_read_body:
            return {k: _maybe_json(k, v) for k, v in out.items()}
        if request.content_type == "application/json":
            out.update(await request.json())
            return out
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, web.FileField):
                data = value.file.read()
                out[key] = {
                    "filename": value.filename,
                    "content_type": value.content_type,
                    "size": len(data),
                    "data": data,
                }
            else:
                out[key] = value
        return {k: _maybe_json(k, v) for k, v in out.items()}

    def _flood_check(self, call: Call, params: Mapping[str, Any]) -> web.Response | None:
        if not self.enforce_retry_after:
            return None
        until = self._flood_until.get(str(params.get("chat_id")))
        if until is None or call.at >= until:
            return None
        self.flood_violations.append(call)
        wait = max(1, math.ceil(until - call.at))
        return _envelope_error(429, f"Too Many Requests: retry after {wait}", retry_after=wait)

    def _pace_check(
        self, call: Call, method: str, params: Mapping[str, Any]
    ) -> web.Response | None:
        """An edit or a draft less than EDIT_INTERVAL_S after the chat's previous text call, or a
        send that soon after an edit, is refused with a 429 and recorded as a flood violation."""
        if method not in MESSAGE_CALLS or not self.enforce_retry_after:
            return None
        chat = str(params.get("chat_id"))
        last = self._last_message_call.get(chat)
        # A draft is no message: the answer's sendMessage may follow it at once, as Telegram's docs
        # have it. A clock that went back is a test's next virtual clock (a restarted gateway):
        # nothing to compare with.
        if (
            last is None
            or call.at - last[0] >= EDIT_INTERVAL_S
            or call.at < last[0]
            or (method not in PREVIEW_CALLS and last[1] != "editmessagetext")
        ):
            return None
        self.flood_violations.append(call)
        self._flood_until[chat] = last[0] + EDIT_INTERVAL_S
        self.refused.append((call, 429, "Too Many Requests: retry after 1"))
        return _envelope_error(429, "Too Many Requests: retry after 1", retry_after=1)

    def _group_check(
        self, call: Call, method: str, params: Mapping[str, Any]
    ) -> web.Response | None:
        """The 21st send or edit in a group within a minute is refused with a 429 and counted as a
        flood violation."""
        chat = str(params.get("chat_id"))
        if method not in GROUP_CALLS or not self.enforce_retry_after or not chat.startswith("-"):
            return None
        recent = [t for t in self._group_calls.get(chat, []) if 0 <= call.at - t < GROUP_WINDOW_S]
        if len(recent) < GROUP_PER_MINUTE:
            self._group_calls[chat] = [*recent, call.at]
            return None
        self._group_calls[chat] = recent
        wait = max(1, math.ceil(recent[0] + GROUP_WINDOW_S - call.at))
        self.flood_violations.append(call)
        self._flood_until[chat] = call.at + wait
        self.refused.append((call, 429, f"Too Many Requests: retry after {wait}"))
        return _envelope_error(429, f"Too Many Requests: retry after {wait}", retry_after=wait)

    def _note_flood(self, step: Any, params: Mapping[str, Any]) -> None:
        while isinstance(step, Delay):
            step = step.then
        if isinstance(step, Fault) and isinstance(step.body, dict):
            seconds = (step.body.get("parameters") or {}).get("retry_after")
            if seconds:
                self._flood_until[str(params.get("chat_id"))] = self.clock() + float(seconds)

    # -- methods ------------------------------------------------------------------------------
    async def _m_getme(self, p: Mapping[str, Any]) -> Any:
        return {
            **self.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _m_getupdates(self, p: Mapping[str, Any]) -> Any:
        if self.webhook:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use "
                "deleteWebhook to delete the webhook first",
            )
        offset, limit = int(p.get("offset") or 0), int(p.get("limit") or 100)
        timeout = float(p.get("timeout") or 0)
        if p.get("allowed_updates") is not None:
            self.allowed_updates = list(p["allowed_updates"]) or None
        if offset:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        self._poll_generation += 1
        generation = self._poll_generation
        try:
            await self.wait_until(
                lambda: (
                    bool(self._deliverable())
                    or self._stopping
                    or generation != self._poll_generation
                ),
                timeout,
            )
        except TimeoutError:
            pass
        if generation != self._poll_generation:
            raise _ApiError(
                409,
                "Conflict: terminated by other getUpdates request; make sure that only one bot "
                "instance is running",
            )
        return self._deliverable()[:limit]

    def _deliverable(self) -> list[dict[str, Any]]:
        allowed = set(self.allowed_updates or DEFAULT_UPDATE_TYPES)
        self.updates = [u for u in self.updates if any(k in allowed for k in u if k != "update_id")]
        return list(self.updates)

    async def _m_setwebhook(self, p: Mapping[str, Any]) -> Any:
        if p.get("drop_pending_updates"):
            self.updates.clear()
        self.webhook = dict(p)
        return True

    async def _m_deletewebhook(self, p: Mapping[str, Any]) -> Any:
        if p.get("drop_pending_updates"):
            self.updates.clear()
        self.webhook = None
        return True

    async def _m_getwebhookinfo(self, p: Mapping[str, Any]) -> Any:
        return {
            "url": (self.webhook or {}).get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": len(self.updates),
        }

    async def _m_sendmessage(self, p: Mapping[str, Any]) -> Any:
        chat_id = self._writable_chat(p)
        _check_keyboard(p)
        raw = str(p.get("text") or "")
        text, entities = self._render(raw, p, MAX_TEXT, "message is too long")
        if not text.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        return self._store_sent(chat_id, p, text, entities, raw, "sendmessage")

    async def _m_senddocument(self, p: Mapping[str, Any]) -> Any:
        return await self._send_file(p, "document", "senddocument")

    async def _m_sendphoto(self, p: Mapping[str, Any]) -> Any:
        return await self._send_file(p, "photo", "sendphoto")

    async def _m_sendvoice(self, p: Mapping[str, Any]) -> Any:
        if _chat_id(p.get("chat_id")) in self.voice_forbidden:
            raise _ApiError(400, "Bad Request: VOICE_MESSAGES_FORBIDDEN")
        return await self._send_file(p, "voice", "sendvoice")

    async def _m_sendaudio(self, p: Mapping[str, Any]) -> Any:
        return await self._send_file(p, "audio", "sendaudio")

    async def _send_file(self, p: Mapping[str, Any], field_name: str, method: str) -> Any:
        chat_id = self._writable_chat(p)
        upload = p.get(field_name)
        if isinstance(upload, str) and upload.startswith("attach://"):  # aiogram names the part
            upload = p.get(upload.removeprefix("attach://"))
        if not upload:
            raise _ApiError(400, f"Bad Request: there is no {field_name} in the request")
        size = upload.get("size", 0) if isinstance(upload, dict) else 0
        if size > (MAX_VOICE_BYTES if field_name == "voice" else MAX_UPLOAD_BYTES):
            raise _ApiError(413, "Request Entity Too Large")
        if field_name == "voice" and isinstance(upload, dict):
            upload = {**upload, "as_voice": _voice_format(upload.get("data", b""))}
        raw = str(p.get("caption") or "")
        text, entities = self._render(raw, p, MAX_CAPTION, "message caption is too long")
        doc = dict(upload) if isinstance(upload, dict) else {"file_id": str(upload)}
        return self._store_sent(chat_id, p, text, entities, raw, method, document=doc)

    async def _m_editmessagetext(self, p: Mapping[str, Any]) -> Any:
        if p.get("inline_message_id"):
            return True
        chat_id, message_id = _chat_id(p.get("chat_id")), int(p.get("message_id") or 0)
        index = next(
            (
                i
                for i, m in enumerate(self._sent)
                if m.chat_id == chat_id and m.message_id == message_id
            ),
            None,
        )
        if index is None:
            if (chat_id, message_id) in self._messages:
                raise _ApiError(400, "Bad Request: message can't be edited")
            raise _ApiError(400, "Bad Request: message to edit not found")
        raw = str(p.get("text") or "")
        text, entities = self._render(raw, p, MAX_TEXT, "message is too long")
        if not text.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        _check_keyboard(p)
        old = self._sent[index]
        if (
            text == old.text
            and tuple(entities) == old.entities
            and p.get("reply_markup") == old.reply_markup
        ):
            raise _ApiError(400, NOT_MODIFIED)
        new = replace(
            old,
            text=text,
            entities=tuple(entities),
            parse_mode=p.get("parse_mode"),
            raw_text=raw,
            reply_markup=p.get("reply_markup"),
            edits=(*old.edits, old.text),
        )
        self._sent[index] = new
        message = self._message_obj(new)
        message["edit_date"] = int(self.wall_clock())
        self._messages[(chat_id, message_id)] = message
        self.notify()
        return message

    async def _m_sendmessagedraft(self, p: Mapping[str, Any]) -> Any:
        chat_id = self._writable_chat(p)
        if (self.chats.get(chat_id) or {}).get(
            "type", "private" if chat_id > 0 else "group"
        ) != "private":
            raise _ApiError(400, "Bad Request: drafts can be sent only to private chats")
        draft_id = int(p.get("draft_id") or 0)
        if not draft_id:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        text, entities = self._render(str(p.get("text") or ""), p, MAX_TEXT, "message is too long")
        thread = p.get("message_thread_id")
        draft = Draft(
            chat_id,
            draft_id,
            text,
            tuple(entities),
            int(thread) if thread not in (None, "") else None,
            self.clock(),
        )
        self._expire((chat_id, draft.message_thread_id), draft.at)
        self.drafts.append(draft)
        self._live_drafts[(chat_id, draft.message_thread_id)] = draft
        self.notify()
        return True

    def draft_showing(self, chat_id: int, message_thread_id: int | None = None) -> Draft | None:
        """The draft the user sees at the bottom of the chat (topic) now: None once a normal message
        replaced it or 30 s passed without an update (then it is in `expired_drafts`)."""
        key = (chat_id, message_thread_id)
        self._expire(key, self.clock())
        return self._live_drafts.get(key)

    def _expire(self, key: tuple[int, int | None], now: float) -> None:
        live = self._live_drafts.get(key)
        if live is not None and now - live.at >= DRAFT_TTL_S:
            self.expired_drafts.append(live)
            del self._live_drafts[key]

    def drafts_to(self, chat_id: int) -> list[str]:
        """The texts the user saw drafted in a private chat, in order."""
        return [d.text for d in self.drafts if d.chat_id == chat_id]

    async def _m_deletemessage(self, p: Mapping[str, Any]) -> Any:
        key = (_chat_id(p.get("chat_id")), int(p.get("message_id") or 0))
        if key not in self._messages:
            raise _ApiError(400, "Bad Request: message to delete not found")
        del self._messages[key]
        self._sent = [m for m in self._sent if (m.chat_id, m.message_id) != key]
        self.notify()
        return True

    async def _m_getfile(self, p: Mapping[str, Any]) -> Any:
        known = self._file_ids.get(str(p.get("file_id") or ""))
        if known is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        unique, path = known
        size = len(self.shelf.files[path].data)
        if self.local_dir is not None:
            return {
                "file_id": p["file_id"],
                "file_unique_id": unique,
                "file_size": size,
                "file_path": str(self.local_dir / path),
            }
        if size > MAX_DOWNLOAD:
            raise _ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": p["file_id"],
            "file_unique_id": unique,
            "file_size": size,
            "file_path": path,
        }

    async def _file(self, request: web.Request) -> web.StreamResponse:
        """The download URL getFile's path points at; served
        like Telegram: 404 for a wrong token or path."""
        path = request.match_info["path"]
        self.record(request, "file", {"path": path})
        if request.match_info["token"] != self.token or self.local_dir is not None:
            return web.Response(status=404, text="Not Found")
        step = self.take_fault(["file"])
        if step is not None:
            response = await self.apply_fault(
                request, step, lambda s: {"ok": False, "error_code": s}
            )
            if response is not None:
                return response
        return await self.shelf.serve(request, path)

    async def _m_sendchataction(self, p: Mapping[str, Any]) -> Any:
        self._writable_chat(p)
        if p.get("action") not in CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _m_setmycommands(self, p: Mapping[str, Any]) -> Any:
        commands = list(p.get("commands") or [])
        for command in commands:
            if not re.fullmatch(r"[a-z0-9_]{1,32}", str(command.get("command", ""))):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise _ApiError(400, "Bad Request: command description is empty")
        self.commands[_scope_key(p)] = commands
        return True

    async def _m_getmycommands(self, p: Mapping[str, Any]) -> Any:
        return self.commands.get(_scope_key(p), [])

    async def _m_deletemycommands(self, p: Mapping[str, Any]) -> Any:
        self.commands.pop(_scope_key(p), None)
        return True

    async def _m_getchat(self, p: Mapping[str, Any]) -> Any:
        chat_id = _chat_id(p.get("chat_id"))
        if chat_id not in self.chats:
            raise _ApiError(400, "Bad Request: chat not found")
        return {
            **self.chats[chat_id],
            "accent_color_id": 0,
            "max_reaction_count": 11,
            "accepted_gift_types": {
                "unlimited_gifts": False,
                "limited_gifts": False,
                "unique_gifts": False,
                "premium_subscription": False,
            },
        }

    async def _m_answercallbackquery(self, p: Mapping[str, Any]) -> Any:
        query_id = str(p.get("callback_query_id") or "")
        if query_id not in self.callback_queries or query_id in self.callback_answers:
            raise _ApiError(400, QUERY_INVALID)
        if len(str(p.get("text") or "")) > CALLBACK_TEXT_MAX:
            raise _ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self.callback_answers[query_id] = dict(p)
        self.notify()
        return True

    async def _m_getchatmember(self, p: Mapping[str, Any]) -> Any:
        """A member's status in a chat: `members[(chat, user)]` (member, left, kicked) or member."""
        chat_id, user_id = _chat_id(p.get("chat_id")), int(p.get("user_id") or 0)
        status = self.members.get((chat_id, user_id), "member")
        member: dict[str, Any] = {
            "status": status,
            "user": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
        }
        return {**member, "until_date": 0} if status == "kicked" else member

    async def _trivially_true(self, p: Mapping[str, Any]) -> Any:
        return True

    _m_setmessagereaction = _m_setmydescription = _trivially_true
    _m_setmyshortdescription = _m_close = _m_logout = _trivially_true

    # -- helpers ------------------------------------------------------------------------------
    def _writable_chat(self, p: Mapping[str, Any]) -> int:
        if p.get("chat_id") in (None, ""):
            raise _ApiError(400, "Bad Request: chat_id is empty")
        chat_id = _chat_id(p["chat_id"])
        if chat_id in self.blocked_chats:
            raise _ApiError(403, "Forbidden: bot was blocked by the user")
        return chat_id

    def _render(
        self, raw: str, p: Mapping[str, Any], limit: int, too_long: str
    ) -> tuple[str, list[dict[str, Any]]]:
        entity_key = "caption_entities" if "caption" in p else "entities"
        if p.get(entity_key):
            text, entities = raw, list(p[entity_key])
            _check_entities(text, entities)
        else:
            mode = p.get("parse_mode")
            if mode and str(mode).lower() not in ("markdownv2", "html", "markdown"):
                raise _ApiError(400, "Bad Request: unsupported parse_mode")
            try:
                text, entities = parse(raw, mode)
            except EntityParseError as e:
                raise _ApiError(400, f"Bad Request: can't parse entities: {e}") from None
        if len(text) > limit:  # Telegram counts characters after entity parsing
            raise _ApiError(400, f"Bad Request: {too_long}")
        return text, entities

    def _store_sent(
        self,
        chat_id: int,
        p: Mapping[str, Any],
        text: str,
        entities: list[dict[str, Any]],
        raw: str,
        method: str,
        document: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        reply_to = self._reply_target(chat_id, p)
        thread = p.get("message_thread_id")
        sent = SentMessage(
            chat_id=chat_id,
            message_id=self._msg_ids[chat_id](),
            text=text,
            entities=tuple(entities),
            parse_mode=p.get("parse_mode"),
            raw_text=raw,
            message_thread_id=int(thread) if thread not in (None, "") else None,
            reply_to_message_id=reply_to,
            reply_markup=p.get("reply_markup"),
            method=method,
            document=document,
            params=dict(p),
        )
        self._sent.append(sent)
        key = (chat_id, sent.message_thread_id)
        self._expire(key, self.clock())
        self._live_drafts.pop(key, None)  # a normal message in the chat takes the draft's place
        message = self._message_obj(sent)
        self._messages[(chat_id, sent.message_id)] = message
        self.notify()
        return message

    def _reply_target(self, chat_id: int, p: Mapping[str, Any]) -> int | None:
        params = dict(p.get("reply_parameters") or {})
        if p.get("reply_to_message_id"):
            params.setdefault("message_id", p["reply_to_message_id"])
            params.setdefault(
                "allow_sending_without_reply", p.get("allow_sending_without_reply", False)
            )
        if not params.get("message_id"):
            return None
        target = int(params["message_id"])
        if (int(params.get("chat_id") or chat_id), target) not in self._messages:
            if params.get("allow_sending_without_reply"):
                return None
            raise _ApiError(400, "Bad Request: message to be replied not found")
        return target

    def _message_obj(self, sent: SentMessage) -> dict[str, Any]:
        chat = self.chats.get(sent.chat_id) or {
            "id": sent.chat_id,
            "type": "private" if sent.chat_id > 0 else "supergroup",
        }
        msg: dict[str, Any] = {
            "message_id": sent.message_id,
            "date": int(self.wall_clock()),
            "chat": chat,
            "from": self.bot_user,
        }
        msg["caption" if sent.document is not None else "text"] = sent.text
        if sent.entities:
            msg["caption_entities" if sent.document is not None else "entities"] = list(
                sent.entities
            )
        if (
            sent.document is not None
            and sent.method in ("sendvoice", "sendaudio")
            and sent.document.get("as_voice", sent.method == "sendaudio")
        ):
            kind = "voice" if sent.method == "sendvoice" else "audio"
            msg[kind] = {
                "file_id": f"{kind}-{sent.message_id}",
                "file_unique_id": f"u{sent.message_id}",
                "duration": int(sent.params.get("duration") or 0),
                "mime_type": "audio/ogg",
                "file_size": sent.document.get("size"),
            }
        elif sent.document is not None:
            msg["document"] = {
                "file_id": f"doc-{sent.message_id}",
                "file_unique_id": f"u{sent.message_id}",
                "file_name": sent.document.get("filename"),
                "file_size": sent.document.get("size"),
            }
        if sent.message_thread_id is not None:
            msg["message_thread_id"] = sent.message_thread_id
            if chat.get("is_forum"):
                msg["is_topic_message"] = True
        if sent.reply_to_message_id is not None:
            msg["reply_to_message"] = self._messages.get((sent.chat_id, sent.reply_to_message_id))
        if sent.reply_markup:
            msg["reply_markup"] = sent.reply_markup
        return msg

    def _chat_obj(
        self,
        chat_id: int,
        chat_type: str,
        user_id: int,
        username: str | None,
        first_name: str,
        title: str | None,
        is_forum: bool,
    ) -> dict[str, Any]:
        if chat_type == "private":
            chat: dict[str, Any] = {"id": chat_id, "type": "private", "first_name": first_name}
            if username:
                chat["username"] = username
        else:
            chat = {"id": chat_id, "type": chat_type, "title": title or "Test Group"}
            if is_forum or self.chats.get(chat_id, {}).get("is_forum"):
                chat["is_forum"] = True
        self.chats[chat_id] = chat
        return chat

    def _lookup(self, chat_id: int, ref: int | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(ref, Mapping):
            return dict(ref)
        found = self._messages.get((chat_id, int(ref)))
        if found is None:
            raise KeyError(f"no message {ref} in chat {chat_id} to reply to")
        return {k: v for k, v in found.items() if k != "reply_to_message"}


def _check_entities(text: str, entities: list[dict[str, Any]]) -> None:
    """Entities must lie inside the text (UTF-16 offsets)
    and have a length: what Telegram refuses otherwise."""
    size = u16len(text)
    for e in entities:
        offset, length = int(e.get("offset", -1)), int(e.get("length", 0))
        if offset < 0 or length <= 0 or offset + length > size:
            raise _ApiError(
                400,
                f"Bad Request: can't parse entities: entity {e.get('type')} at {offset}+{length} "
                f"is outside the text ({size} code units)",
            )


def _keyboard(markup: Any) -> list[list[dict[str, Any]]]:
    return list((markup or {}).get("inline_keyboard") or []) if isinstance(markup, Mapping) else []


def _check_keyboard(p: Mapping[str, Any]) -> None:
    """An inline keyboard's buttons need a text and, for a callback button, 1-64 bytes of
    callback_data."""
    for row in _keyboard(p.get("reply_markup")):
        for button in row:
            if not str(button.get("text") or "").strip():
                raise _ApiError(
                    400, "Bad Request: text buttons are unallowed in the inline keyboard"
                )
            data = button.get("callback_data")
            if data is not None and not 1 <= len(str(data).encode()) <= CALLBACK_DATA_MAX:
                raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


def _voice_format(data: bytes) -> bool:
    """Whether Telegram shows the file as a voice message: OGG with Opus, MP3 (an ID3 tag or a
    frame sync) or M4A."""
    if data.startswith(b"OggS"):
        return b"OpusHead" in data[:512]
    mp3 = data.startswith(b"ID3") or data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")
    return mp3 or data[4:8] == b"ftyp"


def _envelope_error(status: int, description: str, **parameters: Any) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return json_response(body, status=status)


_FREE_TEXT = {
    "text",
    "caption",
    "description",
    "short_description",
    "title",
    "name",
    "question",
    "explanation",
    "query",
    "url",
    "secret_token",
    "parse_mode",
    "action",
    "emoji",
    "inline_message_id",
}


def _maybe_json(key: str, value: Any) -> Any:
    """aiogram form-encodes nested values as JSON and numbers/booleans as strings: decode those, but
    never a free-text field (a user may well send the text "null" or "42")."""
    if not isinstance(value, str) or key in _FREE_TEXT:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _chat_id(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _ApiError(400, "Bad Request: chat not found") from None


def _scope_key(p: Mapping[str, Any]) -> str:
    return json.dumps(
        [p.get("scope") or {"type": "default"}, p.get("language_code") or ""], sort_keys=True
    )

"""Fake Slack: the Web API (`/api/{method}`, JSON/form/query bodies merged) with per-thread message
storage, and a Socket Mode websocket that pushes envelopes and records acks. Plus builders for
signed Events API posts."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web

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

__all__ = [
    "APP_ID",
    "APP_TOKEN",
    "BOT_ID",
    "BOT_TOKEN",
    "BOT_USER_ID",
    "SIGNING_SECRET",
    "TEAM_ID",
    "Call",
    "ConnectionReset",
    "Delay",
    "FakeSlack",
    "Fault",
    "Malformed",
    "SlackMessage",
    "event_callback",
    "ratelimited",
    "signed_request_headers",
    "slack_error",
    "url_verification",
]

BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
SIGNING_SECRET = "test-signing-secret"
BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "T1"
APP_ID = "A1"
MAX_TEXT = 40_000
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
# Block Kit: an actions block holds up to 25 elements; a button's text is plain_text of at most 75
# characters, its action_id at most 255 (unique within the message) and its value at most 2000.
MAX_ACTIONS, MAX_BUTTON_TEXT, MAX_ACTION_ID, MAX_VALUE = 25, 75, 255, 2000
MAX_STREAM_TEXT = 12_000  # markdown_text per chat.*Stream call
# Web API rate tiers, per method per workspace ("Tier 2: 20+ per minute", Tier 3 50+, Tier 4 100+);
# the fake holds them to exactly that over any 60 s of its clock, and a call beyond gets a 429
# recorded in `tier_violations`.
TIERS = {"chat.startStream": 20, "chat.stopStream": 20, "chat.update": 50, "chat.appendStream": 100}
TIER_WINDOW_S = 60.0


# ---------------------------------------------------------------------------------- faults/builders
def ratelimited(retry_after: int = 1) -> Fault:
    return Fault(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)})


def slack_error(error: str, status: int = 200, **extra: Any) -> Fault:
    """`slack_error("invalid_blocks")` → HTTP 200 `{"ok": false, "error": "invalid_blocks"}`."""
    return Fault(status, {"ok": False, "error": error, **extra})


def event_callback(
    event: Mapping[str, Any],
    event_id: str = "Ev0001",
    *,
    team_id: str = TEAM_ID,
    api_app_id: str = APP_ID,
    bot_user_id: str = BOT_USER_ID,
    event_time: int | None = None,
) -> dict[str, Any]:
    """The outer Events API body Slack wraps around an event (HTTP post or Socket Mode payload)."""
    return {
        "token": "legacy-verification-token",
        "team_id": team_id,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id,
        "event_time": event_time if event_time is not None else int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"ctx-{event_id}",
    }


def url_verification(challenge: str = "challenge-123") -> dict[str, Any]:
    return {
        "token": "legacy-verification-token",
        "challenge": challenge,
        "type": "url_verification",
    }


def signed_request_headers(
    secret: str,
    body: str | bytes,
    timestamp: int | None = None,
    content_type: str = "application/json",
) -> dict[str, str]:
    """Headers Slack sends with an Events API post: `v0=` HMAC-SHA256 of `v0:{ts}:{body}`."""
    ts = int(time.time()) if timestamp is None else timestamp
    raw = body.encode() if isinstance(body, str) else body
    signature = hmac.new(secret.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": f"v0={signature}",
        "Content-Type": content_type,
    }


# --------------------------------------------------------------------------------------------- data
@dataclass(frozen=True, slots=True)
class SlackMessage:
    """A message in the fake workspace (seeded by a test or posted by the bot), edits applied."""

    channel: str
    ts: str
    text: str
    user: str
    thread_ts: str | None = None
    blocks: tuple[dict[str, Any], ...] = ()
    bot_id: str | None = None
    edits: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    streaming: bool = False  # started with chat.startStream and not stopped yet

    def buttons(self) -> list[str]:
        """The labels of the buttons the message shows now."""
        return [str(e["text"]["text"]) for e in _buttons(self.blocks)]

    def as_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "message",
            "user": self.user,
            "text": self.text,
            "ts": self.ts,
        }
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if self.bot_id:
            out["bot_id"] = self.bot_id
            out["app_id"] = APP_ID
        if self.blocks:
            out["blocks"] = list(self.blocks)
        if self.edits:
            out["edited"] = {"user": self.user, "ts": self.ts}
        return out


class _Socket:
    def __init__(self, ws: web.WebSocketResponse, number: int) -> None:
        self.ws, self.number, self.silent = ws, number, False


# --------------------------------------------------------------------------------------------- fake
class FakeSlack(FakeServer):
    """`AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base_url)`; Socket Mode works through the
    same base."""

    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        bot_user_id: str = BOT_USER_ID,
        bot_id: str = BOT_ID,
        team_id: str = TEAM_ID,
        users: Mapping[str, Mapping[str, Any]] | None = None,
        clock: Clock = time.monotonic,
        streaming_supported: bool = True,
    ) -> None:
        super().__init__(clock=clock)
        # False: chat.*Stream are unknown_method (older workspace)
        self.streaming_supported = streaming_supported
        self.tier_violations: list[Call] = []
        self._tier_calls: dict[str, list[float]] = {}
        self.bot_token, self.app_token = bot_token, app_token
        self.bot_user_id, self.bot_id, self.team_id = bot_user_id, bot_id, team_id
        self.users: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (users or {}).items()}
        self.messages: list[SlackMessage] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.reactions: dict[tuple[str, str], list[str]] = {}
        self.statuses: list[dict[str, Any]] = []  # assistant.threads.setStatus calls, in order
        self.files: dict[str, dict[str, Any]] = {}
        self.acks: list[dict[str, Any]] = []
        # posts to a slash command's response_url, in order
        self.responses: list[dict[str, Any]] = []
        self.connections = 0
        self._sockets: list[_Socket] = []
        self._ts = Counter(1)
        self._envelopes = Counter(1)
        self._file_ids = Counter(1)
        self.app.router.add_route("*", "/api/{method}", self._handle)
        self.app.router.add_post("/upload/{file_id}", self._upload)
        self.app.router.add_get("/link/", self._socket_mode)
        self.app.router.add_get("/files-pri/{team_file}/{name}", self._private_file)
        self.app.router.add_get("/files-pri/{team_file}/download/{name}", self._private_file)
        self.shelf = FileShelf()  # private URL path → bytes
        # False: the app lacks files:read (every download gets the sign-in page)
        self.files_scope = True
        self.files_write = True  # False: the app lacks files:write (uploads get missing_scope)

    @property
    def api_base_url(self) -> str:
        return f"{self.base_url}/api/"

    # -- test API: workspace content -------------------------------------------------------------
    def next_ts(self) -> str:
        return f"1700000000.{self._ts():06d}"

    def seed_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        ts: str | None = None,
        thread_ts: str | None = None,
        bot_id: str | None = None,
    ) -> str:
        """Put a message into the workspace (for conversations.replies/history); returns its ts."""
        message = SlackMessage(
            channel=channel,
            ts=ts or self.next_ts(),
            text=text,
            user=user,
            thread_ts=thread_ts,
            bot_id=bot_id,
        )
        self.messages.append(message)
        return message.ts

    def seed_thread(
        self, channel: str, texts: Sequence[str | Mapping[str, Any]], *, user: str = "U1"
    ) -> str:
        """A root message plus replies; items are texts or dicts with text/user/bot_id. Returns the
        thread ts."""
        root = ""
        for item in texts:
            spec = {"text": item} if isinstance(item, str) else dict(item)
            ts = self.seed_message(
                channel,
                spec["text"],
                user=spec.get("user", user),
                ts=spec.get("ts"),
                thread_ts=root or None,
                bot_id=spec.get("bot_id"),
            )
            root = root or ts
        return root

    def thread(self, channel: str, thread_ts: str) -> list[SlackMessage]:
        found = [
            m
            for m in self.messages
            if m.channel == channel and (m.ts == thread_ts or m.thread_ts == thread_ts)
        ]
        return sorted(found, key=lambda m: float(m.ts))

    def posted(
        self, channel: str | None = None, thread_ts: str | None = None
    ) -> list[SlackMessage]:
        """Messages the bot posted (current text), optionally only in one channel / thread."""
        return [
            m
            for m in self.messages
            if m.bot_id == self.bot_id
            and (channel is None or m.channel == channel)
            and (thread_ts is None or m.thread_ts == thread_ts)
        ]

    async def wait_for_post(
        self, channel: str | None = None, count: int = 1, timeout: float = FakeServer.WAIT_S
    ) -> SlackMessage:
        await self.wait_until(
            lambda: len(self.posted(channel)) >= count,
            timeout,
            lambda: f"{count} posts to {channel} not seen; got {[m.text for m in self.posted()]}",
        )
        return self.posted(channel)[count - 1]

    # -- Web API ----------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["method"]
        params = await _merged_params(request)
        token = request.headers.get("Authorization", "").removeprefix(
            "Bearer "
        ).strip() or params.pop("token", "")
        params.pop("token", None)
        call = self.record(request, name, params)
        if not self._within_tier(call):
            return json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        step = self.take_fault([name])
        if step is not None:
            response = await self.apply_fault(
                request, step, lambda s: {"ok": False, "error": f"http_{s}"}
            )
            if response is not None:
                return response
        if name == "response_url":
            # the slash command's response_url: no token, answered "ok" as Slack does
            self.responses.append(params)
            self.notify()
            return web.Response(text="ok")
        if not token:
            return json_response({"ok": False, "error": "not_authed"})
        if token not in (self.bot_token, self.app_token):
            return json_response({"ok": False, "error": "invalid_auth"})
        if (name == "apps.connections.open") != (token == self.app_token) and name != "auth.test":
            return json_response({"ok": False, "error": "not_allowed_token_type"})
        handler = getattr(self, "_m_" + name.replace(".", "_"), None)
        if handler is None or (name.endswith("Stream") and not self.streaming_supported):
            return json_response({"ok": False, "error": "unknown_method"})
        result = handler(params)
        if "error" in result:
            return json_response({"ok": False, **result})
        return json_response({"ok": True, **result})

    def _within_tier(self, call: Call) -> bool:
        limit = TIERS.get(call.name)
        if limit is None:
            return True
        recent = [t for t in self._tier_calls.get(call.name, []) if call.at - t < TIER_WINDOW_S]
        if len(recent) >= limit:
            self.tier_violations.append(call)
            self._tier_calls[call.name] = recent
            return False
        self._tier_calls[call.name] = [*recent, call.at]
        return True

    def _m_auth_test(self, p: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://fake-team.slack.com/",
            "team": "Fake Team",
            "user": "gatewaybot",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _m_chat_postMessage(self, p: Mapping[str, Any]) -> dict[str, Any]:
        problem = _check_content(p)
        if problem:
            return {"error": problem}
        message = SlackMessage(
            channel=str(p["channel"]),
            ts=self.next_ts(),
            text=str(p.get("text") or ""),
            user=self.bot_user_id,
            thread_ts=p.get("thread_ts") or None,
            blocks=tuple(_blocks(p)),
            bot_id=self.bot_id,
            params=dict(p),
        )
        self.messages.append(message)
        self.notify()
        return {"channel": message.channel, "ts": message.ts, "message": message.as_api()}

    def _m_chat_update(self, p: Mapping[str, Any]) -> dict[str, Any]:
        index = self._find(p.get("channel"), p.get("ts"))
        if index is None:
            return {"error": "message_not_found"}
        if self.messages[index].bot_id != self.bot_id or self.messages[index].streaming:
            return {"error": "cant_update_message"}
        problem = _check_content(p)
        if problem:
            return {"error": problem}
        old = self.messages[index]
        new = replace(
            old,
            text=str(p.get("text") or ""),
            blocks=tuple(_blocks(p)),
            edits=(*old.edits, old.text),
            params=dict(p),
        )
        self.messages[index] = new
        self.notify()
        return {"channel": new.channel, "ts": new.ts, "text": new.text, "message": new.as_api()}

    # -- chat.startStream / appendStream / stopStream: a message written as it is streamed
    # (Markdown) --------
    def _m_chat_startStream(self, p: Mapping[str, Any]) -> dict[str, Any]:
        channel, thread = str(p.get("channel") or ""), p.get("thread_ts")
        if not channel or not thread:
            return {"error": "invalid_arguments"}
        if not channel.startswith("D"):  # outside a DM Slack wants to know whom the stream is for
            if not p.get("recipient_team_id"):
                return {"error": "missing_recipient_team_id"}
            if not p.get("recipient_user_id"):
                return {"error": "missing_recipient_user_id"}
        text = _stream_text(p)
        if len(text) > MAX_STREAM_TEXT:
            return {"error": "msg_too_long"}
        message = SlackMessage(
            channel=channel,
            ts=self.next_ts(),
            text=text,
            user=self.bot_user_id,
            thread_ts=str(thread),
            bot_id=self.bot_id,
            params=dict(p),
            streaming=True,
        )
        self.messages.append(message)
        self.notify()
        return {"channel": channel, "ts": message.ts}

    def _m_chat_appendStream(self, p: Mapping[str, Any]) -> dict[str, Any]:
        index, problem = self._streaming(p)
        if problem:
            return {"error": problem}
        text = _stream_text(p)
        if not text:
            return {"error": "no_text"}
        if len(text) > MAX_STREAM_TEXT:
            return {"error": "msg_too_long"}
        old = self.messages[index]
        self.messages[index] = replace(old, text=old.text + text, edits=(*old.edits, old.text))
        self.notify()
        return {"channel": old.channel, "ts": old.ts}

    def _m_chat_stopStream(self, p: Mapping[str, Any]) -> dict[str, Any]:
        index, problem = self._streaming(p)
        if problem:
            return {"error": problem}
        old = self.messages[index]
        text = _stream_text(p)
        new = replace(
            old,
            text=old.text + text,
            streaming=False,
            edits=(*old.edits, old.text) if text else old.edits,
        )
        self.messages[index] = new
        self.notify()
        return {"channel": new.channel, "ts": new.ts, "message": new.as_api()}

    def _streaming(self, p: Mapping[str, Any]) -> tuple[int, str | None]:
        index = self._find(p.get("channel"), p.get("ts"))
        if index is None:
            return -1, "message_not_found"
        if not self.messages[index].streaming:
            return index, "message_not_in_streaming_state"
        return index, None

    def _m_chat_delete(self, p: Mapping[str, Any]) -> dict[str, Any]:
        index = self._find(p.get("channel"), p.get("ts"))
        if index is None:
            return {"error": "message_not_found"}
        del self.messages[index]
        self.notify()
        return {"channel": p["channel"], "ts": p["ts"]}

    def _m_chat_postEphemeral(self, p: Mapping[str, Any]) -> dict[str, Any]:
        if not p.get("user"):
            return {"error": "user_not_in_channel"}
        problem = _check_content(p)
        if problem:
            return {"error": problem}
        ts = self.next_ts()
        self.ephemerals.append({**p, "message_ts": ts})
        self.notify()
        return {"message_ts": ts}

    def _m_conversations_replies(self, p: Mapping[str, Any]) -> dict[str, Any]:
        found = self.thread(str(p.get("channel")), str(p.get("ts")))
        if not found:
            return {"error": "thread_not_found"}
        return _page([self._with_thread_info(m) for m in found], p)

    def _m_conversations_history(self, p: Mapping[str, Any]) -> dict[str, Any]:
        top = [
            m
            for m in self.messages
            if m.channel == p.get("channel") and (not m.thread_ts or m.thread_ts == m.ts)
        ]
        return _page(
            [self._with_thread_info(m) for m in sorted(top, key=lambda m: -float(m.ts))], p
        )

    def _m_conversations_info(self, p: Mapping[str, Any]) -> dict[str, Any]:
        cid = str(p.get("channel"))
        return {
            "channel": {
                "id": cid,
                "name": cid.lower(),
                "is_im": cid.startswith("D"),
                "is_channel": cid.startswith("C"),
                "is_private": cid.startswith("G"),
                "is_member": True,
                "user": "U1" if cid.startswith("D") else None,
            }
        }

    def _m_reactions_add(self, p: Mapping[str, Any]) -> dict[str, Any]:
        names = self.reactions.setdefault((str(p.get("channel")), str(p.get("timestamp"))), [])
        if p.get("name") in names:
            return {"error": "already_reacted"}
        names.append(str(p.get("name")))
        self.notify()
        return {}

    def _m_reactions_remove(self, p: Mapping[str, Any]) -> dict[str, Any]:
        names = self.reactions.get((str(p.get("channel")), str(p.get("timestamp"))), [])
        if p.get("name") not in names:
            return {"error": "no_reaction"}
        names.remove(str(p.get("name")))
        self.notify()
        return {}

    def _m_assistant_threads_setStatus(self, p: Mapping[str, Any]) -> dict[str, Any]:
        self.statuses.append(dict(p))
        self.notify()
        return {}

    def _m_assistant_threads_setTitle(self, p: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def _m_assistant_threads_setSuggestedPrompts(self, p: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def _m_users_info(self, p: Mapping[str, Any]) -> dict[str, Any]:
        uid = str(p.get("user"))
        user = self.users.get(uid) or {
            "id": uid,
            "name": uid.lower(),
            "real_name": f"User {uid}",
            "profile": {"display_name": uid.lower(), "real_name": f"User {uid}"},
        }
        return {
            "user": {
                "team_id": self.team_id,
                "is_bot": False,
                "deleted": False,
                "tz": "UTC",
                **user,
            }
        }

    def _m_apps_connections_open(self, p: Mapping[str, Any]) -> dict[str, Any]:
        return {"url": f"ws://127.0.0.1:{self.port}/link/?ticket=t{self.connections + 1}"}

    def _m_files_getUploadURLExternal(self, p: Mapping[str, Any]) -> dict[str, Any]:
        if not self.files_write:
            return {"error": "missing_scope", "needed": "files:write", "provided": "chat:write"}
        length = str(p.get("length") or "")
        if not p.get("filename") or not length.isdigit() or int(length) <= 0:
            return {"error": "invalid_arguments"}  # both are required; length: the upload's bytes
        file_id = f"F{self._file_ids():04d}"
        self.files[file_id] = {
            "filename": p.get("filename"),
            "length": int(p.get("length") or 0),
            "data": b"",
        }
        return {"upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, p: Mapping[str, Any]) -> dict[str, Any]:
        items = p.get("files")
        items = json.loads(items) if isinstance(items, str) else items or []
        if not items:
            return {"error": "invalid_arguments"}
        for item in items:
            known = self.files.get(item.get("id"))
            if known is None or len(known["data"]) != known["length"]:  # not (all) uploaded
                return {"error": "file_not_found"}
            known.update(
                title=item.get("title"),
                channel=p.get("channel_id"),
                thread_ts=p.get("thread_ts"),
                initial_comment=p.get("initial_comment"),
            )
        if p.get("channel_id"):  # shared: the bot's message with the files (in its thread)
            self.messages.append(
                SlackMessage(
                    channel=str(p["channel_id"]),
                    ts=self.next_ts(),
                    text=str(p.get("initial_comment") or ""),
                    user=self.bot_user_id,
                    thread_ts=p.get("thread_ts") or None,
                    bot_id=self.bot_id,
                    params={**p, "files": [i["id"] for i in items]},
                )
            )
        self.notify()
        return {
            "files": [
                {"id": i["id"], "title": i.get("title"), "name": self.files[i["id"]]["filename"]}
                for i in items
            ]
        }

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            part = next(iter(form.values()))
            data = part.file.read() if isinstance(part, web.FileField) else str(part).encode()
        else:
            data = await request.read()
        self.record(request, "upload", {"file_id": file_id, "size": len(data)})
        if file_id not in self.files:
            return web.Response(status=404, text="not found")
        self.files[file_id]["data"] = data
        return web.Response(text=f"OK - {len(data)}")

    # -- helpers ----------------------------------------------------------------------------------
    def _find(self, channel: Any, ts: Any) -> int | None:
        return next(
            (i for i, m in enumerate(self.messages) if m.channel == channel and m.ts == ts), None
        )

    def _with_thread_info(self, message: SlackMessage) -> dict[str, Any]:
        out = message.as_api()
        replies = [m for m in self.messages if m.thread_ts == message.ts and m.ts != message.ts]
        if replies and not message.thread_ts:
            out.update(thread_ts=message.ts, reply_count=len(replies), latest_reply=replies[-1].ts)
        return out

    # -- Socket Mode ------------------------------------------------------------------------------
    def add_file(
        self,
        data: bytes,
        name: str,
        mimetype: str,
        *,
        subtype: str | None = None,
        hidden: bool = False,
    ) -> dict[str, Any]:
        """A file object as a `file_share` event carries it; its `url_private_download` answers only
        to `Authorization: Bearer <bot token>` (anything else gets Slack's sign-in page, as
        HTML)."""
        fid = f"F{self._file_ids():07d}"
        path = f"/files-pri/{self.team_id}-{fid}/download/{name}"
        self.shelf.put(path, data, name, mimetype)
        out: dict[str, Any] = {
            "id": fid,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(data),
            "mode": "hosted",
            "url_private": f"{self.base_url}/files-pri/{self.team_id}-{fid}/{name}",
            "url_private_download": f"{self.base_url}{path}",
        }
        if subtype:
            out["subtype"] = subtype
        if hidden:
            out = {"id": fid, "mode": "hidden_by_limit", "name": name, "mimetype": mimetype}
        return out

    async def _private_file(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "files-pri", None)
        if (
            request.headers.get("Authorization") != f"Bearer {self.bot_token}"
            or not self.files_scope
        ):
            return web.Response(
                text="<!DOCTYPE html><html><body>Sign in to Slack</body></html>",
                content_type="text/html",
            )
        step = self.take_fault(["files-pri"])
        if step is not None:
            response = await self.apply_fault(
                request, step, lambda s: {"ok": False, "error": f"http_{s}"}
            )
            if response is not None:
                return response
        team_file, name = request.match_info["team_file"], request.match_info["name"]
        return await self.shelf.serve(request, f"/files-pri/{team_file}/download/{name}")

    async def _socket_mode(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        self.connections += 1
        sock = _Socket(ws, self.connections)
        self._sockets.append(sock)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {
                    "host": "fake-slack",
                    "build_number": 1,
                    "approximate_connection_time": 3600,
                },
                "connection_info": {"app_id": APP_ID},
            }
        )
        self.notify()
        async for msg in ws:
            if msg.type == WSMsgType.PING and not sock.silent:
                await ws.pong(msg.data)
            elif msg.type == WSMsgType.TEXT:
                data = json.loads(msg.data)
                if "envelope_id" in data:
                    self.acks.append(data)
                    self.notify()
        if sock in self._sockets:
            self._sockets.remove(sock)
        self.notify()
        return ws

    def open_sockets(self) -> int:
        return sum(1 for s in self._sockets if not s.ws.closed)

    async def wait_for_connections(
        self, count: int = 1, timeout: float = FakeServer.WAIT_S
    ) -> None:
        """Wait until `connections` (total ever opened) reaches `count` and one socket is open."""
        await self.wait_until(
            lambda: self.connections >= count and self.open_sockets() > 0,
            timeout,
            lambda: f"connections={self.connections}, open={self.open_sockets()}",
        )

    async def push_envelope(
        self, envelope: Mapping[str, Any], timeout: float = FakeServer.WAIT_S
    ) -> str:
        """Send a raw envelope on the newest open socket
        (waiting for one); returns its envelope_id."""
        await self.wait_until(
            lambda: self.open_sockets() > 0, timeout, lambda: "no Socket Mode connection"
        )
        body = dict(envelope)
        body.setdefault("envelope_id", f"env-{self._envelopes():04d}")
        sock = [s for s in self._sockets if not s.ws.closed][-1]
        await sock.ws.send_json(body)
        return str(body["envelope_id"])

    async def push_event(
        self,
        event: Mapping[str, Any],
        envelope_id: str | None = None,
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> str:
        """An `events_api` envelope; `event` is the inner event (or a whole event_callback body)."""
        payload = (
            dict(event)
            if event.get("type") == "event_callback"
            else event_callback(
                event,
                event_id or f"Ev{self._envelopes.next_value:04d}",
                team_id=self.team_id,
                bot_user_id=self.bot_user_id,
            )
        )
        envelope: dict[str, Any] = {
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
            "payload": payload,
        }
        if envelope_id:
            envelope["envelope_id"] = envelope_id
        return await self.push_envelope(envelope)

    async def push_slash_command(
        self,
        command: str,
        text: str = "",
        *,
        user_id: str = "U1",
        channel_id: str = "C1",
        envelope_id: str | None = None,
        trigger_id: str = "trigger-1",
        response_url: str | None = None,
    ) -> str:
        payload = {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "team_domain": "fake-team",
            "channel_id": channel_id,
            "channel_name": channel_id.lower(),
            "user_id": user_id,
            "user_name": user_id.lower(),
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "trigger_id": trigger_id,
            "response_url": response_url or f"{self.base_url}/api/response_url",
        }
        envelope: dict[str, Any] = {
            "type": "slash_commands",
            "accepts_response_payload": True,
            "payload": payload,
        }
        if envelope_id:
            envelope["envelope_id"] = envelope_id
        return await self.push_envelope(envelope)

    def block_actions(
        self, channel: str, ts: str, label: str, *, user_id: str = "U1", user_name: str = "alice"
    ) -> dict[str, Any]:
        """The `block_actions` payload of a click on the button labelled `label` under one of the
        bot's messages (deliver it over Socket Mode with `push_interactive`, over HTTP with
        `EventsApi.interact`). LookupError when the message shows no such button now. Its
        response_url answers the clicker alone."""
        index = self._find(channel, ts)
        message = self.messages[index] if index is not None else None
        shown = _buttons(message.blocks if message else ())
        button = next((b for b in shown if b["text"]["text"] == label), None)
        if message is None or button is None:
            raise LookupError(
                f"message {ts} in {channel} shows no button {label!r}: "
                f"{message.buttons() if message else []}"
            )
        return self.action_payload(channel, ts, dict(button), user_id=user_id, user_name=user_name)

    def action_payload(
        self,
        channel: str,
        ts: str,
        button: Mapping[str, Any],
        *,
        user_id: str = "U1",
        user_name: str = "alice",
    ) -> dict[str, Any]:
        """A block_actions payload for any button (an old client's, a forger's)."""
        index = self._find(channel, ts)
        message = self.messages[index].as_api() if index is not None else {"ts": ts}
        action = {
            "type": "button",
            "action_id": button.get("action_id"),
            "block_id": "b1",
            "text": button.get("text"),
            "value": button.get("value"),
            "action_ts": self.next_ts(),
        }
        if button.get("style"):
            action["style"] = button["style"]
        return {
            "type": "block_actions",
            "api_app_id": APP_ID,
            "token": "legacy-verification-token",
            "user": {
                "id": user_id,
                "username": user_name,
                "name": user_name,
                "team_id": self.team_id,
            },
            "team": {"id": self.team_id, "domain": "fake-team"},
            "trigger_id": f"trig-{action['action_ts']}",
            "container": {
                "type": "message",
                "message_ts": ts,
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "channel": {"id": channel, "name": channel.lower()},
            "message": message,
            "response_url": f"{self.base_url}/api/response_url?for_user={user_id}",
            "actions": [action],
        }

    def ephemeral_for(self, user_id: str) -> list[str]:
        """What only `user_id` was shown: chat.postEphemeral to them, and ephemeral answers to their
        clicks."""
        posted = [str(e.get("text") or "") for e in self.ephemerals if e.get("user") == user_id]
        answered = [
            str(r.get("text") or "")
            for r in self.responses
            if r.get("for_user") == user_id and r.get("response_type") == "ephemeral"
        ]
        return posted + answered

    async def push_interactive(
        self, payload: Mapping[str, Any], envelope_id: str | None = None
    ) -> str:
        envelope: dict[str, Any] = {
            "type": "interactive",
            "accepts_response_payload": False,
            "payload": dict(payload),
        }
        if envelope_id:
            envelope["envelope_id"] = envelope_id
        return await self.push_envelope(envelope)

    async def wait_for_ack(
        self, envelope_id: str, timeout: float = FakeServer.WAIT_S
    ) -> dict[str, Any]:
        await self.wait_until(
            lambda: any(a.get("envelope_id") == envelope_id for a in self.acks),
            timeout,
            lambda: f"no ack for {envelope_id}; acks={self.acks}",
        )
        return next(a for a in self.acks if a.get("envelope_id") == envelope_id)

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect, as Slack does before it recycles a socket."""
        for sock in [s for s in self._sockets if not s.ws.closed]:
            await sock.ws.send_json(
                {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-slack"}}
            )

    def go_silent(self) -> None:
        """Currently open sockets stop answering pings (a half-dead connection); new ones behave."""
        for sock in self._sockets:
            sock.silent = True

    async def drop_connections(self, code: int = 1011) -> None:
        for sock in list(self._sockets):
            await sock.ws.close(code=code, message=b"server dropped the connection")

    async def _before_stop(self) -> None:
        await self.drop_connections(code=1001)


async def _merged_params(request: web.Request) -> dict[str, Any]:
    """slack_sdk sends JSON for some methods, form-urlencoded
    for most, and a query string for GETs."""
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        raw = await request.read()
        if request.content_type == "application/json":
            params.update(json.loads(raw or b"{}"))
        elif request.content_type.startswith("multipart/"):
            params.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
        else:
            params.update(dict(parse_qsl(raw.decode())))
    return params


def _stream_text(p: Mapping[str, Any]) -> str:
    """`markdown_text`, or the `markdown_text` chunks the SDK's helpers send instead."""
    chunks = p.get("chunks") or []
    chunks = json.loads(chunks) if isinstance(chunks, str) else chunks
    return str(p.get("markdown_text") or "") + "".join(
        str(c.get("text") or "")
        for c in chunks
        if isinstance(c, dict) and c.get("type") == "markdown_text"
    )


def _blocks(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks = p.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _check_content(p: Mapping[str, Any]) -> str | None:
    """The limits Slack enforces on a message body."""
    if not p.get("channel"):
        return "channel_not_found"
    try:
        blocks = _blocks(p)
    except ValueError:
        return "invalid_blocks_format"
    if not (p.get("text") or blocks or p.get("attachments")):
        return "no_text"
    if len(str(p.get("text") or "")) > MAX_TEXT:
        return "msg_too_long"
    if len(blocks) > MAX_BLOCKS or any(not isinstance(b, dict) or "type" not in b for b in blocks):
        return "invalid_blocks"
    for block in blocks:
        text = block.get("text")
        if isinstance(text, dict) and len(str(text.get("text", ""))) > MAX_SECTION_TEXT:
            return "invalid_blocks"
        elements = block.get("elements") or []
        if block.get("type") == "actions" and not 1 <= len(elements) <= MAX_ACTIONS:
            return "invalid_blocks"
    ids = [str(b.get("action_id") or "") for b in _buttons(blocks)]
    if len(set(ids)) < len(ids) or any(not _good_button(b) for b in _buttons(blocks)):
        return "invalid_blocks"
    return None


def _buttons(blocks: Any) -> list[dict[str, Any]]:
    return [
        e
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "actions"
        for e in b.get("elements") or ()
        if isinstance(e, dict) and e.get("type") == "button"
    ]


def _good_button(button: Mapping[str, Any]) -> bool:
    text = button.get("text") or {}
    label = str(text.get("text") or "") if isinstance(text, dict) else ""
    return (
        isinstance(text, dict)
        and text.get("type") == "plain_text"
        and 0 < len(label) <= MAX_BUTTON_TEXT
        and len(str(button.get("action_id") or "")) <= MAX_ACTION_ID
        and len(str(button.get("value") or "")) <= MAX_VALUE
        and button.get("style") in (None, "primary", "danger")
    )


def _page(items: list[dict[str, Any]], p: Mapping[str, Any]) -> dict[str, Any]:
    start = int(p.get("cursor") or 0)
    limit = int(p.get("limit") or 1000)
    chunk = items[start : start + limit]
    more = start + limit < len(items)
    return {
        "messages": chunk,
        "has_more": more,
        "response_metadata": {"next_cursor": str(start + limit) if more else ""},
    }

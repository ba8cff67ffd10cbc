"""Fake Discord for discord.py: REST under /api/v10 and a gateway websocket
(HELLO/IDENTIFY/READY/RESUME, heartbeats, dispatches with sequence numbers and replay on RESUME),
with injectable faults and close codes. Message create honours `nonce` + `enforce_nonce` as Discord
does; 429s carry Discord's body and headers, and a request to a bucket before its served
`retry_after` expired is recorded and refused again. Point discord.py at it with
`patch_discord_urls(fake)` (class attributes, restored on exit)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import discord.gateway
import discord.http
import yarl
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
    "BOT_ID",
    "CHANNEL_ID",
    "GUILD_ID",
    "NONCE_WINDOW_S",
    "OTHER_USER_ID",
    "PRIVILEGED_INTENTS",
    "TOKEN",
    "USER_ID",
    "AfterCommit",
    "Call",
    "ConnectionReset",
    "Delay",
    "DiscordMessage",
    "FakeDiscord",
    "Fault",
    "Malformed",
    "discord_error",
    "make_guild",
    "make_user",
    "patch_discord_urls",
    "rate_limited",
    "snowflake",
]

TOKEN = "FAKE.DISCORD.TOKEN"
BOT_ID = "100000000000000001"
APP_ID = "100000000000000002"
GUILD_ID = "200000000000000001"
CHANNEL_ID = "300000000000000001"
USER_ID = "400000000000000001"
OTHER_USER_ID = "400000000000000002"
API = "/api/v10"
PRIVILEGED_INTENTS = (1 << 1) | (1 << 8) | (1 << 15)  # members, presences, message_content
MAX_CONTENT = 2000
MAX_NONCE = 25
# Discord's message-create bucket is 5 per 5 s per channel; the window is shorter here so tests stay
# quick while discord.py still has to wait one out (set bucket_window=5.0 for the real span).
BUCKET_LIMIT = 5
BUCKET_WINDOW_S = 0.5
# "you must send an initial response within 3 seconds of receiving the event"
INTERACTION_DEADLINE_S = 3.0
# Message components: "Action Rows can contain up to 5 Buttons", a message up to 5 action rows; a
# button's custom_id is "max 100 characters" and its label "max 80 characters"; styles 1-4 need a
# custom_id, 5 (link) a url.
MAX_ROWS, MAX_BUTTONS, MAX_CUSTOM_ID, MAX_LABEL = 5, 5, 100, 80
EPHEMERAL = 1 << 6  # message flag 64: "only visible to the user who invoked the Interaction"
# Interaction response types: 4 CHANNEL_MESSAGE_WITH_SOURCE, 5 DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
# and for component interactions only 6 DEFERRED_UPDATE_MESSAGE and 7 UPDATE_MESSAGE (edit the
# message the button is on).
COMPONENT_RESPONSES = (6, 7)
# Discord says "the past few minutes" for enforce_nonce; the exact span is not published
NONCE_WINDOW_S = 120.0
DISCORD_EPOCH_MS = 1420070400000


# ------------------------------------------------------------------------------------------ helpers
def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def make_user(
    user_id: str, username: str, *, bot: bool = False, global_name: str | None = None
) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": username,
        "discriminator": "0",
        "global_name": global_name,
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
    }


BOT_USER = {
    **make_user(BOT_ID, "gatewaybot", bot=True),
    "verified": True,
    "mfa_enabled": False,
    "flags": 0,
}


def make_guild(
    guild_id: str = GUILD_ID,
    name: str = "Test Guild",
    *,
    channels: Sequence[tuple[str, str]] = (("general", CHANNEL_ID),),
    members: Sequence[Mapping[str, Any]] = (),
    owner_id: str = USER_ID,
    roles: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A GUILD_CREATE payload: text channels (name, id), roles (id → name, besides @everyone) and
    member user objects (the bot is added)."""
    member_users = [BOT_USER, *members]
    extra_roles = [
        {
            "id": rid,
            "name": rname,
            "permissions": "0",
            "position": i,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": True,
            "flags": 0,
        }
        for i, (rid, rname) in enumerate((roles or {}).items(), 1)
    ]
    return {
        "id": guild_id,
        "name": name,
        "owner_id": owner_id,
        "unavailable": False,
        "member_count": len(member_users),
        "large": False,
        "joined_at": now_iso(),
        "features": [],
        "emojis": [],
        "stickers": [],
        "icon": None,
        "roles": [
            {
                "id": guild_id,
                "name": "@everyone",
                "permissions": "2248473465835073",
                "position": 0,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
                "flags": 0,
            },
            *extra_roles,
        ],
        "channels": [
            {
                "id": cid,
                "type": 0,
                "name": cname,
                "position": i,
                "permission_overwrites": [],
                "guild_id": guild_id,
                "nsfw": False,
                "topic": None,
                "last_message_id": None,
                "rate_limit_per_user": 0,
                "parent_id": None,
            }
            for i, (cname, cid) in enumerate(channels)
        ],
        "threads": [],
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "members": [
            {
                "user": u,
                "roles": [],
                "joined_at": now_iso(),
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
            for u in member_users
        ],
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "preferred_locale": "en-US",
        "system_channel_flags": 0,
        "system_channel_id": None,
        "rules_channel_id": None,
        "afk_channel_id": None,
        "afk_timeout": 300,
    }


VOICE_MESSAGE_FLAG = 1 << 13  # a message sent with the mic button carries this flag
# Voice messages (Discord's message resource): the IS_VOICE_MESSAGE flag, exactly one audio
# attachment with `duration_secs` and `waveform` (base64, at most 256 bytes), and nothing else: no
# content, embeds, stickers, components or poll; they cannot be edited; a channel that denies Send
# Voice Messages refuses them.
VOICE_ERRORS = {
    "content": (50159, "Voice messages do not support additional content."),
    "single": (50160, "Voice messages must have a single audio attachment."),
    "metadata": (50161, "Voice messages must have supporting metadata."),
    "edit": (50162, "Voice messages cannot be edited."),
    "channel": (50173, "Cannot send voice messages in this channel."),
}


# format_type: PNG, APNG, LOTTIE, GIF
STICKER_EXTENSIONS = {1: "png", 2: "png", 3: "json", 4: "gif"}
CDN_DAY = 0x15180  # a signed link lives a day


def _cdn_sign(path: str, ex: int) -> str:
    return hashlib.sha256(f"cdn-secret:{path}:{ex:x}".encode()).hexdigest()[:32]


def snowflake(at: float | None = None, increment: int = 0) -> str:
    """A Discord id minted at `at` (Unix seconds, default
    now): discord.py dates a message by its id."""
    ms = int((time.time() if at is None else at) * 1000) - DISCORD_EPOCH_MS
    return str((ms << 22) | (increment & 0xFFF))


def rate_limited(retry_after: float = 0.05, *, global_: bool = False, scope: str = "user") -> Fault:
    """A 429 the way Discord sends it: JSON body with `retry_after` in seconds (a float) and
    `global`, the X-RateLimit-* headers, and the `Via` header without which discord.py assumes a
    Cloudflare ban."""
    headers = {
        "Retry-After": str(math.ceil(retry_after)),
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
        "X-RateLimit-Reset-After": f"{retry_after:.3f}",
        "X-RateLimit-Bucket": "fake-bucket",
        "X-RateLimit-Scope": "global" if global_ else scope,
        "Via": "1.1 google",
    }
    if global_:
        headers["X-RateLimit-Global"] = "true"
    return Fault(
        429,
        {
            "message": "You are being rate limited.",
            "retry_after": retry_after,
            "global": global_,
            "code": 0,
        },
        headers,
    )


@dataclass(frozen=True, slots=True)
class AfterCommit:
    """Carry the request out (the message is posted), then answer with `then` instead (a
    `ConnectionReset`, a 5xx): the client cannot tell that it went through, the case `enforce_nonce`
    exists for."""

    then: Any


def discord_error(
    status: int, message: str, code: int = 0, errors: Mapping[str, Any] | None = None
) -> Fault:
    body: dict[str, Any] = {"message": message, "code": code}
    if errors:
        body["errors"] = dict(errors)
    return Fault(status, body)


class _ApiError(Exception):
    def __init__(
        self, status: int, message: str, code: int = 0, errors: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.body = (
            status,
            {"message": message, "code": code, **({"errors": errors} if errors else {})},
        )


def _field_error(field_name: str, code: str, message: str) -> _ApiError:
    return _ApiError(
        400,
        "Invalid Form Body",
        50035,
        {field_name: {"_errors": [{"code": code, "message": message}]}},
    )


@contextmanager
def patch_discord_urls(fake: FakeDiscord) -> Iterator[None]:
    """discord.py reads its endpoints from class attributes:
    point them at the fake, restore afterwards."""
    old_base, old_gateway = (
        discord.http.Route.BASE,
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY,
    )
    discord.http.Route.BASE = f"{fake.base_url}{API}"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.ws_url)
    try:
        yield
    finally:
        discord.http.Route.BASE = old_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = old_gateway


# --------------------------------------------------------------------------------------------- data
@dataclass(frozen=True, slots=True)
class DiscordMessage:
    """A message the bot produced (REST send, interaction
    response or webhook follow-up), edits applied."""

    channel_id: str
    id: str
    content: str
    allowed_mentions: Mapping[str, Any] | None = None
    message_reference: Mapping[str, Any] | None = None
    embeds: tuple[dict[str, Any], ...] = ()
    files: tuple[dict[str, Any], ...] = ()
    via: str = "rest"  # "rest" | "interaction" | "webhook"
    flags: int = 0
    edits: tuple[str, ...] = ()
    body: Mapping[str, Any] = field(default_factory=dict)
    # action rows of buttons, as the channel shows them now
    components: tuple[dict[str, Any], ...] = ()
    visible_to: str | None = None  # an ephemeral message: the only user who sees it
    author_id: str = BOT_ID  # the bot that posted it (with several bots: `FakeDiscord.add_bot`)

    def buttons(self) -> list[str]:
        return [str(c.get("label")) for row in self.components for c in row.get("components") or ()]


@dataclass(slots=True)
class FakeBot:
    """One bot account: its token, user, application and the guilds it is in (None: every guild)."""

    token: str
    user: dict[str, Any]
    app_id: str
    guild_ids: set[str] | None = None


@dataclass(slots=True)
class _Session:
    """One gateway session: a bot's shard [id, count], with its own sequence and the dispatches it
    was sent (replayed on RESUME)."""

    id: str
    bot: FakeBot
    shard: tuple[int, int]
    seq: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


class _Conn:
    def __init__(self, ws: web.WebSocketResponse, number: int, path: str) -> None:
        self.ws, self.number, self.path = ws, number, path
        self.live = False  # identified or resumed: dispatches may be sent
        self.silent = False
        self.session: _Session | None = None


Handler = Callable[[web.Request, Any], Awaitable[Any]]
_CALL = web.RequestKey("call", Call)  # the request's record, for handlers that note it
_BOT = web.RequestKey("bot", FakeBot)  # the bot whose token authorized the request


# --------------------------------------------------------------------------------------------- fake
class FakeDiscord(FakeServer):
    """REST + gateway. `fake.ws_url` is the gateway;
    READY's `resume_gateway_url` is `fake.resume_url`."""

    def __init__(
        self,
        *,
        token: str = TOKEN,
        guilds: Sequence[Mapping[str, Any]] | None = None,
        users: Sequence[Mapping[str, Any]] | None = None,
        heartbeat_interval_ms: int = 1000,
        enabled_privileged_intents: int = PRIVILEGED_INTENTS,
        echo_own_messages: bool = True,
        clock: Clock = time.monotonic,
        bucket_limit: int = BUCKET_LIMIT,
        bucket_window: float = BUCKET_WINDOW_S,
        bucket_clock: Clock = time.monotonic,
        roles: Mapping[str, str] | None = None,
        recommended_shards: int = 1,
        max_guilds_per_shard: int = 2500,
    ) -> None:
        super().__init__(clock=clock)
        self.token = token
        self.bots: dict[str, FakeBot] = {token: FakeBot(token, BOT_USER, APP_ID)}
        self.recommended_shards = recommended_shards  # what GET /gateway/bot answers in `shards`
        self.max_guilds_per_shard = max_guilds_per_shard  # past this, IDENTIFY is closed with 4011
        default_users = [
            make_user(USER_ID, "alice", global_name="Alice"),
            make_user(OTHER_USER_ID, "bob"),
        ]
        self.users: dict[str, dict[str, Any]] = {
            u["id"]: dict(u) for u in (*default_users, *(users or ()))
        }
        self.users[BOT_ID] = dict(BOT_USER)
        self.guilds = (
            [dict(g) for g in guilds]
            if guilds is not None
            else [make_guild(members=[self.users[USER_ID], self.users[OTHER_USER_ID]], roles=roles)]
        )
        # user id → role ids they have now (in events and REST)
        self.member_roles: dict[str, list[str]] = {}
        self.departed: set[str] = set()  # users who left the guilds: GET member answers 10007
        self.voice_refused: set[str] = set()  # channels denying Send Voice Messages (refuse_voice)
        self.channels: dict[str, dict[str, Any]] = {
            c["id"]: dict(c) for g in self.guilds for c in g["channels"]
        }
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.enabled_privileged_intents = enabled_privileged_intents
        self.echo_own_messages = echo_own_messages
        self.sent: list[DiscordMessage] = []
        # creates answered with the message an earlier one posted
        self.nonce_repeats: list[Call] = []
        # called the moment a REST create is stored
        self.on_posted: Callable[[DiscordMessage], None] | None = None
        # requests to a bucket before its served retry_after expired
        self.retry_after_violations: list[Call] = []
        # Every answer carries X-RateLimit-*, as Discord's do, so discord.py's own bucket handling
        # runs: it must wait out a Remaining of 0 (real time, as discord.py sleeps) or get a 429
        # recorded in bucket_violations.
        self.bucket_limit, self.bucket_window = bucket_limit, bucket_window
        # The buckets' time: real by default (discord.py sleeps for real on a Remaining of 0); a
        # test whose gateway paces itself on a virtual clock passes that clock, with the real
        # window, so its pacing is what is checked.
        self.bucket_clock = bucket_clock
        self.bucket_violations: list[Call] = []
        # bucket → (resets at, requests used), time.monotonic
        self._buckets: dict[str, tuple[float, int]] = {}
        # interaction ids answered after Discord's 3 s (404 10062)
        self.late_interactions: list[str] = []
        # nonce → (channel, message, when posted)
        self._nonces: dict[str, tuple[str, str, float]] = {}
        # bucket (route + channel) → end of its served retry_after
        self._limited_until: dict[str, float] = {}
        # (channel, message, emoji) currently set by the bot
        self.reactions: list[tuple[str, str, str]] = []
        self.global_commands: list[dict[str, Any]] = []
        self.guild_commands: dict[str, list[dict[str, Any]]] = {}
        # token → pushed INTERACTION_CREATE payload
        self.interactions: dict[str, dict[str, Any]] = {}
        self.interaction_responses: list[dict[str, Any]] = []
        self.gateway_received: list[dict[str, Any]] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.connections = 0
        self.connection_paths: list[str] = []
        # (token, shard id, count) → its latest session
        self.sessions: dict[tuple[str, int, int], _Session] = {}
        self._dm_bots: dict[str, str] = {}  # DM channel → the bot user it is with
        self.resume_replay_from: int | None = None
        self._conns: list[_Conn] = []
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}
        self._ids = Counter(500000000000000001)
        self._sessions = Counter(1)
        self._threads_from: set[str] = set()
        # channel → released when set (a slow history read)
        self._history_holds: dict[str, asyncio.Event] = {}
        # attachment path → bytes; stickers too (/stickers/<id>.<ext>, never signed)
        self.cdn = FileShelf()
        # the expiry newly signed links get (hex Unix seconds, as Discord's `ex`)
        self._cdn_ex = 0x6A00FF00
        self._cdn_oldest = 0  # links signed to expire before this no longer work
        self._routes()

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def resume_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/resume-gateway"

    @property
    def http_base(self) -> str:
        return self.base_url

    @property
    def online(self) -> bool:
        """A client is identified (or resumed) on a socket still open: a dispatch now reaches it."""
        return bool(self._live())

    @property
    def session(self) -> _Session | None:
        """The first bot's session on shard 0 (a single-bot, unsharded test's one session)."""
        return next(
            (
                s
                for (token, sid, _), s in reversed(self.sessions.items())
                if token == self.token and sid == 0
            ),
            None,
        )

    @property
    def session_id(self) -> str:
        return self.session.id if self.session is not None else ""

    @property
    def seq(self) -> int:
        return self.session.seq if self.session is not None else 0

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.session.history if self.session is not None else []

    def add_bot(
        self,
        token: str,
        user_id: str,
        username: str,
        *,
        app_id: str | None = None,
        guild_ids: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Another bot account (its own token, user and application) on this Discord: it is in
        `guild_ids` (None: every guild), gets its own gateway sessions and posts as itself. Returns
        its user object."""
        user = {
            **make_user(user_id, username, bot=True),
            "verified": True,
            "mfa_enabled": False,
            "flags": 0,
        }
        self.users[user_id] = user
        self.bots[token] = FakeBot(
            token,
            user,
            app_id or self.new_id(),
            None if guild_ids is None else {str(g) for g in guild_ids},
        )
        return user

    def shard_of(self, guild_id: str | int, count: int) -> int:
        """Discord's rule: a guild's events go to shard `(guild_id >> 22) % num_shards`."""
        return (int(guild_id) >> 22) % count

    @property
    def identify_count(self) -> int:
        return len(self.identifies)

    @property
    def resume_count(self) -> int:
        return len(self.resumes)

    def new_id(self) -> str:
        return str(self._ids())

    def add_attachment(
        self,
        data: bytes,
        filename: str,
        content_type: str,
        *,
        channel_id: str | int = CHANNEL_ID,
        voice: bool = False,
    ) -> dict[str, Any]:
        """An attachment object for `push_message(attachments=[...])`, its bytes served from a
        signed CDN URL (`?ex=&is=&hm=` as Discord signs them; `expire_attachments()` makes every
        link answer 404)."""
        aid = self.new_id()
        path = f"/attachments/{channel_id}/{aid}/{filename}"
        self.cdn.put(path, data, filename, content_type)
        url = self._signed(path)
        out: dict[str, Any] = {
            "id": aid,
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }
        if voice:
            out.update(
                duration_secs=3.5, waveform=base64.b64encode(bytes(range(0, 256, 4))).decode()
            )
        return out

    def _signed(self, path: str) -> str:
        ex = self._cdn_ex
        return f"{self.base_url}{path}?ex={ex:x}&is={ex - CDN_DAY:x}&hm={_cdn_sign(path, ex)}&"

    def expire_attachments(self) -> None:
        """A day passes: every link signed so far answers 404; links signed from now on (by
        refresh-urls) work."""
        self._cdn_oldest = self._cdn_ex + 1
        self._cdn_ex += CDN_DAY

    def delete_attachment(self, attachment: Mapping[str, Any]) -> None:
        """Its message was deleted: the CDN no longer has it, whatever the link."""
        self.cdn.files.pop(urlsplit(str(attachment["url"])).path, None)

    def add_sticker(self, data: bytes, name: str, format_type: int) -> dict[str, Any]:
        """A sticker item for `push_message(stickers=[...])`; its image at /stickers/<id>.<ext> as
        Discord's CDN serves it (PNG for PNG and APNG, GIF, the Lottie JSON)."""
        sid = self.new_id()
        ext = STICKER_EXTENSIONS[format_type]
        mime = {"png": "image/png", "gif": "image/gif", "json": "application/json"}[ext]
        self.cdn.put(f"/stickers/{sid}.{ext}", data, f"{sid}.{ext}", mime)
        return {"id": sid, "name": name, "format_type": format_type}

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "GET /attachments", None)
        path = request.path
        try:
            ex = int(request.query.get("ex", ""), 16)
        except ValueError:
            ex = -1
        if ex < self._cdn_oldest or request.query.get("hm") != _cdn_sign(path, ex):
            return web.Response(status=404, text="This content is no longer available.")
        # the CDN busy or failing: 429 with Retry-After, 5xx
        step = self.take_fault(["GET /attachments"])
        if step is not None:
            response = await self.apply_fault(request, step, lambda s: "upstream connect error")
            if response is not None:
                return response
        return await self.cdn.serve(request, path)

    async def _sticker_file(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "GET /stickers", None)
        return await self.cdn.serve(request, request.path)

    async def _refresh_urls(self, request: web.Request, body: Any) -> Any:
        """POST /attachments/refresh-urls: each of our attachment links signed anew (others come
        back as given)."""
        urls = body.get("attachment_urls") if isinstance(body, dict) else None
        if not isinstance(urls, list) or not urls or len(urls) > 50:
            raise _ApiError(400, "Invalid Form Body", 50035)
        out = []
        for url in urls:
            parts = urlsplit(str(url))
            known = (
                parts.path.startswith("/attachments/")
                and parts.netloc == urlsplit(self.base_url).netloc
            )
            out.append({"original": url, "refreshed": self._signed(parts.path) if known else url})
        return {"refreshed_urls": out}

    # -- routing ----------------------------------------------------------------------------------
    def _routes(self) -> None:
        r = self.app.router
        for method, path, fn, auth in [
            ("GET", "/users/@me", self._get_me, True),
            ("GET", "/oauth2/applications/@me", self._get_app, True),
            ("GET", "/gateway", self._get_gateway, False),
            ("GET", "/gateway/bot", self._get_gateway_bot, True),
            ("POST", "/users/@me/channels", self._create_dm, True),
            ("GET", "/channels/{cid}", self._get_channel, True),
            ("GET", "/guilds/{gid}/members/{uid}", self._get_member, True),
            ("POST", "/channels/{cid}/messages", self._post_message, True),
            ("GET", "/channels/{cid}/messages", self._list_messages, True),
            ("GET", "/channels/{cid}/messages/{mid}", self._get_message, True),
            ("PATCH", "/channels/{cid}/messages/{mid}", self._patch_message, True),
            ("DELETE", "/channels/{cid}/messages/{mid}", self._delete_message, True),
            (
                "PUT",
                "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me",
                self._add_reaction,
                True,
            ),
            (
                "DELETE",
                "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me",
                self._remove_reaction,
                True,
            ),
            ("POST", "/channels/{cid}/typing", self._typing, True),
            ("POST", "/attachments/refresh-urls", self._refresh_urls, True),
            ("POST", "/channels/{cid}/messages/{mid}/threads", self._thread_from_message, True),
            ("POST", "/channels/{cid}/threads", self._thread_without_message, True),
            ("GET", "/applications/{app}/commands", self._get_commands, True),
            ("PUT", "/applications/{app}/commands", self._put_commands, True),
            ("GET", "/applications/{app}/guilds/{gid}/commands", self._get_commands, True),
            ("PUT", "/applications/{app}/guilds/{gid}/commands", self._put_commands, True),
            ("POST", "/interactions/{iid}/{token}/callback", self._interaction_callback, False),
            ("POST", "/webhooks/{app}/{token}", self._followup, False),
            ("GET", "/webhooks/{app}/{token}/messages/{mid}", self._webhook_get, False),
            ("PATCH", "/webhooks/{app}/{token}/messages/{mid}", self._webhook_edit, False),
            ("DELETE", "/webhooks/{app}/{token}/messages/{mid}", self._webhook_delete, False),
        ]:
            r.add_route(method, API + path, self._wrap(f"{method} {path}", fn, auth))
        r.add_route("*", API + "/{tail:.*}", self._wrap("unknown", self._unknown, False))
        r.add_get("/gateway", self._gateway)
        r.add_get("/attachments/{cid}/{aid}/{filename}", self._cdn)
        r.add_get("/stickers/{file}", self._sticker_file)
        r.add_get("/resume-gateway", self._gateway)

    def _wrap(
        self, name: str, fn: Handler, auth: bool
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            body = await _read_body(request)
            call = request[_CALL] = self.record(request, name, body)
            bucket = f"{name}:{request.match_info.get('cid', '')}"
            limited = self._retry_after_check(call, bucket)
            if limited is not None:
                return limited
            rate = self._spend(call, f"{bucket}:{request.match_info.get('token', '')}", name)
            if rate is None:
                self.bucket_violations.append(call)
                again = rate_limited(
                    self._buckets[f"{bucket}:{request.match_info.get('token', '')}"][0]
                    - self.bucket_clock()
                )
                return json_response(again.body, again.status, again.headers)
            concrete = f"{request.method} {request.path.removeprefix(API)}"
            step = self.take_fault([concrete, name])
            after = step.then if isinstance(step, AfterCommit) else None
            if step is not None and after is None:
                response = await self.apply_fault(request, step, _error_body)
                if response is not None:
                    self._note_retry_after(step, bucket)
                    return response
            bot = self._bot_of(request)
            if auth and bot is None:
                return json_response({"message": "401: Unauthorized", "code": 0}, 401)
            request[_BOT] = bot or self.bots[self.token]
            try:
                result = await fn(request, body)
            except _ApiError as e:
                return json_response(e.body, e.status)
            if after is not None:
                return await self.apply_fault(request, after, _error_body) or json_response(result)
            if result is None:
                return web.Response(status=204, headers=rate)
            return json_response(result, headers=rate)

        return handler

    def _bot_of(self, request: web.Request) -> FakeBot | None:
        given = request.headers.get("Authorization", "")
        return next((b for b in self.bots.values() if given == f"Bot {b.token}"), None)

    def _bot_by_app(self, app_id: str | None) -> FakeBot:
        return next((b for b in self.bots.values() if b.app_id == app_id), self.bots[self.token])

    def _spend(self, call: Call, bucket: str, route: str) -> dict[str, str] | None:
        """One request from `bucket` (route + major parameters): its X-RateLimit-* headers, or None
        when the client sent it while Remaining was 0."""
        now = self.bucket_clock()
        resets, used = self._buckets.get(bucket, (now + self.bucket_window, 0))
        if now >= resets:
            resets, used = now + self.bucket_window, 0
        if used >= self.bucket_limit:
            return None
        used += 1
        self._buckets[bucket] = (resets, used)
        return {
            "X-RateLimit-Limit": str(self.bucket_limit),
            "X-RateLimit-Remaining": str(self.bucket_limit - used),
            "X-RateLimit-Reset": f"{time.time() + resets - now:.3f}",
            "X-RateLimit-Reset-After": f"{resets - now:.3f}",
            "X-RateLimit-Bucket": hashlib.sha1(route.encode()).hexdigest()[:16],
        }

    def _retry_after_check(self, call: Call, bucket: str) -> web.Response | None:
        until = self._limited_until.get(bucket)
        if until is None or call.at >= until:
            return None
        self.retry_after_violations.append(call)
        again = rate_limited(round(until - call.at, 3))
        return json_response(again.body, again.status, again.headers)

    def _note_retry_after(self, step: Any, bucket: str) -> None:
        while isinstance(step, Delay):
            step = step.then
        if isinstance(step, Fault) and step.status == 429 and isinstance(step.body, Mapping):
            self._limited_until[bucket] = self.clock() + float(step.body.get("retry_after") or 0)

    def _matches(self, call: Call, key: str | Callable[[Call], bool]) -> bool:
        return super()._matches(call, key) or key == f"{call.method} {call.path.removeprefix(API)}"

    # -- REST: identity ---------------------------------------------------------------------------
    async def _get_me(self, request: web.Request, body: Any) -> Any:
        return request[_BOT].user

    async def _get_app(self, request: web.Request, body: Any) -> Any:
        bot = request[_BOT]
        return {
            "id": bot.app_id,
            "name": bot.user["username"],
            "description": "",
            "icon": None,
            "bot_public": False,
            "bot_require_code_grant": False,
            "verify_key": "00" * 32,
            "owner": self.users[USER_ID],
            "flags": 0,
            "team": None,
            "summary": "",
            "rpc_origins": [],
            "bot": bot.user,
        }

    async def _get_gateway(self, request: web.Request, body: Any) -> Any:
        return {"url": self.ws_url}

    async def _get_gateway_bot(self, request: web.Request, body: Any) -> Any:
        """The recommended shard count (`recommended_shards`), as Discord answers it for a bot."""
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return {"url": self.ws_url, "shards": self.recommended_shards, "session_start_limit": limit}

    async def _unknown(self, request: web.Request, body: Any) -> Any:
        raise _ApiError(404, "404: Not Found", 0)

    # -- REST: channels and messages ---------------------------------------------------------------
    def _channel(self, cid: str) -> dict[str, Any]:
        if cid not in self.channels:
            raise _ApiError(404, "Unknown Channel", 10003)
        return self.channels[cid]

    async def _create_dm(self, request: web.Request, body: Any) -> Any:
        recipient, bot = str(body.get("recipient_id")), request[_BOT].user["id"]
        existing = next(
            (
                c
                for c in self.channels.values()
                if c["type"] == 1
                and c["recipients"][0]["id"] == recipient
                and self._dm_bots.get(c["id"], BOT_ID) == bot
            ),
            None,
        )
        if existing:
            return existing
        channel: dict[str, Any] = {
            "id": self.new_id(),
            "type": 1,
            "last_message_id": None,
            "recipients": [self._user(recipient)],
        }
        self.channels[channel["id"]] = channel
        self._dm_bots[channel["id"]] = bot
        return channel

    async def _get_channel(self, request: web.Request, body: Any) -> Any:
        return self._channel(request.match_info["cid"])

    async def _get_member(self, request: web.Request, body: Any) -> Any:
        """GET /guilds/{gid}/members/{uid}: a guild member
        with their role ids (10007 once they left)."""
        gid, uid = request.match_info["gid"], request.match_info["uid"]
        guild = next((g for g in self.guilds if g["id"] == gid), None)
        if guild is None:
            raise _ApiError(404, "Unknown Guild", 10004)
        if uid in self.departed or not any(m["user"]["id"] == uid for m in guild["members"]):
            raise _ApiError(404, "Unknown Member", 10007)
        return {
            **self._member(uid),
            "user": self._user(uid),
            "nick": None,
            "avatar": None,
            "premium_since": None,
            "pending": False,
            "communication_disabled_until": None,
        }

    def _member(self, user_id: str) -> dict[str, Any]:
        """A member object as gateway events carry it:
        the roles `member_roles` gives the user now."""
        return {
            "roles": list(self.member_roles.get(user_id, ())),
            "joined_at": now_iso(),
            "deaf": False,
            "mute": False,
            "flags": 0,
        }

    def refuse_voice(self, channel_id: str) -> None:
        """This channel denies the bot Send Voice Messages: a voice message there gets 50173."""
        self.voice_refused.add(channel_id)

    def voice_messages(self, channel_id: str | None = None) -> list[DiscordMessage]:
        return [m for m in self.sent_messages(channel_id) if m.flags & VOICE_MESSAGE_FLAG]

    async def _post_message(self, request: web.Request, body: Any) -> Any:
        cid = request.match_info["cid"]
        self._channel(cid)
        _check_message(body, require_content=True)
        if int(body.get("flags") or 0) & VOICE_MESSAGE_FLAG:
            _check_voice_message(body, refused=cid in self.voice_refused)
        nonce = body.get("nonce")
        if nonce is not None and len(str(nonce)) > MAX_NONCE:
            raise _field_error(
                "nonce", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_NONCE} or fewer in length."
            )
        earlier = (
            self._nonces.get(str(nonce))
            if nonce is not None and body.get("enforce_nonce")
            else None
        )
        if earlier is not None and self.clock() - earlier[2] < NONCE_WINDOW_S:
            # "If another message was created by the same author with the same nonce, that message
            # will be returned and no new message will be created"; one deleted since is not created
            # again either
            self.nonce_repeats.append(request[_CALL])
            if (earlier[0], earlier[1]) not in self._messages:
                raise _ApiError(404, "Unknown Message", 10008)
            return self._messages[(earlier[0], earlier[1])]
        return await self._send(
            cid,
            body,
            "rest",
            nonce=None if nonce is None else str(nonce),
            author=request[_BOT].user["id"],
        )

    async def _send(
        self,
        cid: str,
        body: Mapping[str, Any],
        via: str,
        flags: int = 0,
        nonce: str | None = None,
        visible_to: str | None = None,
        author: str = BOT_ID,
    ) -> dict[str, Any]:
        _check_message(body, require_content=True)
        reference = body.get("message_reference")
        if (
            reference
            and (cid, str(reference.get("message_id"))) not in self._messages
            and reference.get("fail_if_not_exists", True)
        ):
            raise _field_error("message_reference", "REPLIES_UNKNOWN_MESSAGE", "Unknown message")
        sent = DiscordMessage(
            channel_id=cid,
            id=self.new_id(),
            content=str(body.get("content") or ""),
            allowed_mentions=body.get("allowed_mentions"),
            message_reference=reference,
            embeds=tuple(body.get("embeds") or ()),
            files=tuple(body.get("_files") or ()),
            via=via,
            flags=int(body.get("flags") or flags),
            body=dict(body),
            components=tuple(body.get("components") or ()),
            visible_to=visible_to,
            author_id=author,
        )
        self.sent.append(sent)
        message = self._message_obj(sent)
        self._messages[(cid, sent.id)] = message
        if nonce is not None:
            self._nonces[nonce] = (cid, sent.id, self.clock())
        self.notify()
        if via == "rest" and self.on_posted is not None:
            self.on_posted(sent)  # before the answer leaves: a test may kill the client right here
        if self.echo_own_messages and via == "rest":
            await self.dispatch("MESSAGE_CREATE", self._with_member(message))
        return message

    async def _list_messages(self, request: web.Request, body: Any) -> Any:
        """Get Channel Messages: at most `limit` (1–100, default 50), newest first. `before` gives
        the newest ones before it; `after` the ones right after it (the oldest newer ones), still
        newest first, which is why discord.py reverses the page and pages on with its first id.
        Messages pushed while no client was connected are here too: history is what a restarted bot
        catches up from."""
        cid = request.match_info["cid"]
        self._channel(cid)
        hold = self._history_holds.get(cid)
        if hold is not None:
            await hold.wait()
        query = request.query
        try:
            limit = int(query.get("limit", "50"))
            before = int(query["before"]) if "before" in query else None
            after = int(query["after"]) if "after" in query else None
        except ValueError:
            raise _field_error("limit", "NUMBER_TYPE_COERCE", "Value is not int.") from None
        if not 1 <= limit <= 100:
            raise _field_error("limit", "NUMBER_TYPE_MAX", "int value should be between 1 and 100.")
        mine = sorted(
            (m for (c, _), m in self._messages.items() if c == cid), key=lambda m: int(m["id"])
        )
        if after is not None:
            page = [
                m
                for m in mine
                if int(m["id"]) > after and (before is None or int(m["id"]) < before)
            ][:limit]
        else:
            page = [m for m in mine if before is None or int(m["id"]) < before][-limit:]
        return list(reversed(page))

    async def _get_message(self, request: web.Request, body: Any) -> Any:
        key = (request.match_info["cid"], request.match_info["mid"])
        if key not in self._messages:
            raise _ApiError(404, "Unknown Message", 10008)
        return self._messages[key]

    async def _patch_message(self, request: web.Request, body: Any) -> Any:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        editor = request[_BOT].user["id"]
        return await self._edit(cid, mid, body, echo=self.echo_own_messages, editor=editor)

    async def _edit(
        self, cid: str, mid: str, body: Mapping[str, Any], echo: bool, editor: str | None = None
    ) -> dict[str, Any]:
        if (cid, mid) not in self._messages:
            raise _ApiError(404, "Unknown Message", 10008)
        index = next(
            (
                i
                for i, m in enumerate(self.sent)
                if m.channel_id == cid and m.id == mid and (editor is None or m.author_id == editor)
            ),
            None,
        )
        if index is None:
            raise _ApiError(403, "Cannot edit a message authored by another user", 50005)
        if self.sent[index].flags & VOICE_MESSAGE_FLAG:
            raise _ApiError(400, VOICE_ERRORS["edit"][1], VOICE_ERRORS["edit"][0])
        _check_message(body, require_content=False)
        old = self.sent[index]
        new = replace(
            old,
            content=str(body["content"]) if "content" in body else old.content,
            embeds=tuple(body.get("embeds") or old.embeds),
            edits=(*old.edits, old.content),
            body=dict(body),
            components=_components(body, old.components),
        )
        self.sent[index] = new
        message = dict(self._message_obj(new), edited_timestamp=now_iso())
        self._messages[(cid, mid)] = message
        self.notify()
        if echo:
            await self.dispatch("MESSAGE_UPDATE", self._with_member(message))
        return message

    async def _delete_message(self, request: web.Request, body: Any) -> Any:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        if self._messages.pop((cid, mid), None) is None:
            raise _ApiError(404, "Unknown Message", 10008)
        self.sent = [m for m in self.sent if (m.channel_id, m.id) != (cid, mid)]
        self.notify()
        return None

    async def _add_reaction(self, request: web.Request, body: Any) -> Any:
        key = (request.match_info["cid"], request.match_info["mid"], request.match_info["emoji"])
        if key[:2] not in self._messages:
            raise _ApiError(404, "Unknown Message", 10008)
        if key not in self.reactions:
            self.reactions.append(key)
        self.notify()
        return None

    async def _remove_reaction(self, request: web.Request, body: Any) -> Any:
        key = (request.match_info["cid"], request.match_info["mid"], request.match_info["emoji"])
        if key in self.reactions:
            self.reactions.remove(key)
        return None

    async def _typing(self, request: web.Request, body: Any) -> Any:
        self._channel(request.match_info["cid"])
        return None

    # -- REST: threads -----------------------------------------------------------------------------
    async def _thread_from_message(self, request: web.Request, body: Any) -> Any:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        parent = self._channel(cid)
        if (cid, mid) not in self._messages:
            raise _ApiError(404, "Unknown Message", 10008)
        if mid in self._threads_from:
            raise _ApiError(400, "A thread has already been created for this message", 160004)
        self._threads_from.add(mid)
        return await self._create_thread(parent, mid, body, 11)

    async def _thread_without_message(self, request: web.Request, body: Any) -> Any:
        parent = self._channel(request.match_info["cid"])
        return await self._create_thread(parent, self.new_id(), body, int(body.get("type") or 12))

    async def _create_thread(
        self, parent: Mapping[str, Any], thread_id: str, body: Mapping[str, Any], kind: int
    ) -> dict[str, Any]:
        name = str(body.get("name") or "")
        if not 1 <= len(name) <= 100:
            raise _field_error(
                "name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        stamp = now_iso()
        thread = {
            "id": thread_id,
            "guild_id": parent.get("guild_id"),
            "parent_id": parent["id"],
            "owner_id": BOT_ID,
            "name": name,
            "type": kind,
            "last_message_id": None,
            "rate_limit_per_user": int(body.get("rate_limit_per_user") or 0),
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": int(body.get("auto_archive_duration") or 1440),
                "archive_timestamp": stamp,
                "locked": False,
                "create_timestamp": stamp,
            },
            "member": {"id": thread_id, "user_id": BOT_ID, "join_timestamp": stamp, "flags": 0},
        }
        self.channels[thread_id] = thread
        self.notify()
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return thread

    # -- REST: application commands and interactions -----------------------------------------------
    async def _get_commands(self, request: web.Request, body: Any) -> Any:
        gid = request.match_info.get("gid")
        return self.guild_commands.get(gid, []) if gid else self.global_commands

    async def _put_commands(self, request: web.Request, body: Any) -> Any:
        gid = request.match_info.get("gid")
        commands = []
        for i, spec in enumerate(body or []):
            name, kind = str(spec.get("name", "")), int(spec.get("type", 1))
            if not re.fullmatch(r"[-_\w]{1,32}", name) or (kind == 1 and name != name.lower()):
                raise _field_error(
                    f"{i}.name", "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid"
                )
            if kind == 1 and not 1 <= len(str(spec.get("description", ""))) <= 100:
                raise _field_error(
                    f"{i}.description",
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 100 in length.",
                )
            commands.append(
                {
                    "options": [],
                    "default_member_permissions": None,
                    "dm_permission": True,
                    "nsfw": False,
                    "integration_types": [0],
                    "contexts": None,
                    **spec,
                    "id": self.new_id(),
                    "application_id": APP_ID,
                    "version": self.new_id(),
                    "type": kind,
                    **({"guild_id": gid} if gid else {}),
                }
            )
        if gid:
            self.guild_commands[gid] = commands
        else:
            self.global_commands = commands
        self.notify()
        return commands

    async def _interaction_callback(self, request: web.Request, body: Any) -> Any:
        iid, token = request.match_info["iid"], request.match_info["token"]
        interaction = self.interactions.get(token)
        if interaction is None or interaction["id"] != iid:
            raise _ApiError(404, "Unknown interaction", 10062)
        if interaction.get("_responded"):
            raise _ApiError(400, "Interaction has already been acknowledged.", 40060)
        if self.clock() - interaction["_created"] > INTERACTION_DEADLINE_S:
            # the token is invalid from then on
            self.late_interactions.append(iid)
            raise _ApiError(404, "Unknown interaction", 10062)
        kind, data = int(body.get("type", 0)), dict(body.get("data") or {})
        if kind in COMPONENT_RESPONSES and interaction["type"] != 3:
            raise _ApiError(
                400, "Interaction response type is only valid for component interactions", 50035
            )
        interaction["_responded"] = True
        self.interaction_responses.append(
            {"interaction_id": iid, "token": token, "type": kind, "data": data}
        )
        message = None
        cid = interaction["channel_id"]
        if kind == 7:  # UPDATE_MESSAGE: the message the button is on becomes `data`
            await self._edit(
                cid, str(interaction["message"]["id"]), data, echo=self.echo_own_messages
            )
        if kind in (4, 5):
            author = self._bot_by_app(interaction.get("application_id")).user["id"]
            if kind == 4:
                message = await self._send(
                    cid, data, "interaction", author=author, visible_to=_viewer(interaction, data)
                )
            else:
                message = await self._send(
                    cid,
                    {"content": "", "flags": data.get("flags", 0), "_loading": True},
                    "interaction",
                    author=author,
                )
            interaction["_original"] = message["id"]
        self.notify()
        if request.query.get("with_response") not in ("1", "true", "True"):
            return None
        flags = int(data.get("flags") or 0)
        response: dict[str, Any] = {
            "interaction": {
                "id": iid,
                "type": interaction["type"],
                "response_message_id": message["id"] if message else None,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(flags & 64),
            }
        }
        if message is not None:
            response["resource"] = {"type": kind, "message": message}
        return response

    def _interaction_for(self, request: web.Request) -> dict[str, Any]:
        interaction = self.interactions.get(request.match_info["token"])
        if interaction is None or request.match_info["app"] != interaction.get("application_id"):
            raise _ApiError(404, "Unknown Webhook", 10015)
        return interaction

    def _webhook_mid(self, request: web.Request, interaction: Mapping[str, Any]) -> str:
        mid = request.match_info["mid"]
        if mid == "@original":
            if "_original" not in interaction:
                raise _ApiError(404, "Unknown Message", 10008)
            return str(interaction["_original"])
        return mid

    async def _followup(self, request: web.Request, body: Any) -> Any:
        interaction = self._interaction_for(request)
        if not interaction.get("_responded"):  # a follow-up needs the initial response first
            raise _ApiError(404, "Unknown Webhook", 10015)
        author = self._bot_by_app(interaction.get("application_id")).user["id"]
        message = await self._send(
            interaction["channel_id"],
            body,
            "webhook",
            author=author,
            visible_to=_viewer(interaction, body),
        )
        return message if request.query.get("wait") in ("1", "true", "True") else None

    async def _webhook_get(self, request: web.Request, body: Any) -> Any:
        interaction = self._interaction_for(request)
        key = (interaction["channel_id"], self._webhook_mid(request, interaction))
        if key not in self._messages:
            raise _ApiError(404, "Unknown Message", 10008)
        return self._messages[key]

    async def _webhook_edit(self, request: web.Request, body: Any) -> Any:
        interaction = self._interaction_for(request)
        return await self._edit(
            interaction["channel_id"], self._webhook_mid(request, interaction), body, echo=False
        )

    async def _webhook_delete(self, request: web.Request, body: Any) -> Any:
        interaction = self._interaction_for(request)
        key = (interaction["channel_id"], self._webhook_mid(request, interaction))
        self._messages.pop(key, None)
        self.sent = [m for m in self.sent if (m.channel_id, m.id) != key]
        self.notify()
        return None

    # -- test API: what users see / do -------------------------------------------------------------
    def sent_messages(self, channel_id: str | int | None = None) -> list[DiscordMessage]:
        return [m for m in self.sent if channel_id is None or m.channel_id == str(channel_id)]

    async def wait_for_sent(
        self,
        channel_id: str | int | None = None,
        count: int = 1,
        timeout: float = FakeServer.WAIT_S,
    ) -> DiscordMessage:
        await self.wait_until(
            lambda: len(self.sent_messages(channel_id)) >= count,
            timeout,
            lambda: (
                f"{count} messages to {channel_id} not seen; got "
                f"{[m.content for m in self.sent_messages()]}"
            ),
        )
        return self.sent_messages(channel_id)[count - 1]

    def hold_history(self, channel_id: str | int) -> asyncio.Event:
        """Reads of this channel's history wait until the returned event is set (or the fake stops):
        a slow channel, for what a catch-up does meanwhile."""
        return self._history_holds.setdefault(str(channel_id), asyncio.Event())

    def delete_message(self, channel_id: str | int, message_id: str) -> None:
        """Someone (a moderator, the user in a DM) deleted one of the bot's messages."""
        key = (str(channel_id), str(message_id))
        self._messages.pop(key, None)
        self.sent = [m for m in self.sent if (m.channel_id, m.id) != key]
        self.notify()

    async def push_message(
        self,
        channel_id: str | int,
        content: str,
        author_id: str | int = USER_ID,
        *,
        guild_id: str | int | None = None,
        mentions: Sequence[str | int] | None = None,
        referenced_message: str | int | Mapping[str, Any] | None = None,
        author_bot: bool = False,
        message_id: str | int | None = None,
        author_name: str | None = None,
        attachments: Sequence[Mapping[str, Any]] = (),
        live: bool = True,
        flags: int = 0,
        stickers: Sequence[Mapping[str, Any]] = (),
        bot: str | None = None,
    ) -> str:
        """A user's MESSAGE_CREATE. A channel the fake does not know becomes a DM channel, with
        `bot` (a bot's user id; the first bot's by default). With `live=False` the event only enters
        the sessions' history, so the client receives it when it next RESUMEs."""
        cid = str(channel_id)
        gid = str(guild_id) if guild_id is not None else self.channels.get(cid, {}).get("guild_id")
        author = self._user(str(author_id), author_name, author_bot)
        if cid not in self.channels:
            self.channels[cid] = {
                "id": cid,
                "type": 1,
                "last_message_id": None,
                "recipients": [author],
            }
            self._dm_bots[cid] = bot or BOT_ID
        mid = str(message_id) if message_id is not None else self.new_id()
        message: dict[str, Any] = {
            "id": mid,
            "channel_id": cid,
            "author": author,
            "content": content,
            "timestamp": now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self._user(str(u)) for u in mentions or ()],
            "mention_roles": [],
            "attachments": list(attachments),
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": flags,
            "components": [],
        }
        if gid:
            message["guild_id"] = gid
        if stickers:
            message["sticker_items"] = [dict(item) for item in stickers]
        if referenced_message is not None:
            ref = (
                dict(referenced_message)
                if isinstance(referenced_message, Mapping)
                else self._messages.get((cid, str(referenced_message)))
            )
            if ref is None:
                raise KeyError(f"no message {referenced_message} in channel {cid}")
            message.update(
                type=19,
                referenced_message=ref,
                message_reference={
                    "type": 0,
                    "message_id": ref["id"],
                    "channel_id": cid,
                    **({"guild_id": gid} if gid else {}),
                },
            )
        self._messages[(cid, mid)] = message
        await self.dispatch("MESSAGE_CREATE", self._with_member(message), live=live)
        return mid

    async def push_interaction(
        self,
        name: str,
        *,
        options: Sequence[Mapping[str, Any]] = (),
        user_id: str | int = USER_ID,
        channel_id: str | int = CHANNEL_ID,
        guild_id: str | int | None = None,
        interaction_id: str | None = None,
        token: str | None = None,
        command_id: str | None = None,
        command_type: int = 1,
        bot: str | None = None,
    ) -> tuple[str, str]:
        """An INTERACTION_CREATE for an application (slash)
        command; returns (interaction_id, token)."""
        cid = str(channel_id)
        gid = str(guild_id) if guild_id is not None else self.channels.get(cid, {}).get("guild_id")
        iid = interaction_id or self.new_id()
        token = token or f"itoken-{iid}"
        command = next(
            (
                c
                for c in [*self.global_commands, *self.guild_commands.get(gid or "", [])]
                if c["name"] == name
            ),
            None,
        )
        data: dict[str, Any] = {
            "id": command_id or (command or {}).get("id") or self.new_id(),
            "name": name,
            "type": command_type,
            "options": [dict(o) for o in options],
        }
        if gid:
            data["guild_id"] = gid
        user = self._user(str(user_id))
        channel = self.channels.get(cid) or {"id": cid, "type": 1}
        payload: dict[str, Any] = {
            "id": iid,
            "type": 2,
            "data": data,
            "channel_id": cid,
            "application_id": self._app_of(bot or BOT_ID),
            "channel": {k: v for k, v in channel.items() if k != "recipients"},
            "token": token,
            "version": 1,
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": gid} if gid else {"1": str(user_id)},
            "context": 0 if gid else 1,
            "attachment_size_limit": 8 * 1024 * 1024,
        }
        if gid:
            payload["guild_id"] = gid
            payload["guild_locale"] = "en-US"
            payload["member"] = {
                **self._member(str(user_id)),
                "user": user,
                "permissions": "2248473465835073",
            }
        else:
            payload["user"] = user
        self.interactions[token] = {**payload, "_created": self.clock()}
        await self.dispatch("INTERACTION_CREATE", payload)
        return iid, token

    async def click(
        self,
        channel_id: str | int,
        message_id: str,
        label: str,
        *,
        user_id: str | int = USER_ID,
        name: str | None = None,
    ) -> tuple[str, str]:
        """A person clicks the button labelled `label` on one of the bot's messages: an
        INTERACTION_CREATE of type 3 (MESSAGE_COMPONENT) with its custom_id; returns
        (interaction_id, token). LookupError when the message shows no such button now."""
        cid = str(channel_id)
        sent = next((m for m in self.sent if (m.channel_id, m.id) == (cid, message_id)), None)
        rows = sent.components if sent else ()
        shown = [c for row in rows for c in row.get("components") or ()]
        button = next((c for c in shown if c.get("label") == label), None)
        if sent is None or button is None:
            raise LookupError(
                f"message {message_id} shows no button {label!r}: {sent.buttons() if sent else []}"
            )
        return await self.push_component(
            cid, message_id, str(button.get("custom_id")), user_id=user_id, name=name
        )

    async def push_component(
        self,
        channel_id: str,
        message_id: str,
        custom_id: str,
        *,
        user_id: str | int = USER_ID,
        name: str | None = None,
    ) -> tuple[str, str]:
        """A component interaction with any custom_id (an old client, a forger)."""
        cid, uid = str(channel_id), str(user_id)
        gid = self.channels.get(cid, {}).get("guild_id")
        iid = self.new_id()
        token = f"itoken-{iid}"
        user = self._user(uid, name)
        message = self._messages.get((cid, message_id)) or {"id": message_id, "channel_id": cid}
        payload: dict[str, Any] = {
            "id": iid,
            "application_id": APP_ID,
            "type": 3,
            "channel_id": cid,
            "token": token,
            "version": 1,
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": message,
            "channel": {
                k: v
                for k, v in (self.channels.get(cid) or {"id": cid, "type": 1}).items()
                if k != "recipients"
            },
            "app_permissions": "2248473465835073",
            "locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": gid} if gid else {"1": uid},
            "context": 0 if gid else 1,
            "attachment_size_limit": 8 * 1024 * 1024,
        }
        if gid:
            payload.update(
                guild_id=gid,
                guild_locale="en-US",
                member={**self._member(uid), "user": user, "permissions": "2248473465835073"},
            )
        else:
            payload["user"] = user
        self.interactions[token] = {**payload, "_created": self.clock()}
        await self.dispatch("INTERACTION_CREATE", payload)
        return iid, token

    def ephemerals(self, user_id: str | int | None = None) -> list[DiscordMessage]:
        """Ephemeral replies, each seen by one user only (the one whose interaction it answers)."""
        return [
            m
            for m in self.sent
            if m.flags & EPHEMERAL and (user_id is None or m.visible_to == str(user_id))
        ]

    def _app_of(self, bot_user: str) -> str:
        return next(b.app_id for b in self.bots.values() if b.user["id"] == bot_user)

    def _user(self, user_id: str, name: str | None = None, bot: bool = False) -> dict[str, Any]:
        if user_id not in self.users:
            self.users[user_id] = make_user(user_id, name or f"user{user_id[-4:]}", bot=bot)
        return self.users[user_id]

    def _with_member(self, message: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(message)
        if out.get("guild_id"):
            out["member"] = self._member(str(out.get("author", {}).get("id", "")))
        return out

    def _message_obj(self, sent: DiscordMessage) -> dict[str, Any]:
        channel = self.channels.get(sent.channel_id, {})
        message: dict[str, Any] = {
            "id": sent.id,
            "channel_id": sent.channel_id,
            "content": sent.content,
            "author": self.users.get(sent.author_id, BOT_USER),
            "timestamp": now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [
                {
                    "id": self.new_id(),
                    "filename": f.get("filename"),
                    "size": f.get("size", 0),
                    "url": f"https://cdn.fake/{f.get('filename')}",
                    "proxy_url": "https://cdn.fake/p",
                    **{
                        k: f[k]
                        for k in ("content_type", "duration_secs", "waveform")
                        if f.get(k) is not None
                    },
                }
                for f in sent.files
            ],
            "embeds": list(sent.embeds),
            "pinned": False,
            "type": 19 if sent.message_reference else 0,
            "flags": sent.flags,
            "components": [dict(row) for row in sent.components],
        }
        if sent.body.get("nonce") is not None:
            message["nonce"] = sent.body["nonce"]
        if channel.get("guild_id"):
            message["guild_id"] = channel["guild_id"]
        if sent.message_reference:
            ref_id = str(sent.message_reference.get("message_id"))
            message["message_reference"] = {
                "type": 0,
                "channel_id": sent.channel_id,
                "message_id": ref_id,
            }
            message["referenced_message"] = self._messages.get((sent.channel_id, ref_id))
        return message

    # -- gateway -----------------------------------------------------------------------------------
    async def dispatch(self, event: str, data: Mapping[str, Any], *, live: bool = True) -> int:
        """Send an op-0 dispatch to each session that gets it (Discord's routing: a guild's events
        to the bots in it, on the shard `(guild_id >> 22) % num_shards`; a DM's to its bot's shard
        0; an interaction's to its application's bot), with that session's next sequence number; it
        is kept for RESUME replay. Returns the sequence number of the last session it went to (0:
        none)."""
        seq = 0
        for session in [s for s in self.sessions.values() if self._gets(s, data)]:
            seq = await self._send_frame(session, event, data, live=live)
        return seq

    async def _send_frame(
        self, session: _Session, event: str, data: Mapping[str, Any], *, live: bool = True
    ) -> int:
        session.seq += 1
        frame = {"op": 0, "t": event, "s": session.seq, "d": dict(data)}
        session.history.append(frame)
        if live:
            for conn in [c for c in self._live() if c.session is session]:
                try:
                    await conn.ws.send_str(json.dumps(frame))
                except ConnectionError:  # the client is gone (killed): it never gets this one
                    conn.live = False
        return session.seq

    def _gets(self, session: _Session, data: Mapping[str, Any]) -> bool:
        bot, (shard, count) = session.bot, session.shard
        app = data.get("application_id")
        if app is not None and app != bot.app_id:
            return False
        guild = data.get("guild_id")
        if guild is None:  # a DM (or a thread without its guild): shard 0 of the bot it is with
            channel = str(data.get("channel_id") or data.get("id") or "")
            return shard == 0 and self._dm_bots.get(channel, bot.user["id"]) == bot.user["id"]
        in_guild = bot.guild_ids is None or str(guild) in bot.guild_ids
        return in_guild and self.shard_of(guild, count) == shard

    def _guilds_of(self, bot: FakeBot, shard: tuple[int, int]) -> list[dict[str, Any]]:
        return [
            g
            for g in self.guilds
            if (bot.guild_ids is None or g["id"] in bot.guild_ids)
            and self.shard_of(g["id"], shard[1]) == shard[0]
        ]

    def _live(self) -> list[_Conn]:
        return [c for c in self._conns if c.live and not c.ws.closed]

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        self.connections += 1
        self.connection_paths.append(request.path)
        conn = _Conn(ws, self.connections, request.path)
        self._conns.append(conn)
        self.notify()
        if request.query.get("v") != "10" or request.query.get("encoding") != "json":
            await ws.close(code=4012, message=b"Invalid API version")
            return ws
        await ws.send_str(
            json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        )
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            payload = json.loads(msg.data)
            self.gateway_received.append(payload)
            self.notify()
            await self._on_gateway_op(conn, payload)
        conn.live = False
        self.notify()
        return ws

    async def _on_gateway_op(self, conn: _Conn, payload: Mapping[str, Any]) -> None:
        op, d = payload.get("op"), payload.get("d") or {}
        if op == 1 and not conn.silent:
            await conn.ws.send_str(json.dumps({"op": 11}))
        elif op == 2:
            await self._identify(conn, d)
        elif op == 6:
            await self._resume(conn, d)

    async def _identify(self, conn: _Conn, d: Mapping[str, Any]) -> None:
        self.identifies.append(dict(d))
        self.notify()
        bot = self.bots.get(str(d.get("token")))
        if bot is None:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        if int(d.get("intents") or 0) & PRIVILEGED_INTENTS & ~self.enabled_privileged_intents:
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        given = list(d.get("shard") or [0, 1])
        if len(given) != 2 or not 0 <= int(given[0]) < int(given[1]):
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return
        shard = (int(given[0]), int(given[1]))
        guilds = self._guilds_of(bot, shard)
        if len(guilds) > self.max_guilds_per_shard:
            await conn.ws.close(code=4011, message=b"Sharding required.")
            return
        session = _Session(f"session-{self._sessions()}", bot, shard)
        self.sessions.pop((bot.token, *shard), None)
        self.sessions[(bot.token, *shard)] = session
        conn.session, conn.live = session, True
        await self._send_frame(
            session,
            "READY",
            {
                "v": 10,
                "user": bot.user,
                "session_id": session.id,
                "resume_gateway_url": self.resume_url,
                "shard": list(shard),
                "guilds": [{"id": g["id"], "unavailable": True} for g in guilds],
                "application": {"id": bot.app_id, "flags": 0},
                "private_channels": [],
                "relationships": [],
                "user_settings": {},
                "presences": [],
            },
        )
        for guild in guilds:
            await self._send_frame(session, "GUILD_CREATE", guild)

    async def _resume(self, conn: _Conn, d: Mapping[str, Any]) -> None:
        self.resumes.append(dict(d))
        self.notify()
        session = next((s for s in self.sessions.values() if s.id == d.get("session_id")), None)
        if session is None or d.get("token") != session.bot.token:
            await conn.ws.send_str(json.dumps({"op": 9, "d": False}))
            return
        start = (
            self.resume_replay_from
            if self.resume_replay_from is not None
            else int(d.get("seq") or 0)
        )
        self.resume_replay_from = None
        for frame in [f for f in session.history if f["s"] > start]:
            await conn.ws.send_str(json.dumps(frame))
        conn.session, conn.live = session, True
        await self._send_frame(session, "RESUMED", {})

    async def wait_for_identify(
        self, count: int = 1, timeout: float = FakeServer.WAIT_S
    ) -> dict[str, Any]:
        await self.wait_until(
            lambda: len(self.identifies) >= count and bool(self._live()),
            timeout,
            lambda: f"identifies={len(self.identifies)}, live={len(self._live())}",
        )
        return self.identifies[count - 1]

    async def wait_for_resume(
        self, count: int = 1, timeout: float = FakeServer.WAIT_S
    ) -> dict[str, Any]:
        await self.wait_until(
            lambda: len(self.resumes) >= count and bool(self._live()),
            timeout,
            lambda: f"resumes={len(self.resumes)}, live={len(self._live())}",
        )
        return self.resumes[count - 1]

    async def force_reconnect(self, wait: bool = True, timeout: float = FakeServer.WAIT_S) -> None:
        """Op 7 RECONNECT: the client closes and RESUMEs on
        `resume_gateway_url`; replays what it missed."""
        before = len(self.resumes)
        for conn in self._live():
            conn.live = False
            await conn.ws.send_str(json.dumps({"op": 7, "d": None}))
        if wait:
            await self.wait_for_resume(before + 1, timeout)

    async def invalidate_session(self, resumable: bool = False) -> None:
        for conn in self._live():
            conn.live = False
            await conn.ws.send_str(json.dumps({"op": 9, "d": resumable}))

    async def close_with(self, code: int, reason: str = "") -> None:
        """Close the gateway socket(s) with a close code,
        e.g. 4014 disallowed intents, 4004 auth failed."""
        for conn in [c for c in self._conns if not c.ws.closed]:
            conn.live = False
            await conn.ws.close(code=code, message=reason.encode())

    def go_silent(self) -> None:
        """Stop acknowledging heartbeats on the current connections (a zombied connection)."""
        for conn in self._conns:
            conn.silent = True

    async def _before_stop(self) -> None:
        for hold in self._history_holds.values():
            hold.set()
        await self.close_with(1001, "fake stopping")


# --------------------------------------------------------------------------------------------- body
def _error_body(status: int) -> dict[str, Any]:
    return {"message": f"{status}: fault", "code": 0}


async def _read_body(request: web.Request) -> Any:
    if not request.can_read_body:
        return {}
    if request.content_type.startswith("multipart/"):
        form = await request.post()
        body = json.loads(str(form.get("payload_json") or "{}"))
        files = [(k, v) for k, v in form.items() if isinstance(v, web.FileField)]
        described = {
            str(a.get("id")): a for a in body.get("attachments") or () if isinstance(a, dict)
        }
        body["_files"] = []
        for field_name, upload in files:
            data = upload.file.read()
            about = described.get(field_name.removeprefix("files[").removesuffix("]"), {})
            body["_files"].append(
                {
                    "field": field_name,
                    "filename": upload.filename,
                    "size": len(data),
                    "data": data,
                    "content_type": upload.content_type,
                    "duration_secs": about.get("duration_secs"),
                    "waveform": about.get("waveform"),
                }
            )
        return body
    raw = await request.read()
    return json.loads(raw) if raw else {}


Components = tuple[dict[str, Any], ...]


def _components(body: Mapping[str, Any], old: Components) -> Components:
    """A PATCH replaces the components it names (`[]` removes them) and keeps them otherwise."""
    return tuple(body["components"] or ()) if "components" in body else old


def _viewer(interaction: Mapping[str, Any], body: Mapping[str, Any]) -> str | None:
    if not int(body.get("flags") or 0) & EPHEMERAL:
        return None
    who = interaction.get("member", {}).get("user") or interaction.get("user") or {}
    return str(who.get("id"))


def _check_components(rows: Any) -> None:
    if len(rows) > MAX_ROWS:
        raise _field_error(
            "components", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_ROWS} or fewer in length."
        )
    seen: set[str] = set()
    for i, row in enumerate(rows):
        buttons = row.get("components") or []
        if row.get("type") != 1 or not 1 <= len(buttons) <= MAX_BUTTONS:
            raise _field_error(
                f"components.{i}", "COMPONENT_LAYOUT_WIDTH_EXCEEDED", "Invalid action row"
            )
        for button in buttons:
            custom_id, label = str(button.get("custom_id") or ""), str(button.get("label") or "")
            if button.get("type") != 2 or len(label) > MAX_LABEL:
                raise _field_error(f"components.{i}", "BASE_TYPE_MAX_LENGTH", "Invalid button")
            if button.get("style") != 5 and not 1 <= len(custom_id) <= MAX_CUSTOM_ID:
                raise _field_error(
                    f"components.{i}.custom_id",
                    "BASE_TYPE_MAX_LENGTH",
                    f"Must be between 1 and {MAX_CUSTOM_ID} in length.",
                )
            if custom_id and custom_id in seen:
                raise _field_error(
                    f"components.{i}.custom_id",
                    "COMPONENT_CUSTOM_ID_DUPLICATED",
                    "Component custom id cannot be duplicated",
                )
            seen.add(custom_id)


def _check_voice_message(body: Mapping[str, Any], *, refused: bool) -> None:
    def fail(rule: str) -> _ApiError:
        code, message = VOICE_ERRORS[rule]
        return _ApiError(403 if rule == "channel" else 400, message, code)

    if refused:
        raise fail("channel")
    if any(body.get(k) for k in ("content", "embeds", "sticker_ids", "components", "poll")):
        raise fail("content")
    files = body.get("_files") or []
    if len(files) != 1 or not _is_audio(files[0]):
        raise fail("single")
    waveform = files[0].get("waveform")
    if files[0].get("duration_secs") is None or not waveform:
        raise fail("metadata")
    if len(base64.b64decode(waveform)) > 256:
        raise fail("metadata")


def _is_audio(upload: Mapping[str, Any]) -> bool:
    data = upload.get("data") or b""
    declared = str(upload.get("content_type", ""))
    return data.startswith((b"OggS", b"ID3", b"RIFF", b"fLaC")) or declared.startswith("audio/")


def _check_message(body: Mapping[str, Any], require_content: bool) -> None:
    if body.get("components"):
        _check_components(body["components"])
    content = body.get("content")
    if content is not None and len(str(content)) > MAX_CONTENT:
        raise _field_error(
            "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length."
        )
    if (
        require_content
        and not body.get("_loading")
        and not any(
            body.get(k)
            for k in ("content", "embeds", "_files", "sticker_ids", "components", "poll")
        )
    ):
        raise _ApiError(400, "Cannot send an empty message", 50006)

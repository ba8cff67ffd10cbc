"""Normalized messages and the adapter contract: the
only shapes that cross between adapters and the core.

Nothing platform-specific lives here; adapters translate their platform's objects into these at the
edge. Buttons and taps (choices), voice notes and files (files) are re-exported here.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from gateway.events.choices import Choice as Choice
from gateway.events.choices import Choices as Choices
from gateway.events.choices import Interactive as Interactive
from gateway.events.choices import Picked as Picked
from gateway.events.files import AudioReplies as AudioReplies
from gateway.events.files import FileReplies as FileReplies
from gateway.events.files import OutboundAudio as OutboundAudio
from gateway.events.files import OutboundFile as OutboundFile

if TYPE_CHECKING:
    from aiohttp import web

ChatType = Literal["dm", "group", "channel"]
CHAT_TYPES: tuple[ChatType, ...] = ("dm", "group", "channel")
PLATFORMS: tuple[str, ...] = ("telegram", "discord", "slack", "web", "cli", "cron")
DEFAULT_ACCOUNT = "default"  # a platform's bot account when there is one (the single-token form)
MAIN_AGENT = "main"  # the agent of a gateway without `agents:` (the top-level settings)


@dataclass(frozen=True, slots=True)
class ChatRef:
    """Where a message lives. Ids are strings whatever the platform uses. `account` is the bot
    account the chat is reached through (one adapter each): a reply must go out through it."""

    platform: str
    chat_type: ChatType
    chat_id: str
    thread_id: str | None = None
    account: str = DEFAULT_ACCOUNT

    @property
    def is_group(self) -> bool:
        return self.chat_type != "dm"

    @property
    def adapter_key(self) -> str:
        return adapter_key(self.platform, self.account)


def adapter_key(platform: str, account: str = DEFAULT_ACCOUNT) -> str:
    """The name an adapter serves under (health, logs, the outbox's routing): its platform, and
    `platform@account` for a bot account other than `default`."""
    return platform if account == DEFAULT_ACCOUNT else f"{platform}@{account}"


def account_of(adapter: object) -> str:
    """An adapter's bot account (`account` attribute); `default` for one that has none."""
    return str(getattr(adapter, "account", DEFAULT_ACCOUNT))


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message. `ref` is the platform's handle to fetch it later (Telegram's
    file_id, a Discord CDN URL, Slack's url_private_download, a web chat upload id): it is stored
    with the message, so a turn replayed after a restart downloads the file again (see
    `MediaSource`)."""

    kind: str  # photo, document, audio, voice, video, sticker, file
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    ref: str | None = None


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message from a person, as the core sees it.

    `is_addressed` is the adapter's verdict on whether the bot was spoken to (a DM, an @mention, a
    reply to the bot, a command); mention detection is platform knowledge, so it is decided at the
    edge. `is_bot` marks messages authored by another bot (for the bot-loop budget).
    Access control reads `username` (the platform handle without `@`, e.g. Telegram's, never a
    display name, which anyone can set to anything), `space_id` (the server the chat belongs to:
    Discord guild, Slack team) and `roles` (the sender's role ids in that server, Discord).
    `context` is other people's words the adapter read for this message; `text` is the sender's
    alone.
    """

    chat: ChatRef
    user_id: str
    text: str
    message_id: str
    received_at: datetime
    user_name: str | None = None
    reply_to_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    is_addressed: bool = True
    is_bot: bool = False
    chat_title: str | None = None
    username: str | None = None
    space_id: str | None = None
    roles: tuple[str, ...] = ()
    group_id: str | None = None  # Telegram's media_group_id: the parts of one album make one turn
    # What others said before this message, read by the adapter for it (a Slack thread's earlier
    # messages): their words, not the sender's, so the core scans and frames it as untrusted before
    # the model reads it.
    context: str = ""
    # a forwarded message: whose words these are (not the sender's own)
    forwarded_from: str | None = None
    agent: str = MAIN_AGENT  # who answers: set once, by the bindings, as the message comes in
    # a tap on a button the gateway sent (`Interactive`); its text is empty
    picked: Picked | None = None


class OutboundKind(enum.Enum):
    REPLY = "reply"  # the agent's answer to a turn
    NOTICE = "notice"  # a short system line: reset notice, busy notice, command answer
    ERROR = "error"  # one plain sentence when a turn failed
    VOICE = "voice"  # a spoken copy of a reply, sent after its text (gateway/delivery/voice.py)
    FILE = "file"  # a file for the chat: text its name, plain its copy (delivery/files.py)


@dataclass(frozen=True, slots=True)
class TextEntity:
    """A Telegram-style formatting span; offsets and lengths in UTF-16 code units."""

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """One platform message to send: already rendered for the platform and within its size limit.

    `plain` is the same chunk without markup, sent instead when the platform rejects the markup.
    `reply_to_id` is our inbound `message_id`; adapters map it to their platform's reply mechanism.
    `key` names the stored chunk: the same for every retry and across restarts, different for any
    other chunk, so a platform that deduplicates sends on a client key (Discord's `nonce`) never
    posts the chunk twice.
    """

    chat: ChatRef
    text: str
    plain: str
    entities: tuple[TextEntity, ...] = ()
    reply_to_id: str | None = None
    kind: OutboundKind = OutboundKind.REPLY
    chunk_index: int = 0
    chunk_count: int = 1
    use_plain: bool = False
    key: str = ""
    # buttons under this chunk (the last of its message): see `Interactive`
    choices: Choices | None = None


class SubmitOutcome(enum.Enum):
    ACCEPTED = "accepted"  # stored; a turn (or command) will run
    DUPLICATE = "duplicate"  # seen before: nothing will happen
    IGNORED = "ignored"  # not addressed / not allowed: nothing will happen
    REFUSED = "refused"  # answered with a notice (pairing code, queue full) but no turn


@dataclass(frozen=True, slots=True)
class SubmitResult:
    outcome: SubmitOutcome
    reason: str = ""
    # for a tap: a short line for the tapper alone (why nothing changed; what to do next)
    notice: str = ""


Submit = Callable[[Inbound], Awaitable[SubmitResult]]


def on_account(submit: Submit, account: str) -> Submit:
    """The submit of one bot account's adapter: each message's chat names the account it came
    through, so its answer goes back through the same bot."""
    if account == DEFAULT_ACCOUNT:
        return submit

    async def submit_on_account(inbound: Inbound) -> SubmitResult:
        return await submit(replace(inbound, chat=replace(inbound.chat, account=account)))

    return submit_on_account


class HttpListener(Protocol):
    """An aiohttp application being served: the port it is bound to, and how to stop it."""

    port: int

    async def stop(self) -> None: ...


class Caller(enum.Enum):
    """Who an HTTP request is, judged from its request line and headers before any body is awaited:
    what the listener waits on for it, and which connections it closes first when full
    (gateway/ops/http_limits.py)."""

    PROBE = "probe"  # a health probe (/healthz): no secret, never closed to make room
    KNOWN = "known"  # authenticated by its headers (a cookie, a secret header): never closed
    # a credential only its body can prove (Slack's signature): the body must come at the minimum
    # rate, and while it comes the connection goes first
    CLAIMED = "claimed"
    STRANGER = "stranger"  # refused at once (401), its body never read


# Judges a request from its line and headers; raises an aiohttp HTTPException to refuse with its own
# answer.
RequestGate = Callable[["web.BaseRequest"], Caller]
# How an adapter that receives webhooks serves them (app, host, port, gate). The daemon hands in one
# that bounds connections and header/body read times (gateway/ops/http_limits.py), so the adapter
# never opens a bare listener.
ServeHttp = Callable[["web.Application", str, int, RequestGate], Awaitable[HttpListener]]


@dataclass(frozen=True, slots=True)
class AdapterHealth:
    platform: str
    state: str = "stopped"  # starting, running, backoff, down, stopped
    connected_since: datetime | None = None
    last_inbound_at: datetime | None = None
    last_error: str | None = None
    restarts: int = 0
    extra: tuple[tuple[str, str], ...] = field(default_factory=tuple)


@runtime_checkable
class Adapter(Protocol):
    """What every platform adapter is: start with a submit callable, send, stop.

    `start` returns once the adapter is connected and serving (it may keep background tasks); it
    raises `AdapterError` when it cannot start (bad token, disallowed intents), so the supervisor
    can decide. `send` delivers one already-rendered chunk and returns the platform's message id.
    """

    platform: str

    async def start(self, submit: Submit) -> None: ...

    async def send(self, message: OutboundMessage) -> str: ...

    async def stop(self) -> None: ...


@runtime_checkable
class TypingIndicator(Protocol):
    """Optional ability: show that the bot is working while a turn runs."""

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]: ...


@runtime_checkable
class MediaSource(Protocol):
    """Optional ability: an attachment's bytes, fetched with the platform's own mechanism, as a
    stream of chunks.

    The core bounds the size and the time, writes the chunks to disk and closes the stream early
    when a file is over the limit. Raise `MediaTooLarge` (the platform's own cap, e.g. Telegram's 20
    MB) or `MediaUnavailable` (gone, refused, network) with a short reason a user may read: never a
    URL, never a token."""

    def media(self, attachment: Attachment) -> AsyncIterator[bytes]: ...


@runtime_checkable
class Pingable(Protocol):
    """Optional ability: one cheap round trip over the
    connection that delivers events (True = alive).

    The supervisor's watchdog pings an adapter that has
    been quiet and reconnects it when pings keep failing.
    """

    async def ping(self) -> bool: ...


@runtime_checkable
class Watchable(Protocol):
    """Optional ability: `wait_closed` returns (or raises the cause) once the adapter has stopped
    serving on its own (its polling task died, its socket closed for good), so the supervisor
    restarts it. Raise `AdapterFatal` to stay down."""

    async def wait_closed(self) -> None: ...


@runtime_checkable
class CatchUp(Protocol):
    """Optional ability, for platforms that never redeliver (Discord): once connected, fetch what
    was said while the adapter was away and submit it like a live message. `last_seen` maps each
    recently active chat (thread_id set for a thread) to the newest platform message id stored from
    it; returns how many messages were submitted. Overlap with live events is harmless: the core
    dedupes on platform + chat + message id."""

    async def catch_up(self, last_seen: Mapping[ChatRef, str]) -> int: ...


@runtime_checkable
class MemberRoles(Protocol):
    """Optional ability, for platforms that can say whether a job's creator still belongs where it
    was made: a member's roles in a server (Discord) or workspace (Slack: none) as they are now
    (role ids, as `Inbound.roles`), asked before each run of a scheduled job its creator made there.
    None when they are no longer a member of it (left the server, a deactivated Slack account);
    raises when it cannot be told right now (the roles the job was made with are used then)."""

    # what the platform calls the space, for the reason a stopped job gives ("server")
    space_noun: str

    async def member_roles(self, space_id: str, user_id: str) -> tuple[str, ...] | None: ...


@runtime_checkable
class KnownThreads(Protocol):
    """Optional ability, for platforms where the bot follows a thread once it took part (Slack):
    before it starts, the adapter is told the threads it took part in, read back from the store
    (oldest first), so after a restart a thread's next message needs no new mention."""

    def remember_threads(self, threads: Sequence[ChatRef]) -> None: ...


@dataclass(frozen=True, slots=True)
class PreviewStyle:
    """How an adapter shows a live preview in one chat (docs/streaming.md).

    `interval_s` is the least time between two preview calls in the chat and, when `scope` names
    one, across every chat of the account too (Slack's method tiers count per workspace).
    `ephemeral`: a draft the platform drops by itself (Telegram's sendMessageDraft), so only the
    newest part is shown and nothing is replaced.
    `raw`: the partial Markdown goes as is, because the
    client renders it (the web chat, Slack's own streaming).
    `lasts_s`: a shown preview vanishes this long after its last update (a Telegram draft: 30 s), so
    the stream shows it again before then while no new text comes (a long tool call); 0: it stays.
    """

    interval_s: float
    scope: str = ""
    ephemeral: bool = False
    raw: bool = False
    lasts_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PreviewPart:
    """One part of an answer being written, rendered and within the platform's limit, or the
    progress line (`index` -1). `platform_message_id` is the message that shows it so far (None:
    open one). `key` is stable per turn and part, for a draft id or a nonce. `user_id`/`space_id`
    name who asked (Slack streams name them)."""

    chat: ChatRef
    index: int
    text: str
    entities: tuple[TextEntity, ...] = ()
    platform_message_id: str | None = None
    reply_to_id: str | None = None
    user_id: str = ""
    space_id: str | None = None
    key: str = ""

    @property
    def is_progress(self) -> bool:
        return self.index < 0


@runtime_checkable
class LivePreview(Protocol):
    """Optional ability: show an answer while it is written. `preview_style` is None where it cannot
    (a slash command's reply). `show_preview` opens or updates a part and returns its message id (""
    for a draft); `finish_preview` turns a part into the final chunk (raising `PreviewGone` if the
    message is gone); `drop_preview` takes a part down."""

    def preview_style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle | None: ...

    async def show_preview(self, part: PreviewPart) -> str: ...

    async def finish_preview(self, message: OutboundMessage, platform_message_id: str) -> str: ...

    async def drop_preview(self, chat: ChatRef, platform_message_id: str) -> None: ...


def command_word(text: str) -> str | None:
    """`/New@my_bot args` → `new`; None for anything that is not a slash command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    return stripped.split()[0][1:].split("@")[0].lower()

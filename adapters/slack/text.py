"""Slack translation with no I/O: which events are for us, Slack markup as plain text, files,
timestamps, Web API errors as the core's errors, and the bounded memories the adapter keeps."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from gateway.config.settings import SlackConfig
from gateway.errors import (
    AdapterError,
    AdapterFatal,
    MarkupRejected,
    PlatformUnavailable,
    RateLimited,
    RecipientUnavailable,
)
from gateway.events import Attachment, ChatType

PLATFORM = "slack"
REMEMBERED = 4096  # event ids, message keys, threads, people: bounded memories
CONTEXT_LINE_CHARS = 1000
# Subtypes that are a person saying something; edits (message_changed), deletions, joins and the
# like are not.
USER_SUBTYPES = frozenset({"", "file_share", "thread_broadcast", "me_message"})
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    SlackClientError,
    aiohttp.ClientError,
    OSError,
    TimeoutError,
)
API_ERRORS: tuple[type[BaseException], ...] = (SlackApiError, *NETWORK_ERRORS)
CHANNEL_TYPES: dict[str, ChatType] = {
    "im": "dm",
    "mpim": "group",
    "group": "group",
    "channel": "channel",
}
# `/agent WORDS` that are one of the core's in-chat commands: Slack sends any message starting with
# "/" to a slash command, so `/jobs`, `/link CODE` … can only reach us through `/agent` (or after
# the bot's mention).
_SLASH_WORDS = re.compile(
    r"(?i)(new|reset|status|usage|stop|retry|undo|help|jobs|link|voice|model)"
    r"|(jobs\s+(?:list|(?:cancel|stop)\s+#?\d+))|((?:link|approve)\s+[A-Za-z0-9]{8})"
    r"|(link\s+[A-Za-z0-9]{8}\s+yes)|(voice\s+(?:on|off|auto))|(model\s+[A-Za-z0-9_.-]{1,32})"
)
_FATAL_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
    }
)
_MARKUP_ERRORS = frozenset(
    {
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_too_long",
        "no_text",
        "invalid_attachments",
        "too_many_attachments",
    }
)
_GONE_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "account_inactive",
        "user_not_found",
        "user_not_in_channel",
        "cannot_dm_bot",
        "restricted_action",
        "team_access_not_granted",
    }
)
_TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
_ANGLE = re.compile(r"<([^<>]*)>")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


# ---------------------------------------------------------------------- small data
@dataclass(frozen=True, slots=True)
class Me:
    user_id: str
    bot_id: str
    team_id: str
    name: str


@dataclass(frozen=True, slots=True)
class Person:
    name: str | None = None  # display name, shown to the model
    handle: str | None = None  # the Slack username


@dataclass(frozen=True, slots=True)
class Target:
    """Where an event goes, decided from the event alone (before any network call)."""

    channel: str
    ts: str
    user_id: str
    channel_type: str
    thread_id: str | None
    is_dm: bool
    addressed: bool
    hydrate: str | None  # the thread to read once before submitting
    is_bot: bool


class Recent:
    """A bounded set: the oldest keys go first, so memory for ids never grows without end."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, None] = OrderedDict()

    def add(self, key: Hashable) -> bool:
        """True when the key is new."""
        if key in self._items:
            self._items.move_to_end(key)
            return False
        self._items[key] = None
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return True

    def discard(self, key: Hashable) -> None:
        self._items.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._items


def put(mapping: OrderedDict[K, V], key: K, value: V, size: int = REMEMBERED) -> None:
    mapping[key] = value
    mapping.move_to_end(key)
    if len(mapping) > size:
        mapping.popitem(last=False)


# ---------------------------------------------------------------------- inbound
def event_target(
    event: Mapping[str, Any],
    via_mention: bool,
    me: Me,
    cfg: SlackConfig,
    threads: Collection[tuple[str, str]],
) -> Target | None:
    """Is this event for us, and where does its answer go? None drops it at the edge."""
    subtype = str(event.get("subtype") or "")
    is_bot = bool(event.get("bot_id")) or subtype == "bot_message"
    if event.get("hidden") or (subtype not in USER_SUBTYPES and subtype != "bot_message"):
        return None
    if event.get("user") == me.user_id or (is_bot and event.get("bot_id") == me.bot_id):
        return None
    if is_bot and not cfg.answer_bots:
        return None
    channel, ts = str(event.get("channel") or ""), str(event.get("ts") or "")
    user = str(event.get("user") or event.get("bot_id") or "")
    if not (channel and ts and user):
        return None
    channel_type = str(event.get("channel_type") or "")
    thread_ts = str(event.get("thread_ts") or "") or None
    if channel_type == "im" or channel.startswith("D"):
        return Target(
            channel, ts, user, "im", None, is_dm=True, addressed=True, hydrate=None, is_bot=is_bot
        )
    mentioned = via_mention or f"<@{me.user_id}>" in str(event.get("text") or "")
    known = thread_ts is not None and (channel, thread_ts) in threads
    if cfg.require_mention and not (mentioned or known):
        return None
    thread = thread_ts or (ts if cfg.reply_in_thread == "always" else None)
    hydrate = thread_ts if thread_ts and thread_ts != ts and not known else None
    return Target(
        channel,
        ts,
        user,
        channel_type,
        thread,
        is_dm=False,
        addressed=mentioned or known,
        hydrate=hydrate,
        is_bot=is_bot,
    )


def mentioned_users(text: str) -> set[str]:
    return {
        m.group(1)[1:].partition("|")[0]
        for m in _ANGLE.finditer(text)
        if m.group(1).startswith("@")
    }


def slack_to_text(text: str, bot_user_id: str, names: Mapping[str, str | None]) -> str:
    """Slack markup as a person reads it: our own mention dropped, `<@U1>` → `@name`,
    `<#C1|general>` → `#general`, `<url|label>` → `label (url)`, and `&amp;`, `&lt;`, `&gt;`
    unescaped."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "\x00", text)
        text = re.sub(r"^\s*\x00\s*[,:;]?\s*", "", text)  # "@bot, what…" → "what…"
        text = re.sub(r"[ \t]*\x00", "", text)

    def one(match: re.Match[str]) -> str:
        target, _, label = match.group(1).partition("|")
        if target.startswith("@"):
            return "@" + (names.get(target[1:]) or label or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            word = target[1:].split("^")[0]
            return f"@{word}" if word in ("here", "channel", "everyone") else (label or f"@{word}")
        address = target.removeprefix("mailto:")
        return f"{label} ({address})" if label and label != address else address

    text = _ANGLE.sub(one, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").strip()


def attachments(event: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """The event's files with their `url_private_download` (fetched later with the bot token); an
    audio clip recorded in Slack (`subtype: slack_audio`) is a voice note. A file Slack hides (over
    a free workspace's limit, deleted) comes without a link, and the model is told it was there."""
    found = []
    for item in event.get("files") or ():
        if not isinstance(item, dict):
            continue
        mime = str(item.get("mimetype") or "") or None
        major = (mime or "").split("/")[0]
        kind = {"image": "photo", "audio": "audio", "video": "video"}.get(major, "document")
        if item.get("subtype") == "slack_audio":
            kind = "voice"
        size = item.get("size")
        link = item.get("url_private_download") or item.get("url_private")
        found.append(
            Attachment(
                kind=kind,
                name=item.get("name") or item.get("title"),
                mime_type=mime,
                size=size if isinstance(size, int) else None,
                ref=str(link) if link and item.get("mode") != "hidden_by_limit" else None,
            )
        )
    return tuple(found)


def guess_type(channel: str) -> ChatType:
    return "group" if channel.startswith("G") else "channel"


def received_at(ts: str) -> datetime:
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError):
        return datetime.now(UTC)


def ts_value(ts: Any) -> float:
    try:
        return float(ts)
    except (TypeError, ValueError):
        return 0.0


def clip(text: str, limit: int = CONTEXT_LINE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------- errors
def error_code(exc: SlackApiError) -> str:
    try:
        return str(exc.response.get("error") or "")
    except (AttributeError, TypeError):
        return ""


def _status(exc: SlackApiError) -> int:
    return int(getattr(exc.response, "status_code", 200) or 200)


def retry_after(headers: Any) -> float:
    for name, value in dict(headers or {}).items():
        if str(name).lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                break
    return 1.0


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def start_error(exc: SlackApiError, what: str, variable: str) -> AdapterError:
    code = error_code(exc)
    if code in _FATAL_ERRORS:
        return AdapterFatal(PLATFORM, f"{what} rejected ({code}) — check {variable}")
    if (
        _status(exc) == 429
        or code == "ratelimited"
        or _status(exc) >= 500
        or code in _TRANSIENT_ERRORS
    ):
        return PlatformUnavailable(
            PLATFORM, f"{what} check failed ({code or _status(exc)}); will retry"
        )
    return AdapterError(PLATFORM, f"{what} check failed: {code or _status(exc)}")


def send_error(exc: BaseException) -> AdapterError:
    """Slack's answer as the outbox understands it: wait,
    resend plain, give up on the chat, or retry."""
    if not isinstance(exc, SlackApiError):
        return PlatformUnavailable(PLATFORM, describe(exc))
    code, status = error_code(exc), _status(exc)
    if status == 429 or code == "ratelimited":
        return RateLimited(PLATFORM, retry_after(exc.response.headers))
    if code in _MARKUP_ERRORS:
        return MarkupRejected(PLATFORM, code)
    if code in _GONE_ERRORS:
        return RecipientUnavailable(PLATFORM, code)
    if status >= 500 or code in _TRANSIENT_ERRORS:
        return PlatformUnavailable(PLATFORM, code or f"HTTP {status}")
    return AdapterError(PLATFORM, code or f"HTTP {status}")


def slash_text(text: str) -> str:
    """What `/agent TEXT` says: an in-chat command as `/word args`, any other text as the prompt it
    is, none as /help. Only whole command shapes count, so `/agent new ideas for the offsite` stays
    a prompt."""
    words = " ".join(text.split())
    if not words:
        return "/help"
    if _SLASH_WORDS.fullmatch(words):
        word, _, rest = words.partition(" ")
        return f"/{word.lower()} {rest}".rstrip()
    return text.strip()

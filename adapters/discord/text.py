"""Discord translation with no I/O: mentions as a reader sees them, where a message lives, an
interaction as an `Inbound`, thread names, reply references, allowed mentions, message nonces, and
discord.py's errors as the core's errors."""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord

from gateway.errors import (
    AdapterError,
    AdapterFatal,
    MarkupRejected,
    PlatformUnavailable,
    RateLimited,
    RecipientUnavailable,
)
from gateway.events import Attachment, ChatRef, ChatType, Inbound, OutboundMessage

PLATFORM = "discord"
THREAD_NAME_MAX = 80
INTENT_HINT = (
    "message content intent not enabled for this bot (gateway close 4014) — enable MESSAGE CONTENT "
    "INTENT in the Discord developer portal → Bot, then restart the gateway"
)
TOKEN_HINT = "token rejected (401) — check DISCORD_BOT_TOKEN"
_FATAL_CLOSE = {
    4004: TOKEN_HINT,
    4010: "invalid shard (4010)",
    4011: "sharding required (4011)",
    4012: "invalid gateway API version (4012)",
    4013: "invalid intents (4013)",
    4014: INTENT_HINT,
}
# unknown channel, missing access, DMs closed, missing perms
_GONE_CODES = frozenset({10003, 50001, 50007, 50013})
_MENTION = re.compile(r"<(@!?|@&|#)(\d+)>")


@dataclass(frozen=True, slots=True)
class Addressing:
    """The message text as the model should read it, and whether it mentions the bot."""

    text: str
    mentioned: bool = False


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message lives, in the core's terms; `bot_thread` = a thread the bot itself opened."""

    chat_type: ChatType
    chat_id: str
    thread_id: str | None = None
    title: str | None = None
    space_id: str | None = None
    bot_thread: bool = False


@dataclass(frozen=True, slots=True)
class Origin:
    channel_id: int
    author_id: int


# ---------------------------------------------------------------------- inbound
def addressing(
    content: str,
    me_id: int,
    *,
    users: Mapping[int, str],
    roles: Mapping[int, str],
    bot_roles: set[int],
    channels: Mapping[int, str],
) -> Addressing:
    """Drop our mention (or our bot role's); show other
    mentions the way a Discord user reads them."""
    mentioned = False

    def readable(match: re.Match[str]) -> str:
        nonlocal mentioned
        kind, target = match.group(1), int(match.group(2))
        if (kind in ("@", "@!") and target == me_id) or (kind == "@&" and target in bot_roles):
            mentioned = True
            return "\x00"
        if kind == "#":
            return f"#{channels[target]}" if target in channels else match.group(0)
        names = roles if kind == "@&" else users
        return f"@{names[target]}" if target in names else match.group(0)

    text = _MENTION.sub(readable, content)
    text = re.sub(r"^\s*\x00[,:;]?\s*", "", text)  # "@bot, what…" → "what…"
    text = re.sub(r"(?m)^[ \t]*\x00[ \t]*\n", "", text)  # a line that only mentioned us
    text = re.sub(r"[ \t]*\x00", "", text)
    return Addressing(text=text.strip(), mentioned=mentioned)


def place_of(channel: Any, guild: discord.Guild | None, me_id: int) -> Place | None:
    if isinstance(channel, (discord.DMChannel, discord.GroupChannel)) or (
        guild is None and isinstance(channel, discord.PartialMessageable)
    ):
        return Place("dm", str(channel.id))
    space = str(guild.id) if guild is not None else None
    if isinstance(channel, discord.Thread):
        return Place(
            "group",
            str(channel.parent_id),
            str(channel.id),
            channel.name,
            space,
            bot_thread=channel.owner_id == me_id,
        )
    if isinstance(channel, discord.abc.GuildChannel):
        return Place("group", str(channel.id), None, channel.name, space)
    return None


def interaction_inbound(interaction: discord.Interaction[Any], text: str) -> Inbound:
    me_id = interaction.client.user.id if interaction.client.user else 0
    place = place_of(interaction.channel, interaction.guild, me_id)
    if place is None:
        chat_id = str(interaction.channel_id or interaction.user.id)
        guild_id = interaction.guild_id
        place = (
            Place("group", chat_id, space_id=str(guild_id)) if guild_id else Place("dm", chat_id)
        )
    user = interaction.user
    return Inbound(
        chat=ChatRef(PLATFORM, place.chat_type, place.chat_id, place.thread_id),
        user_id=str(user.id),
        text=text,
        message_id=str(interaction.id),
        received_at=interaction.created_at,
        user_name=user.display_name,
        username=user.name,
        is_addressed=True,
        is_bot=user.bot,
        chat_title=place.title,
        space_id=place.space_id,
        roles=roles_of(user),
    )


def replied_author(message: discord.Message) -> int | None:
    reference = message.reference
    resolved = reference.resolved if reference is not None else None
    return resolved.author.id if isinstance(resolved, discord.Message) else None


def roles_of(user: discord.abc.User) -> tuple[str, ...]:
    if not isinstance(user, discord.Member):
        return ()
    return tuple(str(r.id) for r in user.roles if not r.is_default())


def attachment(item: discord.Attachment) -> Attachment:
    """A file with its CDN URL to fetch it by; a voice message (the mic button: Ogg/Opus with a
    duration and a waveform) is a voice note."""
    mime = item.content_type or ""
    kind = (
        "voice"
        if item.is_voice_message()
        else {"image": "photo", "audio": "audio", "video": "video"}.get(
            mime.split("/", 1)[0], "file"
        )
    )
    name = "voice message" if kind == "voice" else item.filename
    return Attachment(kind, name=name, mime_type=item.content_type, size=item.size, ref=item.url)


# ---------------------------------------------------------------------- outbound
def thread_name(text: str, author: str) -> str:
    first = " ".join(text.split())
    if not first:
        return f"Chat with {author}"[:THREAD_NAME_MAX]
    return first if len(first) <= THREAD_NAME_MAX else first[: THREAD_NAME_MAX - 1].rstrip() + "…"


def allowed_mentions(asker_id: int | None) -> discord.AllowedMentions:
    """Model output never pings @everyone, @here or
    roles; it may ping only the person it answers."""
    users: bool | list[discord.Object] = [discord.Object(id=asker_id)] if asker_id else False
    return discord.AllowedMentions(everyone=False, roles=False, users=users, replied_user=False)


def reference_for(
    message: OutboundMessage, target: int, origin: Origin | None
) -> discord.MessageReference | None:
    """The first chunk replies to the triggering message when it lives where we post: a thread grown
    from it (same id) already shows it, and Discord refuses references across channels."""
    our_id = message.reply_to_id or ""
    if message.chunk_index != 0 or not our_id.isdigit() or target == int(our_id):
        return None
    if origin is not None and origin.channel_id != target:
        return None
    return discord.MessageReference(
        message_id=int(our_id), channel_id=target, fail_if_not_exists=False
    )


def nonce_for(message: OutboundMessage) -> str:
    """The chunk's message nonce: 24 hex chars (Discord takes at most 25) derived from the stored
    chunk's key, so every retry and every daemon life sends the same one. discord.py adds
    `enforce_nonce: true` to any nonce, and Discord then answers a repeat within a few minutes with
    the message already posted instead of a second one. A message with no stored chunk behind it
    gets a random nonce, as discord.py would pick (its own retries)."""
    if not message.key:
        return secrets.token_hex(12)
    return hashlib.blake2b(message.key.encode(), digest_size=12, person=b"gw-discord").hexdigest()


def posted_then_deleted(exc: BaseException, message: OutboundMessage) -> bool:
    """A create answered 10008 Unknown Message: Discord's way of saying the message this chunk's
    nonce already posted has since been deleted (it is not created again). The chunk was delivered;
    no retry."""
    return bool(message.key) and isinstance(exc, discord.NotFound) and exc.code == 10008


# ---------------------------------------------------------------------- errors
def translate_error(exc: BaseException) -> AdapterError:
    """discord.py already waits out 429s and retries some
    5xx; what still surfaces is mapped once, here."""
    if isinstance(exc, discord.RateLimited):
        return RateLimited(PLATFORM, float(exc.retry_after))
    if isinstance(exc, discord.HTTPException):
        detail = f"{exc.status} {exc.code}: {exc.text}".strip()
        if exc.status == 429:
            return RateLimited(PLATFORM, _retry_after(exc))
        if exc.status >= 500:
            return PlatformUnavailable(PLATFORM, detail)
        if exc.status == 403 or exc.code in _GONE_CODES:
            return RecipientUnavailable(PLATFORM, detail)
        if exc.status == 400 and exc.code == 50035 and "content" in exc.text:
            return MarkupRejected(PLATFORM, detail)
        return AdapterError(PLATFORM, detail)
    if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
        return PlatformUnavailable(PLATFORM, str(exc) or type(exc).__name__)
    return AdapterError(PLATFORM, f"{type(exc).__name__}: {exc}")


def gateway_failure(exc: BaseException) -> AdapterError:
    """Close codes no reconnect can fix become `AdapterFatal`
    (the supervisor logs it once and stays down)."""
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return AdapterFatal(PLATFORM, INTENT_HINT)
    if isinstance(exc, discord.ConnectionClosed) and exc.code in _FATAL_CLOSE:
        return AdapterFatal(PLATFORM, _FATAL_CLOSE[exc.code])
    if isinstance(exc, discord.LoginFailure):
        return AdapterFatal(PLATFORM, TOKEN_HINT)
    return AdapterError(PLATFORM, f"gateway: {type(exc).__name__}: {exc}")


def _retry_after(exc: discord.HTTPException) -> float:
    try:
        return float(exc.response.headers.get("Retry-After", 1.0))
    except (TypeError, ValueError, AttributeError):
        return 1.0

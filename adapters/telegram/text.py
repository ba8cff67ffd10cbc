"""Telegram translation with no I/O: who a message addresses (entities in UTF-16 offsets), its
sender, files, keys and times as the core wants them, our entities as aiogram's, and Bot API errors
as the core's errors."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.types import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    Sticker,
    User,
)

from gateway.errors import (
    AdapterError,
    MarkupRejected,
    PlatformUnavailable,
    RateLimited,
    RecipientUnavailable,
)
from gateway.events import Attachment, ChatType, Choices
from gateway.events.choices import choice_data

PLATFORM = "telegram"
CHAT_TYPES: dict[str, ChatType] = {
    "private": "dm",
    "group": "group",
    "supergroup": "group",
    "channel": "channel",
}


@dataclass(frozen=True, slots=True)
class Addressing:
    """What the message says to whom: the text with our @mention removed, and the verdicts."""

    text: str
    mentioned: bool = False
    command: bool = False
    for_other_bot: bool = False


# ---------------------------------------------------------------------- inbound
def addressing(text: str, entities: Sequence[MessageEntity], me: User) -> Addressing:
    """Read mentions and a leading command from Telegram's
    entities (UTF-16 offsets); drop our @mention."""
    username = (me.username or "").lower()
    mentioned = command = other = False
    cuts: list[tuple[int, int, str]] = []  # (start, end, replacement) as str indices
    for entity in entities:
        start, end = _index(text, entity.offset), _index(text, entity.offset + entity.length)
        piece = text[start:end]
        if entity.type == "mention" and username and piece[1:].lower() == username:
            mentioned = True
            cuts.append((start, end, ""))
        elif entity.type == "text_mention" and entity.user is not None and entity.user.id == me.id:
            mentioned = True
        elif entity.type == "bot_command" and entity.offset == 0:
            name, _, target = piece.partition("@")
            if target and target.lower() != username:
                other = True
            else:
                command = True
                if target:
                    cuts.append((start, end, name))
    for start, end, replacement in sorted(cuts, reverse=True):
        text = _cut(text, start, end, replacement)
    return Addressing(text=text.strip(), mentioned=mentioned, command=command, for_other_bot=other)


def _cut(text: str, start: int, end: int, replacement: str) -> str:
    if replacement:
        return text[:start] + replacement + text[end:]
    before, after = text[:start], text[end:]
    if not before.strip():
        after = re.sub(r"^[,:;]?\s*", "", after)  # "@bot, what…" → "what…"
    elif before.endswith((" ", "\n")) and after.startswith(" "):
        after = after[1:]
    return before + after


def _index(text: str, utf16_offset: int) -> int:
    """The str index of a UTF-16 offset (characters
    outside the BMP count twice in Telegram's offsets)."""
    units = 0
    for i, ch in enumerate(text):
        if units >= utf16_offset:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(text)


def real_reply(message: Message) -> Message | None:
    """In a forum topic every message "replies" to the topic's creation; that is not a reply."""
    replied = message.reply_to_message
    if replied is None or replied.forum_topic_created is not None:
        return None
    return replied


def attachments(message: Message) -> tuple[Attachment, ...]:
    """The message's files, each with its file_id (`ref`) for getFile: the largest size of a photo,
    a document (a GIF comes as an animation and a document: kept once, as a video), audio, video, a
    round video note, a voice note, and a sticker as a still image (an animated or video sticker by
    its thumbnail)."""
    found: list[Attachment] = []
    if message.photo:
        best = message.photo[-1]
        found.append(
            Attachment("photo", mime_type="image/jpeg", size=best.file_size, ref=best.file_id)
        )
    document = None if message.animation is not None else message.document
    for kind, media in (
        ("document", document),
        ("audio", message.audio),
        ("video", message.video),
        ("video", message.animation),
        ("video", message.video_note),
    ):
        if media is not None:
            found.append(
                Attachment(
                    kind,
                    name=getattr(media, "file_name", None),
                    mime_type=getattr(media, "mime_type", None),
                    size=media.file_size,
                    ref=media.file_id,
                )
            )
    if message.voice is not None:
        found.append(
            Attachment(
                "voice",
                name="voice note",
                mime_type=message.voice.mime_type or "audio/ogg",
                size=message.voice.file_size,
                ref=message.voice.file_id,
            )
        )
    if message.sticker is not None:
        found.append(_sticker(message.sticker))
    return tuple(found)


def _sticker(sticker: Sticker) -> Attachment:
    name = f"sticker {sticker.emoji}" if sticker.emoji else "sticker"
    if not sticker.is_animated and not sticker.is_video:
        return Attachment(
            "sticker",
            name=name,
            mime_type="image/webp",
            size=sticker.file_size,
            ref=sticker.file_id,
        )
    thumb = sticker.thumbnail
    return Attachment(
        "sticker",
        name=name,
        size=thumb.file_size if thumb else None,
        ref=thumb.file_id if thumb else None,
    )


def forwarded_from(message: Message) -> str | None:
    """Whose a forwarded message was (a person, a hidden person's name, a group or a channel); None:
    not one."""
    origin = message.forward_origin
    if origin is None:
        return None
    user = getattr(origin, "sender_user", None)
    chat = getattr(origin, "chat", None) or getattr(origin, "sender_chat", None)
    name = (user.full_name if user is not None else getattr(origin, "sender_user_name", None)) or (
        chat.title or chat.full_name if chat is not None else None
    )
    return " ".join(str(name or "").split())[:80] or "someone"


def sender_id(message: Message) -> str:
    if message.sender_chat is not None:  # anonymous admin or channel: the chat speaks
        return str(message.sender_chat.id)
    return str(message.from_user.id) if message.from_user else str(message.chat.id)


def sender_name(message: Message) -> str | None:
    if message.sender_chat is not None:
        return message.author_signature or message.sender_chat.title
    return message.from_user.full_name if message.from_user else None


def sender_handle(message: Message) -> str | None:
    sender = message.sender_chat or message.from_user
    return sender.username if sender is not None else None


def message_key(message: Message) -> str:
    """Telegram's message id; an edit gets its own key
    so the store does not take it for a redelivery."""
    if message.edit_date is not None:
        return f"{message.message_id}-e{int(utc(message.edit_date).timestamp())}"
    return str(message.message_id)


def utc(value: datetime | int) -> datetime:
    if isinstance(value, int):
        return datetime.fromtimestamp(value, UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# ---------------------------------------------------------------------- outbound
def platform_message_id(our_id: str | None) -> int | None:
    head = (our_id or "").split("-", 1)[0]
    return int(head) if head.isdigit() else None


def entity(e: Any) -> MessageEntity:
    return MessageEntity(
        type=e.type, offset=e.offset, length=e.length, url=e.url, language=e.language
    )


def keyboard(choices: Choices) -> InlineKeyboardMarkup:
    """Buttons as an inline keyboard, one a row (a label like "Allow for this session" stays whole);
    each one's callback_data is the core's `choice_data`, within Telegram's 1-64 bytes."""
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [InlineKeyboardButton(text=c.label, callback_data=choice_data(choices.token, c.value))]
            for c in choices.options
        ]
    )


# ---------------------------------------------------------------------- errors
def send_error(exc: BaseException) -> AdapterError:
    """A failed send as the outbox understands it: wait,
    resend plain, give up on the chat, or retry."""
    if isinstance(exc, TelegramRetryAfter):
        return RateLimited(PLATFORM, float(exc.retry_after))
    text = str(exc).lower()
    if isinstance(exc, TelegramBadRequest) and ("can't parse entities" in text or "entit" in text):
        return MarkupRejected(PLATFORM, str(exc))
    gone = (
        "chat not found",
        "thread not found",
        "not enough rights",
        "have no rights",
        "bot was kicked",
    )
    if isinstance(exc, TelegramForbiddenError) or (
        isinstance(exc, TelegramBadRequest) and any(g in text for g in gone)
    ):
        return RecipientUnavailable(PLATFORM, str(exc))
    if isinstance(exc, (TelegramServerError, TelegramNetworkError, asyncio.TimeoutError, OSError)):
        return PlatformUnavailable(PLATFORM, str(exc) or type(exc).__name__)
    if isinstance(exc, TelegramAPIError):
        return AdapterError(PLATFORM, str(exc))
    # decode errors and the like
    return PlatformUnavailable(PLATFORM, f"{type(exc).__name__}: {exc}")

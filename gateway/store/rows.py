"""What the store's rows are, as frozen dataclasses, and the small conversions between rows and the
rest of the code.

Kept apart from gateway/store/database.py (the queries) so modules that only read a row's shape need
not know the SQL.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, TypeVar

from gateway.errors import StoreError
from gateway.llm.types import Usage
from gateway.store.history_cache import ChatView


def utcnow() -> datetime:
    return datetime.now(UTC)


_LAST_ISO: tuple[datetime | None, str | None] = (None, None)  # a turn stores one `now` in many rows


def iso(dt: datetime | None) -> str | None:
    global _LAST_ISO
    if dt is None:
        return None
    last, text = _LAST_ISO
    if last is dt:
        return text
    text = (dt if dt.tzinfo is UTC else dt.astimezone(UTC)).isoformat(timespec="microseconds")
    _LAST_ISO = (dt, text)
    return text


def parse_iso(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


# messages.active: out of the context after compression, still searchable (1: in it, 0: gone)
COMPRESSED = 2
HISTORY_KINDS = ("chat", "summary")  # what a session's model input is made of


def chat_view(
    role: str,
    content: str,
    tool_calls: str | None,
    tool_call_id: str | None,
    media: str | None = None,
    is_error: int = 0,
) -> ChatView:
    """A stored message as a neutral chat message (gateway/llm/types.py's ChatMessage shape).

    `media` is the stored image list of a user message: `[{"media_type", "file"}]`, files named
    relative to GATEWAY_HOME/media (gateway/store/transcript.py reads them back as base64 for the
    model)."""
    message: ChatView = {"role": sys.intern(role), "content": content}
    if tool_calls:
        message["tool_calls"] = json.loads(tool_calls)
    if tool_call_id:
        message["tool_call_id"] = tool_call_id
    if media:
        message["images"] = json.loads(media)
    if is_error:
        message["is_error"] = True
    return message


def media_column(message: Mapping[str, Any]) -> str | None:
    """What `messages.media` stores of a message's images: type and file only (never the base64 a
    turn sent)."""
    images = message.get("images")
    if not images:
        return None
    return (
        json.dumps(
            [{"media_type": i["media_type"], "file": i["file"]} for i in images if i.get("file")]
        )
        or None
    )


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: int
    key: str
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    user_id: str | None
    parent_id: int | None
    created_at: str
    last_user_at: str | None
    ended_at: str | None
    end_reason: str | None
    model: str | None
    provider: str | None
    system_prompt: str | None
    prompt_built_at: str | None
    prompt_rebuild_reason: str | None
    prompt_rebuilds: int
    flush_state: str | None
    flush_attempts: int
    flush_error: str | None
    flush_finished_at: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    compressions: int
    # the session's fixed tool list (tool_lists), set when its prompt is built
    tool_list_id: int | None = None
    agent: str = "main"  # the agent that answers in it (docs/agents.md)
    account: str = "default"  # the bot account its chat is reached through


@dataclass(frozen=True, slots=True)
class MessageRow:
    id: int
    session_id: int
    role: str
    content: str
    tool_calls: str | None
    tool_call_id: str | None
    user_id: str | None
    user_name: str | None
    platform_message_id: str | None
    created_at: str
    active: int
    kind: str
    turn_id: str | None
    media: str | None = None  # the images of a user message (JSON; see chat_view)
    is_error: int = 0  # a tool result that reported a failure


@dataclass(frozen=True, slots=True)
class InboundRow:
    id: int
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    platform_message_id: str
    user_id: str
    user_name: str | None
    text: str
    payload: str
    received_at: str
    status: str
    session_id: int | None
    finished_at: str | None
    account: str = "default"


@dataclass(frozen=True, slots=True)
class OutboundRow:
    id: int
    turn_id: str
    chunk_index: int
    chunk_count: int
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    kind: str
    text: str
    plain: str
    entities: str | None
    reply_to_id: str | None
    status: str
    attempts: int
    platform_message_id: str | None
    last_error: str | None
    created_at: str
    sent_at: str | None
    account: str = "default"


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model request's row in `llm_calls`."""

    usage: Usage
    purpose: str
    provider: str
    model: str


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


_R = TypeVar("_R")


def _row(cls: type[_R], row: sqlite3.Row | None) -> _R:
    if row is None:
        # callers declare `X | None` where a row may be missing
        return None  # type: ignore[return-value]
    names = _FIELD_NAMES.get(cls)
    if names is None:
        # dataclasses.fields() is slow enough to show when a turn reads its whole history
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    try:
        if tuple(row.keys()) == names:  # the columns in the fields' order: a third of the time
            return cls(*row)
        return cls(**{name: row[name] for name in names})
    except (IndexError, KeyError, TypeError) as exc:
        raise StoreError(f"unreadable {cls.__name__} row: {exc}") from exc

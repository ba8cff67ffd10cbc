"""How stored rows become model input and back: the inbound payload codec and the history → chat
messages view.

Shared by the session manager, the access gate, the
flush and the commands, so it sits below all of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.events import Attachment, ChatRef, Inbound
from gateway.llm.types import ChatMessage, History
from gateway.store.database import Store
from gateway.store.media_files import read_base64
from gateway.store.rows import MessageRow, chat_view

_INBOUND_FIELDS = tuple(f.name for f in fields(Inbound))
_CHAT_FIELDS = tuple(f.name for f in fields(ChatRef))


def encode_inbound(inbound: Inbound) -> str:
    """JSON of every field, as `asdict` would give it
    (every message is encoded once; asdict deep-copies)."""
    data: dict[str, Any] = {name: getattr(inbound, name) for name in _INBOUND_FIELDS}
    data["chat"] = {name: getattr(inbound.chat, name) for name in _CHAT_FIELDS}
    data["received_at"] = inbound.received_at.isoformat()
    data["attachments"] = [asdict(a) for a in inbound.attachments]
    return json.dumps(data, ensure_ascii=False)


def decode_inbound(payload: str) -> Inbound:
    data: dict[str, Any] = json.loads(payload)
    data["chat"] = ChatRef(**data["chat"])
    data["received_at"] = datetime.fromisoformat(data["received_at"])
    data["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
    data["roles"] = tuple(data.get("roles") or ())
    return Inbound(**data)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(inbound: Inbound) -> Inbound:
    """Lone UTF-16 surrogates (a JavaScript client can put them in JSON escapes) cannot be encoded
    as UTF-8, so SQLite and every API would refuse the message; they become U+FFFD once, before
    anything stores the text."""
    fixed: dict[str, Any] = {}
    for name in ("text", "user_name", "chat_title", "username", "context", "forwarded_from"):
        value = getattr(inbound, name)
        if isinstance(value, str) and _LONE_SURROGATE.search(value):
            fixed[name] = _LONE_SURROGATE.sub("\ufffd", value)
    if any(a.name and _LONE_SURROGATE.search(a.name) for a in inbound.attachments):
        fixed["attachments"] = tuple(
            replace(a, name=_LONE_SURROGATE.sub("\ufffd", a.name)) if a.name else a
            for a in inbound.attachments
        )
    return replace(inbound, **fixed) if fixed else inbound


def history_messages(rows: Sequence[MessageRow], *, home: Path | None = None) -> list[ChatMessage]:
    """Stored rows as chat messages; with `home`, their images carry the file's bytes (see
    `with_image_data`), without it they stay names, which the wires send as a one-line note (a
    summary or flush needs no pixels)."""
    msgs = [
        chat_view(r.role, r.content, r.tool_calls, r.tool_call_id, r.media, r.is_error)
        for r in rows
    ]
    return _drop_dangling_tool_calls(with_image_data(msgs, home) if home is not None else msgs)


def session_history(store: Store, session_id: int) -> History:
    """The session's model input so far: `history_messages(store.history(id))`, from the store's
    cache (read on demand, with what the wires keep of it), or whole when it holds pictures (their
    bytes read from GATEWAY_HOME/media, the home being where state.db lives) or a tool call
    without its result."""
    view = store.history_view(session_id)
    if view is not None:
        return view
    whole = with_image_data(store.chat_history(session_id), store.path.parent)
    return History.of(_drop_dangling_tool_calls(whole))


def with_image_data(msgs: list[ChatMessage], home: Path) -> list[ChatMessage]:
    """Every stored image as `{"media_type", "file", "data": base64}`: the same file gives the same
    text on every turn, so the provider's cached prefix matches. A file the retention removed gets
    no data (the wires then send a fixed note). New dicts throughout: the history cache shares the
    stored lists."""
    if not any("images" in m for m in msgs):
        return msgs
    out = []
    for m in msgs:
        if "images" in m:
            m = {**m, "images": [_with_data(i, home) for i in m["images"]]}
        out.append(m)
    return out


def _with_data(image: dict[str, Any], home: Path) -> dict[str, Any]:
    data = read_base64(home, str(image.get("file") or ""))
    return {**image, "data": data} if data is not None else dict(image)


def _drop_dangling_tool_calls(msgs: list[ChatMessage]) -> list[ChatMessage]:
    """A tool call without its result (or the reverse) makes both wires reject the request; drop
    such pairs."""
    # a plain message is role and content; a tool result has its id
    tooling = [m for m in msgs if len(m) > 2]
    if not tooling:
        return msgs
    answered = {m["tool_call_id"] for m in tooling if m["role"] == "tool"}
    called = {c["id"] for m in tooling for c in m.get("tool_calls") or ()}
    if answered == called:
        return msgs  # every call has its result: nothing to drop
    out = []
    for m in msgs:
        if m["role"] == "tool" and m["tool_call_id"] not in called:
            continue
        if m.get("tool_calls") and any(c["id"] not in answered for c in m["tool_calls"]):
            continue
        out.append(m)
    return out

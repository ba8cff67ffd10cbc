"""The recently used sessions' active history, already decoded, so a turn does not read and decode every row of
its session from SQLite again. Bounded by an estimate of its bytes; least recently used sessions go first.

Only gateway/store/database.py fills and changes it: appends are staged inside a write transaction and applied when it
commits, anything else that touches a session's history drops the session (see Store.chat_history).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

ChatView = dict[str, Any]  # {"role", "content", "tool_calls"?: [...], "tool_call_id"?}: transcript's shape
# Kept compact: (role, content, the other keys or None). A tuple costs ~80 bytes less than the dict per message.
_Kept = tuple[str, str, "dict[str, Any] | None"]

DEFAULT_BUDGET_BYTES = 4_000_000  # ~20,000 short messages; 10,000 idle sessions cost no more than this
MESSAGE_BYTES = 130  # the tuple, its slot and the content string's header, besides the content itself


def _keep(message: ChatView) -> _Kept:
    if len(message) <= 2:
        return message["role"], message["content"], None
    extra = {k: v for k, v in message.items() if k != "role" and k != "content"}
    if "tool_calls" in extra:  # the caller keeps its list; the kept one must not change with it
        extra["tool_calls"] = [dict(call) for call in extra["tool_calls"] or ()]
    return message["role"], message["content"], extra


def _view(kept: _Kept) -> ChatView:
    role, content, extra = kept
    view: ChatView = {"role": role, "content": content}
    if extra is not None:
        view.update(extra)
        if "tool_calls" in view:  # a caller may change a call in place; the kept one must not change with it
            view["tool_calls"] = [dict(call) for call in view["tool_calls"]]
    return view


def kept_bytes(kept: _Kept) -> int:
    """An upper-bound-ish estimate: strings at up to 4 bytes a character when they are not ASCII (CPython stores
    1, 2 or 4 per character), tool calls with their arguments, which can be far larger than the text."""
    size = MESSAGE_BYTES + _str_bytes(kept[1])
    if kept[2]:
        size += 100 + sum(_str_bytes(v) for v in kept[2].values() if isinstance(v, str))
        for call in kept[2].get("tool_calls") or ():
            size += 300 + sum(_str_bytes(v) for v in call.values() if isinstance(v, str))
    return size


def _str_bytes(text: str) -> int:
    return len(text) if text.isascii() else 4 * len(text)


class HistoryCache:
    """Session id → its active chat and summary messages in order. Callers always get fresh dicts."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.bytes = 0
        self._entries: OrderedDict[int, tuple[list[_Kept], int]] = OrderedDict()
        self._staged: list[tuple[int, list[ChatView]]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, session_id: int) -> list[ChatView] | None:
        """The session's messages as new dicts (the caller may change them), or None when it is not cached."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        self._entries.move_to_end(session_id)
        return [_view(k) if k[2] else {"role": k[0], "content": k[1]} for k in entry[0]]

    def put(self, session_id: int, messages: list[ChatView]) -> None:
        """Cache a session's whole history as just read."""
        self.drop(session_id)
        if any(staged == session_id for staged, _ in self._staged):
            return  # read inside a transaction that also appends to it: the append would repeat those rows
        kept = [_keep(m) for m in messages]
        size = sum(kept_bytes(k) for k in kept)
        if size > self.budget_bytes:
            return
        self._entries[session_id] = (kept, size)
        self.bytes += size
        self._evict()

    def stage(self, session_id: int, messages: list[ChatView]) -> None:
        """Messages written inside the open transaction: appended to a cached session when it commits."""
        self._staged.append((session_id, messages))

    def commit(self) -> None:
        staged, self._staged = self._staged, []
        for session_id, messages in staged:
            entry = self._entries.get(session_id)
            if entry is None:
                continue  # not cached: the next read loads the whole history, these rows included
            cached, size = entry
            added = [_keep(m) for m in messages]
            cached.extend(added)
            grown = sum(kept_bytes(k) for k in added)
            self._entries[session_id] = (cached, size + grown)
            self.bytes += grown
        if staged:
            self._evict()

    def rollback(self) -> None:
        """The transaction failed: what was staged never reached the database; drop those sessions to be sure."""
        staged, self._staged = self._staged, []
        for session_id, _ in staged:
            self.drop(session_id)

    def drop(self, session_id: int) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self.bytes -= entry[1]

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _evict(self) -> None:
        while self.bytes > self.budget_bytes and self._entries:
            _, (_, size) = self._entries.popitem(last=False)
            self.bytes -= size

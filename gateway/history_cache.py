"""The recently used sessions' active history, already decoded, so a turn does not read and decode every row of
its session from SQLite again. Bounded by an estimate of its bytes; least recently used sessions go first.

Only gateway/store.py fills and changes it: appends are staged inside a write transaction and applied when it
commits, anything else that touches a session's history drops the session (see Store.chat_history).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

ChatView = dict[str, Any]  # {"role", "content", "tool_calls"?: [...], "tool_call_id"?}: transcript's shape

DEFAULT_BUDGET_BYTES = 8_000_000  # ~25,000 short messages; 10,000 idle sessions cost no more than this
MESSAGE_BYTES = 260  # a two-key dict and its small strings, besides the content itself


def view_bytes(message: ChatView) -> int:
    calls = message.get("tool_calls")
    return MESSAGE_BYTES + len(message["content"]) + (200 * len(calls) if calls else 0)


class HistoryCache:
    """Session id → its active chat and summary messages in order. Entries are never handed out: callers copy."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.bytes = 0
        self._entries: OrderedDict[int, tuple[list[ChatView], int]] = OrderedDict()
        self._staged: list[tuple[int, list[ChatView]]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, session_id: int) -> list[ChatView] | None:
        """A copy of each cached message (the caller may change them), or None when the session is not cached."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        self._entries.move_to_end(session_id)
        return [m.copy() for m in entry[0]]

    def put(self, session_id: int, messages: list[ChatView]) -> None:
        """Cache a session's whole history as just read (the list is kept: the caller must not use it after)."""
        self.drop(session_id)
        size = sum(view_bytes(m) for m in messages)
        if size > self.budget_bytes or any(staged == session_id for staged, _ in self._staged):
            return  # too big; or read inside a transaction that also appends to it (the append would repeat)
        self._entries[session_id] = (messages, size)
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
            cached.extend(messages)
            added = sum(view_bytes(m) for m in messages)
            self._entries[session_id] = (cached, size + added)
            self.bytes += added
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

"""The recently used sessions' active history, already decoded, so a turn does not read and decode
every row of its session from SQLite again; with it what the model wires made of it (WireMemo), so a
turn's request is built from what is new. Bounded by a count of its bytes that is at least what
Python allocates for them, sized by the number of active sessions; least recently used sessions go
first, and a short history, cheap to read again, is kept only in room to spare.

Only gateway/store/database.py fills and changes it: appends are staged inside a write transaction
and applied when it commits, anything else that touches a session's history drops the session (see
Store.chat_history).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, TypeAlias

from gateway.llm.types import History, WireMemo, message_chars

# {"role", "content", "tool_calls"?: [...], "tool_call_id"?}: transcript's shape
ChatView = dict[str, Any]
# Kept compact: a plain user or assistant message as one string, its role's letter and its text
# (~120 bytes less than the dict); anything else as (role, content, the other keys).
_Kept: TypeAlias = "str | tuple[str, str, dict[str, Any]]"
_PLAIN = {"user": "u", "assistant": "a"}
_ROLE = {"u": "user", "a": "assistant"}

DEFAULT_BUDGET_BYTES = 4_000_000  # ~25,000 short messages: the least, however few are active
# The most: 200 conversations of ~180 messages each kept whole with their wire form (what
# bench/overhead.py runs). Short histories have DEFAULT_BUDGET_BYTES at most (SHORT_MESSAGES), so
# 10,000 sessions of 20 messages stay within the daemon's 120 MB (bench/memory.py).
MAX_BUDGET_BYTES = 12_000_000
SESSION_BYTES = 40_000  # room per active session: ~150 messages with their wire form
MEMO_MESSAGES = 40  # a shorter history is converted whole each turn: cheap, not worth keeping
# A shorter history is one indexed read away and cheap to decode: it is kept while the cache holds
# less than DEFAULT_BUDGET_BYTES, and never evicts another session to get in.
SHORT_MESSAGES = MEMO_MESSAGES
# a plain message's list slot, string header, role letter and padding, besides the text
PLAIN_BYTES = 62
# the tuple, its slot and the content string's header, besides the content itself
MESSAGE_BYTES = 130
# a session's entry, its slot in the LRU order and its list's header and spare room
ENTRY_BYTES = 400
MEMO_BYTES = 750  # a WireMemo, its prefix and their headers, besides the prefix's data


def _keep(message: ChatView) -> _Kept:
    if len(message) <= 2:
        letter = _PLAIN.get(message["role"])
        if letter is not None:
            return letter + str(message["content"])
    extra = {k: v for k, v in message.items() if k != "role" and k != "content"}
    if "tool_calls" in extra:  # the caller keeps its list; the kept one must not change with it
        extra["tool_calls"] = [dict(call) for call in extra["tool_calls"] or ()]
    return message["role"], message["content"], extra


def _view(kept: _Kept) -> ChatView:
    if isinstance(kept, str):
        return {"role": _ROLE[kept[0]], "content": kept[1:]}
    role, content, extra = kept
    view: ChatView = {"role": role, "content": content, **extra}
    if "tool_calls" in view:  # a caller may change a call in place; the kept one must not change
        view["tool_calls"] = [dict(call) for call in view["tool_calls"]]
    return view


def kept_bytes(kept: _Kept) -> int:
    """At least what CPython allocates for it (tests/test_history_cache.py measures it): strings
    at 4 bytes a character when they are not ASCII (CPython stores 1, 2 or 4), tool calls with
    their arguments, which can be far larger than the text."""
    if isinstance(kept, str):
        return PLAIN_BYTES + _str_bytes(kept)
    size = (
        MESSAGE_BYTES
        + _str_bytes(kept[1])
        + 100
        + sum(_str_bytes(v) for v in kept[2].values() if isinstance(v, str))
    )
    for call in kept[2].get("tool_calls") or ():
        size += 300 + sum(_str_bytes(v) for v in call.values() if isinstance(v, str))
    return size


def _str_bytes(text: str) -> int:
    return len(text) if text.isascii() else 4 * len(text)


class _Entry:
    """One session's kept history and what is known of it without reading it again."""

    __slots__ = ("balanced", "chars", "images", "kept", "memo", "size")

    def __init__(self, kept: list[_Kept], size: int) -> None:
        self.kept = kept
        self.size = size
        self.chars = 0  # message_chars summed
        self.images = 0  # messages with pictures (their bytes are read from the files each turn)
        self.balanced = True  # every tool call has its result and the reverse (nothing to drop)
        self.memo: WireMemo | None = None

    def add(self, messages: list[ChatView]) -> None:
        self.chars += sum(message_chars(m) for m in messages)
        self.images += sum(1 for m in messages if "images" in m)
        calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
        results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
        # a batch that pairs up its own keeps the whole paired
        self.balanced = self.balanced and calls == results


class HistoryCache:
    """Session id → its active chat and summary messages
    in order. Callers always get fresh dicts."""

    def __init__(self, budget_bytes: int | None = None) -> None:
        self.fixed = budget_bytes is not None
        self.budget_bytes = budget_bytes if budget_bytes is not None else DEFAULT_BUDGET_BYTES
        self.bytes = 0
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._staged: list[tuple[int, list[ChatView]]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._entries

    def size_for(self, active_sessions: int) -> None:
        """Room for the active sessions' histories, between the least and the most (a fixed
        budget stays)."""
        if not self.fixed:
            wanted = max(DEFAULT_BUDGET_BYTES, active_sessions * SESSION_BYTES)
            self.budget_bytes = min(MAX_BUDGET_BYTES, wanted)
            self._evict()

    def get(self, session_id: int) -> list[ChatView] | None:
        """The session's messages as new dicts (the caller
        may change them), or None when it is not cached."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        self._entries.move_to_end(session_id)
        return [_view(k) for k in entry.kept]

    def view(self, session_id: int) -> History | None:
        """The session's history as the turn reads it, without making a dict of every message,
        and the memo the wires keep its converted form in; None when it is not cached, or when
        the turn must see it whole (it holds pictures, whose bytes are read from their files, or
        a tool call without its result)."""
        entry = self._entries.get(session_id)
        if entry is None or entry.images or not entry.balanced:
            return None
        self._entries.move_to_end(session_id)
        if entry.memo is None and len(entry.kept) >= MEMO_MESSAGES:
            entry.memo = WireMemo(grown=lambda n: self._grown(session_id, entry, n))
            entry.size += MEMO_BYTES
            self.bytes += MEMO_BYTES
        return History(entry.kept, _view, memo=entry.memo, stored_chars=entry.chars)

    def put(self, session_id: int, messages: list[ChatView]) -> None:
        """Cache a session's whole history as just read."""
        self.drop(session_id)
        if any(staged == session_id for staged, _ in self._staged):
            # read inside a transaction that also appends to it: the append would repeat those rows
            return
        kept = [_keep(m) for m in messages]
        size = ENTRY_BYTES + sum(kept_bytes(k) for k in kept)
        if size > self.budget_bytes:
            return
        room = min(self.budget_bytes, DEFAULT_BUDGET_BYTES)
        if len(kept) < SHORT_MESSAGES and self.bytes + size > room:
            return  # the next turn reads it again, cheaply; longer histories keep their places
        entry = self._entries[session_id] = _Entry(kept, size)
        entry.add(messages)
        self.bytes += size
        self._evict()

    def stage(self, session_id: int, messages: list[ChatView]) -> None:
        """Messages written inside the open transaction:
        appended to a cached session when it commits."""
        self._staged.append((session_id, messages))

    def commit(self) -> None:
        staged, self._staged = self._staged, []
        for session_id, messages in staged:
            entry = self._entries.get(session_id)
            if entry is None:
                continue  # not cached: the next read loads the whole history, these rows included
            added = [_keep(m) for m in messages]
            entry.kept.extend(added)
            entry.add(messages)
            grown = sum(kept_bytes(k) for k in added)
            entry.size += grown
            self.bytes += grown
        if staged:
            self._evict()

    def rollback(self) -> None:
        """The transaction failed: what was staged never reached the database; drop those sessions
        to be sure."""
        staged, self._staged = self._staged, []
        for session_id, _ in staged:
            self.drop(session_id)

    def drop(self, session_id: int) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self.bytes -= entry.size
            entry.memo = None

    def clear(self) -> None:
        for entry in self._entries.values():
            entry.memo = None
        self._entries.clear()
        self.bytes = 0

    def _grown(self, session_id: int, entry: _Entry, n: int) -> None:
        """A wire kept more (or less) of this session's request: counted, and the budget kept."""
        if self._entries.get(session_id) is not entry:
            return  # dropped meanwhile: the memo lives on only in the request being built
        entry.size += n
        self.bytes += n
        self._evict()

    def _evict(self) -> None:
        while self.bytes > self.budget_bytes and self._entries:
            _, entry = self._entries.popitem(last=False)
            self.bytes -= entry.size
            entry.memo = None

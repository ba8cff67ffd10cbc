"""Queries on messages: appending a turn (whole or not at all), the active history (kept decoded
between turns in the history cache), compression, and completing a turn with its reply chunks in one
transaction.

Messages are written only through these methods: they keep the history cache in step.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gateway.errors import StoreError, TurnGone
from gateway.llm.types import History
from gateway.store.connection import Database
from gateway.store.delivery_queries import insert_outbound, touch_session
from gateway.store.history_cache import ChatView
from gateway.store.rows import (
    COMPRESSED,
    HISTORY_KINDS,
    MessageRow,
    ModelCall,
    _row,
    chat_view,
    iso,
    media_column,
)
from gateway.store.session_queries import insert_call


class MessageQueries(Database):
    def add_message(
        self,
        session_id: int,
        role: str,
        content: str,
        *,
        now: datetime,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        user_id: str | None = None,
        user_name: str | None = None,
        platform_message_id: str | None = None,
        kind: str = "chat",
        turn_id: str | None = None,
    ) -> int:
        message = {
            "role": role,
            "content": content,
            "tool_calls": tool_calls,
            "tool_call_id": tool_call_id,
            "user_id": user_id,
            "user_name": user_name,
            "platform_message_id": platform_message_id,
        }
        try:
            with self.tx() as conn:
                return self._insert_messages(
                    conn, session_id, [message], now=now, kind=kind, turn_id=turn_id
                )
        except sqlite3.Error as exc:
            raise StoreError(f"write failed: {exc}") from exc

    def add_messages(
        self,
        session_id: int,
        messages: Sequence[dict[str, Any]],
        *,
        now: datetime,
        turn_id: str | None = None,
        kind: str = "chat",
    ) -> None:
        """Append one turn's messages atomically: a turn is stored whole or not at all."""
        with self.tx() as conn:
            self._insert_messages(conn, session_id, messages, now=now, kind=kind, turn_id=turn_id)

    def insert_messages(
        self,
        conn: sqlite3.Connection,
        session_id: int,
        messages: Sequence[dict[str, Any]],
        *,
        now: datetime,
        kind: str = "chat",
        turn_id: str | None = None,
    ) -> int:
        """Append messages inside the caller's `tx()`, for a feature whose rows must commit with
        them (a scheduled job's run ends with its messages, gateway/scheduling/jobstore.py)."""
        return self._insert_messages(
            conn, session_id, messages, now=now, kind=kind, turn_id=turn_id
        )

    def _insert_messages(
        self,
        conn: sqlite3.Connection,
        session_id: int,
        messages: Sequence[dict[str, Any]],
        *,
        now: datetime,
        kind: str,
        turn_id: str | None,
    ) -> int:
        """Insert neutral chat messages (role, content,
        tool calls…) inside the caller's transaction."""
        last = 0
        created = iso(now)
        views = []
        for m in messages:
            content = m.get("content") or ""
            calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else None
            media = media_column(m)
            # a failed tool result: the wire says so on every later turn too
            failed = 1 if m.get("is_error") else 0
            cur = conn.execute(
                "INSERT INTO messages (session_id, role, content, "
                "tool_calls, tool_call_id, user_id, user_name,"
                " platform_message_id, created_at, kind, turn_id, media, is_error)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    m["role"],
                    content,
                    calls,
                    m.get("tool_call_id"),
                    m.get("user_id"),
                    m.get("user_name"),
                    m.get("platform_message_id"),
                    created,
                    kind,
                    turn_id,
                    media,
                    failed,
                ),
            )
            last = int(cur.lastrowid or 0)
            views.append(chat_view(m["role"], content, calls, m.get("tool_call_id"), media, failed))
        if kind in HISTORY_KINDS:
            self.history_cache.stage(session_id, views)
        self.index_soon()
        return last

    def history(self, session_id: int, *, kinds: Sequence[str] = HISTORY_KINDS) -> list[MessageRow]:
        marks = ",".join("?" * len(kinds))
        rows = self.all(
            f"SELECT * FROM messages WHERE session_id = ? AND active = 1 AND kind IN ({marks})"
            " ORDER BY id",
            (session_id, *kinds),
        )
        return [_row(MessageRow, r) for r in rows]

    def chat_history(self, session_id: int) -> list[ChatView]:
        """The session's active chat and summary messages as chat messages, oldest first:
        `history()` as transcript.history_messages sees it, kept decoded between turns for recently
        used sessions (a turn otherwise re-reads every row). The list and its dicts are the caller's
        to change."""
        self._forget_if_changed_elsewhere()
        cached = self.history_cache.get(session_id)
        if cached is not None:
            return cached
        try:
            cur = self.conn.cursor()
            cur.row_factory = None
            rows = cur.execute(
                "SELECT role, content, tool_calls, tool_call_id, media, is_error FROM messages"
                " WHERE session_id = ?"
                " AND active = 1 AND kind IN ('chat', 'summary') ORDER BY id",
                (session_id,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"query failed: {exc}") from exc
        views = [chat_view(*r) for r in rows]
        self.history_cache.put(session_id, views)  # keeps its own compact copy
        return views

    def history_view(self, session_id: int) -> History | None:
        """`chat_history` as the turn reads it (HistoryCache.view): kept between turns with what
        the model wires made of it; None when the session must be read whole (as
        transcript.session_history then does)."""
        self._forget_if_changed_elsewhere()
        if session_id not in self.history_cache:
            self.chat_history(session_id)  # read and kept, if it fits
        return self.history_cache.view(session_id)

    def _forget_if_changed_elsewhere(self) -> None:
        """Another connection (a second process, another Store on the file) committed: cached
        histories may be stale. SQLite bumps `data_version` for exactly that, and never for this
        connection's own commits."""
        version = self.data_version()
        if version != self._data_version:
            self.history_cache.clear()
            self._data_version = version

    def count_messages(self, session_id: int, roles: Sequence[str] = ("user", "assistant")) -> int:
        marks = ",".join("?" * len(roles))
        row = self.one(
            f"SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1 AND kind = 'chat'"
            f" AND role IN ({marks})",
            (session_id, *roles),
        )
        return int(row[0]) if row else 0

    def deactivate_messages(self, ids: Sequence[int]) -> None:
        self.history_cache.clear()
        with self.tx() as conn:
            conn.executemany("UPDATE messages SET active = 0 WHERE id = ?", [(i,) for i in ids])

    def compress_history(
        self,
        session_id: int,
        *,
        dropped: Sequence[int],
        tail: Sequence[MessageRow],
        summary: str,
        now: datetime,
    ) -> int:
        """Context compression in one transaction; returns the summary's id.

        The dropped messages leave the context (active = COMPRESSED: session_search still finds
        them, since the summary keeps only the gist); the summary (kind 'summary') and fresh copies
        of the kept tail are appended and the tail's originals go inactive (0: their copies are the
        searchable ones), so `ORDER BY id` stays the conversation's order. Nothing is deleted: the
        originals stay for the record.
        """
        self.history_cache.drop(session_id)
        with self.tx() as conn:
            conn.executemany(
                f"UPDATE messages SET active = {COMPRESSED} WHERE id = ?", [(i,) for i in dropped]
            )
            conn.executemany("UPDATE messages SET active = 0 WHERE id = ?", [(r.id,) for r in tail])
            cur = conn.execute(
                "INSERT INTO messages (session_id, role, content, created_at, kind)"
                " VALUES (?, 'user', ?, ?, 'summary')",
                (session_id, summary, iso(now)),
            )
            for r in tail:
                conn.execute(
                    "INSERT INTO messages (session_id, role, content, "
                    "tool_calls, tool_call_id, user_id, user_name,"
                    " platform_message_id, created_at, kind, turn_id, media, is_error)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session_id,
                        r.role,
                        r.content,
                        r.tool_calls,
                        r.tool_call_id,
                        r.user_id,
                        r.user_name,
                        r.platform_message_id,
                        r.created_at,
                        r.kind,
                        r.turn_id,
                        r.media,
                        r.is_error,
                    ),
                )
            conn.execute(
                "UPDATE sessions SET compressions = compressions + 1 WHERE id = ?", (session_id,)
            )
            summary_id = int(cur.lastrowid or 0)
        self.index_soon()
        return summary_id

    def complete_turn(
        self,
        session_id: int,
        messages: Sequence[dict[str, Any]],
        outbound: Sequence[dict[str, Any]],
        inbound_id: int | None,
        *,
        now: datetime,
        turn_id: str,
        calls: Sequence[ModelCall] = (),
        touched_at: datetime | None = None,
    ) -> None:
        """The end of a turn in one transaction: its messages, its reply chunks (unsent),
        `answered`, the usage of the model call that gave the answer (`calls`; earlier ones were
        recorded as they happened) and, with `touched_at`, when the person wrote (the session's
        `last_user_at`).

        After a crash either all of it is there (the chunks
        get sent at boot) or none (the turn runs again).
        """
        with self.tx() as conn:
            if inbound_id is not None:
                cur = conn.execute(
                    "UPDATE inbound SET status = 'answered', finished_at = ?, session_id = ?"
                    " WHERE id = ? AND status != 'forgotten'",
                    (iso(now), session_id, inbound_id),
                )
                if cur.rowcount == 0:
                    # `gateway users forget` erased it while the turn ran: keep nothing of it
                    raise TurnGone(f"inbound {inbound_id} was deleted while its turn ran")
            elif (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                raise TurnGone(f"session {session_id} was deleted while a turn ran")
            try:
                self._insert_messages(
                    conn, session_id, messages, now=now, kind="chat", turn_id=turn_id
                )
            except sqlite3.IntegrityError as exc:  # messages.session_id: the session row is gone
                raise TurnGone(f"session {session_id} was deleted while a turn ran") from exc
            insert_outbound(conn, outbound, now)
            for call in calls:
                insert_call(conn, session_id, call, now, touched_at)
                touched_at = None
            touch_session(conn, session_id, touched_at)

"""The one SQLite database (WAL): sessions with their stored prompt, messages (FTS5), inbound, outbound, usage.

One named function per query; schema changes are append-only named migrations. Calls are synchronous and
short (WAL + synchronous=NORMAL: no fsync per commit), so the event loop may call them directly. A row that
cannot be read raises StoreError; it never turns into "no session". Messages are written only through the
methods here: they keep the cache of recent sessions' histories (`chat_history`) in step.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from gateway.errors import StoreError
from gateway.llm.types import Usage
from gateway.store.history_cache import ChatView, HistoryCache
from gateway.store.rows import (
    COMPRESSED,
    HISTORY_KINDS,
    InboundRow,
    MessageRow,
    ModelCall,
    OutboundRow,
    SessionRow,
    _row,
    chat_view,
    iso,
    utcnow,
)
from gateway.store.schema import MIGRATIONS, Migration


class Store:
    """The gateway's database. Open once in the composition root; close on shutdown."""

    def __init__(self, path: Path, *, migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        conn.execute("PRAGMA busy_timeout=5000")
        self.db.enable_wal()
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        self.applied = self._migrate(migrations)
        self.history_cache = HistoryCache()
        self._data_version = self._read_data_version()

    def checkpoint_off_loop(self, *, safety_pages: int = 10_000) -> None:
        """Leave WAL checkpoints to `checkpoint()` (the daemon runs it in a thread). SQLite's own runs inside
        whichever commit fills the WAL past 1,000 pages, a turn's commit on the event loop, copying and syncing
        for milliseconds; `safety_pages` keeps it as a backstop should the background ones stop."""
        self.conn.execute(f"PRAGMA wal_autocheckpoint={int(safety_pages)}")

    def checkpoint(self) -> None:
        """Copy the WAL into the database from a connection of its own (safe from any thread); PASSIVE never
        waits for the daemon's writers or readers, it takes what it can and the next round the rest."""
        conn = sqlite3.connect(self.path, timeout=5)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def close(self) -> None:
        try:
            self.conn.execute("PRAGMA optimize")
        except sqlite3.Error:
            pass
        self.conn.close()

    # ---------------------------------------------------------------- plumbing
    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One small write transaction (BEGIN IMMEDIATE so a second process waits instead of failing)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.history_cache.rollback()
            self.conn.execute("ROLLBACK")
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                self.history_cache.rollback()
                raise
            self.history_cache.commit()

    def _migrate(self, migrations: Sequence[Migration]) -> list[str]:
        self.conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        done = {r[0] for r in self.conn.execute("SELECT name FROM schema_migrations")}
        applied = []
        for name, run in migrations:
            if name in done:
                continue
            try:
                if isinstance(run, str):
                    # executescript commits any open transaction first, so the BEGIN goes inside the script.
                    stamp = iso(utcnow())
                    self.conn.executescript(f"BEGIN IMMEDIATE;\n{run}\nINSERT INTO schema_migrations VALUES"
                                            f" ('{name}', '{stamp}');\nCOMMIT;")
                else:
                    self.conn.execute("BEGIN IMMEDIATE")
                    run(self.conn)
                    self.conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, iso(utcnow())))
                    self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise StoreError(f"migration {name} failed: {exc}") from exc
            applied.append(name)
        return applied

    def migrations_done(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM schema_migrations ORDER BY name")]

    def one(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Row | None:
        try:
            row: sqlite3.Row | None = self.conn.execute(sql, args).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"query failed: {exc}") from exc
        return row

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"query failed: {exc}") from exc

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one write statement in its own transaction; return lastrowid."""
        if "messages" in sql:  # not a path messages are written by; should one ever be, no cached history lies
            self.history_cache.clear()
        try:
            with self.tx() as conn:
                cur = conn.execute(sql, args)
                return int(cur.lastrowid or 0)
        except sqlite3.Error as exc:
            raise StoreError(f"write failed: {exc}") from exc

    # ---------------------------------------------------------------- sessions
    def active_session(self, key: str) -> SessionRow | None:
        return _row(SessionRow, self.one("SELECT * FROM sessions WHERE key = ? AND ended_at IS NULL", (key,)))

    def session(self, session_id: int) -> SessionRow:
        row = _row(SessionRow, self.one("SELECT * FROM sessions WHERE id = ?", (session_id,)))
        if row is None:
            raise StoreError(f"session {session_id} does not exist")
        return row

    def latest_session(self, key: str) -> SessionRow | None:
        return _row(SessionRow, self.one("SELECT * FROM sessions WHERE key = ? ORDER BY id DESC LIMIT 1", (key,)))

    def active_sessions(self) -> list[SessionRow]:
        return [_row(SessionRow, r) for r in self.all("SELECT * FROM sessions WHERE ended_at IS NULL ORDER BY id")]

    def list_sessions(self, *, active: bool | None = None, limit: int = 100) -> list[SessionRow]:
        where = "" if active is None else ("WHERE ended_at IS NULL" if active else "WHERE ended_at IS NOT NULL")
        rows = self.all(f"SELECT * FROM sessions {where} ORDER BY id DESC LIMIT ?", (limit,))
        return [_row(SessionRow, r) for r in rows]

    def create_session(self, *, key: str, platform: str, chat_type: str, chat_id: str, thread_id: str | None,
                       user_id: str | None, parent_id: int | None, model: str | None, provider: str | None,
                       now: datetime) -> SessionRow:
        sid = self.execute(
            "INSERT INTO sessions (key, platform, chat_type, chat_id, thread_id, user_id, parent_id, created_at,"
            " model, provider) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (key, platform, chat_type, chat_id, thread_id, user_id, parent_id, iso(now), model, provider))
        return self.session(sid)

    def store_prompt(self, session_id: int, prompt: str, *, now: datetime, reason: str | None = None,
                     model: str | None = None, provider: str | None = None) -> None:
        """Write the session's system prompt bytes; `reason` is set on a rebuild (compression, model change)."""
        self.execute(
            "UPDATE sessions SET system_prompt = ?, prompt_built_at = ?, prompt_rebuild_reason = COALESCE(?, prompt_rebuild_reason),"
            " prompt_rebuilds = prompt_rebuilds + (? IS NOT NULL), model = COALESCE(?, model), provider = COALESCE(?, provider)"
            " WHERE id = ?", (prompt, iso(now), reason, reason, model, provider, session_id))

    def touch_user(self, session_id: int, now: datetime) -> None:
        self.execute("UPDATE sessions SET last_user_at = ? WHERE id = ?", (iso(now), session_id))

    def start_turn(self, inbound_id: int, session_id: int, *, now: datetime, touch_user: bool) -> None:
        """The inbound is running; and a person's message counts as the session's latest: one transaction."""
        with self.tx() as conn:
            conn.execute("UPDATE inbound SET status = 'running', finished_at = NULL WHERE id = ?", (inbound_id,))
            if touch_user:
                conn.execute("UPDATE sessions SET last_user_at = ? WHERE id = ?", (iso(now), session_id))

    def end_session(self, session_id: int, *, reason: str, now: datetime, flush_state: str | None) -> bool:
        """Close a session once; returns False if it was already closed (so two closers never both flush)."""
        self.history_cache.drop(session_id)  # no more turns: its history is read once more at most (the flush)
        with self.tx() as conn:
            cur = conn.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ?, flush_state = COALESCE(flush_state, ?)"
                " WHERE id = ? AND ended_at IS NULL", (iso(now), reason, flush_state, session_id))
            return cur.rowcount == 1

    def add_usage(self, session_id: int | None, usage: Usage, *, purpose: str, provider: str, model: str,
                  now: datetime) -> None:
        with self.tx() as conn:
            self._insert_call(conn, session_id, ModelCall(usage, purpose, provider, model), now)

    @staticmethod
    def _insert_call(conn: sqlite3.Connection, session_id: int | None, call: ModelCall, now: datetime) -> None:
        usage = call.usage
        conn.execute(
            "INSERT INTO llm_calls (session_id, purpose, provider, model, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, call.purpose, call.provider, call.model, usage.input_tokens, usage.output_tokens,
             usage.cache_read_tokens, usage.cache_write_tokens, iso(now)))
        if session_id is not None:
            conn.execute(
                "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
                " cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?"
                " WHERE id = ?", (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
                                  usage.cache_write_tokens, session_id))

    # ---------------------------------------------------------------- messages
    def add_message(self, session_id: int, role: str, content: str, *, now: datetime,
                    tool_calls: list[dict[str, Any]] | None = None, tool_call_id: str | None = None,
                    user_id: str | None = None, user_name: str | None = None,
                    platform_message_id: str | None = None, kind: str = "chat", turn_id: str | None = None) -> int:
        message = {"role": role, "content": content, "tool_calls": tool_calls, "tool_call_id": tool_call_id,
                   "user_id": user_id, "user_name": user_name, "platform_message_id": platform_message_id}
        try:
            with self.tx() as conn:
                return self._insert_messages(conn, session_id, [message], now=now, kind=kind, turn_id=turn_id)
        except sqlite3.Error as exc:
            raise StoreError(f"write failed: {exc}") from exc

    def add_messages(self, session_id: int, messages: Sequence[dict[str, Any]], *, now: datetime,
                     turn_id: str | None = None, kind: str = "chat") -> None:
        """Append one turn's messages atomically: a turn is stored whole or not at all."""
        with self.tx() as conn:
            self._insert_messages(conn, session_id, messages, now=now, kind=kind, turn_id=turn_id)

    def _insert_messages(self, conn: sqlite3.Connection, session_id: int, messages: Sequence[dict[str, Any]], *,
                         now: datetime, kind: str, turn_id: str | None) -> int:
        """Insert neutral chat messages (role, content, tool calls…) inside the caller's transaction."""
        last = 0
        created = iso(now)
        views = []
        for m in messages:
            content = m.get("content") or ""
            calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else None
            cur = conn.execute(
                "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, user_id, user_name,"
                " platform_message_id, created_at, kind, turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, m["role"], content, calls, m.get("tool_call_id"), m.get("user_id"), m.get("user_name"),
                 m.get("platform_message_id"), created, kind, turn_id))
            last = int(cur.lastrowid or 0)
            views.append(chat_view(m["role"], content, calls, m.get("tool_call_id")))
        if kind in HISTORY_KINDS:
            self.history_cache.stage(session_id, views)
        return last

    def history(self, session_id: int, *, kinds: Sequence[str] = HISTORY_KINDS) -> list[MessageRow]:
        marks = ",".join("?" * len(kinds))
        rows = self.all(f"SELECT * FROM messages WHERE session_id = ? AND active = 1 AND kind IN ({marks})"
                        " ORDER BY id", (session_id, *kinds))
        return [_row(MessageRow, r) for r in rows]

    def chat_history(self, session_id: int) -> list[ChatView]:
        """The session's active chat and summary messages as chat messages, oldest first: `history()` as
        transcript.history_messages sees it, kept decoded between turns for recently used sessions (a turn
        otherwise re-reads every row). The list and its dicts are the caller's to change."""
        self._forget_if_changed_elsewhere()
        cached = self.history_cache.get(session_id)
        if cached is not None:
            return cached
        try:
            cur = self.conn.cursor()
            cur.row_factory = None
            rows = cur.execute("SELECT role, content, tool_calls, tool_call_id FROM messages WHERE session_id = ?"
                               " AND active = 1 AND kind IN ('chat', 'summary') ORDER BY id", (session_id,)).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"query failed: {exc}") from exc
        views = [chat_view(*r) for r in rows]
        self.history_cache.put(session_id, views)  # keeps its own compact copy
        return views

    def _read_data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def _forget_if_changed_elsewhere(self) -> None:
        """Another connection (a second process, another Store on the file) committed: cached histories may be
        stale. SQLite bumps `data_version` for exactly that, and never for this connection's own commits."""
        version = self._read_data_version()
        if version != self._data_version:
            self.history_cache.clear()
            self._data_version = version

    def count_messages(self, session_id: int, roles: Sequence[str] = ("user", "assistant")) -> int:
        marks = ",".join("?" * len(roles))
        row = self.one(f"SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1 AND kind = 'chat'"
                       f" AND role IN ({marks})", (session_id, *roles))
        return int(row[0]) if row else 0

    def deactivate_messages(self, ids: Sequence[int]) -> None:
        self.history_cache.clear()
        with self.tx() as conn:
            conn.executemany("UPDATE messages SET active = 0 WHERE id = ?", [(i,) for i in ids])

    def compress_history(self, session_id: int, *, dropped: Sequence[int], tail: Sequence[MessageRow],
                         summary: str, now: datetime) -> int:
        """Context compression in one transaction; returns the summary's id.

        The dropped messages leave the context (active = COMPRESSED: session_search still finds them, since the
        summary keeps only the gist); the summary (kind 'summary') and fresh copies of the kept tail are appended
        and the tail's originals go inactive (0: their copies are the searchable ones), so `ORDER BY id` stays
        the conversation's order. Nothing is deleted: the originals stay for the record.
        """
        self.history_cache.drop(session_id)
        with self.tx() as conn:
            conn.executemany(f"UPDATE messages SET active = {COMPRESSED} WHERE id = ?", [(i,) for i in dropped])
            conn.executemany("UPDATE messages SET active = 0 WHERE id = ?", [(r.id,) for r in tail])
            cur = conn.execute("INSERT INTO messages (session_id, role, content, created_at, kind)"
                               " VALUES (?, 'user', ?, ?, 'summary')", (session_id, summary, iso(now)))
            for r in tail:
                conn.execute(
                    "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, user_id, user_name,"
                    " platform_message_id, created_at, kind, turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session_id, r.role, r.content, r.tool_calls, r.tool_call_id, r.user_id, r.user_name,
                     r.platform_message_id, r.created_at, r.kind, r.turn_id))
            conn.execute("UPDATE sessions SET compressions = compressions + 1 WHERE id = ?", (session_id,))
            return int(cur.lastrowid or 0)

    def complete_turn(self, session_id: int, messages: Sequence[dict[str, Any]], outbound: Sequence[dict[str, Any]],
                      inbound_id: int | None, *, now: datetime, turn_id: str, calls: Sequence[ModelCall] = ()) -> None:
        """The end of a turn in one transaction: its messages, its reply chunks (unsent), `answered`, and the
        usage of the model call that gave the answer (`calls`; earlier ones were recorded as they happened).

        After a crash either all of it is there (the chunks get sent at boot) or none (the turn runs again).
        """
        with self.tx() as conn:
            self._insert_messages(conn, session_id, messages, now=now, kind="chat", turn_id=turn_id)
            self._insert_outbound(conn, outbound, now)
            for call in calls:
                self._insert_call(conn, session_id, call, now)
            if inbound_id is not None:
                conn.execute("UPDATE inbound SET status = 'answered', finished_at = ?, session_id = ? WHERE id = ?",
                             (iso(now), session_id, inbound_id))

    # ---------------------------------------------------------------- inbound
    def insert_inbound(self, *, platform: str, chat_type: str, chat_id: str, thread_id: str | None,
                       platform_message_id: str, user_id: str, user_name: str | None, text: str, payload: str,
                       received_at: datetime, status: str = "pending") -> int | None:
        """Store an inbound message; None when (platform, chat, message id) was already stored (a redelivery)."""
        try:
            with self.tx() as conn:
                cur = conn.execute(
                    "INSERT INTO inbound (platform, chat_type, chat_id, thread_id, platform_message_id, user_id,"
                    " user_name, text, payload, received_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (platform, chat_id, platform_message_id) DO NOTHING",
                    (platform, chat_type, chat_id, thread_id, platform_message_id, user_id, user_name, text,
                     payload, iso(received_at), status))
                return int(cur.lastrowid) if cur.rowcount == 1 and cur.lastrowid else None
        except sqlite3.Error as exc:
            raise StoreError(f"cannot store inbound message: {exc}") from exc

    def settle_inbound(self, inbound_id: int, status: str, outbound: Sequence[dict[str, Any]], *, now: datetime,
                       session_id: int | None = None) -> None:
        """An inbound's final status and the chunks that answer it (a notice, an error) in one transaction:
        after a crash either both are there or neither, never a final status with its answer lost."""
        with self.tx() as conn:
            self._insert_outbound(conn, outbound, now)
            conn.execute("UPDATE inbound SET status = ?, finished_at = ?, session_id = COALESCE(?, session_id)"
                         " WHERE id = ?", (status, iso(now), session_id, inbound_id))

    def set_inbound_status(self, inbound_id: int, status: str, *, now: datetime,
                           session_id: int | None = None) -> None:
        finished = iso(now) if status not in ("pending", "running") else None
        self.execute("UPDATE inbound SET status = ?, finished_at = ?, session_id = COALESCE(?, session_id)"
                     " WHERE id = ?", (status, finished, session_id, inbound_id))

    def inbound(self, inbound_id: int) -> InboundRow:
        row = _row(InboundRow, self.one("SELECT * FROM inbound WHERE id = ?", (inbound_id,)))
        if row is None:
            raise StoreError(f"inbound {inbound_id} does not exist")
        return row

    def unfinished_inbound(self) -> list[InboundRow]:
        rows = self.all("SELECT * FROM inbound WHERE status IN ('pending', 'running') ORDER BY id")
        return [_row(InboundRow, r) for r in rows]

    def prune_inbound(self, before: datetime) -> int:
        with self.tx() as conn:
            cur = conn.execute("DELETE FROM inbound WHERE received_at < ? AND status NOT IN ('pending', 'running')",
                               (iso(before),))
            return cur.rowcount

    # ---------------------------------------------------------------- outbound
    def insert_outbound(self, rows: Sequence[dict[str, Any]], *, now: datetime) -> None:
        """Record every chunk of one reply before the first is sent (ignored if this turn was recorded already)."""
        with self.tx() as conn:
            self._insert_outbound(conn, rows, now)

    @staticmethod
    def _insert_outbound(conn: sqlite3.Connection, rows: Sequence[dict[str, Any]], now: datetime) -> None:
        for r in rows:
            conn.execute(
                "INSERT INTO outbound (turn_id, chunk_index, chunk_count, platform, chat_type, chat_id, thread_id,"
                " kind, text, plain, entities, reply_to_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (turn_id, chunk_index) DO NOTHING",
                (r["turn_id"], r["chunk_index"], r["chunk_count"], r["platform"], r["chat_type"], r["chat_id"],
                 r["thread_id"], r["kind"], r["text"], r["plain"], r.get("entities"), r.get("reply_to_id"),
                 iso(now)))

    def outbound_for_turn(self, turn_id: str) -> list[OutboundRow]:
        rows = self.all("SELECT * FROM outbound WHERE turn_id = ? ORDER BY chunk_index", (turn_id,))
        return [_row(OutboundRow, r) for r in rows]

    def outbound_chat(self, turn_id: str) -> tuple[str, str] | None:
        """(platform, chat id) of a recorded reply, None when the turn recorded nothing."""
        row = self.one("SELECT platform, chat_id FROM outbound WHERE turn_id = ? LIMIT 1", (turn_id,))
        return None if row is None else (row[0], row[1])

    def next_pending_outbound(self, platform: str, chat_id: str) -> OutboundRow | None:
        """The chat's oldest unsent chunk."""
        return _row(OutboundRow, self.one("SELECT * FROM outbound WHERE status = 'pending' AND platform = ?"
                                          " AND chat_id = ? ORDER BY id LIMIT 1", (platform, chat_id)))

    def pending_outbound(self) -> list[OutboundRow]:
        rows = self.all("SELECT * FROM outbound WHERE status = 'pending' ORDER BY id")
        return [_row(OutboundRow, r) for r in rows]

    def mark_outbound(self, outbound_id: int, status: str, *, now: datetime, platform_message_id: str | None = None,
                      error: str | None = None) -> None:
        self.execute("UPDATE outbound SET status = ?, attempts = attempts + 1, platform_message_id ="
                     " COALESCE(?, platform_message_id), last_error = ?, sent_at = CASE WHEN ? = 'sent' THEN ?"
                     " ELSE sent_at END WHERE id = ?",
                     (status, platform_message_id, error, status, iso(now), outbound_id))

"""Queries on sessions (their stored prompt, activity, end), on model usage (llm_calls), on what
people chose in chat for a conversation or a chat (its model, its voice replies), and on sessions'
fixed tool lists (one row per distinct list, by digest)."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import datetime

from gateway.errors import StoreError
from gateway.events import ChatRef
from gateway.llm.types import Usage
from gateway.store.connection import Database
from gateway.store.rows import ModelCall, SessionRow, _row, iso


class SessionQueries(Database):
    def active_session(self, key: str) -> SessionRow | None:
        return _row(
            SessionRow,
            self.one("SELECT * FROM sessions WHERE key = ? AND ended_at IS NULL", (key,)),
        )

    def session(self, session_id: int) -> SessionRow:
        row = _row(SessionRow, self.one("SELECT * FROM sessions WHERE id = ?", (session_id,)))
        if row is None:
            raise StoreError(f"session {session_id} does not exist")
        return row

    def latest_session(self, key: str) -> SessionRow | None:
        return _row(
            SessionRow,
            self.one("SELECT * FROM sessions WHERE key = ? ORDER BY id DESC LIMIT 1", (key,)),
        )

    def active_sessions(self) -> list[SessionRow]:
        return [
            _row(SessionRow, r)
            for r in self.all("SELECT * FROM sessions WHERE ended_at IS NULL ORDER BY id")
        ]

    def list_sessions(self, *, active: bool | None = None, limit: int = 100) -> list[SessionRow]:
        where = (
            ""
            if active is None
            else ("WHERE ended_at IS NULL" if active else "WHERE ended_at IS NOT NULL")
        )
        rows = self.all(f"SELECT * FROM sessions {where} ORDER BY id DESC LIMIT ?", (limit,))
        return [_row(SessionRow, r) for r in rows]

    def create_session(
        self,
        *,
        key: str,
        platform: str,
        chat_type: str,
        chat_id: str,
        thread_id: str | None,
        user_id: str | None,
        parent_id: int | None,
        model: str | None,
        provider: str | None,
        now: datetime,
        agent: str = "main",
        via: ChatRef | None = None,
    ) -> SessionRow:
        """`via`: the chat as the session's bot account reaches it (its `account`)."""
        account = via.account if via is not None else "default"
        sid = self.execute(
            "INSERT INTO sessions (key, platform, chat_type, "
            "chat_id, thread_id, user_id, parent_id, created_at,"
            " model, provider, agent, account) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                platform,
                chat_type,
                chat_id,
                thread_id,
                user_id,
                parent_id,
                iso(now),
                model,
                provider,
                agent,
                account,
            ),
        )
        self._count_active(+1)
        return self.session(sid)

    def _count_active(self, change: int) -> None:
        """The history cache is sized by the active sessions (counted at open, then kept here)."""
        self.active_count = max(0, self.active_count + change)
        self.history_cache.size_for(self.active_count)

    def store_prompt(
        self,
        session_id: int,
        prompt: str,
        *,
        now: datetime,
        reason: str | None = None,
        model: str | None = None,
        provider: str | None = None,
    ) -> None:
        """Write the session's system prompt bytes; `reason`
        is set on a rebuild (compression, model change)."""
        self.execute(
            "UPDATE sessions SET system_prompt = ?, prompt_built_at = ?, "
            "prompt_rebuild_reason = COALESCE(?, prompt_rebuild_reason),"
            " prompt_rebuilds = prompt_rebuilds + (? IS NOT NULL), model "
            "= COALESCE(?, model), provider = COALESCE(?, provider)"
            " WHERE id = ?",
            (prompt, iso(now), reason, reason, model, provider, session_id),
        )

    def touch_user(self, session_id: int, now: datetime) -> None:
        self.execute("UPDATE sessions SET last_user_at = ? WHERE id = ?", (iso(now), session_id))

    def mark_running(self, inbound_id: int) -> None:
        """A queued message's turn starts (one whose turn started at once was stored `running`).
        When the person wrote (the session's `last_user_at`) is stored with the turn's end, in the
        transaction it writes anyway."""
        self.execute(
            "UPDATE inbound SET status = 'running', finished_at = NULL"
            " WHERE id = ? AND status = 'pending'",
            (inbound_id,),
        )

    def end_session(
        self, session_id: int, *, reason: str, now: datetime, flush_state: str | None
    ) -> bool:
        """Close a session once; returns False if it was
        already closed (so two closers never both flush)."""
        # no more turns: its history is read once more at most (the flush)
        self.history_cache.drop(session_id)
        with self.tx() as conn:
            cur = conn.execute(
                "UPDATE sessions SET ended_at = ?, end_reason "
                "= ?, flush_state = COALESCE(flush_state, ?)"
                " WHERE id = ? AND ended_at IS NULL",
                (iso(now), reason, flush_state, session_id),
            )
            ended = cur.rowcount == 1
        if ended:
            self._count_active(-1)
        return ended

    def add_usage(
        self,
        session_id: int | None,
        usage: Usage,
        *,
        purpose: str,
        provider: str,
        model: str,
        now: datetime,
    ) -> None:
        with self.tx() as conn:
            if (
                session_id is not None
                and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                return  # deleted while it ran (its person forgotten): no usage row points at it
            insert_call(conn, session_id, ModelCall(usage, purpose, provider, model), now)


def insert_call(
    conn: sqlite3.Connection,
    session_id: int | None,
    call: ModelCall,
    now: datetime,
    touched_at: datetime | None = None,
) -> None:
    """A model call's row and its session's totals; `touched_at`: the person's message the turn
    answers, as the session's `last_user_at` (the same statement: a turn's end writes one row of
    sessions once)."""
    usage = call.usage
    conn.execute(
        "INSERT INTO llm_calls (session_id, purpose, provider, model, input_tokens, output_tokens,"
        " cache_read_tokens, cache_write_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session_id,
            call.purpose,
            call.provider,
            call.model,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            iso(now),
        ),
    )
    if session_id is not None:
        conn.execute(
            "UPDATE sessions SET input_tokens = input_tokens "
            "+ ?, output_tokens = output_tokens + ?,"
            " cache_read_tokens = cache_read_tokens + ?,"
            " cache_write_tokens = cache_write_tokens + ?,"
            " last_user_at = COALESCE(?, last_user_at) WHERE id = ?",
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                iso(touched_at),
                session_id,
            ),
        )


class ChoiceQueries(Database):
    """What people chose in chat: a chat's voice replies (`/voice on|off`) and a conversation's
    model (`/model NAME`, kept by session key: it outlives a reset and a restart)."""

    def chat_voice(self, platform: str, chat_id: str, account: str = "default") -> str | None:
        """ "on", "off", or None when the chat (as one bot account reaches it) left it to
        `voice.replies`."""
        row = self.one(
            "SELECT mode FROM chat_voice WHERE platform = ? AND account = ? AND chat_id = ?",
            (platform, account, chat_id),
        )
        return None if row is None else str(row[0])

    def set_chat_voice(
        self,
        platform: str,
        chat_id: str,
        mode: str | None,
        *,
        now: datetime,
        account: str = "default",
    ) -> None:
        if mode is None:
            self.execute(
                "DELETE FROM chat_voice WHERE platform = ? AND account = ? AND chat_id = ?",
                (platform, account, chat_id),
            )
            return
        self.execute(
            "INSERT INTO chat_voice (platform, account, chat_id, mode, set_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (platform, account, chat_id)"
            " DO UPDATE SET mode = excluded.mode,"
            " set_at = excluded.set_at",
            (platform, account, chat_id, mode, iso(now)),
        )

    def model_choice(self, key: str) -> str | None:
        """The `models:` name this conversation switched to; None: the main model."""
        row = self.one("SELECT name FROM session_models WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_model_choice(self, key: str, name: str | None, *, now: datetime) -> None:
        if name is None:
            self.execute("DELETE FROM session_models WHERE key = ?", (key,))
            return
        self.execute(
            "INSERT INTO session_models (key, name, set_at) VALUES (?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET name = excluded.name,"
            " set_at = excluded.set_at",
            (key, name, iso(now)),
        )


class ToolListQueries(Database):
    def tool_list_id(self, specs: str, *, now: datetime) -> int:
        """The id of the list whose JSON is exactly `specs`, stored now if it is new."""
        digest = hashlib.sha256(specs.encode()).hexdigest()
        self.execute(
            "INSERT INTO tool_lists (digest, specs, created_at) "
            "VALUES (?, ?, ?) ON CONFLICT(digest) DO NOTHING",
            (digest, specs, iso(now)),
        )
        row = self.one("SELECT id FROM tool_lists WHERE digest = ?", (digest,))
        if row is None:
            raise StoreError("tool list vanished right after it was stored")
        return int(row["id"])

    def tool_list(self, list_id: int) -> str:
        row = self.one("SELECT specs FROM tool_lists WHERE id = ?", (list_id,))
        if row is None:
            raise StoreError(f"tool list {list_id} does not exist")
        return str(row["specs"])

    def fix_tool_list(self, session_id: int, list_id: int) -> None:
        self.execute("UPDATE sessions SET tool_list_id = ? WHERE id = ?", (list_id, session_id))

    def latest_tool_list(self, platform: str) -> int | None:
        """The list the newest session on `platform` got
        (for logging a change once, across restarts too)."""
        row = self.one(
            "SELECT tool_list_id FROM sessions WHERE platform = ? AND tool_list_id IS NOT NULL"
            " ORDER BY id DESC LIMIT 1",
            (platform,),
        )
        return None if row is None else int(row["tool_list_id"])

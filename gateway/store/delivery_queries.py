"""Queries on the delivery log: inbound messages (stored before the platform is acknowledged) and
outbound chunks (recorded before the first is sent, marked as each goes), and the live previews an
answer replaces."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gateway.errors import StoreError, TurnGone
from gateway.store.connection import Database
from gateway.store.rows import InboundRow, OutboundRow, _row, iso


class DeliveryQueries(Database):
    def insert_inbound(
        self,
        *,
        platform: str,
        chat_type: str,
        chat_id: str,
        thread_id: str | None,
        platform_message_id: str,
        user_id: str,
        user_name: str | None,
        text: str,
        payload: str,
        received_at: datetime,
        status: str = "pending",
        account: str = "default",
    ) -> int | None:
        """Store an inbound message; None when (platform, account, chat, message id) was already
        stored (a redelivery; two bots in one chat each see the message once)."""
        try:
            with self.tx() as conn:
                cur = conn.execute(
                    "INSERT INTO inbound (platform, chat_type, "
                    "chat_id, thread_id, platform_message_id, user_id,"
                    " user_name, text, payload, received_at, status, account)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (platform, account, chat_id, platform_message_id) DO NOTHING",
                    (
                        platform,
                        chat_type,
                        chat_id,
                        thread_id,
                        platform_message_id,
                        user_id,
                        user_name,
                        text,
                        payload,
                        iso(received_at),
                        status,
                        account,
                    ),
                )
                return int(cur.lastrowid) if cur.rowcount == 1 and cur.lastrowid else None
        except sqlite3.Error as exc:
            raise StoreError(f"cannot store inbound message: {exc}") from exc

    def settle_inbound(
        self,
        inbound_id: int,
        status: str,
        outbound: Sequence[dict[str, Any]],
        *,
        now: datetime,
        session_id: int | None = None,
        touched_at: datetime | None = None,
    ) -> None:
        """An inbound's final status and the chunks that answer it (a notice, an error) in one
        transaction: after a crash either both are there or neither, never a final status with its
        answer lost. With `touched_at`, the session's `last_user_at` too (the turn's start: the
        person wrote)."""
        with self.tx() as conn:
            cur = conn.execute(
                "UPDATE inbound SET status = ?, finished_at "
                "= ?, session_id = COALESCE(?, session_id)"
                " WHERE id = ? AND status != 'forgotten'",
                (status, iso(now), session_id, inbound_id),
            )
            if cur.rowcount == 0:
                raise TurnGone(f"inbound {inbound_id} was deleted: its answer is not recorded")
            insert_outbound(conn, outbound, now)
            if session_id is not None:
                touch_session(conn, session_id, touched_at)

    def set_inbound_status(
        self,
        inbound_id: int,
        status: str,
        *,
        now: datetime,
        session_id: int | None = None,
        touched: tuple[int, datetime] | None = None,
    ) -> None:
        """`touched`: (session id, when) of a turn that ended without storing anything (cut off,
        crashed): the person still wrote, and the session's `last_user_at` says so."""
        finished = iso(now) if status not in ("pending", "running") else None
        with self.tx() as conn:
            conn.execute(
                "UPDATE inbound SET status = ?, finished_at = ?,"
                " session_id = COALESCE(?, session_id)"
                " WHERE id = ? AND status != 'forgotten'",
                (status, finished, session_id, inbound_id),
            )
            if touched is not None:
                touch_session(conn, *touched)

    def inbound(self, inbound_id: int) -> InboundRow:
        row = _row(InboundRow, self.one("SELECT * FROM inbound WHERE id = ?", (inbound_id,)))
        if row is None or row.status == "forgotten":
            # its sender was forgotten (gateway/knowledge/forget.py)
            raise TurnGone(f"inbound {inbound_id} does not exist")
        return row

    def unfinished_inbound(self) -> list[InboundRow]:
        rows = self.all("SELECT * FROM inbound WHERE status IN ('pending', 'running') ORDER BY id")
        return [_row(InboundRow, r) for r in rows]

    def prune_inbound(self, before: datetime) -> int:
        """Old answered rows go, but never the newest: SQLite gives a new row the highest id in use
        plus one, so after a quiet spell longer than the retention the next message would get id 1
        again, and with it the turn id (t1) of an answer recorded long ago, and its own answer would
        never be sent."""
        with self.tx() as conn:
            cur = conn.execute(
                "DELETE FROM inbound WHERE received_at < ? AND status NOT IN ('pending', 'running')"
                " AND id < (SELECT MAX(id) FROM inbound)",
                (iso(before),),
            )
            return cur.rowcount

    def insert_outbound(self, rows: Sequence[dict[str, Any]], *, now: datetime) -> None:
        """Record every chunk of one reply before the first is sent (ignored if this turn was
        recorded already)."""
        with self.tx() as conn:
            insert_outbound(conn, rows, now)

    def outbound_for_turn(self, turn_id: str) -> list[OutboundRow]:
        rows = self.all("SELECT * FROM outbound WHERE turn_id = ? ORDER BY chunk_index", (turn_id,))
        return [_row(OutboundRow, r) for r in rows]

    def outbound_chat(self, turn_id: str) -> tuple[str, str, str] | None:
        """(platform, account, chat id) of a recorded reply, None when the turn recorded nothing."""
        row = self.one(
            "SELECT platform, account, chat_id FROM outbound WHERE turn_id = ? LIMIT 1", (turn_id,)
        )
        return None if row is None else (row[0], row[1], row[2])

    def next_pending_outbound(
        self, platform: str, account: str, chat_id: str
    ) -> OutboundRow | None:
        """The chat's oldest unsent chunk (the chat as one bot account reaches it)."""
        return _row(
            OutboundRow,
            self.one(
                "SELECT * FROM outbound WHERE status = 'pending' AND platform = ?"
                " AND account = ? AND chat_id = ? ORDER BY id LIMIT 1",
                (platform, account, chat_id),
            ),
        )

    def pending_outbound(self) -> list[OutboundRow]:
        rows = self.all(
            "SELECT * FROM outbound INDEXED BY outbound_pending_chat"
            " WHERE status = 'pending' ORDER BY id"
        )  # the few unsent, not the table
        return [_row(OutboundRow, r) for r in rows]

    def mark_outbound(
        self,
        outbound_id: int,
        status: str,
        *,
        now: datetime,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> None:
        self.execute(
            "UPDATE outbound SET status = ?, attempts = attempts + 1, platform_message_id ="
            " COALESCE(?, platform_message_id), last_error "
            "= ?, sent_at = CASE WHEN ? = 'sent' THEN ?"
            " ELSE sent_at END WHERE id = ?",
            (status, platform_message_id, error, status, iso(now), outbound_id),
        )

    # ---- live previews: which message shows which part
    # of an answer being written (delivery/previews.py)
    def put_preview(
        self,
        turn_id: str,
        index: int,
        platform: str,
        chat_id: str,
        platform_message_id: str,
        *,
        now: datetime,
        account: str = "default",
    ) -> None:
        self.execute(
            "INSERT INTO previews (turn_id, part_index, platform, chat_id,"
            " platform_message_id, created_at, account) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (turn_id, part_index) DO UPDATE SET"
            " platform_message_id = excluded.platform_message_id",
            (turn_id, index, platform, chat_id, platform_message_id, iso(now), account),
        )

    def previews(self) -> dict[str, dict[int, str]]:
        """Every stored part, by turn: the table holds only turns whose answer is not out yet."""
        found: dict[str, dict[int, str]] = {}
        for row in self.all("SELECT turn_id, part_index, platform_message_id FROM previews"):
            found.setdefault(row["turn_id"], {})[int(row["part_index"])] = row[
                "platform_message_id"
            ]
        return found

    def forget_previews(self, turn_id: str, index: int | None = None) -> None:
        if index is None:
            self.execute("DELETE FROM previews WHERE turn_id = ?", (turn_id,))
        else:
            self.execute(
                "DELETE FROM previews WHERE turn_id = ? AND part_index = ?", (turn_id, index)
            )

    def prune_previews(self, before: datetime) -> int:
        """Parts of turns that never finished (interrupted,
        given up): their messages stay as they are."""
        with self.tx() as conn:
            return conn.execute(
                "DELETE FROM previews WHERE created_at < ?", (iso(before),)
            ).rowcount


def insert_outbound(
    conn: sqlite3.Connection, rows: Sequence[dict[str, Any]], now: datetime
) -> None:
    for r in rows:
        conn.execute(
            "INSERT INTO outbound (turn_id, chunk_index, "
            "chunk_count, platform, chat_type, chat_id, thread_id,"
            " kind, text, plain, entities, reply_to_id, created_at, account)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (turn_id, chunk_index) DO NOTHING",
            (
                r["turn_id"],
                r["chunk_index"],
                r["chunk_count"],
                r["platform"],
                r["chat_type"],
                r["chat_id"],
                r["thread_id"],
                r["kind"],
                r["text"],
                r["plain"],
                r.get("entities"),
                r.get("reply_to_id"),
                iso(now),
                r.get("account", "default"),
            ),
        )


def touch_session(conn: sqlite3.Connection, session_id: int, touched_at: datetime | None) -> None:
    """The session's `last_user_at`: when the person last wrote (a turn's start), inside the
    caller's transaction."""
    if touched_at is not None:
        conn.execute(
            "UPDATE sessions SET last_user_at = ? WHERE id = ?", (iso(touched_at), session_id)
        )

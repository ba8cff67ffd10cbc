"""Queries on the `approvals` table (gateway/store/schema.py), over the gateway's one Store.

A request is stored with its chunks in one transaction (so it is never asked twice, nor lost before
it is sent), and every decision is one conditional UPDATE from `pending`: only one of two taps, a
tap and the expiry, or a tap and /stop can win. Nothing here runs on an ordinary turn.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from gateway.events import ChatRef, ChatType
from gateway.store.database import Store
from gateway.store.delivery_queries import insert_outbound
from gateway.store.rows import _row, iso

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # as pairing codes: no 0/O, 1/I/L
CODE_LENGTH = 6  # pairing codes have 8: `/approve CODE` tells the two apart by length
OPEN_STATES = ("pending", "executing")
# (request id, code) → the outbound rows that ask it
Render = Callable[[int, str], Sequence[dict[str, object]]]


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    id: int
    kind: str  # approval | ask
    token: str
    code: str
    session_id: int
    inbound_id: int
    turn_id: str
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    requester: str
    requester_name: str | None
    tool: str
    call_id: str
    arguments: str  # JSON
    request: str  # the request as shown, without buttons or the text fallback
    options: str | None  # an ask's answers, an approval's decisions if not all (JSON list)
    checkpoint: str  # JSON: the turn as it stood (see gateway/approvals/waits.py)
    state: str
    decision: str | None
    decided_by: str | None
    decided_at: str | None
    result: str | None  # JSON ToolResult of a call that ran
    created_at: str
    expires_at: str
    closed_at: str | None

    @property
    def chat(self) -> ChatRef:
        kind = cast(ChatType, self.chat_type)
        return ChatRef(self.platform, kind, self.chat_id, self.thread_id)

    @property
    def answers(self) -> tuple[str, ...]:
        return tuple(json.loads(self.options)) if self.options else ()

    @property
    def message_turn(self) -> str:
        """The outbound turn id of the message that asks it."""
        return message_turn(self.id)


def message_turn(request_id: int) -> str:
    return f"wait{request_id}"


@dataclass(frozen=True, slots=True)
class NewRequest:
    kind: str
    session_id: int
    inbound_id: int
    turn_id: str
    chat: ChatRef
    requester: str
    requester_name: str | None
    tool: str
    call_id: str
    arguments: dict[str, Any]
    request: str
    options: tuple[str, ...]
    checkpoint: str
    expires_at: datetime


_INSERT = (
    "INSERT INTO approvals (kind, token, code, session_id, inbound_id, turn_id, platform,"
    " chat_type, chat_id, thread_id, requester, requester_name, tool, call_id, arguments,"
    " request, options, checkpoint, created_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# The newest request of each turn whose message is still pending or running: where they go on.
_RESUMABLE = (
    "SELECT a.* FROM approvals a JOIN inbound i ON i.id = a.inbound_id"
    " WHERE i.status IN ('pending', 'running')"
    " AND a.id = (SELECT MAX(b.id) FROM approvals b WHERE b.inbound_id = a.inbound_id)"
    " ORDER BY a.id"
)
_ORPHANS = (
    "SELECT a.* FROM approvals a LEFT JOIN inbound i ON i.id = a.inbound_id"
    " WHERE a.state = 'pending' AND (i.id IS NULL OR i.status NOT IN ('pending', 'running'))"
    " ORDER BY a.id"
)


class ApprovalBook:
    def __init__(self, store: Store) -> None:
        self.store = store

    def open(self, new: NewRequest, render: Render, *, now: datetime) -> ApprovalRow:
        """Store the request and the chunks that ask it, in one transaction; a new token, a code
        unique among the open requests."""
        with self.store.tx() as conn:
            code = self._free_code(conn)
            cur = conn.execute(_INSERT, _values(new, code, now))
            request_id = int(cur.lastrowid or 0)
            insert_outbound(conn, render(request_id, code), now)
        found = self.get(request_id)
        assert found is not None
        return found

    @staticmethod
    def _free_code(conn: sqlite3.Connection) -> str:
        while True:
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            taken = conn.execute(
                "SELECT 1 FROM approvals WHERE code = ? AND state = 'pending'", (code,)
            ).fetchone()
            if taken is None:
                return code

    def get(self, request_id: int) -> ApprovalRow | None:
        return self._one("SELECT * FROM approvals WHERE id = ?", (request_id,))

    def by_token(self, token: str) -> ApprovalRow | None:
        return self._one("SELECT * FROM approvals WHERE token = ?", (token,))

    def by_code(self, platform: str, chat_id: str, code: str) -> ApprovalRow | None:
        """The newest request with this code in this chat (codes are unique only among open
        requests)."""
        return self._one(
            "SELECT * FROM approvals WHERE code = ? AND platform = ? AND chat_id = ?"
            " ORDER BY id DESC LIMIT 1",
            (code.upper(), platform, chat_id),
        )

    def decide(
        self, request_id: int, state: str, decision: str | None, by: str | None, *, now: datetime
    ) -> bool:
        """pending → `state` (executing for a yes: the decision and "executing" in one statement,
        before the call runs); False when something else decided first."""
        with self.store.tx() as conn:
            cur = conn.execute(
                "UPDATE approvals SET state = ?, decision = ?, decided_by = ?,"
                " decided_at = ? WHERE id = ? AND state = 'pending'",
                (state, decision, by, iso(now), request_id),
            )
            return cur.rowcount == 1

    def finish(self, request_id: int, state: str, result: dict[str, Any], *, now: datetime) -> None:
        """executing → done (the call's result, stored before the model is asked again) or
        unknown."""
        stored = json.dumps(result, ensure_ascii=False)
        with self.store.tx() as conn:
            conn.execute(
                "UPDATE approvals SET state = ?, result = ?,"
                " decided_at = COALESCE(decided_at, ?)"
                " WHERE id = ? AND state = 'executing'",
                (state, stored, iso(now), request_id),
            )

    def closed(self, request_id: int, *, now: datetime) -> None:
        self.store.execute(
            "UPDATE approvals SET closed_at = ? WHERE id = ?", (iso(now), request_id)
        )

    def granted(self, session_id: int, tool: str) -> bool:
        """Did someone choose "Allow for this session" for this tool in this session?"""
        found = self.store.one(
            "SELECT 1 FROM approvals WHERE session_id = ? AND tool = ?"
            " AND decision = 'session' LIMIT 1",
            (session_id, tool),
        )
        return found is not None

    def resumable(self) -> list[ApprovalRow]:
        """At boot: the newest request of every turn that has not finished (its message is still
        pending or running): where each of those turns goes on from."""
        return self._all(_RESUMABLE)

    def orphans(self) -> list[ApprovalRow]:
        """Pending requests whose turn is over (stopped, failed, forgotten): nobody waits for their
        answer."""
        return self._all(_ORPHANS)

    def unclosed(self) -> list[ApprovalRow]:
        """Decided requests whose message still shows its buttons (its edit did not go through)."""
        return self._all(
            "SELECT * FROM approvals WHERE closed_at IS NULL AND state != 'pending' ORDER BY id"
        )

    def pending(self, limit: int = 50) -> list[ApprovalRow]:
        return self._all(
            "SELECT * FROM approvals WHERE state = 'pending' ORDER BY id LIMIT ?", (limit,)
        )

    def _one(self, sql: str, args: tuple[object, ...]) -> ApprovalRow | None:
        return _row(ApprovalRow, self.store.one(sql, args))

    def _all(self, sql: str, args: tuple[object, ...] = ()) -> list[ApprovalRow]:
        return [_row(ApprovalRow, r) for r in self.store.all(sql, args)]


def _values(new: NewRequest, code: str, now: datetime) -> tuple[object, ...]:
    chat = new.chat
    options = json.dumps(list(new.options), ensure_ascii=False) if new.options else None
    arguments = json.dumps(new.arguments, ensure_ascii=False)
    return (
        new.kind,
        secrets.token_urlsafe(16),
        code,
        new.session_id,
        new.inbound_id,
        new.turn_id,
        chat.platform,
        chat.chat_type,
        chat.chat_id,
        chat.thread_id,
        new.requester,
        new.requester_name,
        new.tool,
        new.call_id,
        arguments,
        new.request,
        options,
        new.checkpoint,
        iso(now),
        iso(new.expires_at),
    )

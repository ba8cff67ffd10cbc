"""Queries on scheduled jobs and their runs, over the
gateway's one Store (its connection and transactions).

A run is claimed (a `job_runs` row, the job's next run moved on) in one transaction before its turn
starts, and finished in one more that also holds everything it leaves behind: the run's messages,
the record in the chat's session and the reply chunks. So a kill between the two never runs it
again, and never loses a stored answer.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gateway.errors import StoreError
from gateway.events import ChatRef
from gateway.store.database import Store
from gateway.store.delivery_queries import insert_outbound
from gateway.store.rows import ModelCall, _row, iso
from gateway.store.session_queries import insert_call

ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    name: str | None
    prompt: str
    kind: str  # once | cron | every
    spec: str  # the UTC instant (once), the cron expression, or the interval ("90m")
    timezone: str
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    user_id: str
    user_name: str | None
    username: str | None
    space_id: str | None
    roles: str | None  # JSON list of role ids (Discord), as the creator had them
    created_at: str
    state: str  # active | done | cancelled | stopped
    state_reason: str | None
    next_run_at: str | None
    last_run_at: str | None
    runs: int
    run_requested_at: str | None
    agent: str = "main"  # the agent it was made with: its runs are that agent's turns
    account: str = "default"  # the bot account its chat is reached through: its posts go through it

    @property
    def chat(self) -> ChatRef:
        chat_type: Any = self.chat_type
        return ChatRef(self.platform, chat_type, self.chat_id, self.thread_id, self.account)

    @property
    def role_ids(self) -> tuple[str, ...]:
        return tuple(json.loads(self.roles)) if self.roles else ()

    @property
    def title(self) -> str:
        return f'job #{self.id} "{self.name}"' if self.name else f"job #{self.id}"


@dataclass(frozen=True, slots=True)
class RunRow:
    id: int
    job_id: int
    scheduled_for: str
    trigger: str  # schedule | boot | manual
    status: str  # running | done | failed | missed | interrupted
    started_at: str
    finished_at: str | None
    session_id: int | None
    turn_id: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class NewJob:
    name: str | None
    prompt: str
    kind: str
    spec: str
    timezone: str
    chat: ChatRef
    user_id: str
    user_name: str | None
    username: str | None
    space_id: str | None
    roles: tuple[str, ...]
    next_run_at: datetime
    agent: str = "main"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """How a run ended and what it leaves behind, written in the transaction that ends it."""

    status: str
    outbound: Sequence[dict[str, Any]] = ()
    chat_session_id: int | None = None
    chat_messages: Sequence[dict[str, Any]] = ()
    run_session_id: int | None = None
    run_messages: Sequence[dict[str, Any]] = ()
    calls: Sequence[ModelCall] = ()
    turn_id: str | None = None
    error: str | None = None


class JobStore:
    """The `jobs` and `job_runs` tables (migration 0008_jobs); a run's end also writes messages and
    reply chunks, through the Store's in-transaction helpers so the history cache stays in step."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---------------------------------------------------------------- jobs
    def add_job(
        self,
        job: NewJob,
        *,
        now: datetime,
        limit: int,
        owners: Sequence[tuple[str, str | None]] = (),
    ) -> JobRow | None:
        """Store a new active job; None when its creator already has `limit` active ones with its
        agent (checked in the same transaction, so two jobs made at once cannot both slip under it;
        per agent, as a person sees and cancels only that agent's jobs). `owners` are all the
        accounts of the creator, (platform, user id; None: any on that platform), counted as one."""
        accounts = list(owners) or [(job.chat.platform, job.user_id)]
        match = " OR ".join(
            "(platform = ? AND user_id = ?)" if user else "platform = ?" for _, user in accounts
        )
        args = [value for account in accounts for value in account if value is not None]
        with self.store.tx() as conn:
            (count,) = conn.execute(
                f"SELECT COUNT(*) FROM jobs WHERE state = ? AND agent = ? AND ({match})",
                (ACTIVE, job.agent, *args),
            ).fetchone()
            if count >= limit:
                return None
            cur = conn.execute(
                "INSERT INTO jobs (name, prompt, kind, spec, "
                "timezone, platform, chat_type, chat_id, thread_id,"
                " user_id, user_name, username, space_id, roles, created_at, next_run_at, agent,"
                " account) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.name,
                    job.prompt,
                    job.kind,
                    job.spec,
                    job.timezone,
                    job.chat.platform,
                    job.chat.chat_type,
                    job.chat.chat_id,
                    job.chat.thread_id,
                    job.user_id,
                    job.user_name,
                    job.username,
                    job.space_id,
                    json.dumps(list(job.roles)) if job.roles else None,
                    iso(now),
                    iso(job.next_run_at),
                    job.agent,
                    job.chat.account,
                ),
            )
            job_id = int(cur.lastrowid or 0)
        found = self.job(job_id)
        if found is None:
            raise StoreError(f"job {job_id} vanished after it was stored")
        return found

    def job(self, job_id: int) -> JobRow | None:
        return _row(JobRow, self.store.one("SELECT * FROM jobs WHERE id = ?", (job_id,)))

    def jobs_of(
        self, platform: str, user_id: str, *, active_only: bool = True, agent: str | None = None
    ) -> list[JobRow]:
        """A person's jobs (made with `agent` only, when given: one agent never lists another's)."""
        state = "AND state = 'active'" if active_only else ""
        mine = "" if agent is None else "AND agent = ?"
        args = (platform, user_id) if agent is None else (platform, user_id, agent)
        rows = self.store.all(
            f"SELECT * FROM jobs WHERE platform = ? AND user_id = ? {state} {mine} ORDER BY id",
            args,
        )
        return [_row(JobRow, r) for r in rows]

    def list_jobs(self, *, states: Collection[str] | None = None, limit: int = 200) -> list[JobRow]:
        """Jobs for the operator: active ones first, each group oldest first."""
        where, args = "", []
        if states:
            where = f"WHERE state IN ({','.join('?' * len(states))})"
            args = list(states)
        rows = self.store.all(
            f"SELECT * FROM jobs {where} ORDER BY state != 'active', id LIMIT ?", (*args, limit)
        )
        return [_row(JobRow, r) for r in rows]

    def end_job(
        self, job_id: int, state: str, reason: str, *, owner: tuple[str, str, str] | None = None
    ) -> bool:
        """Take an active job out of service (cancelled by its owner or the operator, stopped by the
        gateway); False when it was not active (or, with `owner`: platform, user id, agent, not
        theirs)."""
        mine = " AND platform = ? AND user_id = ? AND agent = ?" if owner else ""
        with self.store.tx() as conn:
            cur = conn.execute(
                f"UPDATE jobs SET state = ?, state_reason = ?, next_run_at = NULL,"
                f" run_requested_at = NULL WHERE id = ? AND state = 'active'{mine}",
                (state, reason, job_id, *(owner or ())),
            )
            return cur.rowcount == 1

    def set_roles(self, job_id: int, roles: tuple[str, ...]) -> None:
        """The creator's roles as the platform says they
        are now (read by the access check of each run)."""
        with self.store.tx() as conn:
            conn.execute(
                "UPDATE jobs SET roles = ? WHERE id = ?",
                (json.dumps(list(roles)) if roles else None, job_id),
            )

    def scheduled_jobs(self) -> list[tuple[int, str, str]]:
        """(id, platform, next run) of every active job
        with a run ahead: what the timers load at boot."""
        cur = self.store.conn.cursor()
        cur.row_factory = None  # plain tuples: ten thousand of them load in a few milliseconds
        return cur.execute(
            "SELECT id, platform, next_run_at FROM jobs WHERE state = 'active'"
            " AND next_run_at IS NOT NULL"
        ).fetchall()

    # ---------------------------------------------------------------- runs
    def claim_run(
        self,
        job_id: int,
        due: str,
        *,
        trigger: str,
        now: datetime,
        next_at: datetime | None,
        record: RunRecord | None = None,
    ) -> int | None:
        """Claim the run due at `due` (the job's stored next run, or its stored run request for
        `manual`) and move the job on to `next_at` (None: a one-off is done); None when it is no
        longer due (claimed already, cancelled, moved). With `record`, the run ends in the same
        transaction (a missed run and its notice)."""
        with self.store.tx() as conn:
            if not _still_due(conn, job_id, due, trigger):
                return None
            cur = conn.execute(
                "INSERT INTO job_runs (job_id, scheduled_for, "
                "trigger, status, started_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (job_id, scheduled_for) DO NOTHING",
                (job_id, due, trigger, "running", iso(now)),
            )
            if cur.rowcount != 1:
                return None
            run_id = int(cur.lastrowid or 0)
            if trigger == "manual":
                conn.execute(
                    "UPDATE jobs SET run_requested_at = NULL, last_run_at = ?, runs = runs + 1"
                    " WHERE id = ?",
                    (iso(now), job_id),
                )
            else:
                conn.execute(
                    "UPDATE jobs SET next_run_at = ?, state = "
                    "CASE WHEN ? IS NULL THEN 'done' ELSE state"
                    " END, last_run_at = ?, runs = runs + 1 WHERE id = ?",
                    (iso(next_at), iso(next_at), iso(now), job_id),
                )
            if record is not None:
                self._finish(conn, run_id, record, now)
            return run_id

    def finish_run(self, run_id: int, record: RunRecord, *, now: datetime) -> bool:
        """End a claimed run with everything it leaves behind, in one transaction; False if it had
        ended already."""
        with self.store.tx() as conn:
            return self._finish(conn, run_id, record, now)

    def _finish(
        self, conn: sqlite3.Connection, run_id: int, record: RunRecord, now: datetime
    ) -> bool:
        cur = conn.execute(
            "UPDATE job_runs SET status = ?, finished_at = ?, session_id = COALESCE(?, session_id),"
            " turn_id = ?, error = ? WHERE id = ? AND status = 'running'",
            (record.status, iso(now), record.run_session_id, record.turn_id, record.error, run_id),
        )
        if cur.rowcount != 1:
            return False
        if record.run_session_id is not None and record.run_messages:
            self.store.insert_messages(
                conn,
                record.run_session_id,
                record.run_messages,
                now=now,
                kind="chat",
                turn_id=record.turn_id,
            )
        if record.chat_session_id is not None and record.chat_messages:
            self.store.insert_messages(
                conn,
                record.chat_session_id,
                record.chat_messages,
                now=now,
                kind="chat",
                turn_id=record.turn_id,
            )
        for call in record.calls:
            insert_call(conn, record.run_session_id, call, now)
        insert_outbound(conn, record.outbound, now)
        return True

    def set_run_session(self, run_id: int, session_id: int) -> None:
        self.store.execute("UPDATE job_runs SET session_id = ? WHERE id = ?", (session_id, run_id))

    def unfinished_runs(self) -> list[RunRow]:
        """Runs claimed and never finished: the process
        died (or was stopped) in the middle of them."""
        return [
            _row(RunRow, r)
            for r in self.store.all("SELECT * FROM job_runs WHERE status = 'running' ORDER BY id")
        ]

    def run(self, run_id: int) -> RunRow | None:
        row = self.store.one("SELECT * FROM job_runs WHERE id = ?", (run_id,))
        return None if row is None else _row(RunRow, row)

    def runs_of(self, job_id: int, *, limit: int = 10) -> list[RunRow]:
        rows = self.store.all(
            "SELECT * FROM job_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?", (job_id, limit)
        )
        return [_row(RunRow, r) for r in rows]

    def end_run_sessions(self, *, now: datetime) -> int:
        """Close the `cron` sessions runs left open (a run's
        session ends with it; a kill can leave one)."""
        with self.store.tx() as conn:
            cur = conn.execute(
                "UPDATE sessions SET ended_at = ?, end_reason "
                "= 'job run over' WHERE platform = 'cron'"
                " AND ended_at IS NULL",
                (iso(now),),
            )
            return cur.rowcount

    def prune_run_sessions(self, *, ended_before: datetime) -> list[int]:
        """Delete the sessions of runs that ended before `ended_before` with their messages (the
        search index follows by its triggers); their runs stay, without a session. Returns the
        deleted session ids."""
        with self.store.tx() as conn:
            ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM sessions WHERE platform = 'cron' "
                    "AND key LIKE 'cron:job%' AND ended_at IS NOT NULL"
                    " AND ended_at < ?",
                    (iso(ended_before),),
                )
            ]
            listed = json.dumps(ids)
            for sql in _PRUNE_SQL:
                conn.execute(sql, (listed,))
        return ids

    # ------------------------------------------------------------- requests from `gateway jobs run`
    def request_run(self, job_id: int, *, now: datetime) -> bool:
        """Ask the daemon to run an active job now (it polls for requests); False when the job is
        not active."""
        with self.store.tx() as conn:
            cur = conn.execute(
                "UPDATE jobs SET run_requested_at = ? WHERE id = ? AND state = 'active'",
                (iso(now), job_id),
            )
            return cur.rowcount == 1

    def requested_runs(self) -> list[tuple[int, str]]:
        return [
            (int(r[0]), str(r[1]))
            for r in self.store.all(
                "SELECT id, run_requested_at FROM jobs WHERE "
                "run_requested_at IS NOT NULL ORDER BY run_requested_at"
            )
        ]

    def drop_request(self, job_id: int, requested_at: str) -> None:
        self.store.execute(
            "UPDATE jobs SET run_requested_at = NULL WHERE id = ? AND run_requested_at = ?",
            (job_id, requested_at),
        )

    # ---------------------------------------------------------------- status
    def job_counts(self, *, since: datetime) -> dict[str, int]:
        """Jobs by state, runs in flight, and runs since `since` by how they ended."""
        counts = {
            f"jobs_{r[0]}": int(r[1])
            for r in self.store.all("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        }
        counts.update(
            {
                f"runs_{r[0]}": int(r[1])
                for r in self.store.all(
                    "SELECT status, COUNT(*) FROM job_runs WHERE status "
                    "= 'running' OR started_at >= ? GROUP BY status",
                    (iso(since),),
                )
            }
        )
        return counts

    def next_job(self) -> JobRow | None:
        return _row(
            JobRow,
            self.store.one(
                "SELECT * FROM jobs WHERE state = 'active' AND next_run_at IS NOT NULL"
                " ORDER BY next_run_at LIMIT 1"
            ),
        )


def _still_due(conn: sqlite3.Connection, job_id: int, due: str, trigger: str) -> bool:
    row = conn.execute(
        "SELECT state, next_run_at, run_requested_at FROM jobs WHERE id = ?", (job_id,)
    ).fetchone()
    if row is None or row[0] != ACTIVE:
        return False
    return bool(row[2] == due) if trigger == "manual" else bool(row[1] == due)


_RUN_SESSIONS = "(SELECT value FROM json_each(?1))"
_PRUNE_SQL = (
    f"DELETE FROM messages WHERE session_id IN {_RUN_SESSIONS}",
    f"UPDATE job_runs SET session_id = NULL WHERE session_id IN {_RUN_SESSIONS}",
    f"UPDATE sessions SET parent_id = NULL WHERE parent_id IN {_RUN_SESSIONS}",
    f"DELETE FROM sessions WHERE id IN {_RUN_SESSIONS}",
)

"""Acting on access changes recorded in the database (`access_events`), wherever they were made.

The CLI only records: `gateway pairing approve` stores the approval, `pairing revoke` the
revocation, `users forget` the erasure. The daemon notices (a cheap poll, and once at start for what
happened while it was down) and acts: a short welcome through the platform the person asked from
(through the outbox, so exactly once), the end of a revoked person's own sessions (flushed as usual)
and of their scheduled jobs, the turns of a forgotten person stopped, the conversations of an
unlinked identity ended (not flushed).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from gateway.access.gate import APPROVED_TEXT
from gateway.delivery.outbox import Outbox
from gateway.errors import StoreUnavailable
from gateway.events import ChatRef
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.people import OWNER_PLATFORMS, personal_owner
from gateway.scheduling.jobstore import JobStore
from gateway.sessions.manager import SessionManager
from gateway.store.database import Store
from gateway.store.rows import SessionRow, _row, iso

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
POLL_EVERY_S = 2.0


class AccessWatch:
    def __init__(
        self,
        *,
        store: Store,
        outbox: Outbox,
        sessions: SessionManager,
        memory: MemoryStore,
        clock: Callable[[], datetime],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.store = store
        self.memory = memory
        self.outbox = outbox
        self.sessions = sessions
        self.clock = clock
        self.sleep = sleep
        self.jobs = JobStore(store)
        # the database took no writes last round (said once until it does again)
        self._waiting = False

    async def run(self, every: float = POLL_EVERY_S) -> None:
        while True:
            self.round()
            await self.sleep(every)

    def round(self) -> None:
        """One poll; what fails is tried again the next round (an event is marked handled only once
        acted on)."""
        try:
            self.handle()
        except StoreUnavailable as exc:
            # locked by another process, or a full disk: routine, no traceback
            if not self._waiting:
                log.warning("access changes wait until the database takes writes (%s)", exc)
            self._waiting = True
            return
        except Exception:  # a task root: the next round tries again
            log.exception("acting on access changes failed")
        self._waiting = False

    def handle(self) -> int:
        """Act on every access event not yet handled; returns how many."""
        rows = self.store.all(
            "SELECT * FROM access_events WHERE handled_at IS NULL ORDER BY id LIMIT 200"
        )
        for row in rows:
            getattr(self, f"_{row['kind']}", self._unknown)(row)
            self.store.execute(
                "UPDATE access_events SET handled_at = ? WHERE id = ?",
                (iso(self.clock()), row["id"]),
            )
        return len(rows)

    def _approved(self, row: Any) -> None:
        if not row["chat_id"]:
            return
        # Recorded before the event is marked handled, under a turn id of its own: a crash in
        # between records the same rows again (a no-op), so the welcome goes out once.
        chat = ChatRef(row["platform"], "dm", row["chat_id"], account=row["account"])  # bot asked
        self.outbox.post_soon(
            f"welcome:{row['id']}",
            chat,
            APPROVED_TEXT,
            # not recorded: the next round tries again, so it is sent once
            unrecorded=False,
        )
        log.info("access: welcome sent to %s:%s after approval", row["platform"], row["user_id"])

    def _revoked(self, row: Any) -> None:
        platform, user_id = row["platform"], row["user_id"]
        ended = 0
        for session in self._own_sessions(platform, user_id):
            self.sessions.stop_turn(session.key)
            ended += self.sessions.end_session(session, "revoked")
        reason = f"{platform}:{user_id} no longer has access"
        jobs = sum(
            self.jobs.end_job(job.id, "stopped", reason)
            for job in self.jobs.jobs_of(platform, user_id)
        )
        log.info(
            "access: %s:%s revoked; %s session(s) ended, %s job(s) stopped",
            platform,
            user_id,
            ended,
            jobs,
        )

    def _forgotten(self, row: Any) -> None:
        """Their running turns stop quietly (one that ends first stores and sends nothing:
        TurnGone), and their profile, which such a turn may have written again after the CLI deleted
        it, goes for good."""
        detail = json.loads(row["detail"] or "[]")
        keys, person = (
            (detail, None)
            if isinstance(detail, list)
            else (detail.get("keys", []), detail.get("person"))
        )
        stopped = sum(self.sessions.stop_turn(str(key)) for key in keys)
        if person is not None:
            self.memory.erase_profile(int(person))
        self.store.history_cache.clear()
        log.info(
            "access: %s:%s forgotten; %s running turn(s) stopped",
            row["platform"],
            row["user_id"],
            stopped,
        )

    def _unlinked(self, row: Any) -> None:
        """An identity left its person: its running conversations end, unflushed. Their prompts
        carry the profile it no longer shares, and a flush would save what they say about that
        person into the new one's profile."""
        platform, user_id = row["platform"], row["user_id"]
        ended = 0
        for session in self._own_sessions(platform, user_id):
            self.sessions.stop_turn(session.key)
            if self.store.end_session(
                session.id, reason="unlinked", now=self.clock(), flush_state=None
            ):
                self.sessions.hooks.session_ended(self.store.session(session.id), "unlinked")
                ended += 1
        log.info("access: %s:%s unlinked; %s session(s) ended", platform, user_id, ended)

    def _unknown(self, row: Any) -> None:
        log.warning("access: unknown access event %r (id %s) ignored", row["kind"], row["id"])

    def _own_sessions(self, platform: str, user_id: str) -> list[SessionRow]:
        where, args = (
            ("platform = ?", (platform,))
            if platform in OWNER_PLATFORMS
            else ("platform = ? AND user_id = ?", (platform, user_id))
        )
        rows = self.store.all(f"SELECT * FROM sessions WHERE ended_at IS NULL AND {where}", args)
        return [s for s in (_row(SessionRow, r) for r in rows) if personal_owner(s) is not None]

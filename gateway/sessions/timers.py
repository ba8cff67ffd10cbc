"""Proactive session expiry: every active session's deadline, one APScheduler job at the earliest,
the flush.

The deadlines live in SQLite (a session's last user message and its policy); at boot they are read
back into an in-memory heap and one `date` job (misfire grace None, coalesce) wakes the sweep at the
earliest one. This is the issue's "equivalent sweep": a job per session costs ~31 µs to add (3.1 s
and ~55 MiB for 100,000, see bench/timers.py --compare-jobs) and a shared daily boundary would start
100,000 job tasks at once; the heap rebuilds in ~0.3 s / 25 MiB and expires a crowd in batches.
Deadlines come from the injected clock.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from gateway.errors import StoreUnavailable
from gateway.sessions.flush import Flusher
from gateway.sessions.lifecycle import Deadline, Policies
from gateway.store.database import Store
from gateway.store.rows import SessionRow

if TYPE_CHECKING:
    from gateway.sessions.manager import SessionManager

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
SWEEP_JOB = "session-deadlines"
# a session whose turn is running when it comes due is looked at again then
BUSY_RECHECK = timedelta(seconds=30)
# a deadline whose work the database would not take (locked, full) comes again
STORE_RETRY = timedelta(seconds=5)
# expiries between yields to the event loop, so a crowd at the daily hour never stalls chats
BATCH = 200


class DeadlineTimers:
    """Deadlines by key (one per active session; scheduled jobs use one per job) in a heap; one
    scheduler job, named `job_id`, at the earliest."""

    def __init__(
        self,
        scheduler: AsyncIOScheduler,
        clock: Clock,
        on_due: Callable[[list[tuple[str, int]]], Awaitable[object]],
        *,
        job_id: str = SWEEP_JOB,
    ) -> None:
        self.scheduler = scheduler
        self.job_id = job_id
        self.clock = clock
        self.on_due = on_due
        self._by_key: dict[str, tuple[int, float]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._armed: float | None = None
        self._sweeping = False

    def __len__(self) -> int:
        return len(self._by_key)

    def load(self, entries: Iterable[tuple[float, int, str]]) -> None:
        """Bulk load (boot): (deadline timestamp, session id, key) for every active session."""
        self._heap = list(entries)
        self._by_key = {key: (sid, at) for at, sid, key in self._heap}
        heapq.heapify(self._heap)

    def deadline(self, key: str) -> datetime | None:
        found = self._by_key.get(key)
        return datetime.fromtimestamp(found[1], UTC) if found else None

    def arm(self, key: str, session_id: int, at: datetime) -> None:
        ts = at.timestamp()
        self._by_key[key] = (session_id, ts)
        heapq.heappush(self._heap, (ts, session_id, key))
        if len(self._heap) > 2 * len(self._by_key) + 1024:
            self.load((at_, sid, k) for k, (sid, at_) in self._by_key.items())
        if self._armed is None or ts < self._armed:
            self.reschedule()

    def disarm(self, key: str, session_id: int) -> None:
        """Forget `key`'s deadline if it still belongs
        to `session_id` (its heap entry goes stale)."""
        found = self._by_key.get(key)
        if found is not None and found[0] == session_id:
            del self._by_key[key]

    def _live_top(self) -> tuple[float, int, str] | None:
        heap = self._heap
        while heap:
            at, sid, key = heap[0]
            if self._by_key.get(key) == (sid, at):
                return heap[0]
            heapq.heappop(heap)
        return None

    def pop_due(self, now: datetime) -> list[tuple[str, int]]:
        """Remove and return (key, session id) of every deadline at or before `now`."""
        limit = now.timestamp()
        due: list[tuple[str, int]] = []
        while (top := self._live_top()) is not None and top[0] <= limit:
            heapq.heappop(self._heap)
            del self._by_key[top[2]]
            due.append((top[2], top[1]))
        return due

    def next_due(self) -> datetime | None:
        top = self._live_top()
        return datetime.fromtimestamp(top[0], UTC) if top else None

    def reschedule(self) -> None:
        """Point the one job at the earliest deadline. The delay is measured on the injected clock
        and then laid on the scheduler's wall clock, so a test that moves its clock just calls this
        again."""
        if self._sweeping or not self.scheduler.running:
            return
        top = self._live_top()
        if top is None:
            if self._armed is not None and self.scheduler.get_job(self.job_id) is not None:
                self.scheduler.remove_job(self.job_id)
            self._armed = None
            return
        delay = max(top[0] - self.clock().timestamp(), 0.0)
        self.scheduler.add_job(
            self._sweep,
            "date",
            run_date=datetime.now(UTC) + timedelta(seconds=delay),
            id=self.job_id,
            replace_existing=True,
            misfire_grace_time=None,
            coalesce=True,
        )
        self._armed = top[0]

    async def _sweep(self) -> None:
        self._sweeping = True
        self._armed = None
        try:
            due = self.pop_due(self.clock())
            if due:
                await self.on_due(due)
        finally:
            self._sweeping = False
            self.reschedule()


class Lifecycle:
    """The SessionManager's hooks: expiry policy, deadline
    timers, and the flush when a session ends."""

    def __init__(
        self,
        *,
        store: Store,
        policies: Policies,
        flusher: Flusher,
        clock: Clock,
        scheduler: AsyncIOScheduler | None = None,
    ) -> None:
        self.store = store
        self.policies = policies
        self.flusher = flusher
        self.clock = clock
        self.scheduler = scheduler or AsyncIOScheduler(timezone=UTC)
        self.timers = DeadlineTimers(self.scheduler, clock, self.expire_due)
        self._busy: Callable[[str], bool] = lambda key: False
        self.started = False

    def attach(self, manager: SessionManager) -> None:
        """Learn which session keys have a turn running, so a deadline never cuts a turn in half."""

        def busy(key: str) -> bool:
            lane = manager.lane(key)
            return lane is not None and lane.worker is not None and not lane.worker.done()

        self._busy = busy

    # ---------------------------------------------------------------- SessionHooks
    def expired(self, session: SessionRow, now: datetime) -> str | None:
        return self.policies.expired(session, now)

    def session_touched(self, session: SessionRow, now: datetime) -> None:
        found = self.policies.session_deadline(session)
        if found is None:
            self.timers.disarm(session.key, session.id)
        else:
            self.timers.arm(session.key, session.id, found.at)

    def session_ended(self, session: SessionRow, reason: str) -> None:
        self.timers.disarm(session.key, session.id)
        log.info("session %s (%s) ended: %s", session.id, session.key, reason)
        self.flusher.request(session.id)

    def deadline(self, session: SessionRow) -> Deadline | None:
        return self.policies.session_deadline(session)

    # ---------------------------------------------------------------- expiry
    async def expire_due(self, due: Sequence[tuple[str, int]]) -> int:
        """End each due session whose deadline really passed
        (by the injected clock); returns how many."""
        ended = 0
        for n, (key, session_id) in enumerate(due, 1):
            try:
                ended += self._expire_one(key, session_id)
            except StoreUnavailable as exc:
                # popped from the heap: armed again, or it would wait for a message
                self.timers.arm(key, session_id, self.clock() + STORE_RETRY)
                log.warning(
                    "session %s could not be ended (%s); trying again in %ss",
                    session_id,
                    exc,
                    STORE_RETRY.seconds,
                )
            if n % BATCH == 0:
                await asyncio.sleep(0)
        return ended

    def _expire_one(self, key: str, session_id: int) -> bool:
        session = self.store.session(session_id)
        if session.ended_at is not None:
            return False
        now = self.clock()
        if self._busy(key):
            self.timers.arm(key, session_id, now + BUSY_RECHECK)
            return False
        found = self.policies.session_deadline(session)
        if found is None:
            return False
        if found.at > now:  # the user wrote in the meantime
            self.timers.arm(key, session_id, found.at)
            return False
        if not self.store.end_session(
            session_id, reason=found.reason, now=now, flush_state="pending"
        ):
            return False
        self.session_ended(self.store.session(session_id), found.reason)
        return True

    # ---------------------------------------------------------------- boot and shutdown
    def rebuild(self) -> list[tuple[str, int]]:
        """Read every active session's deadline back from
        SQLite; returns the overdue ones (not loaded)."""
        now_ts = self.clock().timestamp()
        entries: list[tuple[float, int, str]] = []
        overdue: list[tuple[str, int]] = []
        deadline, parse = self.policies.deadline_ts, datetime.fromisoformat
        for sid, key, platform, chat_type, last, agent in self.store.conn.execute(
            "SELECT id, key, platform, chat_type, COALESCE(last_user_at, created_at), agent"
            " FROM sessions WHERE ended_at IS NULL"
        ):
            found = deadline(platform, chat_type, parse(last).timestamp(), agent)
            if found is None:
                continue
            if found[0] <= now_ts:
                overdue.append((key, sid))
            else:
                entries.append((found[0], sid, key))
        self.timers.load(entries)
        return overdue

    async def start(self) -> None:
        """Resume flushes a stop or crash left behind, rebuild the timers, expire what came due
        while down."""
        resumed = self.flusher.start()
        overdue = self.rebuild()
        self.scheduler.start()
        self.started = True
        self.timers.reschedule()
        ended = await self.expire_due(overdue)
        log.info(
            "lifecycle: %s session deadline(s) armed, %s "
            "overdue session(s) ended, %s flush(es) resumed",
            len(self.timers),
            ended,
            resumed,
        )

    async def stop(self, timeout: float) -> int:
        """Stop the timers, end sessions already past their deadline, and flush within `timeout`
        seconds; returns how many flushes stay pending for the next boot."""
        if self.started and self.scheduler.running:
            self.scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler.shutdown runs via call_soon
        self.started = False
        await self.expire_due(self.timers.pop_due(self.clock()))
        left = await self.flusher.stop(timeout)
        if left:
            log.info("lifecycle: %s flush(es) left pending for the next boot", left)
        return left

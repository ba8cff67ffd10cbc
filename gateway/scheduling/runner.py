"""When jobs run: every active job's next run in one deadline heap (gateway/sessions/timers.py's
DeadlineTimers, with a sweep job of its own), rebuilt from SQLite at boot; runs claimed before they
start; the creator's access asked again at each run.

At boot a run that was claimed and never finished (the process died in it) is reported, not
repeated; a run that came due while the daemon was down runs once if it is within
`schedule.misfire_grace`, else the chat is told it was missed. The same rule holds for a timer that
fires late for any other reason. Only the jobs of the platforms this process serves are armed (the
daemon's adapters; `gateway chat`'s console).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from gateway.config.settings import Config
from gateway.errors import StoreUnavailable
from gateway.events import Inbound, MemberRoles
from gateway.scheduling import text
from gateway.scheduling.jobstore import JobRow, JobStore, RunRow
from gateway.scheduling.turn import JobTurn, origin_of
from gateway.scheduling.when import next_run
from gateway.sessions.timers import STORE_RETRY, DeadlineTimers
from gateway.store.media_files import delete_session_media
from gateway.store.rows import parse_iso

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
SWEEP_JOB = "scheduled-jobs"
# how soon `gateway jobs run ID` (a row the CLI writes) is picked up: wall-clock time, as the CLI's
# own wait for it is, not the injected clock (a test's virtual time would otherwise be pushed on by
# this poll, 2 s a round)
POLL_EVERY_S = 2.0
BATCH = 200  # due jobs handled between yields to the event loop
PRUNE_EVERY = timedelta(hours=1)  # old run sessions are deleted this often (on the injected clock)


@dataclass(frozen=True, slots=True)
class JobScope:
    """Whose jobs this runner serves: those of its process's `platforms`, run only while the gate
    still `allowed` their creator, with `members` telling a member's roles (Discord)."""

    platforms: Collection[str]
    allowed: Callable[[Inbound], bool]
    members: Mapping[str, MemberRoles] = field(default_factory=dict)


class JobRunner:
    def __init__(
        self,
        *,
        jobs: JobStore,
        config: Config,
        turn: JobTurn,
        clock: Clock,
        scope: JobScope,
        scheduler: AsyncIOScheduler | None = None,
    ) -> None:
        self.jobs = jobs
        self.members = dict(scope.members)  # adapter key → what tells a member's roles (Discord)
        self.config = config.schedule
        self.home = config.home
        self.turn = turn
        self.allowed = scope.allowed
        self.clock = clock
        self.platforms = frozenset(scope.platforms)
        self.scheduler = scheduler or AsyncIOScheduler(timezone=UTC)
        self.timers = DeadlineTimers(self.scheduler, clock, self._due, job_id=SWEEP_JOB)
        self.started = False
        self._runs: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(config.schedule.max_concurrent_runs)
        self._poller: asyncio.Task[None] | None = None
        self._pruned_at: datetime | None = None

    # ---------------------------------------------------------------- the book's hook
    def changed(self, job: JobRow) -> None:
        """A job was created, cancelled or stopped: arm its timer, or let the stale one lapse."""
        next_at = parse_iso(job.next_run_at)
        if job.state == "active" and next_at is not None and job.platform in self.platforms:
            self.timers.arm(str(job.id), job.id, next_at)
        else:
            self.timers.disarm(str(job.id), job.id)

    # ---------------------------------------------------------------- boot and shutdown
    async def start(self) -> None:
        """Report runs a kill cut short, rebuild the timers,
        then run or report what came due while down."""
        now = self.clock()
        self.jobs.end_run_sessions(now=now)
        self.prune_if_due()
        cut = [self._interrupted(run) for run in self.jobs.unfinished_runs()]
        overdue = self.rebuild()
        self.scheduler.start()
        self.started = True
        self.timers.reschedule()
        await self._fire_all(overdue, trigger="boot")
        await self.run_requests()
        self._poller = asyncio.get_running_loop().create_task(self._poll(), name="job-requests")
        log.info(
            "jobs: %s armed, %s overdue at boot, %s interrupted run(s) reported",
            len(self.timers),
            len(overdue),
            sum(cut),
        )

    def rebuild(self) -> list[tuple[str, int]]:
        """Load every active job's next run of this process's platforms; returns the overdue ones
        (not loaded)."""
        now_ts = self.clock().timestamp()
        entries: list[tuple[float, int, str]] = []
        overdue: list[tuple[str, int]] = []
        parse = datetime.fromisoformat
        for job_id, platform, next_at in self.jobs.scheduled_jobs():
            if platform not in self.platforms:
                continue
            ts = parse(next_at).timestamp()
            if ts <= now_ts:
                overdue.append((str(job_id), job_id))
            else:
                entries.append((ts, job_id, str(job_id)))
        self.timers.load(entries)
        return overdue

    async def stop(self, timeout: float) -> int:
        """Stop the timers and wait up to `timeout` s for running runs; those cut off are reported
        at the next boot (never run twice). Returns how many were cut off."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self.started and self.scheduler.running:
            self.scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler.shutdown runs via call_soon
        self.started = False
        if not self._runs:
            return 0
        _, pending = await asyncio.wait(set(self._runs), timeout=timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if pending:
            log.warning(
                "jobs: %s run(s) cut off by the shutdown; reported at the next start", len(pending)
            )
        return len(pending)

    async def wait_idle(self) -> None:
        """Wait for the runs started so far (tests, and the drain)."""
        while self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)

    # ---------------------------------------------------------------- firing
    async def _due(self, due: Sequence[tuple[str, int]]) -> None:
        await self._fire_all(due, trigger="schedule")

    async def _fire_all(self, due: Sequence[tuple[str, int]], *, trigger: str) -> None:
        # one lookup per person and server per sweep
        asked: dict[tuple[str, str, str], tuple[str, ...] | None] = {}
        for n, (_, job_id) in enumerate(due, 1):
            try:
                await self.recheck_member(job_id, asked)
                self.fire(job_id, trigger=trigger)
            except StoreUnavailable as exc:
                # its timer is spent: armed again, or it would run only after a restart
                self.timers.arm(str(job_id), job_id, self.clock() + STORE_RETRY)
                log.warning(
                    "job %s could not be fired (%s); trying again in %ss",
                    job_id,
                    exc,
                    STORE_RETRY.seconds,
                )
            except Exception:  # a task root for one job: the others still fire
                log.exception("job %s could not be fired", job_id)
            if n % BATCH == 0:
                await asyncio.sleep(0)

    def fire(self, job_id: int, *, trigger: str = "schedule") -> None:
        """The job's next run is due (or overdue): run it, or report it missed, or stop the job."""
        job = self.jobs.job(job_id)
        due = parse_iso(job.next_run_at) if job is not None and job.state == "active" else None
        if job is None or due is None:
            return
        now = self.clock()
        if due > now:  # not yet (moved, or the clock was read early): wait for it
            self.changed(job)
            return
        if self._revoked(job, now):
            return
        following = next_run(job.kind, job.spec, job.timezone, due, now)
        if now - due > self.config.grace:
            self._missed(job, due, following, now, trigger)
        else:
            run_id = self.jobs.claim_run(
                job.id, job.next_run_at or "", trigger=trigger, now=now, next_at=following
            )
            if run_id is not None:
                self._start_run(job, run_id, due)
        fresh = self.jobs.job(job.id)
        if fresh is not None:
            self.changed(fresh)

    async def recheck_member(
        self, job_id: int, asked: dict[tuple[str, str, str], tuple[str, ...] | None] | None = None
    ) -> None:
        """Before a run, where the platform can tell (Discord, Slack): the creator's server roles as
        they are now, so a role taken away (or the server left, the Slack account deactivated)
        counts at the access check as it would for a message; when the
        platform cannot be asked, the roles the job last had are used."""
        job = self.jobs.job(job_id)
        source = self.members.get(job.chat.adapter_key) if job and job.space_id else None
        if job is None or job.space_id is None or source is None or job.state != "active":
            return
        key = (job.platform, job.space_id, job.user_id)
        try:
            roles = (
                asked[key]
                if asked is not None and key in asked
                else await source.member_roles(job.space_id, job.user_id)
            )
        except Exception as exc:  # noqa: BLE001 - the check falls back to the stored roles; the run goes on
            log.info(
                "job %s: cannot ask %s about %s's roles now (%s); using the ones it has",
                job.id,
                job.platform,
                job.user_id,
                exc,
            )
            return
        if asked is not None:
            asked[key] = roles
        if roles is None:
            self._stop(
                job,
                f"{job.platform}:{job.user_id} is no longer a member of {source.space_noun} "
                f"{job.space_id}",
            )
        elif sorted(roles) != sorted(job.role_ids):
            self.jobs.set_roles(job.id, tuple(roles))

    def _stop(self, job: JobRow, reason: str) -> None:
        if self.jobs.end_job(job.id, "stopped", reason):
            log.warning("job %s stopped: %s", job.id, reason)
            self.timers.disarm(str(job.id), job.id)

    def _revoked(self, job: JobRow, now: datetime) -> bool:
        """Ask the gate about the creator as it would about
        a message from them; a refusal stops the job."""
        if self.allowed(origin_of(job, now)):
            return False
        self._stop(job, f"{job.platform}:{job.user_id} no longer has access")
        return True

    def _missed(
        self, job: JobRow, due: datetime, following: datetime | None, now: datetime, trigger: str
    ) -> None:
        late = text.missed(job, due, following)
        record = self.turn.posting(
            job,
            due,
            f"jm{job.id}@{job.next_run_at}",
            late,
            "it was missed",
            status="missed",
            error=f"{now - due} late, past the grace of {self.config.misfire_grace}",
        )
        if (
            self.jobs.claim_run(
                job.id,
                job.next_run_at or "",
                trigger=trigger,
                now=now,
                next_at=following,
                record=record,
            )
            is not None
        ):
            log.warning(
                "job %s missed its run due %s (%s late)", job.id, job.next_run_at, now - due
            )
            self.turn.outbox.deliver_soon(record.turn_id or "")

    def _interrupted(self, run: RunRow) -> int:
        job = self.jobs.job(run.job_id)
        if job is None:
            return 0
        due = parse_iso(run.scheduled_for) or self.clock()
        notice = text.interrupted(job, self.turn.following(job.id))
        record = self.turn.posting(
            job,
            due,
            f"ji{run.id}",
            notice,
            "a restart cut it short",
            status="interrupted",
            error="the process stopped during the run",
        )
        if not self.jobs.finish_run(run.id, record, now=self.clock()):
            return 0
        log.warning(
            "job %s run %s was cut short by a restart; reported, not run again", job.id, run.id
        )
        self.turn.outbox.deliver_soon(record.turn_id or "")
        return 1

    def _start_run(self, job: JobRow, run_id: int, due: datetime) -> None:
        task = asyncio.get_running_loop().create_task(
            self._run(job, run_id, due), name=f"job:{job.id}:{run_id}"
        )
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    async def _run(self, job: JobRow, run_id: int, due: datetime) -> None:
        async with self._slots:
            try:
                await self.turn.run(job, run_id, due)
            except asyncio.CancelledError:
                raise
            except Exception:
                # a task root for one run: it stays `running` and is reported at the next start
                log.exception("job %s run %s crashed", job.id, run_id)

    # ---------------------------------------------------------------- `gateway jobs run ID`
    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_EVERY_S)
            try:
                await self.run_requests()
                self.prune_if_due()
            except StoreUnavailable as exc:  # the request stays; the next poll asks again
                log.warning("job run requests wait: %s", exc)
            except Exception:
                log.exception("reading job run requests failed")

    def prune_if_due(self) -> int:
        """Delete the sessions of runs older than `schedule.keep_run_sessions` (and their media),
        once an hour."""
        now = self.clock()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return 0
        self._pruned_at = now
        ids = self.jobs.prune_run_sessions(ended_before=now - self.config.run_sessions_kept)
        delete_session_media(self.home, ids)
        if ids:
            log.info(
                "jobs: deleted %s run session(s) older than %s",
                len(ids),
                self.config.keep_run_sessions,
            )
        return len(ids)

    async def run_requests(self) -> int:
        """Run the jobs the operator asked for; a request
        older than the grace (the daemon was down) lapses."""
        started = 0
        for job_id, requested in self.jobs.requested_runs():
            job = self.jobs.job(job_id)
            if job is None or job.platform not in self.platforms:
                continue
            now = self.clock()
            asked = parse_iso(requested) or now
            if now - asked > self.config.grace:
                log.warning(
                    "job %s: run request from %s lapsed (older than %s)",
                    job_id,
                    requested,
                    self.config.misfire_grace,
                )
                self.jobs.drop_request(job_id, requested)
                continue
            await self.recheck_member(job_id)
            job = self.jobs.job(job_id)
            if job is not None and job.state == "active" and not self._revoked(job, now):
                run_id = self.jobs.claim_run(
                    job_id, requested, trigger="manual", now=now, next_at=None
                )
                if run_id is not None:
                    self._start_run(job, run_id, asked)
                    started += 1
        return started

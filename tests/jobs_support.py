"""Helpers for the scheduled-jobs tests: wake the jobs' sweep through APScheduler's real executor,
read rows.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent

from gateway.ops.wiring import Gateway
from gateway.scheduling.runner import SWEEP_JOB


async def fire_jobs(gw: Gateway) -> bool:
    """Point the jobs' sweep job at the earliest next run (by the injected clock), move it to now
    (TESTING.md §5: `modify_job` wakes the scheduler), wait for APScheduler's executor to run it,
    then for the runs it started and their sends. False when no job was armed at all. A job not yet
    due by the injected clock stays put."""
    runner = gw.jobs
    assert runner is not None and runner.started
    scheduler = runner.scheduler
    runner.timers.reschedule()
    if scheduler.get_job(SWEEP_JOB) is None:
        return False
    done: asyncio.Future[JobExecutionEvent] = asyncio.get_running_loop().create_future()

    def listener(event: JobExecutionEvent) -> None:
        if event.job_id == SWEEP_JOB and not done.done():
            done.set_result(event)

    scheduler.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    try:
        scheduler.modify_job(SWEEP_JOB, next_run_time=datetime.now(UTC))
        event = await asyncio.wait_for(done, 10)
    finally:
        scheduler.remove_listener(listener)
    assert event.exception is None
    await settle(gw)
    return True


async def settle(gw: Gateway) -> None:
    """Wait for job runs, queued turns and background sends to finish."""
    for _ in range(3):
        if gw.jobs is not None:
            await gw.jobs.wait_idle()
        await gw.sessions.wait_idle()
        await gw.outbox.wait_background()
        await asyncio.sleep(0)


def job_rows(gw: Gateway) -> list[dict[str, Any]]:
    return [dict(r) for r in gw.store.all("SELECT * FROM jobs ORDER BY id")]


def run_rows(gw: Gateway) -> list[dict[str, Any]]:
    return [dict(r) for r in gw.store.all("SELECT * FROM job_runs ORDER BY id")]


def armed_at(gw: Gateway) -> datetime | None:
    """When the sweep job will next wake, on the scheduler's (wall) clock."""
    assert gw.jobs is not None
    job = gw.jobs.scheduler.get_job(SWEEP_JOB)
    return None if job is None else job.next_run_time

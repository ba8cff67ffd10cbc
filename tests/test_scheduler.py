"""Deadline timers: armed from the injected clock, fired through APScheduler's real executor,
rebuilt from SQLite after a restart (overdue ones handled at boot), and a crowd of overdue sessions
flushed at a throttled pace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent

from gateway.config.settings import load_config
from gateway.ops.wiring import Gateway
from gateway.sessions.timers import SWEEP_JOB
from gateway.store.database import Store
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, inbound, llm_url, write_config
from tests.lifecycle_support import START, FakeClock, GatedLLM, open_gateway, seed_session

KEY = "cli:dm:c1"


async def until(predicate: Callable[[], bool], *, rounds: int = 1000) -> None:
    """Let other tasks run until `predicate()` holds (event-loop turns, not wall time)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def fire_sweep(gw: Gateway) -> JobExecutionEvent:
    """Point the sweep job at the earliest deadline, then move it to now (TESTING.md §5:
    `modify_job` wakes the scheduler) and wait for APScheduler's executor to run it."""
    assert gw.lifecycle is not None
    scheduler = gw.lifecycle.scheduler
    done: asyncio.Future[JobExecutionEvent] = asyncio.get_running_loop().create_future()

    def listener(event: JobExecutionEvent) -> None:
        if event.job_id == SWEEP_JOB and not done.done():
            done.set_result(event)

    scheduler.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    try:
        gw.lifecycle.timers.reschedule()
        scheduler.modify_job(SWEEP_JOB, next_run_time=datetime.now(UTC))
        event = await asyncio.wait_for(done, 10)
    finally:
        scheduler.remove_listener(listener)
    assert event.exception is None
    return event


def _config(home: Path, fake_llm: FakeLLM, extra: str = "") -> RecordingAdapter:
    write_config(
        home,
        base_url=llm_url(fake_llm, "anthropic"),
        extra="session_reset: {mode: idle, idle_minutes: 30}\n" + extra,
    )
    return RecordingAdapter("cli")


async def _talk(gw: Gateway, *texts: str, chat_id: str = "c1") -> None:
    for text in texts:
        await gw.sessions.submit(inbound(text, chat_id=chat_id))
        await gw.sessions.wait_idle()


async def test_deadline_follows_the_last_user_message(home: Path, fake_llm: FakeLLM) -> None:
    clock = FakeClock()
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=clock, start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one")
        assert gw.lifecycle.timers.deadline(KEY) == START + timedelta(minutes=30)
        clock.advance(minutes=20)
        await _talk(gw, "two")
        assert gw.lifecycle.timers.deadline(KEY) == START + timedelta(minutes=50)
        assert len(gw.lifecycle.timers) == 1
        job = gw.lifecycle.scheduler.get_job(SWEEP_JOB)
        # the one job waits for the earliest deadline; laid on the wall clock, still in the future
        assert job is not None and job.next_run_time > datetime.now(UTC) + timedelta(minutes=9)


async def test_timer_expires_the_session_through_the_real_executor(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=clock, start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one", "two")
        session = gw.store.active_session(KEY)
        assert session is not None
        clock.advance(minutes=29)
        await fire_sweep(gw)  # early: nothing happens, the job is re-armed for the real deadline
        assert gw.store.active_session(KEY) is not None
        assert gw.lifecycle.timers.deadline(KEY) == START + timedelta(minutes=30)
        clock.advance(minutes=1)
        await fire_sweep(gw)
        ended = gw.store.session(session.id)
        assert ended.end_reason == "idle" and ended.ended_at == clock().isoformat(
            timespec="microseconds"
        )
        await gw.lifecycle.flusher.wait_idle()
        assert gw.store.session(session.id).flush_state == "done"
        assert gw.lifecycle.scheduler.get_job(SWEEP_JOB) is None and len(gw.lifecycle.timers) == 0
        # nothing sent by the flush
        assert adapter.texts() == ["echo: one [users=1]", "echo: two [users=2]"]


async def test_stale_deadline_does_not_end_a_session_the_user_came_back_to(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=clock, start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one")
        session = gw.store.active_session(KEY)
        assert session is not None
        clock.advance(minutes=25)
        await _talk(gw, "two")
        clock.advance(minutes=10)  # 35 min after "one", 10 after "two"
        assert await gw.lifecycle.expire_due([(KEY, session.id)]) == 0
        assert gw.store.active_session(KEY) is not None
        assert gw.lifecycle.timers.deadline(KEY) == START + timedelta(minutes=55)


async def test_a_running_turn_is_not_cut_by_its_deadline(home: Path) -> None:
    clock = FakeClock()
    write_config(home, extra="session_reset: {mode: idle, idle_minutes: 1}\n")
    llm = GatedLLM()
    async with open_gateway(
        home, [RecordingAdapter("cli")], clock=clock, llm=llm, start=True
    ) as gw:
        assert gw.lifecycle is not None
        await gw.sessions.submit(inbound("slow question"))
        await llm.started.wait()
        session = gw.store.active_session(KEY)
        assert session is not None
        clock.advance(minutes=2)
        assert await gw.lifecycle.expire_due(gw.lifecycle.timers.pop_due(clock())) == 0
        assert gw.lifecycle.timers.deadline(KEY) == clock() + timedelta(seconds=30)
        llm.gate.set()
        await gw.sessions.wait_idle()
        assert gw.store.session(session.id).ended_at is None


async def test_mode_none_arms_nothing(home: Path, fake_llm: FakeLLM) -> None:
    clock = FakeClock()
    write_config(
        home,
        base_url=llm_url(fake_llm, "anthropic"),
        extra="session_reset:\n  mode: idle\n  by_chat_type: {dm: {mode: none}}\n",
    )
    async with open_gateway(home, [RecordingAdapter("cli")], clock=clock, start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one")
        clock.advance(days=30)
        assert gw.lifecycle.timers.deadline(KEY) is None and len(gw.lifecycle.timers) == 0
        session = gw.store.active_session(KEY)
        assert session is not None and gw.lifecycle.expired(session, clock()) is None


async def test_timers_are_rebuilt_after_a_restart_including_an_overdue_one(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=clock, start=True) as gw:
        await _talk(gw, "a1", "a2", chat_id="early")
        clock.advance(minutes=20)
        await _talk(gw, "b1", "b2", chat_id="late")
    # down for 15 minutes: "early" came due (30 min after START) while nothing was running; "late"
    # did not
    clock.advance(minutes=15)
    fake_llm.calls.clear()
    async with open_gateway(home, [adapter], clock=clock, start=True) as gw:
        assert gw.lifecycle is not None
        early = gw.store.latest_session("cli:dm:early")
        assert (
            early is not None
            and early.end_reason == "idle"
            and early.ended_at == clock().isoformat(timespec="microseconds")
        )
        assert gw.lifecycle.timers.deadline("cli:dm:early") is None
        assert gw.lifecycle.timers.deadline("cli:dm:late") == START + timedelta(minutes=50)
        job = gw.lifecycle.scheduler.get_job(SWEEP_JOB)
        assert job is not None and job.misfire_grace_time is None and job.coalesce
        await gw.lifecycle.flusher.wait_idle()
        assert gw.store.session(early.id).flush_state == "done"
        assert len(fake_llm.anthropic_requests()) == 1  # one flush, for "early" only
        clock.advance(minutes=15)
        await fire_sweep(gw)
        late = gw.store.latest_session("cli:dm:late")
        assert late is not None and late.end_reason == "idle"


async def test_boot_with_50_overdue_sessions_is_throttled(home: Path) -> None:
    write_config(
        home,
        extra="session_reset: {mode: idle, idle_minutes: 60}\nmemory: {flush_concurrency: 2}\n",
    )
    store = Store(load_config(home).db_path)
    ids = [
        seed_session(store, key=f"cli:dm:c{i}", last_user_at=START - timedelta(hours=3, minutes=i))
        for i in range(50)
    ]
    store.close()
    llm = GatedLLM()
    clock = FakeClock()
    async with open_gateway(
        home, [RecordingAdapter("cli")], clock=clock, llm=llm, start=True
    ) as gw:
        assert gw.lifecycle is not None
        await until(lambda: llm.in_flight == 2)
        for _ in range(50):  # give the other 48 every chance to start too
            await asyncio.sleep(0)
        assert llm.in_flight == 2 and llm.max_in_flight == 2
        states = [gw.store.session(i) for i in ids]
        assert all(s.end_reason == "idle" for s in states)
        assert [s.flush_state for s in states].count("running") == 2
        llm.gate.set()
        await gw.lifecycle.flusher.wait_idle()
        assert [gw.store.session(i).flush_state for i in ids] == ["done"] * 50
        assert llm.max_in_flight == 2 and len(llm.calls) == 50

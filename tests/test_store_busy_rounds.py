"""The daemon's own rounds while another process holds state.db's write lock (the loop waits 50 ms
for it, then a write fails) or the disk is full: a reminder that came due, a session past its idle
deadline, a flush, an approval's welcome. Each is done once writes work again, none is lost until a
restart, none is done twice, and the log gets a line, not a traceback per round."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path

import pytest

from gateway.access.pairing import PairingBook, load_key
from gateway.config.settings import load_config
from gateway.ops.access_watch import AccessWatch
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import build_gateway
from gateway.store.rows import utcnow
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, inbound, llm_url, write_config
from tests.jobs_support import fire_jobs, run_rows, settle
from tests.lifecycle_support import FakeClock, open_gateway
from tests.store_locks import LockHolder
from tests.test_scheduling import jobs_gateway

IDLE = "session_reset: {mode: idle, idle_minutes: 10}\n"


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


async def test_a_reminder_due_while_the_database_is_locked_is_posted_once_it_is_free(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"))
    adapter = RecordingAdapter("cli")
    clock = FakeClock()
    fake_llm.script(
        ToolCall(
            "schedule", {"action": "create", "when": "30m", "prompt": "Remind them to stretch."}
        ),
        Reply("ok"),
        Reply("Stretch!"),
    )
    async with jobs_gateway(home, [adapter], clock) as gw:
        await gw.sessions.submit(inbound("in half an hour remind me to stretch"))
        await settle(gw)
        clock.advance(minutes=30)
        async with LockHolder(home / "state.db"):
            assert await fire_jobs(gw)  # due, but its run cannot be recorded
            assert adapter.texts() == ["ok"] and run_rows(gw) == []
        clock.advance(seconds=10)
        assert await fire_jobs(gw), "the job is no longer armed: it would run only after a restart"
        assert adapter.texts() == ["ok", "⏰ Scheduled job (job #1)\n\nStretch!"]
        assert [(r["status"], r["trigger"]) for r in run_rows(gw)] == [("done", "schedule")]
        assert not await fire_jobs(gw)  # once
    assert tracebacks(caplog) == []


async def test_a_session_past_its_idle_deadline_while_locked_ends_once_the_lock_is_gone(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"), extra=IDLE)
    clock = FakeClock()
    async with open_gateway(home, [RecordingAdapter("cli")], clock=clock, start=True) as gw:
        lifecycle = gw.lifecycle
        assert lifecycle is not None
        await gw.sessions.submit(inbound("hello"))
        await gw.sessions.wait_idle()
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None
        clock.advance(minutes=11)
        async with LockHolder(home / "state.db"):
            assert await lifecycle.expire_due(lifecycle.timers.pop_due(clock())) == 0
        # not ended, and still has a deadline:
        assert gw.store.active_session("cli:dm:c1") is not None
        clock.advance(seconds=10)
        assert await lifecycle.expire_due(lifecycle.timers.pop_due(clock())) == 1
        ended = gw.store.session(session.id)
        assert ended.ended_at is not None and ended.end_reason == "idle"
        await lifecycle.flusher.wait_idle()
    assert tracebacks(caplog) == []


async def test_a_flush_asked_for_while_locked_runs_without_a_restart(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(
        home, base_url=llm_url(fake_llm, "anthropic"), extra="memory: {flush_min_messages: 2}\n"
    )
    clock = FakeClock()
    async with open_gateway(home, [RecordingAdapter("cli")], clock=clock, start=True) as gw:
        lifecycle = gw.lifecycle
        assert lifecycle is not None
        await gw.sessions.submit(inbound("I like tea"))
        await gw.sessions.wait_idle()
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None
        fake_llm.script(
            ToolCall("memory", {"action": "add", "target": "memory", "content": "Likes tea."}),
            Reply("saved"),
        )
        assert gw.store.end_session(session.id, reason="test", now=clock(), flush_state="pending")
        async with LockHolder(home / "state.db") as lock:
            lifecycle.flusher.request(session.id)  # its claim cannot be written
            await fake_llm.wait_until(lambda: gw.store.health.reason == "busy", timeout=10)
            await lock.release()
        await lifecycle.flusher.wait_idle()
        assert gw.store.session(session.id).flush_state == "done"
        assert "Likes tea." in gw.memory.shared().read()
    assert tracebacks(caplog) == []


async def test_an_approval_is_welcomed_once_however_long_the_database_stays_locked(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"), extra="telegram:\n  token: '1:x'\n")
    telegram = RecordingAdapter("telegram")
    async with open_gateway(home, [telegram], clock=FakeClock()) as gw:
        await gw.sessions.submit(inbound("hello?", platform="telegram", chat_id="55", user_id="55"))
        await telegram.wait_for(1)
        book = PairingBook(gw.store, load_key(home))
        code = re.search(r"this bot: `?([A-Z0-9]{8})", telegram.sent[0].plain)
        assert code is not None
        assert book.approve(code.group(1), by="cli", now=utcnow()).status == "approved"
        watch = AccessWatch(
            store=gw.store, outbox=gw.outbox, sessions=gw.sessions, memory=gw.memory, clock=gw.clock
        )
        async with LockHolder(home / "state.db"):
            for _ in range(5):  # five rounds of the watch (every 2 s) while the lock is held
                watch.round()
                await gw.outbox.wait_background()
        for _ in range(2):
            watch.round()
            await gw.outbox.wait_background()
        welcomes = [m for m in telegram.sent if m.text.startswith("You're approved")]
        assert len(welcomes) == 1
        assert gw.store.all("SELECT handled_at FROM access_events")[0][0] is not None
    assert tracebacks(caplog) == []


async def test_the_hourly_prune_waits_for_a_lock_instead_of_failing_for_an_hour(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"), extra="web:\n  enabled: false\n")
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=[], probe_ollama=False), install_signals=False
    )
    store = daemon.gw.store
    for message_id in ("m1", "m2"):
        store.insert_inbound(
            platform="cli",
            chat_type="dm",
            chat_id="c1",
            thread_id=None,
            platform_message_id=message_id,
            user_id="u1",
            user_name="U",
            text="old",
            payload="{}",
            received_at=utcnow() - timedelta(days=30),
        )
    store.execute("UPDATE inbound SET status = 'answered'")
    try:
        async with LockHolder(home / "state.db") as lock:
            prune = asyncio.get_running_loop().create_task(daemon._prune_inbound())
            await fake_llm.wait_until(lambda: store.health.reason == "busy", timeout=10)
            await lock.release()
        # the newest row stays (its id must not be handed out again: tests/test_inbound_ids.py)
        await fake_llm.wait_until(
            lambda: [r[0] for r in store.all("SELECT id FROM inbound")] == [2], timeout=10
        )
        prune.cancel()
    finally:
        store.close()
    assert tracebacks(caplog) == []

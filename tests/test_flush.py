"""The pre-reset memory flush as the user and the provider see it: the same cached prefix as the
session's turns, only memory/skill tools, nothing sent, exactly once, resumed after a crash, retried
then `failed`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway
from gateway.sessions.flush import FLUSH_MARK, MAX_STARTS, FlushLedger
from gateway.store.database import Store
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall, ToolCalls
from tests.helpers import RecordingAdapter, gateway_for, inbound, llm_url, write_config
from tests.lifecycle_support import (
    START,
    FakeClock,
    GatedLLM,
    canonical,
    last_user_text,
    open_gateway,
    seed_session,
)

KEY = "cli:dm:c1"


@pytest.fixture
async def caching_llm() -> AsyncIterator[FakeLLM]:
    fake = FakeLLM(cache=True)
    await fake.start()
    yield fake
    await fake.stop()


def _config(home: Path, fake: FakeLLM, extra: str = "") -> RecordingAdapter:
    write_config(
        home,
        base_url=llm_url(fake, "anthropic"),
        extra="session_reset: {mode: idle, idle_minutes: 30}\n" + extra,
    )
    return RecordingAdapter("cli")


async def _talk(gw: Gateway, *texts: str) -> None:
    for text in texts:
        await gw.sessions.submit(inbound(text))
        await gw.sessions.wait_idle()


def _flush_requests(fake: FakeLLM) -> list[dict[str, Any]]:
    return [b for b in fake.anthropic_requests() if last_user_text(b).startswith(FLUSH_MARK)]


async def test_flush_reuses_the_sessions_cached_prefix(home: Path, caching_llm: FakeLLM) -> None:
    adapter = _config(home, caching_llm)
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "my name is Ada", "I like green tea")
        session = gw.store.active_session(KEY)
        assert session is not None
        await gw.sessions.submit(inbound("/new"))
        await gw.lifecycle.flusher.wait_idle()
    turns = caching_llm.anthropic_requests()[:2]
    flushes = _flush_requests(caching_llm)
    assert len(flushes) == 1
    flush = flushes[0]
    for turn in turns:  # byte for byte: the stored prompt and the same tool list, in the same order
        assert canonical(flush["system"]) == canonical(turn["system"])
        assert canonical(flush["tools"]) == canonical(turn["tools"])
    assert [t["name"] for t in flush["tools"]] == [
        "memory",
        "session_search",
        "skill_view",
        "skill_manage",
        "web_fetch",
        "schedule",
        "ask",
    ]
    flush_usage = caching_llm.usages[-1]
    assert flush_usage.cache_read > 0
    store = Store(load_config(home).db_path)
    try:
        calls = store.all(
            "SELECT purpose, cache_read_tokens FROM llm_calls WHERE session_id = ? ORDER BY id",
            (session.id,),
        )
        assert [c[0] for c in calls] == ["turn", "turn", "flush"] and calls[-1][
            1
        ] == flush_usage.cache_read
        assert store.session(session.id).flush_state == "done"
    finally:
        store.close()
    # the transcript precedes the instruction, which carries the live memory files
    messages = flush["messages"]
    assert messages[0]["content"][0]["text"] == "my name is Ada"
    assert (
        adapter.texts()[-1]
        == "Started a new conversation. I still remember what I saved to memory."
    )


def _owner(gw: Gateway) -> int:
    """The person of the console user these tests talk as: the local owner."""
    return gw.people.resolve("cli", "u1", now=START).id


async def test_flush_instruction_carries_the_live_memory_files(
    home: Path, fake_llm: FakeLLM
) -> None:
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one", "two")
        # written after the session's prompt was frozen: the flush must see it anyway
        gw.memory.shared().add("The deploy script lives in ops/deploy.sh")
        gw.memory.profile(_owner(gw)).add("Prefers short answers")
        await gw.sessions.submit(inbound("/reset"))
        await gw.lifecycle.flusher.wait_idle()
    instruction = last_user_text(_flush_requests(fake_llm)[0])
    assert "<memory>\nThe deploy script lives in ops/deploy.sh\n</memory>" in instruction
    assert "<user>\nPrefers short answers\n</user>" in instruction
    assert (
        "Add only what is new. Do not overwrite or remove an "
        "entry unless this conversation clearly supersedes" in instruction
    )
    assert "Do not reply to the user" in instruction


async def test_only_memory_and_skill_tools_run_and_the_reply_is_not_sent(
    home: Path, fake_llm: FakeLLM
) -> None:
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "I'm Ada and I like green tea", "thanks")
        fake_llm.script(
            ToolCalls(
                [
                    ToolCall(
                        "memory",
                        {
                            "action": "add",
                            "target": "user",
                            "content": "Name: Ada; likes green tea",
                        },
                    ),
                    ToolCall("session_search", {"query": "tea"}),
                ]
            ),
            Reply("I saved your preferences!"),
        )
        await gw.sessions.submit(inbound("/new"))
        await gw.lifecycle.flusher.wait_idle()
        assert gw.memory.profile(_owner(gw)).entries() == ("Name: Ada; likes green tea",)
    assert len(_flush_requests(fake_llm)) == 1
    # the flush's second step: it carries the tool results
    second = fake_llm.anthropic_requests()[-1]
    results = [
        b for m in second["messages"] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert len(results) == 2 and "is_error" not in results[0]
    assert results[1]["is_error"] is True and results[1]["content"].startswith(
        "Tool not available right now: 'session_search'. "
        "Tools you can call: memory, skill_view, skill_manage"
    )
    assert all("I saved your preferences" not in t for t in adapter.texts())
    assert (
        adapter.texts()[-1]
        == "Started a new conversation. I still remember what I saved to memory."
    )


async def test_under_the_minimum_is_nothing(home: Path, fake_llm: FakeLLM) -> None:
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "just one")  # 2 messages < memory.flush_min_messages (4)
        session = gw.store.active_session(KEY)
        assert session is not None
        await gw.sessions.submit(inbound("/new"))
        await gw.lifecycle.flusher.wait_idle()
        row = gw.store.session(session.id)
        assert (
            row.flush_state == "nothing"
            and row.flush_attempts == 1
            and row.flush_finished_at is not None
        )
    assert _flush_requests(fake_llm) == []


async def test_failed_after_three_errors_with_the_reason(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)

        gw.lifecycle.flusher.sleep = sleep
        await _talk(gw, "one", "two")
        session = gw.store.active_session(KEY)
        assert session is not None
        fake_llm.script(Fault(500), Fault(503), Fault(500))
        with caplog.at_level(logging.WARNING, logger="gateway.sessions.flush"):
            await gw.sessions.submit(inbound("/new"))
            await gw.lifecycle.flusher.wait_idle()
        row = gw.store.session(session.id)
        assert (
            row.flush_state == "failed"
            and row.flush_attempts == 3
            and row.flush_finished_at is not None
        )
        assert row.flush_error is not None and row.flush_error.startswith(
            "LLMUnavailable: claude-test"
        )
        assert slept == [10.0, 60.0]
        warnings = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "gateway.sessions.flush"
        ]
        assert (
            len(warnings) == 1
            and f"flush session={session.id} failed after 3 attempts" in warnings[0].message
        )
        # a failed flush is final: it is not retried at the next boot
        assert gw.lifecycle.flusher.ledger.pending() == []


async def test_a_flush_cut_off_by_a_crash_resumes_at_boot(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"))
    store = Store(load_config(home).db_path)
    sid = seed_session(store, key=KEY, last_user_at=START)
    store.end_session(sid, reason="idle", now=START + timedelta(days=1), flush_state="pending")
    # the flush started ... and the process died here
    assert FlushLedger(store).claim(sid) is not None
    store.close()
    async with open_gateway(
        home, [RecordingAdapter("cli")], clock=FakeClock(START + timedelta(days=1)), start=True
    ) as gw:
        assert gw.lifecycle is not None
        await gw.lifecycle.flusher.wait_idle()
        row = gw.store.session(sid)
        assert row.flush_state == "done" and row.flush_attempts == 2
    assert len(_flush_requests(fake_llm)) == 1


async def test_a_flush_that_keeps_getting_cut_off_gives_up(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"))
    store = Store(load_config(home).db_path)
    sid = seed_session(store, key=KEY, last_user_at=START)
    store.end_session(sid, reason="idle", now=START, flush_state="pending")
    store.execute(
        "UPDATE sessions SET flush_state = 'running', flush_attempts = ? WHERE id = ?",
        (MAX_STARTS, sid),
    )
    store.close()
    async with open_gateway(home, [RecordingAdapter("cli")], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await gw.lifecycle.flusher.wait_idle()
        row = gw.store.session(sid)
        assert row.flush_state == "failed"
        assert row.flush_error == f"cut off {MAX_STARTS} times before it could finish"
    assert _flush_requests(fake_llm) == []


async def test_three_kills_in_a_row_do_not_lose_the_flush(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"))
    store = Store(load_config(home).db_path)
    sid = seed_session(store, key=KEY, last_user_at=START)
    store.end_session(sid, reason="idle", now=START, flush_state="pending")
    store.execute(
        "UPDATE sessions SET flush_state = 'running', flush_attempts = 3 WHERE id = ?", (sid,)
    )
    store.close()
    async with open_gateway(home, [RecordingAdapter("cli")], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await gw.lifecycle.flusher.wait_idle()
        row = gw.store.session(sid)
        assert (row.flush_state, row.flush_attempts) == ("done", 4)
    assert len(_flush_requests(fake_llm)) == 1


async def test_exactly_once_under_a_race_of_timer_new_and_a_message(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=clock, start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one", "two")
        old = gw.store.active_session(KEY)
        assert old is not None
        clock.advance(minutes=45)  # past the deadline: all three paths want to end it
        due = gw.lifecycle.timers.pop_due(clock())
        await asyncio.gather(
            gw.lifecycle.expire_due(due),
            gw.sessions.submit(inbound("/new")),
            gw.sessions.submit(inbound("three")),
            gw.lifecycle.flusher.flush(old.id),
        )
        await gw.sessions.wait_idle()
        await gw.lifecycle.flusher.wait_idle()
        ended = gw.store.session(old.id)
        assert (
            ended.ended_at is not None and ended.flush_state == "done" and ended.flush_attempts == 1
        )
        assert gw.store.one("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL")[0] == 1  # type: ignore[index]
        assert gw.store.one("SELECT COUNT(*) FROM llm_calls WHERE purpose = 'flush'")[0] == 1  # type: ignore[index]
        assert adapter.texts()[-1].endswith("three [users=1]")  # answered, in the new session
    assert len(_flush_requests(fake_llm)) == 1


async def test_a_new_session_answers_at_once_while_the_flush_runs(home: Path) -> None:
    write_config(home)
    llm = GatedLLM(open_gate=True)
    adapter = RecordingAdapter("cli")
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm, start=True) as gw:
        assert gw.lifecycle is not None
        await _talk(gw, "one", "two")
        llm.gate.clear()  # the model is slow from now on
        llm.started.clear()
        await gw.sessions.submit(inbound("/new"))
        # the answer is sent off the ack path; the flush is still held
        await gw.outbox.wait_background()
        assert (
            adapter.texts()[-1]
            == "Started a new conversation. I still remember what I saved to memory."
        )
        await llm.started.wait()
        # the flush is running in the background, the user already has the answer
        assert llm.in_flight == 1
        llm.gate.set()
        await gw.lifecycle.flusher.wait_idle()


async def test_shutdown_flushes_what_fits_and_leaves_the_rest_pending(home: Path) -> None:
    write_config(
        home,
        extra="web: {enabled: false}\ndaemon: {drain_seconds: 0}\n"
        "session_reset: {mode: idle, idle_minutes: 30}\n",
    )
    store = Store(load_config(home).db_path)
    overdue = seed_session(store, key="cli:dm:a", last_user_at=START - timedelta(minutes=10))
    alive = seed_session(store, key="cli:dm:b", last_user_at=START)
    store.close()
    clock = FakeClock(START + timedelta(minutes=5))
    llm = GatedLLM()  # never answers: nothing fits a zero drain deadline
    daemon = Daemon(
        gateway_for(home, [RecordingAdapter("cli")], llm=llm, clock=clock), install_signals=False
    )
    await daemon.start()
    clock.advance(minutes=20)  # "a" is past its deadline now, "b" is not
    await daemon.stop()
    store = Store(load_config(home).db_path)
    try:
        a, b = store.session(overdue), store.session(alive)
        assert a.end_reason == "idle" and a.flush_state == "pending" and a.flush_attempts == 0
        assert b.ended_at is None and b.flush_state is None
    finally:
        store.close()
    # next boot, with time to spare: the pending flush runs
    write_config(
        home, extra="web: {enabled: false}\nsession_reset: {mode: idle, idle_minutes: 30}\n"
    )
    llm = GatedLLM(open_gate=True)
    daemon = Daemon(
        gateway_for(home, [RecordingAdapter("cli")], llm=llm, clock=clock), install_signals=False
    )
    await daemon.start()
    assert daemon.gw.lifecycle is not None
    await daemon.gw.lifecycle.flusher.wait_idle()
    assert daemon.gw.store.session(overdue).flush_state == "done"
    await daemon.stop()


async def test_a_stop_during_the_backoff_wait_keeps_the_failed_attempt(
    home: Path, fake_llm: FakeLLM
) -> None:
    adapter = _config(home, fake_llm)
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        waiting = asyncio.Event()

        async def sleep(seconds: float) -> None:  # the backoff wait outlasts the daemon
            waiting.set()
            await asyncio.Event().wait()

        gw.lifecycle.flusher.sleep = sleep
        await _talk(gw, "one", "two")
        session = gw.store.active_session(KEY)
        assert session is not None
        fake_llm.script(Fault(500))
        await gw.sessions.submit(inbound("/new"))
        await waiting.wait()
        assert await gw.lifecycle.stop(0) == 1
        row = gw.store.session(session.id)
        assert row.flush_state == "pending" and row.flush_attempts == 1
        assert row.flush_error is not None and row.flush_error.startswith("LLMUnavailable")
    async with open_gateway(home, [adapter], clock=FakeClock(), start=True) as gw:
        assert gw.lifecycle is not None
        await gw.lifecycle.flusher.wait_idle()
        row = gw.store.session(session.id)
        assert row.flush_state == "done" and row.flush_attempts == 2

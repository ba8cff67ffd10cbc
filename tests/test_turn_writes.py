"""A turn's writes (gateway/sessions/manager.py): three transactions for a message answered at once
(the inbound row, the turn's end, the chunk sent), the message stored `running` when its turn
starts at once and `pending` when it waits; when the person wrote (the session's `last_user_at`) is
stored with the turn's last write, whatever way the turn ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.errors import LLMRejected
from gateway.llm.types import LLMReply
from gateway.sessions.manager import BUSY_TEXT
from gateway.store.database import Store
from gateway.store.rows import iso
from tests.helpers import RecordingAdapter, inbound, write_config
from tests.lifecycle_support import START, FakeClock, GatedLLM, open_gateway


def _status(store: Store, message_id: str) -> str:
    row = store.one("SELECT status FROM inbound WHERE platform_message_id = ?", (message_id,))
    assert row is not None
    return str(row[0])


def _last_user_at(store: Store) -> str | None:
    row = store.one(
        "SELECT last_user_at FROM sessions WHERE key = 'cli:dm:c1' AND ended_at IS NULL"
    )
    assert row is not None
    return None if row[0] is None else str(row[0])


async def test_a_message_answered_at_once_costs_three_transactions(home: Path) -> None:
    write_config(home)
    adapter, llm = RecordingAdapter("cli"), GatedLLM(open_gate=True)
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        await gw.sessions.submit(inbound("first"))
        await gw.sessions.wait_idle()
        statements: list[str] = []
        gw.store.conn.set_trace_callback(statements.append)
        try:
            await gw.sessions.submit(inbound("second"))
            await gw.sessions.wait_idle()
        finally:
            gw.store.conn.set_trace_callback(None)
        assert adapter.texts() == ["ok", "ok"]
        # the inbound row; messages + chunk + answered + usage + last_user_at; the chunk sent
        assert [s for s in statements if s == "COMMIT"] == ["COMMIT"] * 3
        assert not [s for s in statements if "fts" in s]  # the search index is kept after the turn
        assert not [s for s in statements if "status = 'running'" in s]  # stored running at once


async def test_a_queued_message_waits_pending_and_runs_running(home: Path) -> None:
    write_config(home)
    adapter, llm = RecordingAdapter("cli"), GatedLLM()
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        first, second = inbound("a"), inbound("b")
        await gw.sessions.submit(first)
        await llm.started.wait()
        assert (
            _status(gw.store, first.message_id) == "running"
        )  # status and metrics: a turn in progress
        await gw.sessions.submit(second)
        assert _status(gw.store, second.message_id) == "pending"  # queued behind it
        llm.started.clear()
        llm.gate.clear()
        gw_turn = asyncio.ensure_future(gw.sessions.wait_idle())
        llm.gate.set()
        await llm.started.wait()
        assert _status(gw.store, first.message_id) == "answered"
        await gw_turn
        assert _status(gw.store, second.message_id) == "answered"
    assert sorted(adapter.texts()) == sorted(
        [BUSY_TEXT, "ok", "ok"]
    )  # the notice goes in the background


async def test_when_the_person_wrote_is_stored_however_the_turn_ends(home: Path) -> None:
    """Answered, failed (the model refused), or cut off by /stop: the session's last_user_at is the
    time the person's message began its turn, as the idle timer (gateway/sessions/timers.py) reads
    it after a restart."""
    write_config(home)
    clock = FakeClock()
    adapter, llm = RecordingAdapter("cli"), GatedLLM(open_gate=True)
    async with open_gateway(home, [adapter], clock=clock, llm=llm) as gw:
        await gw.sessions.submit(inbound("answered"))
        await gw.sessions.wait_idle()
        assert _last_user_at(gw.store) == iso(START)

        turn_start = clock.advance(minutes=5)
        llm.gate.clear()
        llm.started.clear()
        await gw.sessions.submit(inbound("cut off"))
        await llm.started.wait()
        clock.advance(minutes=1)
        assert gw.sessions.stop_turn("cli:dm:c1")
        await gw.sessions.wait_idle()
        assert _last_user_at(gw.store) == iso(turn_start)

        turn_start = clock.advance(minutes=5)

        async def refuse(**_: object) -> LLMReply:
            raise LLMRejected("gated-test: HTTP 400: no")

        llm.complete = refuse  # type: ignore[method-assign]
        await gw.sessions.submit(inbound("refused"))
        await gw.sessions.wait_idle()
        assert _last_user_at(gw.store) == iso(turn_start)
        assert "HTTP 400" in adapter.texts()[-1]  # the failure told

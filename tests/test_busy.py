"""Busy policy: a message for a session whose turn is running is queued FIFO (cap, then a polite
refusal) or interrupts it; one busy notice per 30 s per session; a lane whose worker died heals by
itself."""

from __future__ import annotations

from pathlib import Path

from gateway.events import SubmitOutcome
from gateway.sessions.manager import BUSY_TEXT, QUEUE_FULL_TEXT
from gateway.store.database import Store
from tests.helpers import RecordingAdapter, inbound, write_config
from tests.lifecycle_support import FakeClock, GatedLLM, last_user_text, open_gateway

KEY = "cli:dm:c1"


def _asked(llm: GatedLLM) -> list[str]:
    return [last_user_text({"messages": c["messages"]}) for c in llm.calls]


def _status(store: Store, message_id: str) -> str:
    row = store.one("SELECT status FROM inbound WHERE platform_message_id = ?", (message_id,))
    assert row is not None
    return str(row[0])


async def test_queue_is_fifo_with_one_busy_notice(home: Path) -> None:
    write_config(home)
    adapter, llm = RecordingAdapter("cli"), GatedLLM()
    llm.answers = ["A", "B", "C", "D"]
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        await gw.sessions.submit(inbound("a"))
        await llm.started.wait()
        for text in ("b", "c", "d"):
            assert (await gw.sessions.submit(inbound(text))).outcome is SubmitOutcome.ACCEPTED
        lane = gw.sessions.lane(KEY)
        assert lane is not None and len(lane.queue) == 3
        llm.gate.set()
        await gw.sessions.wait_idle()
    assert _asked(llm) == ["a", "b", "c", "d"]
    assert adapter.texts() == [BUSY_TEXT, "A", "B", "C", "D"]
    assert adapter.sent[0].reply_to_id is not None


async def test_queue_cap_then_a_polite_refusal(home: Path) -> None:
    write_config(home, extra="sessions: {queue_cap: 2}\n")
    adapter, llm = RecordingAdapter("cli"), GatedLLM()
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        await gw.sessions.submit(inbound("a"))
        await llm.started.wait()
        assert (await gw.sessions.submit(inbound("b"))).outcome is SubmitOutcome.ACCEPTED
        assert (await gw.sessions.submit(inbound("c"))).outcome is SubmitOutcome.ACCEPTED
        over = inbound("d")
        result = await gw.sessions.submit(over)
        assert result.outcome is SubmitOutcome.REFUSED and result.reason == "queue full"
        assert _status(gw.store, over.message_id) == "refused"
        llm.gate.set()
        await gw.sessions.wait_idle()
    assert _asked(llm) == ["a", "b", "c"]
    # the busy notice goes out in the background, the refusal at once: either may arrive first
    assert sorted(adapter.texts()[:2]) == sorted([BUSY_TEXT, QUEUE_FULL_TEXT])
    assert adapter.texts()[2:] == ["ok", "ok", "ok"]


async def test_busy_notice_at_most_once_per_30_seconds_per_session(home: Path) -> None:
    write_config(home)
    adapter, llm, clock = RecordingAdapter("cli"), GatedLLM(), FakeClock()
    async with open_gateway(home, [adapter], clock=clock, llm=llm) as gw:

        async def burst(*texts: str) -> None:
            llm.gate.clear()
            llm.started.clear()
            await gw.sessions.submit(inbound(texts[0]))
            await llm.started.wait()
            for text in texts[1:]:
                await gw.sessions.submit(inbound(text))
            llm.gate.set()
            await gw.sessions.wait_idle()

        await burst("a1", "a2")
        assert gw.sessions.lane(KEY) is None  # the lane is gone; the notice time is not
        clock.advance(seconds=20)
        await burst("b1", "b2")
        clock.advance(seconds=11)
        await burst("c1", "c2")
    assert adapter.texts().count(BUSY_TEXT) == 2
    assert adapter.texts() == [BUSY_TEXT, "ok", "ok", "ok", "ok", BUSY_TEXT, "ok", "ok"]


async def test_interrupt_cancels_the_running_turn(home: Path) -> None:
    write_config(home, extra="sessions: {busy: queue, busy_by_platform: {cli: interrupt}}\n")
    adapter, llm = RecordingAdapter("cli"), GatedLLM()
    llm.answers = ["answer to c"]
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        a, b, c = inbound("a"), inbound("b"), inbound("c")
        await gw.sessions.submit(a)
        await llm.started.wait()
        llm.started.clear()
        await gw.sessions.submit(b)
        await llm.started.wait()  # b is the running turn now
        llm.started.clear()
        await gw.sessions.submit(c)
        await llm.started.wait()
        llm.gate.set()
        await gw.sessions.wait_idle()
        assert [_status(gw.store, m.message_id) for m in (a, b, c)] == [
            "interrupted",
            "interrupted",
            "answered",
        ]
        assert gw.store.unfinished_inbound() == []  # nothing left for a replay after a restart
    assert _asked(llm) == ["a", "b", "c"]
    assert adapter.texts() == ["answer to c"]


async def test_a_dead_worker_is_healed_without_a_new_message(home: Path) -> None:
    write_config(home)
    adapter, llm = RecordingAdapter("cli"), GatedLLM()
    llm.answers = ["B"]
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        await gw.sessions.submit(inbound("a"))
        await llm.started.wait()
        await gw.sessions.submit(inbound("b"))
        lane = gw.sessions.lane(KEY)
        assert lane is not None and lane.worker is not None
        dead = lane.worker
        llm.started.clear()
        dead.cancel()  # the task holding the session's lane dies mid-turn
        await llm.started.wait()  # ... and "b" starts without anyone writing again
        assert lane.worker is not dead and not lane.worker.done()
        llm.gate.set()
        await gw.sessions.wait_idle()
    assert _asked(llm) == ["a", "b"]
    assert adapter.texts() == [BUSY_TEXT, "B"]


async def test_a_crashing_turn_does_not_strand_the_queue(home: Path) -> None:
    write_config(home)
    adapter, llm = RecordingAdapter("cli"), GatedLLM()
    llm.answers = ["A", "C"]
    async with open_gateway(home, [adapter], clock=FakeClock(), llm=llm) as gw:
        await gw.sessions.submit(inbound("a"))
        await llm.started.wait()
        b, c = inbound("b"), inbound("c")
        await gw.sessions.submit(b)
        await gw.sessions.submit(c)
        gw.store.execute(
            "UPDATE inbound SET payload = '{' WHERE platform_message_id = ?", (b.message_id,)
        )
        llm.gate.set()
        await gw.sessions.wait_idle()
        assert _status(gw.store, b.message_id) == "failed"
    assert _asked(llm) == ["a", "c"]
    assert adapter.texts() == [BUSY_TEXT, "A", "C"]

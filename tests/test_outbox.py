"""Outbound delivery: what the user sees, in which order
and when, through platform weather and a crash.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.delivery.outbox import Backoff, Outbox, Pacing, RetryPolicy
from gateway.delivery.ratelimit import PLATFORM_LIMITS, PlatformLimits, RateLimiter
from gateway.errors import MarkupRejected, PlatformUnavailable, RateLimited, RecipientUnavailable
from gateway.events import ChatRef, OutboundKind
from gateway.prompt.hints import load_platform_facts
from gateway.store.database import Store
from tests.delivery import ReplyLLM, ScriptedAdapter, TypingAdapter, gateway_on, write_home
from tests.fakeclock import FakeClock
from tests.helpers import inbound

DM = ChatRef("telegram", "dm", "100")
OTHER = ChatRef("telegram", "dm", "200")
PARA_A = " ".join(["alpha"] * 500)  # 2999 characters: two of them do not fit one Telegram message
PARA_B = " ".join(["bravo"] * 500)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def outbox_for(
    store: Store,
    clock: FakeClock,
    *adapters: ScriptedAdapter,
    available: object = None,
    backoff: Backoff | None = None,
    max_rounds: int = 10,
    limits: dict[str, PlatformLimits] | None = None,
) -> Outbox:
    limiter = RateLimiter(
        PLATFORM_LIMITS if limits is None else limits, clock=clock.monotonic, sleep=clock.sleep
    )
    pacing = Pacing(
        clock.now,
        sleep=clock.sleep,
        backoff=backoff or Backoff(),
        rng=random.Random(7),
        limiter=limiter,
    )
    retry = RetryPolicy(max_rounds=max_rounds, available=available)  # type: ignore[arg-type]
    return Outbox(
        store, {a.platform: a for a in adapters}, load_platform_facts(), pacing, retry=retry
    )


def statuses(store: Store) -> list[tuple[str, int, str]]:
    return [
        (r[0], r[1], r[2])
        for r in store.all("SELECT turn_id, chunk_index, status FROM outbound ORDER BY id")
    ]


async def test_long_reply_arrives_as_ordered_chunks_split_at_the_paragraph(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    box = outbox_for(store, clock, tg)
    ids = await clock.run(
        box.post("t1", DM, f"{PARA_A}\n\n{PARA_B}", kind=OutboundKind.REPLY, reply_to_id="m1")
    )
    assert ids == ["telegram-1", "telegram-2"]
    assert tg.seen() == [PARA_A, PARA_B]
    assert [(m.chunk_index, m.chunk_count, m.reply_to_id) for m in tg.sent] == [
        (0, 2, "m1"),
        (1, 2, "m1"),
    ]
    assert [t for t, _ in tg.attempts] == [0.0, 1.0]  # Telegram: one message per second in a chat
    assert statuses(store) == [("t1", 0, "sent"), ("t1", 1, "sent")]


async def test_rejected_markup_is_resent_once_as_plain_text_and_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(MarkupRejected("telegram", "Bad Request: can't parse entities: unsupported start tag"))
    box = outbox_for(store, clock, tg)
    with caplog.at_level(logging.WARNING, logger="gateway.delivery.outbox"):
        await clock.run(
            box.post("t1", DM, "Use **bold** and `code_with_underscores`", kind=OutboundKind.REPLY)
        )
    first, second = (m for _, m in tg.attempts)
    assert (first.use_plain, second.use_plain) == (False, True)
    assert first.entities and second.plain == first.plain
    assert tg.seen() == ["Use bold and code_with_underscores"]
    assert statuses(store) == [("t1", 0, "sent")]
    assert any(
        "resending it as plain text" in r.getMessage() and "can't parse entities" in r.getMessage()
        for r in caplog.records
    )


async def test_plain_text_rejected_too_fails_that_reply_only(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(
        MarkupRejected("telegram", "can't parse entities"), MarkupRejected("telegram", "still not")
    )
    box = outbox_for(store, clock, tg)
    await clock.run(box.post("t1", DM, f"{PARA_A}\n\n{PARA_B}", kind=OutboundKind.REPLY))
    await clock.run(box.post("t2", DM, "next answer", kind=OutboundKind.REPLY))
    # markup, plain once, then the next reply: never a third try of the chunk
    assert len(tg.attempts) == 3
    assert tg.seen() == ["next answer"]
    assert statuses(store) == [("t1", 0, "failed"), ("t1", 1, "failed"), ("t2", 0, "sent")]


async def test_429_retry_after_is_honoured_for_that_chat_while_others_go_on(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(RateLimited("telegram", 7))
    box = outbox_for(store, clock, tg)
    await clock.run(
        asyncio.gather(
            box.post("a", DM, "to the flooded chat"), box.post("b", OTHER, "to another chat")
        )
    )
    times = {(m.chat.chat_id, round(t, 6)) for t, m in tg.attempts}
    # no request to chat 100 before 7 s had passed
    assert times == {("100", 0.0), ("200", 0.0), ("100", 7.0)}
    assert tg.seen("100") == ["to the flooded chat"] and tg.seen("200") == ["to another chat"]


async def test_a_global_429_holds_every_chat_of_that_bot(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(RateLimited("telegram", 3, is_global=True))
    box = outbox_for(store, clock, tg)
    await clock.run(box.post("a", DM, "first"))
    await clock.run(box.post("b", OTHER, "second"))
    assert [(m.chat.chat_id, t) for t, m in tg.attempts] == [
        ("100", 0.0),
        ("100", 3.0),
        ("200", 3.0),
    ]


async def test_server_errors_back_off_bounded_then_wait_and_keep_chat_order(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    backoff = Backoff(first=0.5, factor=2, maximum=3, attempts=4)
    tg.fail(*[PlatformUnavailable("telegram", "502 Bad Gateway")] * 4)
    # no send limits: only the backoff sleeps
    box = outbox_for(store, clock, tg, backoff=backoff, limits={})
    assert (
        await clock.run(box.post("t1", DM, f"{PARA_A}\n\n{PARA_B}", kind=OutboundKind.REPLY)) == []
    )
    delays = [d for d in clock.sleeps if d > 0]
    assert len(delays) == 3 and all(d <= cap for d, cap in zip(delays, [0.5, 1, 2], strict=True))
    assert statuses(store) == [("t1", 0, "pending"), ("t1", 1, "pending")]
    row = store.outbound_for_turn("t1")[0]
    assert row.last_error == "telegram: 502 Bad Gateway" and row.attempts == 1
    # The platform is back. A newer reply in the same chat must not overtake the older one.
    await clock.run(box.post("t2", DM, "the newer answer", kind=OutboundKind.REPLY))
    assert tg.seen() == [PARA_A, PARA_B, "the newer answer"]
    assert statuses(store) == [("t1", 0, "sent"), ("t1", 1, "sent"), ("t2", 0, "sent")]


async def test_a_stuck_chat_does_not_hold_up_another(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(*[PlatformUnavailable("telegram", "reset")] * 2)
    box = outbox_for(store, clock, tg, backoff=Backoff(attempts=2))
    await clock.run(box.post("a", DM, "stuck"))
    await clock.run(box.post("b", OTHER, "fine"))
    assert tg.seen() == ["fine"]
    assert await clock.run(box.deliver_pending()) == 1
    assert tg.seen() == ["fine", "stuck"]


async def test_a_blocked_recipient_is_not_retried(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(RecipientUnavailable("telegram", "Forbidden: bot was blocked by the user"))
    box = outbox_for(store, clock, tg)
    await clock.run(box.post("t1", DM, f"{PARA_A}\n\n{PARA_B}", kind=OutboundKind.REPLY))
    assert len(tg.attempts) == 1
    assert statuses(store) == [("t1", 0, "failed"), ("t1", 1, "failed")]
    assert store.outbound_for_turn("t1")[1].last_error == "not sent: chunk 0 failed"


async def test_a_chunk_that_keeps_failing_is_given_up_after_max_rounds(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(*[PlatformUnavailable("telegram", "timeout")] * 3)
    box = outbox_for(store, clock, tg, backoff=Backoff(attempts=1), max_rounds=3)
    await clock.run(box.post("t1", DM, "doomed"))
    for _ in range(4):
        await clock.run(box.deliver_pending())
    await clock.run(box.post("t2", DM, "after it"))
    assert len([m for _, m in tg.attempts if m.text == "doomed"]) == 3
    assert tg.seen() == ["after it"]
    assert store.outbound_for_turn("t1")[0].status == "failed"


async def test_replies_for_a_platform_that_is_down_wait_for_it(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    up = {"telegram": False}
    box = outbox_for(store, clock, tg, available=lambda p: up[p])
    await clock.run(box.post("t1", DM, "one"))
    await clock.run(box.post("t2", DM, "two"))
    assert tg.attempts == [] and [s for *_, s in statuses(store)] == ["pending", "pending"]
    assert store.outbound_for_turn("t1")[0].attempts == 0  # waiting for the platform costs no round
    up["telegram"] = True
    assert await clock.run(box.deliver_pending("telegram")) == 2
    assert tg.seen() == ["one", "two"]


async def test_retry_loop_gives_pending_chunks_another_round(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(PlatformUnavailable("telegram", "503"))
    box = outbox_for(store, clock, tg, backoff=Backoff(attempts=1))
    await clock.run(box.post("t1", DM, "later"))
    loop = asyncio.ensure_future(box.retry_pending(30))
    try:
        await clock.advance(29)
        assert tg.seen() == []
        await clock.advance(1)
        assert tg.seen() == ["later"]
    finally:
        loop.cancel()


class ProcessDied(BaseException):
    """Stands for kill -9: nothing after it runs, no handler sees it."""


async def test_exactly_once_across_a_crash_between_two_chunks(home: Path) -> None:
    write_home(home)
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(None, ProcessDied())  # chunk 0 goes out, then the process dies before chunk 1
    gw = gateway_on(clock, home, [tg], ReplyLLM(lambda text: f"{PARA_A}\n\n{PARA_B}"))
    await clock.run(
        gw.sessions.submit(inbound("tell me everything", platform="telegram", chat_id="100"))
    )
    await clock.run(gw.sessions.wait_idle())
    assert tg.seen() == [PARA_A]
    gw.store.close()

    clock2 = FakeClock()
    tg2 = ScriptedAdapter("telegram", clock2)
    llm2 = ReplyLLM()
    gw2 = gateway_on(clock2, home, [tg2], llm2)
    sent = await clock2.run(gw2.outbox.deliver_pending())
    resumed, expired = await clock2.run(gw2.sessions.replay())
    await clock2.run(gw2.sessions.wait_idle())
    assert sent == 1 and tg2.seen() == [PARA_B]  # only the missing chunk, and no second LLM turn
    assert (resumed, expired) == (0, 0) and llm2.seen == []
    assert [s for *_, s in statuses(gw2.store)] == ["sent", "sent"]
    gw2.store.close()


async def test_typing_stops_before_the_final_send_and_on_error(home: Path) -> None:
    write_home(home)
    clock = FakeClock()
    tg = TypingAdapter("telegram", clock)

    def answer(text: str) -> str:
        if text == "fail":
            raise RuntimeError("model exploded")
        return f"{PARA_A}\n\n{PARA_B}"

    gw = gateway_on(clock, home, [tg], ReplyLLM(answer))
    await clock.run(gw.sessions.submit(inbound("hello", platform="telegram", chat_id="100")))
    await clock.run(gw.sessions.wait_idle())
    assert tg.events == ["typing on", "typing off", "send 0", "send 1"]
    tg.events.clear()
    await clock.run(gw.sessions.submit(inbound("fail", platform="telegram", chat_id="100")))
    await clock.run(gw.sessions.wait_idle())
    assert tg.events == ["typing on", "typing off", "send 0"]
    assert tg.seen()[-1] == "Sorry, something went wrong on my side. Please try again."
    gw.store.close()


async def test_post_soon_records_at_once_and_sends_in_the_background_in_order(store: Store) -> None:
    clock = FakeClock()
    tg = ScriptedAdapter("telegram", clock)
    tg.fail(RateLimited("telegram", 5))
    box = outbox_for(store, clock, tg)
    box.post_soon("n1", DM, "your pairing code is ABC", reply_to_id="m1")  # returns before any send
    box.post_soon("n2", DM, "and one more thing")
    assert (
        statuses(store) == [("n1", 0, "pending"), ("n2", 0, "pending")] and clock.monotonic() == 0.0
    )
    await clock.advance(4.9)
    assert tg.seen() == []
    await clock.advance(0.1)
    await clock.advance(1)
    assert tg.seen() == ["your pairing code is ABC", "and one more thing"]

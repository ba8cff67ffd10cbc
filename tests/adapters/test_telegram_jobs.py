"""Scheduled jobs end to end on Telegram: real aiogram polling against the fake Bot API, the whole
daemon behind it, the fake LLM making the `schedule` tool call, and an injected clock. The jobs'
sweep fires through APScheduler's executor; a restart is a new daemon on the same home. Assertions
are what the Telegram users saw, and where."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_telegram import ALICE, BOB, FORUM, VirtualTime, telegram_yaml
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.helpers import write_config
from tests.jobs_support import fire_jobs, job_rows, run_rows, settle
from tests.lifecycle_support import FakeClock

ZONE = "schedule:\n  timezone: Europe/Berlin\n"  # the fake clock starts at 09:00 UTC = 10:00 there


@asynccontextmanager
async def daemon(
    home: Path, llm: FakeLLM, tg: FakeTelegram, clock: FakeClock
) -> AsyncIterator[Gateway]:
    """One life of the daemon: built as `gateway run` builds it, with the injected clock; stopped
    (drained) after."""
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=telegram_yaml(tg, ZONE))
    config = load_config(home, env={})
    assert config.telegram is not None
    virtual = VirtualTime()
    # Telegram and the gateway share the virtual clock (previews are paced on it)
    tg.clock = virtual.monotonic
    adapter = TelegramAdapter(config.telegram, submit_retry_delays=(), clock=virtual.monotonic)
    gw = build_gateway(
        config,
        env={},
        adapters=[adapter],
        probe_ollama=False,
        clock=clock,
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    running = Daemon(gw, install_signals=False)
    await running.start()
    try:
        yield gw
        await settle(gw)
    finally:
        await running.stop()


def create(when: str, prompt: str, name: str) -> ToolCall:
    return ToolCall("schedule", {"action": "create", "when": when, "prompt": prompt, "name": name})


def seen(tg: FakeTelegram, chat: int) -> list[tuple[int | None, str]]:
    return [(m.message_thread_id, m.text) for m in tg.sent_messages(chat)]


async def ask(tg: FakeTelegram, chat: int, text: str, count: int, **kw: Any) -> None:
    tg.inject_message(chat, text, **kw)
    await tg.wait_for_sent(chat, count=count)


async def test_a_reminder_set_in_a_forum_topic_arrives_in_that_topic_at_its_time(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(
        create("2031-01-06T10:45", "Remind Alice to send the invoice.", "invoice"),
        Reply("Will do, at 10:45."),
        Reply("Alice, time to send the invoice."),
    )
    async with daemon(home, fake_llm, tg, clock) as gw:
        await ask(
            tg,
            FORUM,
            "@gw_test_bot remind me at 10:45 to send the invoice",
            1,
            chat_type="supergroup",
            is_topic=True,
            message_thread_id=11,
        )
        [job] = job_rows(gw)
        assert (job["platform"], job["chat_id"], job["thread_id"], job["user_id"]) == (
            "telegram",
            str(FORUM),
            "11",
            str(ALICE),
        )
        clock.advance(minutes=44)
        await fire_jobs(gw)  # a minute early: nothing
        assert seen(tg, FORUM) == [(11, "Will do, at 10:45.")]
        clock.advance(minutes=1)
        await fire_jobs(gw)
        await tg.wait_for_sent(FORUM, count=2)
        assert seen(tg, FORUM) == [
            (11, "Will do, at 10:45."),
            (11, ("⏰ invoice (job #1)\n\nAlice, time to send the invoice.")),
        ]
        # the header, as Telegram bold
        assert any(e["type"] == "bold" for e in tg.sent_messages(FORUM)[1].entities)
        assert tg.sent_messages(ALICE) == []  # the topic, not Alice's DM
        assert [(r["status"], r["finished_at"][11:16]) for r in run_rows(gw)] == [("done", "09:45")]


async def test_a_recurring_job_runs_on_schedule_and_both_kinds_survive_a_restart(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(
        create("0 * * * *", "Tell Bob the time.", "chime"),
        Reply("Hourly it is."),
        create("2h30m", "Remind Bob to leave.", "leave"),
        Reply("Noted."),
        Reply("It is 11:00."),
    )
    async with daemon(home, fake_llm, tg, clock) as gw:
        await ask(
            tg, BOB, "tell me the time every hour", 1, user_id=BOB, username="bob", first_name="Bob"
        )
        await ask(
            tg,
            BOB,
            "and remind me to leave in 2.5 hours",
            2,
            user_id=BOB,
            username="bob",
            first_name="Bob",
        )
        clock.advance(hours=1)
        await fire_jobs(gw)
        await tg.wait_for_sent(BOB, count=3)
    fake_llm.script(Reply("It is 12:00."), Reply("Time to leave, Bob."), Reply("It is 13:00."))
    async with daemon(home, fake_llm, tg, clock) as gw:
        # a restart: both jobs come back from SQLite
        assert gw.jobs is not None and len(gw.jobs.timers) == 2
        clock.advance(hours=1)
        await fire_jobs(gw)
        clock.advance(minutes=30)
        await fire_jobs(gw)
        clock.advance(minutes=30)
        await fire_jobs(gw)
        await tg.wait_for_sent(BOB, count=6)
    assert [text for _, text in seen(tg, BOB)] == [
        "Hourly it is.",
        "Noted.",
        "⏰ chime (job #1)\n\nIt is 11:00.",
        "⏰ chime (job #1)\n\nIt is 12:00.",
        "⏰ leave (job #2)\n\nTime to leave, Bob.",
        "⏰ chime (job #1)\n\nIt is 13:00.",
    ]


async def test_runs_missed_while_the_daemon_was_down(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Down for 2 h 40 min: the run 2 h 10 min late is
    reported as missed, the one 10 min late runs once."""
    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(
        create("30m", "Remind Alice to stretch.", "stretch"),
        Reply("ok"),
        create("2h30m", "Remind Alice to call Bob.", "call"),
        Reply("ok"),
    )
    async with daemon(home, fake_llm, tg, clock):
        await ask(tg, ALICE, "stretch in 30 minutes", 1)
        await ask(tg, ALICE, "call Bob in 2.5 hours", 2)
    clock.advance(hours=2, minutes=40)
    fake_llm.script(Reply("Call Bob now (a little late)."))
    async with daemon(home, fake_llm, tg, clock) as gw:
        await tg.wait_for_sent(ALICE, count=4)
        assert sorted(text for _, text in seen(tg, ALICE)[2:]) == [
            (
                '⏰ I missed job #1 "stretch", due 2031-01-06 10:30 '
                "CET, while I was offline, so it did not run. Ask me "
                "to schedule it again if it still matters."
            ),
            "⏰ call (job #2)\n\nCall Bob now (a little late).",
        ]
        assert sorted((r["job_id"], r["status"], r["trigger"]) for r in run_rows(gw)) == [
            (1, "missed", "boot"),
            (2, "done", "boot"),
        ]
    async with daemon(home, fake_llm, tg, clock):
        # never twice: the next boot has nothing to catch up
        pass
    assert len(tg.sent_messages(ALICE)) == 4


async def test_cancel_from_the_chat_stops_a_job(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(create("0 12 * * *", "Lunch reminder.", "lunch"), Reply("Daily at noon."))
    async with daemon(home, fake_llm, tg, clock) as gw:
        await ask(tg, ALICE, "remind me about lunch every day at noon", 1)
        await ask(tg, ALICE, "/jobs", 2)
        assert tg.sent_texts(ALICE)[1].startswith(
            'Your scheduled jobs:\n#1 "lunch": cron 0 12 * * * (Europe/Berlin);'
            " next 2031-01-06 12:00 CET (in 2 h)"
        )
        await ask(tg, ALICE, "/jobs cancel 1", 3)
        assert tg.sent_texts(ALICE)[2] == 'Cancelled job #1 "lunch".'
        clock.advance(days=1)
        assert await fire_jobs(gw) is False  # nothing armed
        assert gw.jobs is not None
        gw.jobs.fire(1)
        await settle(gw)
        assert len(tg.sent_messages(ALICE)) == 3 and run_rows(gw) == []
        assert job_rows(gw)[0]["state"] == "cancelled"

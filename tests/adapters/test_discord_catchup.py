"""Discord never redelivers: what was said while the daemon was down is fetched from channel history
once it is back (real discord.py against the fake Discord's REST history, the whole gateway behind
it)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import discord
import pytest

from tests.adapters.test_discord import DM, MENTION, ref_id, running
from tests.fakes.discord import BOT_ID, CHANNEL_ID, OTHER_USER_ID, USER_ID, FakeDiscord, snowflake
from tests.fakes.llm import FakeLLM

# the catch-up window, not pruning, decides below
KEEP_ROWS = "delivery:\n  dedupe_retention_hours: 1000\n"
_ids = iter(range(1, 4000))


def new_id(days_ago: float = 0.0) -> str:
    """A message id dated now (or days ago): discord.py dates a message by its id, the catch-up
    window by that."""
    return snowflake(time.time() - days_ago * 86400, increment=next(_ids))


def history_reads(fake: FakeDiscord, channel: str) -> int:
    return len(fake.calls_to(f"GET /channels/{channel}/messages"))


@pytest.fixture
def quick_reidentify(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_identify_pause(
        self: object, shard_id: int | None, *, initial: bool = False
    ) -> None:
        return None  # discord.py sleeps 5 s before a re-IDENTIFY (Discord's identify rate limit)

    monkeypatch.setattr(discord.Client, "before_identify_hook", no_identify_pause)


async def caught_up(fake: FakeDiscord, caplog: pytest.LogCaptureFixture, why: str) -> str:
    """The adapter's summary line of its catch-up after `why` (waits for it)."""

    def line() -> str:
        return next(
            (r.getMessage() for r in caplog.records if f"caught up after {why}" in r.getMessage()),
            "",
        )

    await fake.wait_until(lambda: bool(line()))
    return line()


async def test_messages_sent_while_stopped_are_answered_once_in_order(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "before the restart", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
    assert not fake_discord.online
    away = [
        await fake_discord.push_message(DM, f"while away {i}", message_id=new_id())
        for i in range(3)
    ]
    caplog.set_level(logging.INFO, logger="adapters.discord.adapter")
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.wait_for_sent(DM, count=4)
        await run.gw.sessions.wait_idle()
        answers = fake_discord.sent_messages(DM)
        assert [m.content for m in answers] == [
            "echo: before the restart [users=1]",
            "echo: while away 0 [users=2]",
            "echo: while away 1 [users=3]",
            "echo: while away 2 [users=4]",
        ]
        assert [ref_id(m) for m in answers[1:]] == away  # each answers its own message
        assert history_reads(fake_discord, DM) == 1
        assert any(
            "caught up after a restart: 1 channel(s), 3 message(s) fetched, 3 submitted"
            in r.getMessage()
            for r in caplog.records
        )
        # live traffic goes on as before
        await fake_discord.push_message(DM, "live again", message_id=new_id())
        assert (
            await fake_discord.wait_for_sent(DM, count=5)
        ).content == "echo: live again [users=5]"


async def test_an_overlap_with_a_live_event_is_answered_once(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "hello", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
    missed = await fake_discord.push_message(DM, "missed", message_id=new_id())
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.wait_for_sent(DM, count=2)
        # the same MESSAGE_CREATE arrives live too (a gateway replay): the store already has it
        await fake_discord.dispatch(
            "MESSAGE_CREATE", fake_discord._with_member(fake_discord._messages[(DM, missed)])
        )
        await fake_discord.push_message(DM, "after", message_id=new_id())
        await fake_discord.wait_for_sent(DM, count=3)
        await run.gw.sessions.wait_idle()
        assert [m.content for m in fake_discord.sent_messages(DM)] == [
            "echo: hello [users=1]",
            "echo: missed [users=2]",
            "echo: after [users=3]",
        ]
        assert run.inbound_texts() == ["hello", "missed", "after"]


async def test_guild_catch_up_answers_only_what_addressed_the_bot(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID], message_id=new_id()
        )
        await fake_discord.wait_for_sent(CHANNEL_ID)
        await run.gw.sessions.wait_idle()
    await fake_discord.push_message(
        CHANNEL_ID, "humans talking", author_id=OTHER_USER_ID, message_id=new_id()
    )
    await fake_discord.push_message(
        CHANNEL_ID, "a note from the bot itself", author_id=BOT_ID, message_id=new_id()
    )
    asked = await fake_discord.push_message(
        CHANNEL_ID, f"{MENTION} are you back?", mentions=[BOT_ID], message_id=new_id()
    )
    await fake_discord.push_message(
        CHANNEL_ID, "more chatter", author_id=USER_ID, message_id=new_id()
    )
    async with running(home, fake_llm, fake_discord) as run:
        reply = await fake_discord.wait_for_sent(CHANNEL_ID, count=2)
        await run.gw.sessions.wait_idle()
        assert reply.content == "echo: [Alice] are you back? [users=2]" and ref_id(reply) == asked
        assert len(fake_discord.sent_messages(CHANNEL_ID)) == 2
        assert run.inbound_texts() == ["hi", "are you back?"]


async def test_a_chat_quiet_for_longer_than_the_window_is_not_fetched(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    old_dm = "600000000000000002"
    async with running(home, fake_llm, fake_discord, KEEP_ROWS) as run:
        await fake_discord.push_message(old_dm, "long ago", message_id=new_id(days_ago=8))
        await fake_discord.push_message(DM, "recently", message_id=new_id(days_ago=1))
        await fake_discord.wait_for_sent(old_dm)
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
    await fake_discord.push_message(old_dm, "anyone?", message_id=new_id())
    await fake_discord.push_message(DM, "still there?", message_id=new_id())
    async with running(home, fake_llm, fake_discord, KEEP_ROWS) as run:
        await fake_discord.wait_for_sent(DM, count=2)
        await run.gw.sessions.wait_idle()
        assert history_reads(fake_discord, old_dm) == 0 and history_reads(fake_discord, DM) == 1
        assert [m.content for m in fake_discord.sent_messages(old_dm)] == [
            "echo: long ago [users=1]"
        ]


async def test_a_full_reconnect_catches_up_by_itself(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, quick_reidentify: None
) -> None:
    """discord.py re-IDENTIFYs after an invalid session: a new session replays nothing, so the
    adapter looks."""
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "one", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        identifies = fake_discord.identify_count
        await fake_discord.invalidate_session(resumable=False)
        await fake_discord.push_message(DM, "said during the reconnect", message_id=new_id())
        await fake_discord.wait_for_identify(identifies + 1)
        await fake_discord.wait_for_sent(DM, count=2)
        await run.gw.sessions.wait_idle()
        assert [m.content for m in fake_discord.sent_messages(DM)] == [
            "echo: one [users=1]",
            "echo: said during the reconnect [users=2]",
        ]
        # the start knew no chat yet; the new session looked once
        assert history_reads(fake_discord, DM) == 1


async def test_a_resume_needs_no_catch_up(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "one", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        reads = history_reads(fake_discord, DM)
        await fake_discord.force_reconnect()
        await fake_discord.push_message(DM, "two", message_id=new_id())
        await fake_discord.wait_for_sent(DM, count=2)
        await run.gw.sessions.wait_idle()
        assert history_reads(fake_discord, DM) == reads


async def test_a_reconnect_reads_only_chats_that_addressed_the_bot(
    home: Path,
    fake_llm: FakeLLM,
    fake_discord: FakeDiscord,
    quick_reidentify: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A busy channel where people only talk among themselves is never read: nothing there was for
    the bot."""
    caplog.set_level(logging.INFO, logger="adapters.discord.adapter")
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            CHANNEL_ID,
            "humans talking, bot not addressed",
            author_id=OTHER_USER_ID,
            message_id=new_id(),
        )
        await fake_discord.push_message(DM, "one", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        identifies = fake_discord.identify_count
        await fake_discord.invalidate_session(resumable=False)
        await fake_discord.wait_for_identify(identifies + 1)
        assert "after a reconnect: 1 channel(s)" in await caught_up(
            fake_discord, caplog, "a reconnect"
        )
        assert history_reads(fake_discord, DM) == 1 and history_reads(fake_discord, CHANNEL_ID) == 0
        assert fake_discord.sent_messages(CHANNEL_ID) == []


async def test_a_slow_channel_holds_back_only_its_own_live_messages(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, quick_reidentify: None
) -> None:
    """While one channel's history is slow to come, a DM is answered at once; a live mention in the
    slow channel waits for the mention missed there before it, and both are answered in order."""
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID], message_id=new_id()
        )
        await fake_discord.wait_for_sent(CHANNEL_ID)
        await fake_discord.push_message(DM, "one", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        release = fake_discord.hold_history(CHANNEL_ID)
        identifies = fake_discord.identify_count
        await fake_discord.invalidate_session(resumable=False)
        missed = await fake_discord.push_message(
            CHANNEL_ID,
            f"{MENTION} said during the reconnect",
            mentions=[BOT_ID],
            message_id=new_id(),
        )
        await fake_discord.wait_for_identify(identifies + 1)
        # reading, slowly
        await fake_discord.wait_until(lambda: history_reads(fake_discord, CHANNEL_ID) == 1)
        later = await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} and after it", mentions=[BOT_ID], message_id=new_id()
        )
        await fake_discord.push_message(DM, "live meanwhile", message_id=new_id())
        assert (
            await fake_discord.wait_for_sent(DM, count=2)
        ).content == "echo: live meanwhile [users=2]"
        # its channel's catch-up is still reading
        assert len(fake_discord.sent_messages(CHANNEL_ID)) == 1
        release.set()
        await fake_discord.wait_for_sent(CHANNEL_ID, count=3)
        await run.gw.sessions.wait_idle()
        answers = fake_discord.sent_messages(CHANNEL_ID)
        assert [ref_id(m) for m in answers[1:]] == [missed, later]
        assert [m.content for m in answers[1:]] == [
            "echo: [Alice] said during the reconnect [users=2]",
            "echo: [Alice] and after it [users=3]",
        ]


async def test_a_catch_up_skips_what_its_time_budget_leaves_unread(
    home: Path,
    fake_llm: FakeLLM,
    fake_discord: FakeDiscord,
    quick_reidentify: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A catch-up gives up when its time is up: the channel still being read and the ones not begun
    are skipped and named in a warning; live messages there are answered as usual afterwards."""
    caplog.set_level(logging.INFO, logger="adapters.discord.adapter")
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID], message_id=new_id()
        )
        await fake_discord.wait_for_sent(CHANNEL_ID)
        # the most recently active: read first
        await fake_discord.push_message(DM, "one", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        run.adapter.catch_up_budget, run.adapter.catch_up_concurrency = 0.3, 1
        release = fake_discord.hold_history(DM)
        identifies = fake_discord.identify_count
        await fake_discord.invalidate_session(resumable=False)
        await fake_discord.push_message(DM, "lost", message_id=new_id())
        await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} lost too", mentions=[BOT_ID], message_id=new_id()
        )
        await fake_discord.wait_for_identify(identifies + 1)
        summary = await caught_up(fake_discord, caplog, "a reconnect")
        assert "2 channel(s), 0 message(s) fetched, 0 submitted" in summary and summary.endswith(
            "2 skipped"
        )
        warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        assert "2 channel(s) not caught up" in warning and DM in warning and CHANNEL_ID in warning
        assert history_reads(fake_discord, CHANNEL_ID) == 0  # its turn came after the time was up
        release.set()
        await fake_discord.push_message(DM, "still here", message_id=new_id())
        assert (
            await fake_discord.wait_for_sent(DM, count=2)
        ).content == "echo: still here [users=2]"
        await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} and here", mentions=[BOT_ID], message_id=new_id()
        )
        assert (
            await fake_discord.wait_for_sent(CHANNEL_ID, count=2)
        ).content == "echo: [Alice] and here [users=2]"


async def test_a_chat_known_only_from_the_store_is_read_after_a_later_reconnect(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, quick_reidentify: None
) -> None:
    """After a restart, a chat that has been quiet since
    still counts as known when discord.py reconnects."""
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "before the restart", message_id=new_id())
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
    async with running(home, fake_llm, fake_discord) as run:
        # the restart's catch-up
        await fake_discord.wait_until(lambda: history_reads(fake_discord, DM) == 1)
        identifies = fake_discord.identify_count
        await fake_discord.invalidate_session(resumable=False)
        missed = await fake_discord.push_message(
            DM, "said during the reconnect", message_id=new_id()
        )
        await fake_discord.wait_for_identify(identifies + 1)
        reply = await fake_discord.wait_for_sent(DM, count=2)
        assert (
            reply.content == "echo: said during the reconnect [users=2]" and ref_id(reply) == missed
        )

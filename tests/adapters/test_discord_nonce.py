"""Discord's `nonce` + `enforce_nonce`: a chunk Discord already took is never posted twice, whether
the answer to its create was lost in this process (the outbox retries) or the daemon died before
recording it (the next life sends the stored chunk again). Real discord.py against the fake Discord,
which dedupes as Discord documents."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import aiohttp
import pytest

from adapters.discord.text import nonce_for
from gateway.events import ChatRef, OutboundMessage
from tests.adapters.test_discord import DM, running, wait_for
from tests.fakes.base import ConnectionReset, Delay, Fault
from tests.fakes.discord import API, NONCE_WINDOW_S, TOKEN, AfterCommit, FakeDiscord
from tests.fakes.llm import FakeLLM, Reply

CREATE = "POST /channels/{cid}/messages"
# a send still in flight then is cut off, as by kill -9
DRAIN_FAST = "daemon:\n  drain_seconds: 1\n"
# Discord posts the first create but never answers it, nor any retry: the daemon stops with the
# chunk pending
HANG_AFTER_THE_FIRST_POST = (AfterCommit(Delay(60)), *[Delay(60)] * 10)


def outbound_statuses(home: Path) -> list[str]:
    with closing(sqlite3.connect(home / "state.db")) as db:
        return [r[0] for r in db.execute("SELECT status FROM outbound ORDER BY id")]


def creates(fake: FakeDiscord) -> list[dict[str, object]]:
    return [c.body for c in fake.calls_to(CREATE)]


def test_the_nonce_is_stable_per_stored_chunk_and_fits_discord() -> None:
    chat = ChatRef("discord", "dm", DM)
    one = OutboundMessage(chat=chat, text="a", plain="a", key="17@2025-01-01T00:00:00.000001+00:00")
    assert nonce_for(one) == nonce_for(
        OutboundMessage(
            chat=chat,
            text="other",
            plain="other",
            key=one.key,
            # a plain-text retry keeps its nonce
            use_plain=True,
        )
    )
    assert nonce_for(one) != nonce_for(
        OutboundMessage(chat=chat, text="a", plain="a", key="18@2025-01-01T00:00:00.000002+00:00")
    )
    # a wiped database reuses row ids; the creation time keeps the nonce new
    assert nonce_for(one) != nonce_for(
        OutboundMessage(chat=chat, text="a", plain="a", key="17@2025-01-01T00:07:00.000001+00:00")
    )
    assert len(nonce_for(one)) <= 25
    # no stored chunk: a random nonce, as discord.py's
    keyless = OutboundMessage(chat=chat, text="a", plain="a")
    assert nonce_for(keyless) != nonce_for(keyless) and len(nonce_for(keyless)) <= 25


@pytest.mark.parametrize("lost", [ConnectionReset(), Fault(502)], ids=["reset", "502"])
async def test_a_chunk_whose_answer_was_lost_is_posted_once(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, lost: object
) -> None:
    """Discord posted the message, then the connection dropped (our outbox retries) or a 502 came
    back (discord.py retries by itself): either way the retry carries the same nonce and gets the
    posted message back."""
    fake_discord.fail(CREATE, AfterCommit(lost))
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "hello")
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        rows = [
            tuple(r) for r in run.gw.store.all("SELECT status, platform_message_id FROM outbound")
        ]
    sent = fake_discord.sent_messages(DM)
    assert [m.content for m in sent] == ["echo: hello [users=1]"]
    bodies = creates(fake_discord)
    assert len(bodies) == 2 and bodies[0]["nonce"] == bodies[1]["nonce"]
    assert all(b["enforce_nonce"] is True and len(str(b["nonce"])) <= 25 for b in bodies)
    assert len(fake_discord.nonce_repeats) == 1
    # the id Discord handed back for the repeat is the posted message's
    assert rows == [("sent", sent[0].id)]


async def test_a_chunk_discord_took_before_the_daemon_died_is_not_posted_again(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    """Discord posts the chunk but its answer never arrives: the daemon dies (here: its drain
    deadline passes) with the chunk still pending in SQLite. The next life sends the stored chunk
    again: same row, same nonce, and Discord hands back the message it already has."""
    fake_discord.fail(CREATE, *HANG_AFTER_THE_FIRST_POST)
    async with running(home, fake_llm, fake_discord, DRAIN_FAST):
        await fake_discord.push_message(DM, "hello")
        await fake_discord.wait_for_sent(DM)
    assert outbound_statuses(home) == ["pending"]
    fake_discord.clear_faults()
    async with running(home, fake_llm, fake_discord) as run:
        await wait_for(
            lambda: (
                [r["status"] for r in run.gw.store.all("SELECT status FROM outbound")] == ["sent"]
            )
        )
        row = run.gw.store.all("SELECT platform_message_id FROM outbound")[0]
    sent = fake_discord.sent_messages(DM)
    assert [m.content for m in sent] == ["echo: hello [users=1]"]
    assert row["platform_message_id"] == sent[0].id
    assert (
        len({b["nonce"] for b in creates(fake_discord)}) == 1
        and len(fake_discord.nonce_repeats) == 1
    )


async def test_a_posted_chunk_deleted_before_the_resend_is_not_posted_again(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    """Someone deleted the chunk while the daemon was down: Discord answers the repeat with 10008
    and does not create it again. The chunk counts as delivered, and the rest of the reply still
    goes out."""
    fake_llm.script(Reply("\n\n".join(f"paragraph {i:02d} " + "fox " * 60 for i in range(12))))
    fake_discord.fail(CREATE, *HANG_AFTER_THE_FIRST_POST)
    async with running(home, fake_llm, fake_discord, DRAIN_FAST):
        await fake_discord.push_message(DM, "a long one")
        first = await fake_discord.wait_for_sent(DM)
    assert outbound_statuses(home) == ["pending", "pending"]
    fake_discord.clear_faults()
    fake_discord.delete_message(DM, first.id)
    async with running(home, fake_llm, fake_discord) as run:
        await wait_for(
            lambda: (
                {r["status"] for r in run.gw.store.all("SELECT status FROM outbound")} == {"sent"}
            )
        )
    sent = fake_discord.sent_messages(DM)
    assert first.content.startswith("paragraph 00") and "paragraph 11" not in first.content
    assert (
        len(sent) == 1
        and "paragraph 11" in sent[0].content
        and "paragraph 00" not in sent[0].content
    )
    assert len(fake_discord.nonce_repeats) == 1


async def test_the_fake_forgets_a_nonce_after_discords_window() -> None:
    """Outside the few minutes Discord keeps a nonce, the same nonce posts a new message (so a key
    must never be reused for another chunk: ours carries the row's creation time)."""
    now = [1000.0]
    fake = FakeDiscord(clock=lambda: now[0])
    async with fake, aiohttp.ClientSession(headers={"Authorization": f"Bot {TOKEN}"}) as http:

        async def post(text: str) -> str:
            async with http.post(
                f"{fake.base_url}{API}/channels/{DM}/messages",
                json={"content": text, "nonce": "n1", "enforce_nonce": True},
            ) as r:
                return str((await r.json())["id"])

        await fake.push_message(DM, "make the DM channel")
        first = await post("one")
        assert await post("one again") == first
        now[0] += NONCE_WINDOW_S + 1
        assert await post("one, later") != first
    assert [m.content for m in fake.sent_messages(DM)] == ["one", "one, later"]

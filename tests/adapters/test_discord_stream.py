"""Discord live previews end to end: real discord.py against the fake REST + gateway (its buckets on
the test's virtual clock, with Discord's real 5 requests per 5 s per channel), the whole gateway on
the same clock, and the fake LLM streaming for real, held piece by piece by a StreamGate."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from adapters.discord.adapter import DiscordAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_discord import MENTION, discord_yaml
from tests.adapters.test_telegram import VirtualTime
from tests.fakes.discord import (
    BOT_ID,
    CHANNEL_ID,
    DiscordMessage,
    FakeDiscord,
    patch_discord_urls,
    snowflake,
)
from tests.fakes.llm import FakeLLM, Paced, Reply, StreamGate
from tests.helpers import write_config

ANSWER = (
    "Sure. Here is how:\n\n1. open the **settings**\n2. "
    "pick a file\n\n```python\nprint('done')\n```\n"
    "That is the whole of it."
)
EDIT = "streaming:\n  by_platform:\n    discord: edit\n"


@asynccontextmanager
async def discord_fake(virtual: VirtualTime) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(
        clock=virtual.monotonic, bucket_clock=virtual.monotonic, bucket_window=5.0
    ) as fake:
        with patch_discord_urls(fake):
            yield fake


@asynccontextmanager
async def running(
    home: Path, llm: FakeLLM, fake: FakeDiscord, virtual: VirtualTime, extra: str = EDIT
) -> AsyncIterator[Gateway]:
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=discord_yaml(fake, extra))
    config = load_config(home, env={})
    assert config.discord is not None
    adapter = DiscordAdapter(config.discord, guild_ready_timeout=0.1)
    gw = build_gateway(
        config,
        env={},
        adapters=[adapter],
        probe_ollama=False,
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw
    finally:
        await daemon.stop()


def updates(fake: FakeDiscord) -> int:
    """How many versions of the bot's first message in
    the channel people have seen (posted + edits)."""
    sent = fake.sent_messages(CHANNEL_ID)
    return len(sent[0].edits) + 1 if sent else 0


async def piece_by_piece(fake: FakeDiscord, gate: StreamGate, count: int = 3) -> None:
    for n in range(1, count + 1):
        gate.release(1)
        await fake.wait_until(lambda n=n: updates(fake) >= n, 10)  # type: ignore[misc]
    gate.release_all()


async def final(fake: FakeDiscord) -> DiscordMessage:
    await fake.wait_until(
        lambda: updates(fake) > 0 and fake.sent_messages(CHANNEL_ID)[0].content.endswith("it."), 10
    )
    return fake.sent_messages(CHANNEL_ID)[0]


async def test_a_channel_sees_one_message_grow_and_become_the_answer(
    home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    async with discord_fake(virtual) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, fake, virtual) as gw:
            asked = await fake.push_message(
                CHANNEL_ID, f"{MENTION} how do I do it?", mentions=[BOT_ID]
            )
            await piece_by_piece(fake, gate)
            message = await final(fake)
            await gw.sessions.wait_idle()
        edits = [c.at for c in fake.calls if c.method == "PATCH"]
    assert len(fake.sent_messages(CHANNEL_ID)) == 1 and len(message.edits) >= 3  # grew in place
    assert str(message.message_reference["message_id"]) == asked  # type: ignore[index]
    assert fake.bucket_violations == [] and fake.retry_after_violations == []
    assert all(b - a >= 1.25 for a, b in itertools.pairwise(edits))  # under the channel's 5 per 5 s
    unstreamed = home.parent / "off"
    unstreamed.mkdir()
    virtual2 = VirtualTime()
    async with discord_fake(virtual2) as fake2:
        fake_llm.script(Reply(ANSWER))
        async with running(unstreamed, fake_llm, fake2, virtual2, extra="") as gw2:
            await fake2.push_message(CHANNEL_ID, f"{MENTION} how do I do it?", mentions=[BOT_ID])
            plain = await fake2.wait_for_sent(CHANNEL_ID)
            await gw2.sessions.wait_idle()
    # byte for byte what streaming off sends
    assert message.content == plain.content and plain.edits == ()


async def test_a_code_fence_cut_by_the_stream_is_always_closed(home: Path) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    code = (
        "Look:\n```python\n"
        + "".join(f"x{i} = {i}  # *note* {i}\n" for i in range(10))
        + "```\nThat is it."
    )
    async with discord_fake(virtual) as fake, FakeLLM(stream_chunk_chars=19) as llm:
        llm.script(Paced(Reply(code), gate=gate))
        async with running(home, llm, fake, virtual) as gw:
            await fake.push_message(CHANNEL_ID, f"{MENTION} code please", mentions=[BOT_ID])
            await piece_by_piece(fake, gate, 5)
            message = await final(fake)
            await gw.sessions.wait_idle()
    shown = [*message.edits, message.content]
    assert len(shown) >= 5 and all(text.count("```") % 2 == 0 for text in shown)
    assert fake.bucket_violations == []


async def test_a_kill_mid_stream_gives_one_answer_in_the_preview(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    async with discord_fake(virtual) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate), Reply(ANSWER))
        async with running(home, fake_llm, fake, virtual, EDIT + "daemon:\n  drain_seconds: 0\n"):
            await fake.push_message(
                CHANNEL_ID,
                f"{MENTION} how do I do it?",
                mentions=[BOT_ID],
                # dated now: young enough to be answered after a restart
                message_id=snowflake(),
            )
            gate.release(2)
            await fake.wait_until(lambda: updates(fake) >= 2, 10)
        # the daemon died mid-answer; the next one, a while later, answers it again
        gate.release_all()
        virtual.t += 5.0
        async with running(home, fake_llm, fake, virtual) as gw:
            message = await final(fake)
            await gw.sessions.wait_idle()
    # the stale preview became the answer
    assert [m.id for m in fake.sent_messages(CHANNEL_ID)] == [message.id]
    assert fake.bucket_violations == []


async def test_a_slash_command_answer_has_no_preview(home: Path, fake_llm: FakeLLM) -> None:
    """/ask already shows the interaction's "thinking…":
    the answer is the interaction's, with no preview."""
    gate = StreamGate()
    virtual = VirtualTime()
    async with discord_fake(virtual) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, fake, virtual) as gw:
            await fake.push_interaction(
                "ask", options=[{"name": "prompt", "type": 3, "value": "how do I do it?"}]
            )
            for _ in range(3):
                gate.release(1)
            gate.release_all()
            await fake.wait_until(
                lambda: bool(fake.sent) and fake.sent[-1].content.endswith("it."), 10
            )
            await gw.sessions.wait_idle()
    assert [m.via for m in fake.sent] == ["interaction"] and fake.sent[0].content.endswith(
        "whole of it."
    )
    # no post, no edit
    assert fake.calls_to(lambda c: f"/channels/{CHANNEL_ID}/messages" in c.path) == []
    # the answer, once
    assert len(fake.calls_to(lambda c: c.path.endswith("/messages/@original"))) == 1

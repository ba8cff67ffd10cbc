"""Discord sharding against the fake: `shards: auto` follows the shard count Discord recommends
(GET /gateway/bot) with discord.py's AutoShardedClient, and `{count, ids}` runs only some shards in
this process. The fake routes each server's events to shard `(guild_id >> 22) % count` and direct
messages to shard 0, as Discord does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import discord

from tests.adapters.test_discord import DM, MENTION, running
from tests.fakes.discord import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    OTHER_USER_ID,
    USER_ID,
    FakeDiscord,
    make_guild,
    make_user,
    patch_discord_urls,
)
from tests.fakes.llm import FakeLLM

SECOND_GUILD = str(int(GUILD_ID) + (1 << 22))  # the next shard over from GUILD_ID
SECOND_CHANNEL = "300000000000000002"


@asynccontextmanager
async def sharded_discord(recommended: int) -> AsyncIterator[FakeDiscord]:
    """Two servers, one on each shard of two."""
    members = [{"id": USER_ID, "username": "alice"}, {"id": OTHER_USER_ID, "username": "bob"}]
    users = [make_user(m["id"], m["username"]) for m in members]
    lobby = (("lobby", SECOND_CHANNEL),)
    second = make_guild(SECOND_GUILD, "Second", channels=lobby, members=users)
    guilds = [make_guild(members=users), second]
    fake = FakeDiscord(guilds=guilds, recommended_shards=recommended)
    await fake.start()
    try:
        with patch_discord_urls(fake):
            yield fake
    finally:
        await fake.stop()


def shards_of(fake: FakeDiscord) -> dict[str, list[int]]:
    """Guild id → the shard ids whose READY listed it."""
    found: dict[str, list[int]] = {}
    for session in fake.sessions.values():
        ready = session.history[0]["d"]
        for guild in ready["guilds"]:
            found.setdefault(guild["id"], []).append(ready["shard"][0])
    return found


async def test_a_recommended_shard_count_of_two_connects_both_shards(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with sharded_discord(2) as fake, running(home, fake_llm, fake, "  shards: auto\n") as run:
        assert fake.shard_of(GUILD_ID, 2) != fake.shard_of(SECOND_GUILD, 2)
        assert sorted(i["shard"] for i in fake.identifies) == [[0, 2], [1, 2]]  # both IDENTIFY
        assert shards_of(fake) == {
            GUILD_ID: [fake.shard_of(GUILD_ID, 2)],
            SECOND_GUILD: [fake.shard_of(SECOND_GUILD, 2)],
        }
        client = run.adapter._client
        assert isinstance(client, discord.AutoShardedClient) and client.shard_count == 2
        await fake.push_message(CHANNEL_ID, f"{MENTION} first server", mentions=[BOT_ID])
        await fake.push_message(SECOND_CHANNEL, f"{MENTION} second server", mentions=[BOT_ID])
        await fake.push_message(DM, "a direct message")  # only shard 0 gets DMs
        assert "first server" in (await fake.wait_for_sent(CHANNEL_ID)).content
        assert "second server" in (await fake.wait_for_sent(SECOND_CHANNEL)).content
        assert "a direct message" in (await fake.wait_for_sent(DM)).content
        assert run.health.state == "running"


async def test_one_recommended_shard_is_one_plain_connection(home: Path, fake_llm: FakeLLM) -> None:
    async with sharded_discord(1) as fake, running(home, fake_llm, fake, "  shards: auto\n") as run:
        assert not isinstance(run.adapter._client, discord.AutoShardedClient)
        assert len(fake.identifies) == 1 and fake.identifies[0].get("shard") in (None, [0, 1])
        await fake.push_message(SECOND_CHANNEL, f"{MENTION} hi", mentions=[BOT_ID])
        assert "hi" in (await fake.wait_for_sent(SECOND_CHANNEL)).content


async def test_a_process_runs_only_its_shard_ids(home: Path, fake_llm: FakeLLM) -> None:
    async with sharded_discord(2) as fake:
        mine = fake.shard_of(SECOND_GUILD, 2)
        extra = f"  shards:\n    count: 2\n    ids: [{mine}]\n"
        async with running(home, fake_llm, fake, extra) as run:
            assert [i["shard"] for i in fake.identifies] == [[mine, 2]]
            assert shards_of(fake) == {SECOND_GUILD: [mine]}  # the other server: another process
            await fake.push_message(CHANNEL_ID, f"{MENTION} not mine", mentions=[BOT_ID])
            await fake.push_message(SECOND_CHANNEL, f"{MENTION} mine", mentions=[BOT_ID])
            assert "mine" in (await fake.wait_for_sent(SECOND_CHANNEL)).content
            await run.gw.sessions.wait_idle()
            texts = run.inbound_texts()
            assert [t for t in texts if "mine" in t] == texts  # it never saw the other one
            assert len(run.inbound_texts()) == 1 and fake.sent_messages(CHANNEL_ID) == []

"""Sharding: a bot in many servers connects over several gateway sessions (shards); Discord sends
shard N the events of the servers with `(guild_id >> 22) % count == N`, and direct messages to shard
0 only.

`discord.shards: auto` asks Discord how many shards it recommends (GET /gateway/bot) and shards,
with discord.py's AutoShardedClient, when that is more than one; `{count: N, ids: [...]}` runs the
listed shards of N in this process, so a big bot can be spread over several processes (each with its
own home).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
import discord
import discord.http

from adapters.discord.text import PLATFORM, TOKEN_HINT
from gateway.config.settings import DiscordConfig
from gateway.errors import AdapterError, AdapterFatal

log = logging.getLogger("adapters.discord.adapter")  # the Discord adapter's one logger


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """The shards this process runs: `ids` of `count`."""

    count: int
    ids: tuple[int, ...]

    def describe(self) -> str:
        return f"shard(s) {', '.join(map(str, self.ids))} of {self.count}"


async def shard_plan(config: DiscordConfig) -> ShardPlan | None:
    """None: one connection, as an unsharded bot. With `shards: auto`, what Discord recommends."""
    shards = config.shards
    if shards is None:
        return None
    if shards != "auto":
        return ShardPlan(shards.count, shards.shard_ids)
    count = await recommended_shards(config.token.value)
    log.info("discord: Discord recommends %s shard(s) for this bot", count)
    return ShardPlan(count, tuple(range(count))) if count > 1 else None


async def recommended_shards(token: str) -> int:
    """GET /gateway/bot's `shards`, over a client of its own (closed again)."""
    http = discord.http.HTTPClient(asyncio.get_running_loop())
    try:
        await http.static_login(token)
        count, _, _ = await http.get_bot_gateway()
    except discord.LoginFailure:
        raise AdapterFatal(PLATFORM, TOKEN_HINT) from None
    except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
        raise AdapterError(
            PLATFORM,
            f"cannot ask Discord for the recommended shard count: {exc or type(exc).__name__}",
        ) from None
    finally:
        await http.close()
    return max(1, int(count))

"""Discord outbound: a chunk → a channel message (in the thread `threads` opens, as a reply to the
message it answers, pinging no one but that message's author) or the slash command's own response;
and "is typing…" while a turn runs."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import discord

from adapters.discord.buttons import view_of
from adapters.discord.commands import SlashCommands
from adapters.discord.text import (
    PLATFORM,
    Origin,
    allowed_mentions,
    nonce_for,
    posted_then_deleted,
    reference_for,
    translate_error,
)
from adapters.discord.threads import AutoThreads
from gateway.errors import PlatformUnavailable
from gateway.events import ChatRef, OutboundMessage

# one logger for the Discord adapter, whichever module speaks
log = logging.getLogger("adapters.discord.adapter")

REMEMBERED_MESSAGES = 5000  # triggering messages kept for reply references and mention scope


class Outbound:
    """What goes to Discord. `client` is set once the adapter's `start` has made it; the inbound
    side tells it each message that may be answered (`remember`), so the reply can point at it and
    ping only its author."""

    def __init__(self, commands: SlashCommands, threads: AutoThreads) -> None:
        self.client: discord.Client | None = None
        self.commands = commands
        self.threads = threads
        self._origins: OrderedDict[str, Origin] = OrderedDict()
        self._typing = 0

    def remember(self, message: discord.Message) -> None:
        self._origins[str(message.id)] = Origin(message.channel.id, message.author.id)
        while len(self._origins) > REMEMBERED_MESSAGES:
            self._origins.popitem(last=False)

    def origin(self, our_id: str | None) -> Origin | None:
        """Where the message we answer was and who wrote it (for reply references and whom a reply
        may ping)."""
        return self._origins.get(our_id or "")

    async def send(self, message: OutboundMessage) -> str:
        client = self.client
        if client is None or client.is_closed():
            raise PlatformUnavailable(PLATFORM, "not connected")
        text = message.plain if message.use_plain else message.text
        origin = self._origins.get(message.reply_to_id or "")
        mentions = allowed_mentions(origin.author_id if origin else None)
        # the same chunk never posts twice: not on a retry, not after a kill -9
        nonce = nonce_for(message)
        extra: dict[str, Any] = {}
        if message.choices is not None:  # buttons (the Interactive ability: buttons.py)
            extra["view"] = view_of(message.choices)
        try:
            pending = self.commands.interaction_for(message.reply_to_id) if not extra else None
            if pending is not None:
                sent = await self.commands.answer(pending, text, mentions)
                if sent is not None:
                    return sent
            target = await self.threads.open(message.chat)
            channel = client.get_partial_messageable(target)
            reference = reference_for(message, target, origin)
            if reference is not None:
                extra["reference"] = reference
            posted = await channel.send(text, allowed_mentions=mentions, nonce=nonce, **extra)
        except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            if posted_then_deleted(exc, message):
                log.info(
                    "discord: chunk %s of a reply in channel "
                    "%s was posted before and deleted since",
                    message.chunk_index,
                    message.chat.chat_id,
                )
                return ""
            raise translate_error(exc) from None
        return str(posted.id)

    # ------------------------------------------------------------------ typing
    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """discord.py's `channel.typing()` refreshes "is typing…" every 5 s; it stops the moment the
        turn ends."""
        client = self.client
        indicator = None
        if client is not None and not client.is_closed():
            try:
                indicator = client.get_partial_messageable(await self.threads.open(chat)).typing()
                await indicator.__aenter__()
            except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
                log.debug("discord: typing indicator in channel %s failed: %s", chat.chat_id, exc)
                indicator = None
        self._typing += indicator is not None
        try:
            yield
        finally:
            if indicator is not None:
                self._typing -= 1
                await indicator.__aexit__(None, None, None)

    @property
    def typing_active(self) -> int:
        return self._typing

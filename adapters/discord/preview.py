"""Discord live previews: the answer posted as a message (a reply, in the thread the answer goes to)
and edited as it grows, then edited into the answer itself.

Edits of a channel's messages share one rate-limit bucket per channel, 5 per 5 seconds; the core
paces a preview 1.25 s apart per channel, so a preview never empties the bucket and the answer's own
edit or post finds room. The opening post carries a nonce from the turn and part, so a retry or a
restart never posts it twice. A slash command's answer has no preview: its "thinking…" response is
the interaction's own.
"""

from __future__ import annotations

import logging

import aiohttp
import discord

from adapters.discord.outbound import Outbound
from adapters.discord.text import PLATFORM, allowed_mentions, translate_error
from gateway.errors import PlatformUnavailable, PreviewGone
from gateway.events import ChatRef, OutboundMessage, PreviewPart, PreviewStyle

log = logging.getLogger("adapters.discord.adapter")

# PATCH /channels/{id}/messages/{id}: 5 per 5 s per channel, with room to spare
STYLE = PreviewStyle(1.25)
UNKNOWN_MESSAGE = 10008
_ERRORS = (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError)


class DiscordPreview:
    """Posts and edits for the adapter's LivePreview ability, through its `Outbound` (client,
    threads, origins)."""

    def __init__(self, outbound: Outbound) -> None:
        self.out = outbound

    def style(self, reply_to_id: str | None) -> PreviewStyle | None:
        return None if self.out.commands.interaction_for(reply_to_id) is not None else STYLE

    async def show(self, part: PreviewPart) -> str:
        if part.platform_message_id is None:
            # the first chunk's post: a reply to the asker, pinging no one else
            return await self.out.send(
                OutboundMessage(
                    chat=part.chat,
                    text=part.text,
                    plain=part.text,
                    reply_to_id=part.reply_to_id,
                    chunk_index=max(part.index, 0),
                    key=f"preview:{part.key}",
                )
            )
        return await self._edit(part.chat, part.platform_message_id, part.text, part.reply_to_id)

    async def finish(self, message: OutboundMessage, platform_message_id: str) -> str:
        text = message.plain if message.use_plain else message.text
        return await self._edit(message.chat, platform_message_id, text, message.reply_to_id)

    async def drop(self, chat: ChatRef, platform_message_id: str) -> None:
        try:
            channel = self._client().get_partial_messageable(await self.out.threads.open(chat))
            await channel.get_partial_message(int(platform_message_id)).delete()
        except _ERRORS as exc:
            log.info(
                "discord: preview %s in channel %s not deleted: %s",
                platform_message_id,
                chat.chat_id,
                exc,
            )

    async def _edit(
        self, chat: ChatRef, platform_message_id: str, text: str, reply_to_id: str | None
    ) -> str:
        origin = self.out.origin(reply_to_id)
        try:
            channel = self._client().get_partial_messageable(await self.out.threads.open(chat))
            await channel.get_partial_message(int(platform_message_id)).edit(
                content=text,
                allowed_mentions=allowed_mentions(origin.author_id if origin else None),
            )
        except _ERRORS as exc:
            if isinstance(exc, discord.NotFound) and exc.code == UNKNOWN_MESSAGE:
                raise PreviewGone(PLATFORM, f"message {platform_message_id} was deleted") from None
            raise translate_error(exc) from None
        return platform_message_id

    def _client(self) -> discord.Client:
        client = self.out.client
        if client is None or client.is_closed():
            raise PlatformUnavailable(PLATFORM, "not connected")
        return client

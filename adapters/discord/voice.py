"""Discord voice replies: a voice message, the IS_VOICE_MESSAGE flag on one OGG/Opus attachment that
carries its duration and waveform, and nothing else (Discord refuses content, embeds or a second
file with one). discord.py has no voice-message API, so it goes on the raw route through
discord.py's own HTTP client (its rate limits and retries). Where Discord refuses a voice message
(the channel denies Send Voice Messages) the note goes as an ordinary audio attachment instead. A
file for the chat (the shell's) goes as an attachment too."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
from typing import Any

import aiohttp
import discord

from adapters.discord.text import PLATFORM, translate_error
from adapters.discord.threads import AutoThreads
from gateway.errors import PlatformUnavailable
from gateway.events import OutboundAudio, OutboundFile

log = logging.getLogger("adapters.discord.adapter")

VOICE_MESSAGE_FLAG = 1 << 13
FILENAME = "voice-message.ogg"
# Missing Permissions, and the voice-message refusals (Discord's JSON error codes): an audio file
# can still go.
REFUSED = frozenset({50013, 50159, 50160, 50161, 50173})


class VoiceNotes:
    def __init__(self, threads: AutoThreads) -> None:
        self.threads = threads
        self.client: discord.Client | None = None

    async def send(self, audio: OutboundAudio) -> str:
        client = self.client
        if client is None or client.is_closed():
            raise PlatformUnavailable(PLATFORM, "not connected")
        nonce = _nonce(audio.key)
        try:
            target = await self.threads.open(audio.chat)
            try:
                posted = await _voice_message(client, target, audio, nonce)
            except discord.HTTPException as exc:
                if exc.code not in REFUSED:
                    raise
                log.info(
                    "discord: channel %s refused a voice message (%s); sending an audio file",
                    target,
                    exc.code,
                )
                posted = await _audio_file(client, target, audio, nonce)
        except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            raise translate_error(exc) from None
        return str(posted["id"])

    async def send_file(self, sent: OutboundFile) -> str:
        """A file for the chat: an attachment under its own name, in the thread it answers."""
        client = self.client
        if client is None or client.is_closed():
            raise PlatformUnavailable(PLATFORM, "not connected")
        nonce = _nonce(sent.key)
        file = discord.File(io.BytesIO(sent.data), filename=sent.filename)
        try:
            channel = client.get_partial_messageable(await self.threads.open(sent.chat))
            posted = await (
                channel.send(file=file, nonce=nonce) if nonce else channel.send(file=file)
            )
        except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            raise translate_error(exc) from None
        finally:
            file.close()
        return str(posted.id)


async def _voice_message(
    client: discord.Client, channel_id: int, audio: OutboundAudio, nonce: str | None
) -> Any:
    """POST /channels/{id}/messages, multipart: payload_json (flags, nonce, the attachment's
    metadata) and the file; discord.py resends the same form on its own retries."""
    payload: dict[str, Any] = {
        "flags": VOICE_MESSAGE_FLAG,
        "attachments": [
            {
                "id": 0,
                "filename": FILENAME,
                "duration_secs": audio.duration_s,
                "waveform": base64.b64encode(audio.waveform[:256] or b"\0").decode(),
            }
        ],
    }
    if nonce is not None:
        payload.update(nonce=nonce, enforce_nonce=True)
    file = discord.File(io.BytesIO(audio.data), filename=FILENAME)
    form: list[dict[str, Any]] = [
        {"name": "payload_json", "value": json.dumps(payload)},
        {
            "name": "files[0]",
            "value": file.fp,
            "filename": FILENAME,
            "content_type": audio.mime_type,
        },
    ]
    route = discord.http.Route("POST", "/channels/{channel_id}/messages", channel_id=channel_id)
    try:
        return await client.http.request(route, files=[file], form=form)
    finally:
        file.close()


async def _audio_file(
    client: discord.Client, channel_id: int, audio: OutboundAudio, nonce: str | None
) -> Any:
    channel = client.get_partial_messageable(channel_id)
    file = discord.File(io.BytesIO(audio.data), filename="voice-reply.ogg")
    posted = await (channel.send(file=file, nonce=nonce) if nonce else channel.send(file=file))
    return {"id": posted.id}


def _nonce(key: str) -> str | None:
    """The stored row's nonce (24 hex chars): a retry or a restart never posts the same note
    twice."""
    if not key:
        return None
    return hashlib.blake2b(key.encode(), digest_size=12, person=b"gw-discord-vn").hexdigest()

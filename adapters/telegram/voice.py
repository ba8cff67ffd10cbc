"""Telegram voice replies and files: sendVoice with the OGG/Opus note, sendDocument with a file, in
the chat's slot like any message. A user whose privacy settings refuse voice messages (Telegram
Premium: VOICE_MESSAGES_FORBIDDEN) gets the note as an audio file."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiogram.exceptions import AiogramError, TelegramAPIError, TelegramBadRequest
from aiogram.types import BufferedInputFile, Message

from adapters.telegram.outbound import Outbound, log
from adapters.telegram.text import PLATFORM
from gateway.errors import PlatformUnavailable, RateLimited
from gateway.events import OutboundAudio, OutboundFile

AUDIO_TITLE = "Voice reply"


async def send_voice(out: Outbound, audio: OutboundAudio) -> str:
    return await _paced(out, audio.chat.chat_id, lambda: _send(out, audio))


async def send_document(out: Outbound, file: OutboundFile) -> str:
    """A file as a document (sendDocument, multipart), in the thread of the chat it answers."""
    bot = out.bot
    if bot is None:
        raise PlatformUnavailable(PLATFORM, "not started")
    kwargs: dict[str, Any] = {}
    if file.chat.thread_id:
        kwargs["message_thread_id"] = int(file.chat.thread_id)
    document = BufferedInputFile(file.data, file.filename)
    return await _paced(
        out,
        file.chat.chat_id,
        lambda: bot.send_document(int(file.chat.chat_id), document, **kwargs),
    )


async def _paced(out: Outbound, chat_id: str, request: Callable[[], Awaitable[Message]]) -> str:
    """One request in the chat's slot: a flood wait refuses it, errors become the gateway's."""
    if out.bot is None:
        raise PlatformUnavailable(PLATFORM, "not started")
    async with out.pacing.one_request(chat_id):
        left = out.pacing.flood_left(chat_id)
        if left > 0:
            raise RateLimited(PLATFORM, left)
        try:
            sent = await request()
        except (TimeoutError, TelegramAPIError, AiogramError, OSError) as exc:
            raise out.translate_error(exc, chat_id) from None
    return str(sent.message_id)


async def _send(out: Outbound, audio: OutboundAudio) -> Message:
    assert out.bot is not None
    kwargs: dict[str, Any] = {"duration": max(1, round(audio.duration_s))}
    if audio.chat.thread_id:
        kwargs["message_thread_id"] = int(audio.chat.thread_id)
    chat_id = int(audio.chat.chat_id)
    try:
        return await out.bot.send_voice(chat_id, _file(audio), **kwargs)
    except TelegramBadRequest as exc:
        if "VOICE_MESSAGES_FORBIDDEN" not in str(exc):
            raise
    log.info(
        "telegram: chat %s takes no voice messages; the voice reply goes as an audio file", chat_id
    )
    return await out.bot.send_audio(chat_id, _file(audio), title=AUDIO_TITLE, **kwargs)


def _file(audio: OutboundAudio) -> BufferedInputFile:
    return BufferedInputFile(audio.data, audio.filename)

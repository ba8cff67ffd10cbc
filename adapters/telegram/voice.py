"""Telegram voice replies: sendVoice with the OGG/Opus note, in the chat's slot like any message. A
user whose privacy settings refuse voice messages (Telegram Premium: VOICE_MESSAGES_FORBIDDEN) gets
it as an audio file."""

from __future__ import annotations

from typing import Any

from aiogram.exceptions import AiogramError, TelegramAPIError, TelegramBadRequest
from aiogram.types import BufferedInputFile, Message

from adapters.telegram.outbound import Outbound, log
from adapters.telegram.text import PLATFORM
from gateway.errors import PlatformUnavailable, RateLimited
from gateway.events import OutboundAudio

AUDIO_TITLE = "Voice reply"


async def send_voice(out: Outbound, audio: OutboundAudio) -> str:
    if out.bot is None:
        raise PlatformUnavailable(PLATFORM, "not started")
    chat_id = audio.chat.chat_id
    async with out.pacing.one_request(chat_id):
        left = out.pacing.flood_left(chat_id)
        if left > 0:
            raise RateLimited(PLATFORM, left)
        try:
            sent = await _send(out, audio)
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
    log.info("telegram: chat %s takes no voice messages; the voice reply goes as an audio file",
             chat_id)
    return await out.bot.send_audio(chat_id, _file(audio), title=AUDIO_TITLE, **kwargs)


def _file(audio: OutboundAudio) -> BufferedInputFile:
    return BufferedInputFile(audio.data, audio.filename)

"""What a reply sends besides text, and the adapter abilities that send it: a voice note
(`OutboundAudio`, `AudioReplies`) and a file as a document (`OutboundFile`, `FileReplies`). The
outbox sends both as rows of their own kind (gateway/delivery/voice.py, files.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from gateway.events import ChatRef


@dataclass(frozen=True, slots=True)
class OutboundAudio:
    """A voice note: OGG/Opus bytes spoken from a reply whose text was sent before it.

    `waveform` is up to 256 loudness levels (0–255), one per equal slice of the note, for a
    platform that draws it (Discord). `transcript` is what is spoken (a title where the platform
    shows one). `key` names the stored row, as `OutboundMessage.key` does.
    """

    chat: ChatRef
    data: bytes
    duration_s: float
    waveform: bytes = b""
    transcript: str = ""
    reply_to_id: str | None = None
    key: str = ""
    filename: str = "voice.ogg"
    mime_type: str = "audio/ogg"


@runtime_checkable
class AudioReplies(Protocol):
    """Optional ability: send a voice note (Telegram sendVoice, a Discord voice message, a Slack
    audio file, the web chat's player); returns the platform's message id. Errors as for `send`."""

    async def send_audio(self, audio: OutboundAudio) -> str: ...


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file for the chat: its bytes, the name the person sees and its type. `key` names the
    stored row, as `OutboundMessage.key` does."""

    chat: ChatRef
    data: bytes
    filename: str
    mime_type: str = "application/octet-stream"
    reply_to_id: str | None = None
    key: str = ""


@runtime_checkable
class FileReplies(Protocol):
    """Optional ability: send a file as a document (Telegram sendDocument, a Slack file upload, a
    Discord attachment); returns the platform's message id. Errors as for `send`. Without it the
    core tells the chat in words that a file could not be sent there."""

    async def send_file(self, file: OutboundFile) -> str: ...

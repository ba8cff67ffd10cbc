"""The `voice:` section of config.yaml (docs/voice.md): when an answer also comes as a voice note,
how much of it is spoken, and the text-to-speech provider (an OpenAI-compatible service, or the
local espeak-ng)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

VoiceReplies = Literal["auto", "always", "never"]
DEFAULT_VOICES = {"openai": "alloy", "espeak": "en-us"}


@dataclass(frozen=True, slots=True)
class TtsConfig:
    """`openai`: `POST {base_url}/audio/speech` (OpenAI, or a local server speaking its API);
    `espeak`: Debian's espeak-ng on this machine, no service. Either way Debian's ffmpeg encodes
    the note (OGG/Opus)."""

    provider: Literal["openai", "espeak"]
    base_url: str | None = None  # openai: None is https://api.openai.com/v1
    api_key_env: str | None = None
    model: str = "gpt-4o-mini-tts"
    voice: str | None = None  # None: alloy (openai), en-us (espeak)
    speed: float = field(default=1.0, metadata={"min": 0.25, "max": 4.0})
    response_format: Literal["opus", "mp3", "wav", "flac", "aac"] = "opus"
    timeout_s: float = field(default=60.0, metadata={"positive": True})
    max_bytes: int = field(default=10 * 1024 * 1024, metadata={"positive": True})

    @property
    def voice_name(self) -> str:
        return self.voice or DEFAULT_VOICES[self.provider]


@dataclass(frozen=True, slots=True)
class VoiceConfig:
    """`replies`: auto (a voice note is answered with a voice note as well as the text), always,
    never; a chat's `/voice on|off` overrides it. Nothing is spoken without `tts`."""

    replies: VoiceReplies = "auto"
    max_chars: int = field(default=1500, metadata={"positive": True})
    tts: TtsConfig | None = None

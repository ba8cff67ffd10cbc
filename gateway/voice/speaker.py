"""An answer → a voice note: the words to speak (speech), the provider's audio (tts), OGG/Opus (encode). And what a
configured provider needs on this machine, for `gateway doctor` and `gateway config check`."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from gateway.config.voice import TtsConfig, VoiceConfig
from gateway.voice.encode import Speech, encode_voice
from gateway.voice.speech import spoken_text
from gateway.voice.tts import TextToSpeech, text_to_speech

ENCODE_TIMEOUT_S = 60.0
MAX_NOTE_BYTES = 8 * 1024 * 1024  # under every platform's upload cap (Discord's is 10 MB)


class Speaker:
    def __init__(self, config: VoiceConfig, tts: TtsConfig, api_key: str | None) -> None:
        self.config = config
        self.tts: TextToSpeech = text_to_speech(tts, api_key)

    def words(self, markdown: str) -> str:
        """What of this answer would be spoken ("" for nothing)."""
        return spoken_text(markdown, min(self.config.max_chars, self.tts.max_input))

    async def speak(self, words: str) -> Speech:
        """A voice note saying `words` (already the spoken text); SpeechError when it cannot be made."""
        audio = await self.tts.audio(words)
        return await encode_voice(audio, timeout_s=ENCODE_TIMEOUT_S, max_bytes=MAX_NOTE_BYTES)

    async def close(self) -> None:
        await self.tts.close()


def missing_tools(tts: TtsConfig, which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The programs a provider needs that are not installed here, as `apt-get install` would name them."""
    needed = ["espeak-ng", "ffmpeg"] if tts.provider == "espeak" else ["ffmpeg"]
    return [name for name in needed if which(name) is None]

"""An answer → a voice note: the words to speak (speech), the provider's audio (tts), OGG/Opus
(encode). And what a configured provider needs on this machine, for `gateway doctor` and
`gateway config check`."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from gateway.config.voice import TtsConfig, VoiceConfig
from gateway.config.yamlload import locate
from gateway.errors import ConfigError
from gateway.voice.encode import Speech, encode_voice
from gateway.voice.speech import spoken_text
from gateway.voice.tts import TextToSpeech, text_to_speech

ENCODE_TIMEOUT_S = 60.0
MAX_NOTE_BYTES = 8 * 1024 * 1024  # under every platform's upload cap (Discord's is 10 MB)
Which = Callable[[str], "str | None"]
Verdict = Literal["ok", "warn", "fail"]


class Speaker:
    def __init__(self, config: VoiceConfig, tts: TtsConfig, api_key: str | None) -> None:
        self.config = config
        self.tts: TextToSpeech = text_to_speech(tts, api_key)

    def words(self, markdown: str) -> str:
        """What of this answer would be spoken ("" for nothing)."""
        return spoken_text(markdown, min(self.config.max_chars, self.tts.max_input))

    async def speak(self, words: str) -> Speech:
        """A voice note saying `words` (the spoken text); SpeechError when it cannot be made."""
        audio = await self.tts.audio(words)
        return await encode_voice(audio, timeout_s=ENCODE_TIMEOUT_S, max_bytes=MAX_NOTE_BYTES)

    async def close(self) -> None:
        await self.tts.close()


def missing_tools(tts: TtsConfig, which: Which = shutil.which) -> list[str]:
    """The programs a provider needs that are not installed here (named as apt-get names them)."""
    needed = ["espeak-ng", "ffmpeg"] if tts.provider == "espeak" else ["ffmpeg"]
    return [name for name in needed if which(name) is None]


def tools_problem(tts: TtsConfig, which: Which = shutil.which) -> str | None:
    """What `voice.tts` needs that this machine lacks, in a sentence; None when nothing is."""
    missing = missing_tools(tts, which)
    if not missing:
        return None
    verb = "is" if len(missing) == 1 else "are"
    return (
        f"provider {tts.provider} needs {' and '.join(missing)}, which {verb} not installed "
        f"(apt-get install {' '.join(missing)})"
    )


def config_problems(voice: VoiceConfig, path: Path) -> list[ConfigError]:
    """`gateway config check`: a provider whose programs are missing, at its line in config.yaml."""
    problem = None if voice.tts is None else tools_problem(voice.tts)
    if problem is None:
        return []
    line = locate(path, "voice.tts.provider")
    return [ConfigError(problem, file=str(path), line=line, key="voice.tts.provider")]


def doctor_check(
    voice: VoiceConfig, env: Mapping[str, str]
) -> list[tuple[Verdict, str, str | None]]:
    """`gateway doctor`'s voice line: (verdict, detail, fix); none without `voice.tts`."""
    tts = voice.tts
    if tts is None:
        return []
    problem = tools_problem(tts)
    if problem is not None:
        fix = f"apt-get install {' '.join(missing_tools(tts))}"
        return [("fail", f"voice.tts: {problem}", fix)]
    if tts.provider == "openai" and tts.api_key_env and not env.get(tts.api_key_env):
        return [
            (
                "warn",
                f"voice.tts.api_key_env names {tts.api_key_env}, which is not set",
                f"export {tts.api_key_env} where the gateway runs",
            )
        ]
    where = "espeak-ng" if tts.provider == "espeak" else (tts.base_url or "api.openai.com")
    detail = f"speech from {where}, encoded by ffmpeg (voice.replies: {voice.replies})"
    return [("ok", detail, None)]

"""Text → audio: an OpenAI-compatible `POST {base_url}/audio/speech`, or the local espeak-ng. Either
returns audio in some container (ffmpeg reads it: gateway/voice/encode.py); failures are SpeechError
in words a user may read."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Protocol

from gateway.config.voice import TtsConfig
from gateway.errors import SpeechError
from gateway.voice.process import run_tool

if TYPE_CHECKING:  # imported when speech is first asked for: `gateway config check` needs none
    import aiohttp

log = logging.getLogger(__name__)

OPENAI_URL = "https://api.openai.com/v1"
OPENAI_MAX_INPUT = 4096  # characters per request (OpenAI's limit)
ESPEAK_WPM = 175  # espeak-ng's own default speed, which `speed: 1.0` keeps
RETRY_DELAY_S = 1.0  # one more try after a 429/5xx or a dropped connection
MAX_RETRY_AFTER_S = 10.0


class TextToSpeech(Protocol):
    max_input: int

    async def audio(self, text: str) -> bytes: ...

    async def close(self) -> None: ...


class OpenAISpeech:
    """OpenAI's speech endpoint, or a server speaking its API (a local Kokoro or Piper server)."""

    max_input = OPENAI_MAX_INPUT

    def __init__(self, config: TtsConfig, api_key: str | None) -> None:
        self.config = config
        self.url = (config.base_url or OPENAI_URL).rstrip("/") + "/audio/speech"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: aiohttp.ClientSession | None = None

    async def audio(self, text: str) -> bytes:
        config = self.config
        body = {
            "model": config.model,
            "voice": config.voice_name,
            "input": text[: self.max_input],
            "response_format": config.response_format,
            "speed": config.speed,
        }
        for attempt in (1, 2):
            try:
                return await self._post(body)
            except _Transient as exc:
                if attempt == 2:
                    raise SpeechError(str(exc)) from None
                log.info("speech service: %s; trying again", exc)
                await asyncio.sleep(min(exc.retry_after or RETRY_DELAY_S, MAX_RETRY_AFTER_S))
        raise AssertionError("unreachable")

    async def _post(self, body: dict[str, object]) -> bytes:
        import aiohttp

        if self._http is None:
            timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
            self._http = aiohttp.ClientSession(timeout=timeout)
        try:
            async with self._http.post(self.url, json=body, headers=self._headers) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise _Transient(
                        f"the speech service answered HTTP {resp.status}", _seconds(resp)
                    )
                if resp.status != 200:
                    why = ", the key" if resp.status == 401 else f": {await _reason(resp)}"
                    raise SpeechError(
                        f"the speech service refused the request (HTTP {resp.status}{why})"
                    )
                return await self._read(resp)
        except TimeoutError:
            raise SpeechError(
                f"the speech service did not answer within {self.config.timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise _Transient(
                f"the speech service could not be reached ({type(exc).__name__})"
            ) from None

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        limit = self.config.max_bytes
        if resp.content_length is not None and resp.content_length > limit:
            raise SpeechError(f"the speech service sent more than {limit:,} bytes")
        data = bytearray()
        async for chunk in resp.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > limit:
                raise SpeechError(f"the speech service sent more than {limit:,} bytes")
        return bytes(data)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


class EspeakSpeech:
    """Debian's espeak-ng, on this machine: WAV on its standard output, the text on its standard
    input."""

    max_input = 100_000

    def __init__(self, config: TtsConfig) -> None:
        self.config = config

    async def audio(self, text: str) -> bytes:
        argv = [
            "espeak-ng",
            "--stdout",
            "-b",
            "1",
            "-v",
            self.config.voice_name,
            "-s",
            str(round(ESPEAK_WPM * self.config.speed)),
        ]
        return await run_tool(
            argv,
            stdin=text.encode("utf-8"),
            timeout_s=self.config.timeout_s,
            max_output=self.config.max_bytes,
        )

    async def close(self) -> None:
        return None


def text_to_speech(config: TtsConfig, api_key: str | None) -> TextToSpeech:
    return EspeakSpeech(config) if config.provider == "espeak" else OpenAISpeech(config, api_key)


class _Transient(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _seconds(resp: aiohttp.ClientResponse) -> float | None:
    try:
        return float(resp.headers.get("Retry-After", ""))
    except ValueError:
        return None


async def _reason(resp: aiohttp.ClientResponse) -> str:
    """The service's own error message, short (OpenAI: {"error": {"message": ...}})."""
    import aiohttp

    try:
        body = json.loads(await resp.content.read(4096))
        error = body.get("error")
        message = error["message"] if isinstance(error, dict) else error
    except (ValueError, KeyError, TypeError, AttributeError, aiohttp.ClientError):
        return "no reason given"
    return str(message or "no reason given")[:200]

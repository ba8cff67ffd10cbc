"""A fake OpenAI-compatible text-to-speech service: `POST /v1/audio/speech` with OpenAI's JSON body
and rules (model, input, voice required; input at most 4096 characters; speed 0.25–4; a bearer key),
answering real audio: the input spoken by espeak-ng, converted by ffmpeg to the requested
`response_format`."""

from __future__ import annotations

import asyncio
import json
import time
from asyncio.subprocess import DEVNULL, PIPE
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.base import Clock, FakeServer, json_response

MAX_INPUT = 4096
FORMATS = {  # response_format → (ffmpeg output arguments, Content-Type), as OpenAI serves them
    "opus": (["-c:a", "libopus", "-b:a", "32k", "-f", "ogg"], "audio/ogg"),
    "mp3": (["-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"], "audio/mpeg"),
    "wav": (["-c:a", "pcm_s16le", "-f", "wav"], "audio/wav"),
    "flac": (["-c:a", "flac", "-f", "flac"], "audio/flac"),
    "aac": (["-c:a", "aac", "-f", "adts"], "audio/aac"),
}


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    model: str
    voice: str
    input: str
    response_format: str
    speed: float


class FakeSpeech(FakeServer):
    """`voice.tts.base_url` is `fake.v1_url`. `requests` holds what was asked to be spoken."""

    def __init__(self, *, api_key: str | None = "tts-key", clock: Clock = time.monotonic) -> None:
        super().__init__(clock=clock)
        self.api_key = api_key
        self.requests: list[SpeechRequest] = []
        self.answer: bytes | None = None  # set: served instead of real speech (garbage, say)
        self.app.router.add_post("/v1/audio/speech", self._speech)

    @property
    def v1_url(self) -> str:
        return f"{self.base_url}/v1"

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "speech", None)
        authorized = request.headers.get("Authorization") == f"Bearer {self.api_key}"
        if self.api_key is not None and not authorized:
            return _error(401, "Incorrect API key provided", "invalid_api_key")
        step = self.take_fault(["speech", "*"])
        if step is not None:
            response = await self.apply_fault(
                request, step, lambda s: {"error": {"message": f"Error {s}"}}
            )
            if response is not None:
                return response
        try:
            body = json.loads(await request.read())
            asked = _check(body)
        except ValueError as exc:
            return _error(400, str(exc), None)
        self.requests.append(asked)
        self.notify()
        args, mime = FORMATS[asked.response_format]
        audio = self.answer if self.answer is not None else await _speak(asked.input, args)
        return web.Response(body=audio, content_type=mime)


def _check(body: Any) -> SpeechRequest:
    if not isinstance(body, dict):
        raise ValueError("We could not parse the JSON body of your request.")  # noqa: TRY004 (a 400, as OpenAI)
    for key in ("model", "input", "voice"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise ValueError(f"'{key}' is a required property")
    if len(body["input"]) > MAX_INPUT:
        raise ValueError(f"'input' is too long: at most {MAX_INPUT} characters")
    fmt = body.get("response_format", "mp3")
    if fmt not in FORMATS:
        raise ValueError(f"'{fmt}' is not one of {sorted(FORMATS)} - 'response_format'")
    speed = float(body.get("speed", 1.0))
    if not 0.25 <= speed <= 4.0:
        raise ValueError("'speed' must be between 0.25 and 4.0")
    return SpeechRequest(body["model"], body["voice"], body["input"], fmt, speed)


async def _speak(text: str, args: list[str]) -> bytes:
    """espeak-ng's WAV of `text`, converted by ffmpeg (real audio, whatever the format)."""
    espeak = await asyncio.create_subprocess_exec(
        "espeak-ng", "--stdout", "-b", "1", stdin=PIPE, stdout=PIPE, stderr=DEVNULL
    )
    wav, _ = await espeak.communicate(text.encode())
    ffmpeg = await asyncio.create_subprocess_exec(
        "ffmpeg",
        "-hide_banner",
        "-loglevel",
        "error",
        "-i",
        "pipe:0",
        "-ac",
        "1",
        "-ar",
        "24000",
        *args,
        "pipe:1",
        stdin=PIPE,
        stdout=PIPE,
        stderr=DEVNULL,
    )
    audio, _ = await ffmpeg.communicate(wav)
    assert ffmpeg.returncode == 0 and audio, "the fake speech service could not make audio"
    return audio


def _error(status: int, message: str, code: str | None) -> web.Response:
    return json_response(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": code,
            }
        },
        status=status,
    )

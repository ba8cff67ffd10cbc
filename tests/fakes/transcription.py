"""A fake OpenAI-compatible speech-to-text service: `POST /v1/audio/transcriptions` with a real
multipart body (aiohttp's parser), the fields OpenAI requires, a bearer key, and a transcript the
test chose per audio payload."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.base import Clock, FakeServer, json_response

MAX_REQUEST_BYTES = 25 * 1024 * 1024  # OpenAI's limit for one upload (the whole request)


@dataclass(frozen=True, slots=True)
class Upload:
    """One transcription request as the service saw it."""

    filename: str
    content_type: str
    data: bytes
    fields: Mapping[str, str] = field(default_factory=dict)


class FakeTranscription(FakeServer):
    """`base_url` for `media.transcription.base_url` is `fake.base_url + "/v1"`."""

    def __init__(self, *, api_key: str | None = "stt-key", clock: Clock = time.monotonic) -> None:
        super().__init__(clock=clock)
        self.api_key = api_key
        self.uploads: list[Upload] = []
        self.transcripts: dict[str, str] = {}  # sha256 of the audio → its text
        self.default_text = "hello from a voice note"
        self.max_request_bytes = MAX_REQUEST_BYTES
        self.app.router.add_post("/v1/audio/transcriptions", self._transcribe)

    @property
    def v1_url(self) -> str:
        return f"{self.base_url}/v1"

    def says(self, audio: bytes, text: str) -> None:
        self.transcripts[hashlib.sha256(audio).hexdigest()] = text

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "transcriptions", None)
        if (
            self.api_key is not None
            and request.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            return json_response(
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
                status=401,
            )
        step = self.take_fault(["transcriptions", "*"])
        if step is not None:
            response = await self.apply_fault(request, step, _error)
            if response is not None:
                return response
        upload, problem = await _read_upload(request, self.max_request_bytes)
        if problem is not None:
            status = 413 if problem.startswith("Maximum content size") else 400
            return json_response(
                _error(status, problem, "server_error" if status == 413 else None), status=status
            )
        assert upload is not None
        self.uploads.append(upload)
        text = self.transcripts.get(hashlib.sha256(upload.data).hexdigest(), self.default_text)
        return json_response({"text": text})


async def _read_upload(request: web.Request, limit: int) -> tuple[Upload | None, str | None]:
    if not request.content_type.startswith("multipart/form-data"):
        return None, "Could not parse multipart form"
    reader = await request.multipart()
    fields: dict[str, str] = {}
    file: tuple[str, str, bytes] | None = None
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            return None, "Could not parse multipart form"
        if part.filename:
            file = (part.filename, part.headers.get("Content-Type", ""), bytes(await part.read()))
        else:
            fields[str(part.name)] = await part.text()
    if file is None:
        return None, "Missing required parameter: 'file'."
    if not fields.get("model"):
        return None, "Missing required parameter: 'model'."
    read = len(file[2]) + sum(len(v) for v in fields.values())
    if read > limit:  # OpenAI counts the whole request, and answers 413
        return None, f"Maximum content size limit ({limit}) exceeded ({read} bytes read)"
    return Upload(file[0], file[1], file[2], fields), None


def _error(status: int, message: str = "", kind: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message or f"Error {status}",
            "type": kind or "invalid_request_error",
            "param": None,
            "code": None,
        }
    }

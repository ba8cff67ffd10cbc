"""Voice notes and audio files → text through an OpenAI-compatible `POST
{base_url}/audio/transcriptions` (OpenAI, Groq, a local whisper server): one multipart upload
streamed from disk, the answer's `text` back.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp

from gateway.config.media import TranscriptionConfig
from gateway.errors import MediaError

log = logging.getLogger(__name__)


class Transcriber:
    """One aiohttp session, opened on the first voice note; `close` on shutdown."""

    def __init__(self, config: TranscriptionConfig, api_key: str | None) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/") + "/audio/transcriptions"
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None

    def check_size(self, size: int | None) -> None:
        """MediaError when the recording is bigger than the service takes (25 MB on OpenAI): said
        plainly, before anything is downloaded or sent when its size is known."""
        if size is not None and size > self.config.max_bytes:
            raise MediaError(self._too_long(size))

    def _too_long(self, size: int | None) -> str:
        shown = f"{_mb(size)}; " if size is not None else ""
        return (
            f"it is too long to transcribe ({shown}the transcription service takes recordings up "
            f"to {_mb(self.config.max_bytes)}): please send it in shorter parts"
        )

    async def transcribe(self, path: Path, *, filename: str, mime_type: str | None) -> str:
        """The spoken text; MediaError with a short reason when the service cannot give it."""
        self.check_size(path.stat().st_size)
        form = aiohttp.FormData()
        form.add_field("model", self.config.model)
        form.add_field("response_format", "json")
        if self.config.language:
            form.add_field("language", self.config.language)
        headers = {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        try:
            with path.open("rb") as f:
                form.add_field(
                    "file",
                    f,
                    filename=filename,
                    content_type=mime_type or "application/octet-stream",
                )
                async with self._client().post(
                    self.url, data=form, headers=headers, timeout=timeout
                ) as resp:
                    body = (
                        await resp.json(content_type=None)
                        if resp.status == 200
                        else await resp.text()
                    )
                    status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.warning("transcription failed: %s: %s", type(exc).__name__, exc)
            raise MediaError(
                "it could not be transcribed: the transcription service did not answer"
            ) from None
        if status == 413:  # the service's own cap is lower than media.transcription.max_bytes says
            log.warning("transcription refused as too large: %.200s", body)
            raise MediaError(
                f"it is too long to transcribe (the transcription service refused a recording of "
                f"{_mb(path.stat().st_size)}): please send it in shorter parts"
            )
        if status != 200:
            log.warning("transcription failed: HTTP %s: %.200s", status, body)
            raise MediaError(
                f"it could not be transcribed: the transcription service answered HTTP {status}"
            )
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise MediaError("it could not be transcribed: the transcription service gave no text")
        return text.strip()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"

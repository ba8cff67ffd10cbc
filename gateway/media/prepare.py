"""One message's attachments → what the model reads: image files for image blocks, document text, a
voice note's transcript, a one-line note for anything else, and for the user a plain sentence about
each file that could not be used. Never raises for a bad file: the message's text always goes
through.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from gateway.config.media import MediaConfig
from gateway.errors import MediaError, MediaTooLarge, MediaUnavailable
from gateway.events import Attachment, MediaSource
from gateway.media.documents import (
    Extracted,
    document_block,
    is_pdf,
    is_text_like,
    looks_like_text,
    other_block,
    read_pdf,
    read_text_file,
    suffix,
)
from gateway.media.download import Sleep, download
from gateway.media.images import prepare_picture
from gateway.media.office import is_legacy_office, office_format, read_office
from gateway.media.transcribe import Transcriber
from gateway.store.media_files import private_folder, relative_name, session_dir, write_private
from gateway.worker.parent import JobLimits, Worker, WorkerFailed

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset(
    {"jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff", "heic", "heif", "avif"}
)
AUDIO_SUFFIXES = frozenset(
    {"ogg", "oga", "opus", "mp3", "m4a", "wav", "webm", "flac", "aac", "mpga"}
)
UNREADABLE = "this type cannot be read here"
LEGACY_OFFICE = (
    "it is in an old Office format (Word, Excel or PowerPoint 97–2003), which cannot be read here; "
    "saved as .docx, .xlsx, .pptx or PDF it can be"
)
PDF_JOB = JobLimits(cpu_s=45, wall_s=120)  # read_pdf stops itself after PDF_READ_S, saying where
OFFICE_JOB = JobLimits(cpu_s=30, wall_s=90)
TOLD_ONCE_VISION = "vision"
TOLD_ONCE_TRANSCRIPTION = "transcription"


@dataclass(slots=True)
class Prepared:
    """What one message's attachments became."""

    # transcripts: they are the message's words
    voice: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # for the model, after the text
    images: list[dict[str, str]] = field(default_factory=list)  # {"media_type", "file", "data"}
    problems: list[str] = field(default_factory=list)  # one sentence each, for the user
    tell_once: list[str] = field(default_factory=list)  # TOLD_ONCE_* keys this message triggers
    count: int = 0  # attachments in the message
    # …of which could not be used (a problem each)
    failed: int = 0


def category(a: Attachment) -> str:
    """image, audio, video, document or other: from the
    kind the adapter saw, the MIME type and the name."""
    mime = (a.mime_type or "").lower()
    ext = suffix(a.name)
    if a.kind == "sticker" and mime and not mime.startswith("image/"):
        return "other"  # an animation only its platform plays (Discord's Lottie stickers)
    if (
        a.kind in ("photo", "sticker", "image")
        or (mime.startswith("image/") and mime != "image/svg+xml")
        or (not mime and ext in IMAGE_SUFFIXES)
    ):
        return "image"
    if (
        a.kind in ("voice", "audio")
        or mime.startswith("audio/")
        or (not mime and ext in AUDIO_SUFFIXES)
    ):
        return "audio"
    if a.kind == "video" or mime.startswith("video/"):
        return "video"
    if is_pdf(a.name, mime) or is_text_like(a.name, mime) or office_format(a.name, mime):
        return "document"
    return "other"


# a file name is the sender's to choose: shown to the model and the user, but not at any length
MAX_NAME_CHARS = 120
GENERIC_TYPES = frozenset(
    {"", "application/octet-stream", "binary/octet-stream", "application/unknown"}
)


def display_name(a: Attachment) -> str:
    """The name as one line without invisible characters: a right-to-left override could make
    `cod.exe` read as `exe.doc` to the user, a zero-width character hide words from the scan (a
    zero-width joiner stays: emoji)."""
    if a.name:
        name = " ".join(
            "".join(
                ch
                for ch in a.name
                if ch == "\u200d" or unicodedata.category(ch)[0] != "C" or ch.isspace()
            ).split()
        )
        if name:
            return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"
    return {"photo": "photo", "sticker": "sticker", "voice": "voice note"}.get(a.kind, a.kind)


def untyped(a: Attachment) -> bool:
    """A file nothing says the type of (no extension, a generic MIME type): worth a look, it may be
    text (a README, a Makefile-like script, notes saved without an extension)."""
    return (
        a.kind == "document"
        and (a.mime_type or "").lower() in GENERIC_TYPES
        and not PurePath(a.name or "").suffix
    )


class MediaPipeline:
    """Pictures, PDFs and office files are parsed in `worker` (its own when none is given); text
    files, bounded and linear to read, in a thread. Closing the pipeline stops the worker's child
    (a shared worker starts a new one for its next job). `vision`: whether the model that answers
    sees images, or how to ask at each message (the one a conversation chose with /model)."""

    def __init__(
        self,
        config: MediaConfig,
        home: Path,
        *,
        vision: bool | Callable[[], bool],
        transcriber: Transcriber | None,
        sleep: Sleep = asyncio.sleep,
        worker: Worker | None = None,
    ) -> None:
        self.worker = worker or Worker(memory_mb=config.worker_memory_mb)
        self.config = config
        self.sleep = sleep  # between tries of a download the platform refused for now (429, 5xx)
        self.home = home
        self.vision = vision
        self.transcriber = transcriber

    async def prepare(
        self,
        source: MediaSource | None,
        attachments: Sequence[Attachment],
        *,
        session_id: int,
        inbound_id: int,
    ) -> Prepared:
        out = Prepared(count=len(attachments))
        folder = (
            private_folder(self.home, session_dir(self.home, session_id)) if attachments else None
        )
        for index, attachment in enumerate(attachments):
            assert folder is not None
            dest = folder / f"{inbound_id}-{index}"
            try:
                await self._one(source, attachment, dest, out)
            except asyncio.CancelledError:
                raise
            except MediaError as exc:
                self._failed(attachment, exc, out)
            except Exception as exc:
                # a library's surprise on a hostile file must not cost the message
                log.exception("attachment %s of inbound %s failed", index, inbound_id)
                self._failed(
                    attachment, MediaError(f"it could not be processed ({type(exc).__name__})"), out
                )
            finally:
                _remove(dest)  # the raw download: what the model needs was taken from it
        return out

    async def _one(
        self, source: MediaSource | None, a: Attachment, dest: Path, out: Prepared
    ) -> None:
        kind = category(a)
        name = display_name(a)
        if kind == "image" and not (self.vision() if callable(self.vision) else self.vision):
            out.blocks.append(f"[The user sent an image ({name}); this model cannot see images.]")
            out.tell_once.append(TOLD_ONCE_VISION)
        elif kind == "audio" and self.transcriber is None:
            out.blocks.append(
                f"[The user sent a {'voice note' if a.kind == 'voice' else 'recording'} ({name}); "
                "it could not be transcribed: no transcription service is configured.]"
            )
            out.tell_once.append(TOLD_ONCE_TRANSCRIPTION)
        elif kind == "other" and untyped(a) and source is not None and a.ref:
            size = await self._download(source, a, dest)
            if await asyncio.to_thread(looks_like_text, dest):
                await self._read("document", a, name, dest, size, out)
            else:
                out.blocks.append(
                    other_block(
                        name,
                        a.mime_type,
                        size,
                        why="it is not text, and nothing says what type it is",
                    )
                )
        elif kind in ("video", "other"):
            if a.kind == "sticker":
                out.blocks.append(
                    other_block(
                        name,
                        a.mime_type,
                        a.size,
                        "Sticker",
                        "it is an animation only the chat app can play",
                    )
                )
            else:
                out.blocks.append(
                    other_block(
                        name,
                        a.mime_type,
                        a.size,
                        "Video" if kind == "video" else "File",
                        LEGACY_OFFICE if is_legacy_office(a.name, a.mime_type) else UNREADABLE,
                    )
                )
        elif source is None or not a.ref:
            out.blocks.append(
                other_block(
                    name, a.mime_type, a.size, why="the platform gave no way to download it"
                )
            )
        else:
            if kind == "audio" and self.transcriber is not None:
                self.transcriber.check_size(a.size)  # too long to transcribe: not worth downloading
            size = await self._download(source, a, dest)
            await self._read(kind, a, name, dest, size, out)

    async def _download(self, source: MediaSource, a: Attachment, dest: Path) -> int:
        return await download(
            source,
            a,
            dest,
            max_bytes=self.config.max_bytes,
            timeout_s=self.config.timeout_s,
            sleep=self.sleep,
        )

    async def _read(
        self, kind: str, a: Attachment, name: str, path: Path, size: int, out: Prepared
    ) -> None:
        if kind == "image":
            budget = self.config.max_decode_mb
            image = await prepare_picture(self.worker, path, max_decode_mb=budget)
            stored = path.with_name(
                f"{path.name}.{'png' if image.media_type == 'image/png' else 'jpg'}"
            )
            write_private(stored, image.data)
            out.images.append(
                {
                    "media_type": image.media_type,
                    "file": relative_name(self.home, stored),
                    "data": base64.b64encode(image.data).decode("ascii"),
                }
            )
            out.blocks.append(f"[image: {name}]")
        elif kind == "audio":
            assert self.transcriber is not None
            text = await self.transcriber.transcribe(
                path, filename=_audio_filename(a), mime_type=a.mime_type
            )
            label = "voice note" if a.kind == "voice" else f"audio {name}"
            out.voice.append(
                f"[{label}, transcribed] {text}" if text else f"[{label}: no speech was recognized]"
            )
        else:
            limit = self.config.max_document_chars
            doc = await self._document(a, path, limit)
            out.blocks.append(document_block(name, a.mime_type, size, doc, limit))

    async def _document(self, a: Attachment, path: Path, limit: int) -> Extracted:
        fmt = office_format(a.name, a.mime_type)
        try:
            if is_pdf(a.name, a.mime_type):
                return await self.worker.run(
                    read_pdf, path, limit, limits=PDF_JOB, returns=Extracted
                )
            if fmt:
                return await self.worker.run(
                    read_office, path, limit, fmt, limits=OFFICE_JOB, returns=Extracted
                )
        except WorkerFailed as exc:
            raise MediaError(f"it could not be read: {exc}") from None
        return await asyncio.to_thread(read_text_file, path, limit)

    async def close(self) -> None:
        if self.transcriber is not None:
            await self.transcriber.close()
        await self.worker.close()

    def _failed(self, a: Attachment, exc: MediaError, out: Prepared) -> None:
        name = display_name(a)
        if isinstance(exc, MediaTooLarge):
            why = f"it is too large ({exc.describe()})"
        elif isinstance(exc, MediaUnavailable):
            why = f"it could not be downloaded: {exc}"
        else:
            why = str(exc)
        out.failed += 1
        out.problems.append(f"I couldn't use {name}: {why}.")
        out.blocks.append(f"[The user sent {name}, but it could not be used: {why}.]")


def _audio_filename(a: Attachment) -> str:
    """Transcription services tell the format by the file name's extension: the real name when it
    has a known one, else `voice.<extension of its MIME type>` (Telegram's voice notes are audio/ogg
    without a name)."""
    if a.name and suffix(a.name) in AUDIO_SUFFIXES:
        return display_name(a)  # one line: the sender's name goes into a multipart header
    subtype = (a.mime_type or "audio/ogg").split("/", 1)[-1].split(";")[0].lower()
    ext = {
        "mpeg": "mp3",
        "x-m4a": "m4a",
        "mp4": "m4a",
        "x-wav": "wav",
        "wave": "wav",
        "opus": "ogg",
    }.get(subtype, subtype)
    return f"voice.{ext if ext in AUDIO_SUFFIXES else 'ogg'}"


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".part").unlink(missing_ok=True)

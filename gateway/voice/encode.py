"""Any audio a provider gives (WAV, Opus, MP3 …) → a voice note: OGG/Opus, mono 48 kHz, with its
duration and a waveform, made by Debian's ffmpeg in one bounded run (gateway/voice/process.py).
No codec of our own."""

from __future__ import annotations

import array
import asyncio
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import SpeechError
from gateway.voice.process import run_tool

MAX_SECONDS = 600.0  # a note is cut here, whatever the provider sent
LEVEL_RATE = 1000  # samples a second of the loudness track (the waveform and the duration)
WAVEFORM_POINTS = 256  # Discord draws at most 256 points, at most one per 100 ms
BITRATE = "32k"  # speech: Opus at 32 kb/s is clear, about 240 KB a minute
COMPRESSION = "5"  # libopus effort 0-10: 5 takes half the CPU of 10 (~1 s a minute of speech)


@dataclass(frozen=True, slots=True)
class Speech:
    """A voice note ready to send."""

    data: bytes  # OGG/Opus
    duration_s: float
    waveform: bytes  # loudness, 0–255, one point per equal slice


async def encode_voice(
    audio: bytes, *, timeout_s: float, max_bytes: int, max_seconds: float = MAX_SECONDS
) -> Speech:
    """Encode with ffmpeg; SpeechError when it cannot (no ffmpeg, not audio, silent, too big)."""
    if not audio:
        raise SpeechError("the speech came back empty")
    with tempfile.TemporaryDirectory(prefix="gateway-voice-") as folder:
        note = Path(folder) / "voice.ogg"
        # -fs stops ffmpeg at max_bytes; the file-size limit above it is in case it does not
        track_bytes = int(max_seconds * LEVEL_RATE * 2) + 65_536
        levels = await run_tool(
            _argv(note, max_seconds, max_bytes),
            stdin=audio,
            timeout_s=timeout_s,
            max_output=track_bytes,
            max_file_bytes=max_bytes + 1_000_000,
        )
        data = await asyncio.to_thread(_read, note, max_bytes)
    if not data.startswith(b"OggS") or b"OpusHead" not in data[:200]:
        raise SpeechError("ffmpeg did not write an OGG/Opus file")
    samples = array.array("h")
    samples.frombytes(levels[: len(levels) - len(levels) % 2])
    if sys.byteorder == "big":
        samples.byteswap()  # ffmpeg wrote s16le
    duration = len(samples) / LEVEL_RATE
    if duration <= 0:
        raise SpeechError("the speech had no sound")
    return Speech(data, round(duration, 2), waveform(samples, duration))


def _argv(note: Path, max_seconds: float, max_bytes: int) -> list[str]:
    """One decode of at most `max_seconds`, two outputs: the note (a file, capped at `max_bytes`)
    and a 1 kHz loudness track (stdout)."""
    source = ["-hide_banner", "-loglevel", "error", "-t", f"{max_seconds:g}", "-i", "pipe:0"]
    opus = [
        "-map",
        "0:a:0",
        "-ac",
        "1",
        "-ar",
        "48000",
        "-c:a",
        "libopus",
        "-b:a",
        BITRATE,
        "-application",
        "voip",
        "-compression_level",
        COMPRESSION,
        "-fs",
        str(max_bytes),
        "-f",
        "ogg",
        str(note),
    ]
    levels = [
        "-map",
        "0:a:0",
        "-ac",
        "1",
        "-ar",
        str(LEVEL_RATE),
        "-c:a",
        "pcm_s16le",
        "-f",
        "s16le",
        "pipe:1",
    ]
    return ["ffmpeg", *source, *opus, *levels]


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise SpeechError("ffmpeg wrote no voice note") from None
    if size >= max_bytes:
        raise SpeechError(f"the voice note would be larger than {max_bytes:,} bytes")
    return path.read_bytes()


def waveform(samples: array.array[int], duration_s: float) -> bytes:
    """Peak loudness per slice, the loudest scaled to 255: at most 256 slices, none under 100 ms."""
    points = max(1, min(WAVEFORM_POINTS, int(duration_s * 10)))
    size = max(1, len(samples) // points)
    peaks = []
    for start in range(0, size * points, size):
        part = samples[start : start + size]
        peaks.append(max(max(part), -min(part)) if part else 0)
    top = max(peaks) or 1
    return bytes(min(255, round(255 * peak / top)) for peak in peaks)

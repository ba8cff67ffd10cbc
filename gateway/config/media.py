"""The `media:` section of config.yaml: what the gateway does with photos, documents and voice notes
(limits, retention, the speech-to-text service). Its own module so settings.py stays one screenful
per section."""

from __future__ import annotations

from dataclasses import dataclass, field

# GATEWAY_HOME/media/<session_id>/…: the files of each session (gateway/store/media_files.py)
MEDIA_DIR = "media"
WORKER_BASE_MB = 512  # the worker's memory beyond max_decode_mb: Python, the parsers, a page's tree


@dataclass(frozen=True, slots=True)
class TranscriptionConfig:
    """An OpenAI-compatible speech-to-text service: `POST {base_url}/audio/transcriptions` (OpenAI,
    Groq, a local whisper server)."""

    base_url: str
    model: str = "whisper-1"
    api_key_env: str | None = None
    language: str | None = None
    timeout_s: float = field(default=120.0, metadata={"positive": True})
    # OpenAI's and Groq's upload cap
    max_bytes: int = field(default=25 * 1024 * 1024, metadata={"positive": True})


@dataclass(frozen=True, slots=True)
class MediaConfig:
    max_bytes: int = field(default=20 * 1024 * 1024, metadata={"positive": True})
    timeout_s: float = field(default=120.0, metadata={"positive": True})
    retention_days: float = field(default=30.0, metadata={"positive": True})
    max_document_chars: int = field(default=50_000, metadata={"positive": True})
    # decoded pixels one picture may take (MB); the worker may use this + WORKER_BASE_MB
    max_decode_mb: int = field(default=256, metadata={"min": 16, "max": 65_536})
    transcription: TranscriptionConfig | None = None

    @property
    def worker_memory_mb(self) -> int:
        """The address space the worker process may use (gateway/worker/)."""
        return WORKER_BASE_MB + self.max_decode_mb

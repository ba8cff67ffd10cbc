"""The gateway's exception tree; foreign exceptions become these where a library is called.

GatewayError
├── ConfigError(file, line, key)      bad config: the daemon exits 78
├── StoreError                        a row that cannot be read or written
│   ├── StoreUnavailable(reason)      the database takes no writes now: busy, full, read-only, I/O
│   └── TurnGone                      a turn's message was deleted as it ran (its person forgotten)
├── HomeLocked                        another process holds the home's lock: exit 75 at once
├── HomeUnusable                      home or state.db unusable (read-only, damaged): exit 78
├── AdapterError(platform)
│   ├── RateLimited(retry_after)      429: pause the chat (or the bot) that long
│   ├── MarkupRejected                the platform refused our markup: resend as plain text
│   ├── RecipientUnavailable          403 blocked / kicked: do not retry
│   ├── PlatformUnavailable           5xx, resets, timeouts: retry with backoff
│   ├── PreviewGone                   the message a live preview showed was deleted: post anew
│   └── AdapterFatal                  bad token, disallowed intents: stay down, no restarts
├── LLMError
│   ├── LLMTimeout
│   ├── LLMUnavailable                429/5xx/529 after the client's retries
│   ├── LLMRejected                   4xx that retrying cannot fix (bad key, bad request)
│   └── LLMNotConfigured              no model and nothing found to fall back on
├── ToolError                         a tool refused or failed; the model sees the message
├── MediaError                        an attachment could not be used (the user is told why)
│   ├── MediaTooLarge(size, limit)    over media.max_bytes or the platform's own cap
│   └── MediaUnavailable(transient)   download failed: gone, refused, network (429/5xx: again)
└── SpeechError                       a voice reply could not be made; its text went out before
"""

from __future__ import annotations

from collections.abc import Mapping


class GatewayError(Exception):
    """Base of every error the core catches by type."""


class ConfigError(GatewayError):
    """A config problem located in its file: `config.yaml:7: session_reset.mode: expected ...`."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class ConfigErrors(ConfigError):
    """Several config problems reported at once, so a user fixes them in one go."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


class StoreError(GatewayError):
    """The database could not give a trustworthy answer (never turned into 'no session')."""


class StoreUnavailable(StoreError):
    """A write failed for a reason that can pass: another process holds the write lock (busy), the
    disk is full, the file went read-only or I/O failed. Callers that must not lose what they write
    wait and try again."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason  # busy | full | readonly | io
        super().__init__(message)


class TurnGone(StoreError):
    """The message a turn answers (or the turn's session) was deleted while the turn ran: `gateway
    users forget` erased its person. Nothing of the turn is stored, and nothing is sent."""


class HomeLocked(GatewayError):
    """A second `gateway run`/`chat` on a home another process runs; the message names its PID."""


class HomeUnusable(GatewayError):
    """The home or its database cannot be used at start-up; one line says why and what to run.
    Restarting cannot help, so the daemon exits 78 (the unit's RestartPreventExitStatus)."""


class AdapterError(GatewayError):
    def __init__(self, platform: str, message: str) -> None:
        self.platform = platform
        super().__init__(f"{platform}: {message}")


class RateLimited(AdapterError):
    def __init__(self, platform: str, retry_after: float, *, is_global: bool = False) -> None:
        self.retry_after = retry_after
        self.is_global = is_global
        super().__init__(platform, f"rate limited, retry after {retry_after:g}s")


class MarkupRejected(AdapterError):
    """The platform could not parse the formatted text; the plain fallback should be sent."""


class RecipientUnavailable(AdapterError):
    """The bot was blocked or removed; retrying would only repeat the refusal."""


class PlatformUnavailable(AdapterError):
    """A transient failure (5xx, reset, timeout) worth retrying with backoff."""


class PreviewGone(AdapterError):
    """The message a live preview showed is gone (deleted
    by someone): the answer goes as a new message."""


class AdapterFatal(AdapterError):
    """A failure no restart can fix (bad token, Discord close 4014): the supervisor leaves the
    adapter down."""


class LLMError(GatewayError):
    """The model could not produce a reply."""


class LLMTimeout(LLMError):
    pass


class LLMUnavailable(LLMError):
    pass


class LLMRejected(LLMError):
    pass


class LLMNotConfigured(LLMError):
    pass


class ToolError(GatewayError):
    """A tool refused the call; the text goes back to the model as an error result."""


class MediaError(GatewayError):
    """An attachment could not be used; the message says why in words a user may read."""


class MediaTooLarge(MediaError):
    def __init__(self, size: int | None, limit: int, where: str = "") -> None:
        self.size = size
        self.limit = limit
        self.where = where  # whose limit, when it is the platform's ("Telegram's Bot API")
        super().__init__(self.describe())

    def describe(self) -> str:
        """`25.0 MB; the limit is 20.0 MB` (or, mid-download, `more than 20.0 MB, the limit`)."""
        whose = f"{self.where} limit" if self.where else "the limit"
        if self.size is None:
            return f"more than {_mb(self.limit)}, {whose}"
        return f"{_mb(self.size)}; {whose} is {_mb(self.limit)}"


class MediaUnavailable(MediaError):
    """The platform would not give the file (expired link, refused, network, timeout). `transient`:
    it was busy or failing (429, 5xx, a dropped connection), so the download is tried again soon;
    `retry_after`: the seconds it asked to wait first."""

    def __init__(
        self, message: str, *, transient: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after

    @classmethod
    def http(
        cls, who: str, status: int, headers: Mapping[str, str] | None = None
    ) -> MediaUnavailable:
        """`<who> answered HTTP <status>`: a 429 or a 5xx is transient, to wait what its
        `Retry-After` says."""
        value = (headers or {}).get("Retry-After")
        try:
            wait = float(value) if value is not None else None
        except ValueError:  # the HTTP-date form: the backoff instead
            wait = None
        return cls(
            f"{who} answered HTTP {status}",
            transient=status == 429 or status >= 500,
            retry_after=wait,
        )


class NotSendable(GatewayError):
    """A row that carries more than text cannot go, and never will (a voice note that cannot be
    made, a file whose copy is gone, a platform that cannot take it): the outbox marks it failed
    and goes on with the chat. The message says why in words a user may read."""


class SpeechError(NotSendable):
    """A voice reply could not be made: the speech service or a local tool (espeak-ng, ffmpeg)
    failed. The message says why in words a user may read; the answer's text was sent before, so
    nothing is lost."""


def _mb(size: int) -> str:
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if unit == "MB" else f"{size / scale:.0f} {unit}"
    return f"{max(1, size // 1024)} KB"

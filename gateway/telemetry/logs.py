"""Logging setup: a human format on a TTY, JSON lines
otherwise (journald friendly), and a redaction filter.

The filter sits on the handler, so every record from every library passes it: the config's secret
values and known token shapes are masked in the message, its arguments and any traceback before
anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import logging.config
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from gateway.config.yamlload import Secret
from gateway.telemetry.repeats import RepeatFilter

LogFormat = Literal["auto", "human", "json"]
MASK = "***"
MIN_SECRET_CHARS = 6  # shorter "secrets" (test placeholders like "x") would mask ordinary words
HUMAN_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
QUIET_LIBRARIES = (
    "aiogram",
    "discord",
    "slack_bolt",
    "slack_sdk",
    "httpx",
    "httpcore",
    "openai",
    "anthropic",
    "apscheduler",
    "aiohttp.access",
    "asyncio",
)

# Shapes of credentials that may reach a log line without being in the config (a pasted key, a URL).
TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        # Telegram bot token (also inside /bot<token>/ URLs)
        r"(?<![0-9])\d{6,12}:[A-Za-z0-9_-]{30,}",
        r"\bxox[abposre]-[A-Za-z0-9-]{8,}",  # Slack bot/user/config tokens
        r"\bxapp-\d-[A-Za-z0-9-]{8,}",  # Slack app-level token
        r"\bsk-(?:ant-|proj-|or-)?[A-Za-z0-9_-]{16,}",  # Anthropic, OpenAI, OpenRouter keys
        r"\b[A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,40}\b",  # Discord bot token
        r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
        r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key id
        r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API key
        r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{8,}",  # Authorization: Bearer <anything>
        r"(?i)(?<=\bbot )[A-Za-z0-9._-]{20,}",  # Authorization: Bot <discord token>
    )
)
# Shapes masked in part, (pattern, replacement): what names the secret stays readable.
SHAPED_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # a URL's password: scheme://user:PASSWORD@host (the user name stays)
    (re.compile(r"(://[^\s/?#@:]*:)[^\s/?#]+@"), rf"\g<1>{MASK}@"),
    # the value of a key-like query or form field: ?api_key=…, &access_token=…, ;sig=…
    (
        re.compile(
            r"(?i)([?&;](?:[\w.-]*(?:token|key|secret|passw(?:or)?d|pwd|signature|credential)"
            r"[\w.-]*|auth|sig|pass|session|sessionid|code|jwt)=)[^&;#\s\"'<>]+"
        ),
        rf"\g<1>{MASK}",
    ),
)
# What each pattern needs in the line (any one; in the case-folded line when the flag says so): a
# line without it skips that pattern's scan. Most lines hold none; scans were half a line's cost.
Guard = tuple[tuple[str, ...], bool]
TOKEN_GUARDS: tuple[Guard, ...] = (
    ((":",), False),
    (("xox",), False),
    (("xapp-",), False),
    (("sk-",), False),
    ((".",), False),
    (("gh",), False),
    (("AKIA",), False),
    (("AIza",), False),
    (("bearer ",), True),
    (("bot ",), True),
)
SHAPED_GUARDS: tuple[Guard, ...] = ((("://",), False), (("?", "&", ";"), False))
assert len(TOKEN_GUARDS) == len(TOKEN_PATTERNS) and len(SHAPED_GUARDS) == len(SHAPED_PATTERNS)
# Environment variables whose values are credentials even when the config does not mention them.
SECRET_ENV_SUFFIXES = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_PASS")
KNOWN_SECRET_ENV = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY")
TURN_FIELDS = re.compile(r"\b(platform|session|turn)=([^\s,;]+)")


class Redactor:
    """Masks exact secret values (longest first, so one secret containing another is masked whole)
    and shapes."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._exact: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        values = {*self._exact, *(s for s in secrets if s and len(s) >= MIN_SECRET_CHARS)}
        self._exact = sorted(values, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._exact:
            if value in text:
                text = text.replace(value, MASK)
        folded = text.casefold()
        for pattern, (needs, in_folded) in zip(TOKEN_PATTERNS, TOKEN_GUARDS, strict=True):
            if _has(folded if in_folded else text, needs):
                text = pattern.sub(MASK, text)
                folded = text.casefold()
        for (pattern, replacement), (needs, _) in zip(SHAPED_PATTERNS, SHAPED_GUARDS, strict=True):
            if _has(text, needs):
                text = pattern.sub(replacement, text)
        return text


def _has(text: str, needs: tuple[str, ...]) -> bool:
    return any(need in text for need in needs)


class RedactingFilter(logging.Filter):
    """Renders the record's message once, masked;
    arguments, tracebacks and stack info are masked too."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_redacted", False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not lose the record (or leak its args)
            message = f"{record.msg!s} (unformattable arguments)"
        record.msg = self.redactor(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        record._redacted = True
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg,
    the turn fields (platform/session/turn) and exc."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": message,
        }
        for key, value in TURN_FIELDS.findall(message):
            # "turn=t9: reason" ends the field with a colon that is prose, not part of the id (a jq
            # filter `.turn == "t9"` must find the failed turn too)
            out.setdefault(key, value.rstrip(":."))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, ensure_ascii=False)


def resolve_format(fmt: LogFormat, stream: IO[str]) -> Literal["human", "json"]:
    if fmt != "auto":
        return fmt
    try:
        return "human" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def setup_logging(
    level: str = "INFO",
    fmt: LogFormat = "auto",
    *,
    secrets: Iterable[str] = (),
    stream: IO[str] | None = None,
    redactor: Redactor | None = None,
) -> Redactor:
    """Configure the root logger once (cli.py calls this); returns the redactor so more secrets can
    be added."""
    stream = stream or sys.stderr
    redactor = redactor or Redactor()
    redactor.add(secrets)
    chosen = resolve_format(fmt, stream)
    formatter: dict[str, Any] = (
        {"()": JsonFormatter} if chosen == "json" else {"format": HUMAN_FORMAT}
    )
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "filters": {
                "redact": {"()": RedactingFilter, "redactor": redactor},
                "repeats": {"()": RepeatFilter},
            },
            "formatters": {"main": formatter},
            "handlers": {
                "main": {
                    "class": "logging.StreamHandler",
                    "stream": stream,
                    "formatter": "main",
                    "filters": ["redact", "repeats"],
                }
            },
            "root": {"level": level, "handlers": ["main"]},
            "loggers": {name: {"level": "WARNING"} for name in QUIET_LIBRARIES},
        }
    )
    logging.captureWarnings(True)
    return redactor


def config_secrets(config: object) -> list[str]:
    """Every `Secret` value anywhere in the config tree (nested dataclasses, dicts, tuples)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, Secret):
            found.append(node.value)
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name))
        elif isinstance(node, Mapping):
            for value in node.values():
                walk(value)
        elif isinstance(node, (tuple, list)):
            for value in node:
                walk(value)

    walk(config)
    return found


def redactor_for(config: Any, env: Mapping[str, str]) -> Redactor:
    """What every operator surface (logs, /status, `gateway status`, doctor) masks: the config's
    secrets, the environment's credentials (including the model's `api_key_env`) and the known token
    shapes."""
    models = (
        [config.model, config.model.fallback if config.model else None]
        if config is not None
        else []
    )
    key_envs = [m.api_key_env for m in models if m is not None and m.api_key_env]
    search = config.tools.web_search if config is not None else None
    if search is not None and search.api_key_env:
        key_envs.append(search.api_key_env)
    found = [*config_secrets(config), *url_secrets(config), *env_secrets(env, also=key_envs)]
    return Redactor(found)


def url_secrets(config: object) -> list[str]:
    """What a URL in the config carries besides its address (`mcp_servers.<name>.url`, a base URL):
    its password and its query values (`?api_key=…`; some servers take their key that way), masked
    wherever they are quoted, whatever the shape of the line."""
    found: list[str] = []
    for text in _strings(config):
        if "://" not in text:
            continue
        try:
            parts = urlsplit(text)
            carried = [parts.password or "", *(v for _, v in parse_qsl(parts.query))]
        except ValueError:
            continue
        found += [value for value in carried if len(value) >= MIN_SECRET_CHARS]
    return found


def _strings(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield from _strings(getattr(node, f.name))
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, (tuple, list)):
        for value in node:
            yield from _strings(value)


def redact_tree(node: Any, redact: Callable[[str], str]) -> Any:
    """Every string in JSON-like data (dicts, lists,
    tuples) passed through `redact`, keys included."""
    if isinstance(node, str):
        return redact(node)
    if isinstance(node, Mapping):
        return {redact_tree(k, redact): redact_tree(v, redact) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [redact_tree(v, redact) for v in node]
    return node


def env_secrets(env: Mapping[str, str], *, also: Iterable[str] = ()) -> list[str]:
    """Values of the environment variables that hold
    credentials: known names, `*_TOKEN`-like names, `also`."""
    names = set(KNOWN_SECRET_ENV) | {n for n in also if n}
    return [
        value
        for name, value in env.items()
        if value and (name in names or name.upper().endswith(SECRET_ENV_SUFFIXES))
    ]

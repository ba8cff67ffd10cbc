"""Telegram's side of attachments: a file_id → its bytes, the Bot API's way. `getFile` gives a path;
the cloud Bot API serves it at `<api_server>/file/bot<token>/<path>` up to 20 MB (bigger files get
"file is too big" and no path), while a local Bot API server (`telegram.local_api`) has no such cap
and gives a path on its own disk, read directly as aiogram does. Errors come out as MediaTooLarge /
MediaUnavailable without the URL: it holds the token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiogram import Bot
from aiogram.exceptions import (
    AiogramError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)

from gateway.errors import MediaTooLarge, MediaUnavailable
from gateway.events import Attachment

CLOUD_FILE_LIMIT = 20 * 1024 * 1024  # getFile refuses anything bigger on api.telegram.org
CHUNK = 64 * 1024
# the core bounds the whole download (media.timeout_s); aiogram's default is 30 s
NO_TIMEOUT_S = 24 * 3600


async def file_chunks(bot: Bot, attachment: Attachment, *, local: bool) -> AsyncIterator[bytes]:
    if not attachment.ref:
        raise MediaUnavailable("Telegram gave no file id for it")
    if not local and attachment.size is not None and attachment.size > CLOUD_FILE_LIMIT:
        raise MediaTooLarge(attachment.size, CLOUD_FILE_LIMIT, "Telegram's Bot API")
    path = await _file_path(bot, attachment)
    chunks = _read_local(Path(path)) if local else _download(bot, path)
    async for chunk in chunks:
        yield chunk


async def _file_path(bot: Bot, attachment: Attachment) -> str:
    try:
        file = await bot.get_file(str(attachment.ref))
    except TelegramBadRequest as exc:
        if "too big" in str(exc).lower():
            raise MediaTooLarge(attachment.size, CLOUD_FILE_LIMIT, "Telegram's Bot API") from None
        raise MediaUnavailable(f"Telegram refused the file ({exc.message})") from None
    except TelegramRetryAfter as exc:
        raise MediaUnavailable(
            "Telegram answered HTTP 429 (too many requests)",
            transient=True,
            retry_after=float(exc.retry_after),
        ) from None
    except TelegramServerError as exc:
        raise MediaUnavailable(
            f"Telegram answered with a server error ({exc.message})", transient=True
        ) from None
    except (TelegramNetworkError, OSError, TimeoutError) as exc:
        raise MediaUnavailable(
            f"Telegram could not be reached ({type(exc).__name__})", transient=True
        ) from None
    except (TelegramAPIError, AiogramError) as exc:
        raise MediaUnavailable(f"Telegram could not be reached ({type(exc).__name__})") from None
    if not file.file_path:
        raise MediaUnavailable("Telegram gave no path for it")
    return file.file_path


async def _download(bot: Bot, path: str) -> AsyncIterator[bytes]:
    url = bot.session.api.file_url(bot.token, path)
    try:
        async for chunk in bot.session.stream_content(url, timeout=NO_TIMEOUT_S, chunk_size=CHUNK):
            yield chunk
    except aiohttp.ClientResponseError as exc:  # its str() holds the URL, and the URL the token
        raise MediaUnavailable.http("Telegram", exc.status, exc.headers) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise MediaUnavailable(
            f"the download from Telegram failed ({type(exc).__name__})", transient=True
        ) from None


async def _read_local(path: Path) -> AsyncIterator[bytes]:
    """A local Bot API server's file on this machine's disk."""
    try:
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk
                await asyncio.sleep(0)
    except OSError as exc:
        raise MediaUnavailable(
            f"the local Bot API server's file cannot be read ({exc.strerror})"
        ) from None

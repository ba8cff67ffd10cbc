"""One attachment from its platform to a file: the adapter's own download (a `MediaSource` stream of
chunks), bounded by `media.max_bytes` and `media.timeout_s`, written to a `.part` file and renamed
only when whole, so a kill mid-download leaves nothing that looks complete and the next attempt
starts over. A platform that is busy or failing for a moment (429, 5xx, a dropped connection) is
asked again, after the wait it names or a short backoff, twice at most and within the same time
limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.errors import MediaTooLarge, MediaUnavailable
from gateway.events import Attachment, MediaSource
from gateway.store.media_files import open_private

log = logging.getLogger(__name__)

# backoff before the second and third try, when the platform names no wait
RETRY_DELAYS = (1.0, 4.0)
# a platform that asks for a longer wait is not waited for: the user is told now
MAX_RETRY_AFTER_S = 30.0

Sleep = Callable[[float], Awaitable[None]]


async def download(
    source: MediaSource,
    attachment: Attachment,
    dest: Path,
    *,
    max_bytes: int,
    timeout_s: float,
    sleep: Sleep = asyncio.sleep,
) -> int:
    """Fetch into `dest` (reused when a previous life finished it); returns its size in bytes."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise MediaTooLarge(attachment.size, max_bytes)
    if dest.is_file():
        return dest.stat().st_size
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    part = dest.with_name(dest.name + ".part")
    try:
        async with asyncio.timeout(timeout_s):
            size = await _tries(source, attachment, part, max_bytes, sleep)
    except TimeoutError:
        part.unlink(missing_ok=True)
        raise MediaUnavailable(f"the download took longer than {timeout_s:g} s") from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    return size


async def _tries(
    source: MediaSource, attachment: Attachment, part: Path, max_bytes: int, sleep: Sleep
) -> int:
    for delay in RETRY_DELAYS:
        try:
            return await _stream(source, attachment, part, max_bytes)
        except MediaUnavailable as exc:
            wait = delay if exc.retry_after is None else max(0.0, exc.retry_after)
            if not exc.transient or wait > MAX_RETRY_AFTER_S:
                raise
            log.info(
                "download of a %s failed for now (%s); trying again in %.1f s",
                attachment.kind,
                exc,
                wait,
            )
        await sleep(wait)
    return await _stream(source, attachment, part, max_bytes)


async def _stream(source: MediaSource, attachment: Attachment, part: Path, max_bytes: int) -> int:
    written = 0
    stream = source.media(attachment)
    try:
        with open_private(part) as out:
            async for chunk in stream:
                written += len(chunk)
                if written > max_bytes:
                    raise MediaTooLarge(None, max_bytes)
                out.write(chunk)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    return written

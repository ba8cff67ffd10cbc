"""Discord's side of attachments: an attachment's CDN URL, streamed (discord.py's `Attachment.read` would hold the
whole file in memory). The URLs are signed and expire after about a day; an expired one is a clear refusal. Only
Discord's CDN hosts (or the configured API host) are asked, so a crafted message cannot point the bot elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp

from gateway.errors import MediaUnavailable
from gateway.events import Attachment

CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
CHUNK = 64 * 1024


class DiscordFiles:
    """One aiohttp session for downloads, opened on the first file; `close` on stop."""

    def __init__(self, api_base: str | None) -> None:
        self._hosts = CDN_HOSTS | ({urlsplit(api_base).hostname or ""} if api_base else set())
        self._session: aiohttp.ClientSession | None = None

    async def chunks(self, attachment: Attachment) -> AsyncIterator[bytes]:
        url = attachment.ref or ""
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or parts.hostname not in self._hosts:
            raise MediaUnavailable("Discord gave no downloadable link for it")
        try:
            async with self._client().get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
                if resp.status in (403, 404):
                    raise MediaUnavailable("Discord no longer serves it (the link expired or the message is gone)")
                if resp.status != 200:
                    raise MediaUnavailable(f"Discord's CDN answered HTTP {resp.status}")
                async for chunk in resp.content.iter_chunked(CHUNK):
                    yield chunk
        except (aiohttp.ClientError, OSError) as exc:
            raise MediaUnavailable(f"the download from Discord failed ({type(exc).__name__})") from None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

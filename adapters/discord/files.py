"""Discord's side of attachments: an attachment's CDN URL, streamed (discord.py's `Attachment.read`
would hold the whole file in memory). The URLs are signed and expire after about a day, so a turn
replayed later (after an outage, a restart) finds its link dead: the CDN's 404 then asks Discord for
a fresh link (`POST /attachments/refresh-urls` with the bot's token) and fetches once more; only a
file whose message is gone stays unavailable. Stickers are fetched from the sticker CDN as still
images (PNG, APNG's first frame, GIF's first frame); a Lottie sticker is a vector animation no model
reads, described instead. Only Discord's CDN hosts (or the configured API host) are asked, so a
crafted message cannot point the bot elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlsplit

import aiohttp
import discord

from gateway.errors import MediaUnavailable
from gateway.events import Attachment

log = logging.getLogger(__name__)

CDN_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
CHUNK = 64 * 1024
STICKER_TYPES = {
    discord.StickerFormatType.png: "image/png",
    discord.StickerFormatType.apng: "image/png",
    discord.StickerFormatType.gif: "image/gif",
}
LOTTIE = "application/x-lottie+json"  # a vector animation: described to the model, not fetched
GONE = "Discord no longer serves it (the message or the file was deleted)"

# an expired signed link → a fresh one (None: Discord gave none)
Refresh = Callable[[str], Awaitable[str | None]]


def sticker(item: discord.StickerItem, cdn_origin: str | None) -> Attachment:
    """A sticker as an image attachment; `cdn_origin` (from `discord.api_base`) replaces
    discord.py's fixed CDN host, as it does for every other endpoint."""
    name = f"sticker {item.name}"
    mime = STICKER_TYPES.get(item.format)
    if mime is None:
        return Attachment("sticker", name=name, mime_type=LOTTIE)
    url = item.url if cdn_origin is None else cdn_origin + urlsplit(item.url).path
    return Attachment("sticker", name=name, mime_type=mime, ref=url)


def refresher(http: discord.http.HTTPClient) -> Refresh:
    """Discord's refresh-urls endpoint through discord.py's
    HTTP client (its auth and rate limits)."""
    route = discord.http.Route("POST", "/attachments/refresh-urls")

    async def refresh(url: str) -> str | None:
        try:
            answer = await http.request(route, json={"attachment_urls": [url]})
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.info("discord: could not refresh an attachment link: %s", type(exc).__name__)
            return None
        for item in answer.get("refreshed_urls") or () if isinstance(answer, dict) else ():
            if (
                isinstance(item, dict)
                and item.get("original") == url
                and isinstance(item.get("refreshed"), str)
            ):
                return str(item["refreshed"])
        return None

    return refresh


class DiscordFiles:
    """One aiohttp session for downloads, opened on the first file; `close` on stop."""

    def __init__(self, api_base: str | None) -> None:
        api = urlsplit(api_base) if api_base else None
        self._hosts = CDN_HOSTS | ({api.hostname or ""} if api else set())
        self.cdn_origin = f"{api.scheme}://{api.netloc}" if api else None
        self.refresh: Refresh | None = None  # set once the client is logged in
        self._session: aiohttp.ClientSession | None = None

    async def chunks(self, attachment: Attachment) -> AsyncIterator[bytes]:
        url = self._checked(attachment.ref or "")
        async with self._get(url) as resp:
            if resp.status in (403, 404) and self.refresh is not None and _signed(url):
                fresh = await self.refresh(url)
                if fresh is not None and fresh != url:
                    log.info("discord: attachment link expired; fetching it by a refreshed link")
                    async for chunk in self._fetch(self._checked(fresh)):
                        yield chunk
                    return
            async for chunk in _body(resp):
                yield chunk

    async def _fetch(self, url: str) -> AsyncIterator[bytes]:
        async with self._get(url) as resp:
            async for chunk in _body(resp):
                yield chunk

    def _checked(self, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or parts.hostname not in self._hosts:
            raise MediaUnavailable("Discord gave no downloadable link for it")
        return url

    @asynccontextmanager
    async def _get(self, url: str) -> AsyncIterator[aiohttp.ClientResponse]:
        try:
            async with self._client().get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
                yield resp
        except (aiohttp.ClientError, OSError) as exc:
            raise MediaUnavailable(
                f"the download from Discord failed ({type(exc).__name__})", transient=True
            ) from None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _body(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    if resp.status in (403, 404):
        raise MediaUnavailable(GONE)
    if resp.status != 200:
        raise MediaUnavailable.http("Discord's CDN", resp.status, resp.headers)
    try:
        async for chunk in resp.content.iter_chunked(CHUNK):
            yield chunk
    except (aiohttp.ClientError, OSError) as exc:
        raise MediaUnavailable(
            f"the download from Discord failed ({type(exc).__name__})", transient=True
        ) from None


def _signed(url: str) -> bool:
    """An attachment link with an expiry (`?ex=…&hm=…`); sticker links never expire."""
    return "ex" in parse_qs(urlsplit(url).query)

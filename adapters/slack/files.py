"""Slack's side of attachments: a file's `url_private_download`, fetched with the bot token
(`Authorization: Bearer xoxb-…`, which needs the `files:read` scope). Without the scope, or with a
bad token, Slack answers with its sign-in page (HTML) instead of the file: that is a refusal, not a
file. Only Slack's own file host (or the configured API host) is ever asked, so a crafted event
cannot make the bot fetch other URLs with its token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp

from gateway.errors import MediaUnavailable
from gateway.events import Attachment

FILE_HOSTS = frozenset({"files.slack.com", "slack-files.com"})
CHUNK = 64 * 1024


class SlackFiles:
    """One aiohttp session for downloads, opened on the first file; `close` on stop."""

    def __init__(self, token: str, api_url: str | None) -> None:
        self._token = token
        self._hosts = FILE_HOSTS | ({urlsplit(api_url).hostname or ""} if api_url else set())
        self._session: aiohttp.ClientSession | None = None

    async def chunks(self, attachment: Attachment) -> AsyncIterator[bytes]:
        url = attachment.ref or ""
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or parts.hostname not in self._hosts:
            raise MediaUnavailable("Slack gave no downloadable link for it")
        try:
            async with self._client().get(
                url,
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=aiohttp.ClientTimeout(total=None),
            ) as resp:
                _check(resp, attachment)
                async for chunk in resp.content.iter_chunked(CHUNK):
                    yield chunk
        except (aiohttp.ClientError, OSError) as exc:
            raise MediaUnavailable(
                f"the download from Slack failed ({type(exc).__name__})", transient=True
            ) from None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _check(resp: aiohttp.ClientResponse, attachment: Attachment) -> None:
    if resp.status != 200:
        raise MediaUnavailable.http("Slack", resp.status, resp.headers)
    if resp.content_type == "text/html" and not (attachment.mime_type or "").startswith(
        "text/html"
    ):
        raise MediaUnavailable("Slack refused the download (the app needs the files:read scope)")

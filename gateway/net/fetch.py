"""One guarded GET for the web tools: http(s) only, every redirect hop re-checked, the body capped
in bytes.

Environment proxies are ignored on purpose: a proxy would connect on our behalf to an address we
never checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from yarl import URL

from gateway.errors import ToolError
from gateway.net.guard import BlockedAddress, GuardedResolver, Lookup, check_host, system_lookup
from gateway.worker.parent import Worker

REDIRECTS = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "agent-gateway/0.1 (+web_fetch)"


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # after redirects
    status: int
    content_type: str  # lowercased, without parameters
    charset: str | None
    body: bytes
    truncated: bool  # the body went past the byte cap and was cut there


def checked_url(raw: str, *, allow_private: bool) -> URL:
    """The URL, if a web tool may ask for it: http or
    https, with a host that is not refused on sight."""
    try:
        url = URL(raw.strip())
    except (ValueError, TypeError):
        raise ToolError(f"Not a valid URL: {raw!r}.") from None
    if url.scheme not in ("http", "https"):
        raise ToolError(
            f"Only http and https URLs can be fetched (got {url.scheme or 'no scheme'!s}: {raw!r})."
        )
    if not url.host:
        raise ToolError(f"The URL has no host: {raw!r}.")
    check_host(url.host, allow_private=allow_private)
    return url


class WebClient:
    """An aiohttp session whose every connection went through the guard; one per daemon, closed at
    shutdown. `worker` reads the pages (gateway/net/extract.py; its own when none is given), and
    closing the client stops the worker's child too."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        max_bytes: int = 2_000_000,
        timeout_s: float = 20.0,
        max_redirects: int = 5,
        read_cpu_s: float = 15.0,
        lookup: Lookup = system_lookup,
        route: Callable[[str], str] | None = None,
        worker: Worker | None = None,
    ) -> None:
        self.worker = worker or Worker()
        self.allow_private = allow_private
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects
        self.read_cpu_s = read_cpu_s  # processor time trafilatura may spend on one page
        self.resolver = GuardedResolver(allow_private=allow_private, lookup=lookup, route=route)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(resolver=self.resolver, use_dns_cache=False, limit=16)
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,
                headers={"User-Agent": USER_AGENT},
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            )
        return self._session

    async def get(
        self, raw_url: str, *, accept: str = "text/html,text/plain;q=0.9,*/*;q=0.5"
    ) -> Fetched:
        url = checked_url(raw_url, allow_private=self.allow_private)
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._follow(url, accept)
        except TimeoutError:
            raise ToolError(f"Fetching {url} took longer than {self.timeout_s:g} s.") from None
        except aiohttp.ClientError as exc:
            raise ToolError(f"Could not fetch {url}: {_plain(exc)}.") from None

    async def _follow(self, url: URL, accept: str) -> Fetched:
        for _ in range(self.max_redirects + 1):
            async with self._client().get(
                url, allow_redirects=False, headers={"Accept": accept}
            ) as response:
                location = response.headers.get("Location")
                if response.status in REDIRECTS and location:
                    url = self._next_hop(url, location)
                    continue
                return await self._read(url, response)
        raise ToolError(f"Too many redirects (more than {self.max_redirects}) from {url}.")

    def _next_hop(self, url: URL, location: str) -> URL:
        try:
            target = url.join(URL(location))
        except ValueError:
            raise ToolError(f"{url} redirected to an invalid URL: {location!r}.") from None
        try:
            return checked_url(str(target), allow_private=self.allow_private)
        except BlockedAddress as exc:
            raise BlockedAddress(f"{url} redirected to {target}. {exc}") from None

    async def _read(self, url: URL, response: aiohttp.ClientResponse) -> Fetched:
        body = bytearray()
        truncated = False
        async for chunk in response.content.iter_chunked(65536):
            body += chunk
            if len(body) > self.max_bytes:
                del body[self.max_bytes :]
                truncated = True
                break
        return Fetched(
            url=str(url),
            status=response.status,
            content_type=response.content_type.lower(),
            charset=response.charset,
            body=bytes(body),
            truncated=truncated,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.worker.close()


def _plain(exc: aiohttp.ClientError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status}"
    return type(exc).__name__

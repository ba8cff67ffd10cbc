"""The web search providers' HTTP APIs (SearXNG, Brave
Search, Tavily) behind one `search(query, count)`.

The endpoint is the owner's choice (a SearXNG on 127.0.0.1 is common), so it is not address-checked
like a fetched URL; the API key goes only in the provider's own header and never into an error text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.errors import ToolError

DEFAULT_BASE = {"brave": "https://api.search.brave.com/res/v1", "tavily": "https://api.tavily.com"}
MAX_RESULTS = 20


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    url: str
    snippet: str


class WebSearch:
    def __init__(
        self, provider: str, *, base_url: str | None, api_key: str | None, timeout_s: float = 15.0
    ) -> None:
        base = base_url or DEFAULT_BASE.get(provider)
        if base is None:
            raise ValueError(f"tools.web_search.base_url is required for {provider}")
        self.provider = provider
        self.base_url = base.rstrip("/")
        self._key = api_key
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s)
            )
        return self._session

    async def search(self, query: str, count: int) -> list[SearchHit]:
        count = max(1, min(count, MAX_RESULTS))
        try:
            data = await self._request(query, count)
        except TimeoutError:
            raise ToolError(
                f"The search provider ({self.provider}) did not answer within {self.timeout_s:g} s."
            ) from None
        except aiohttp.ClientError as exc:
            raise ToolError(
                f"The search provider ({self.provider}) is unreachable ({type(exc).__name__})."
            ) from None
        return _hits(self.provider, data)[:count]

    async def _request(self, query: str, count: int) -> Mapping[str, Any]:
        session = self._client()
        if self.provider == "tavily":
            call = session.post(
                f"{self.base_url}/search",
                json={"query": query, "max_results": count, "search_depth": "basic"},
                headers=self._auth("Authorization", "Bearer "),
            )
        elif self.provider == "brave":
            call = session.get(
                f"{self.base_url}/web/search",
                params={"q": query, "count": str(count)},
                headers={"Accept": "application/json", **self._auth("X-Subscription-Token")},
            )
        else:
            call = session.get(
                f"{self.base_url}/search",
                params={"q": query, "format": "json"},
                headers={"Accept": "application/json", **self._auth("Authorization", "Bearer ")},
            )
        async with call as response:
            if response.status != 200:
                raise ToolError(self._refusal(response.status, response.headers.get("Retry-After")))
            try:
                data = await response.json(content_type=None)
            except ValueError:
                raise ToolError(
                    f"The search provider ({self.provider}) answered with something that is not "
                    "JSON."
                ) from None
        return data if isinstance(data, dict) else {}

    def _auth(self, header: str, prefix: str = "") -> dict[str, str]:
        return {header: prefix + self._key} if self._key else {}

    def _refusal(self, status: int, retry_after: str | None) -> str:
        who = f"The search provider ({self.provider})"
        if status == 429:
            wait = f" for {retry_after} s" if retry_after and retry_after.isdigit() else ""
            return (
                f"{who} is rate-limiting searches{wait}; try "
                "again later or answer without searching."
            )
        if status in (401, 403):
            if self.provider == "searxng":
                return (
                    f"{who} refused the search (HTTP {status}); "
                    "its settings must allow the json format."
                )
            return (
                f"{who} refused the API key (HTTP {status}); the "
                "owner should check tools.web_search.api_key_env."
            )
        return f"{who} failed (HTTP {status})."

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _hits(provider: str, data: Mapping[str, Any]) -> list[SearchHit]:
    if provider == "brave":
        web = data.get("web")
        rows = web.get("results") if isinstance(web, dict) else None
        snippet_key = "description"
    else:
        rows = data.get("results")
        snippet_key = "content"
    hits = []
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("url"), str):
            hits.append(
                SearchHit(
                    _plain(str(row.get("title") or row["url"])),
                    row["url"],
                    _plain(str(row.get(snippet_key) or "")),
                )
            )
    return hits


def _plain(snippet: str) -> str:
    """Brave marks matches with <strong>; the model reads plain text."""
    for tag in ("<strong>", "</strong>", "<b>", "</b>"):
        snippet = snippet.replace(tag, "")
    return " ".join(snippet.split())

"""The three web search APIs web_search speaks, on one aiohttp server: SearXNG (`GET
/search?format=json`), Brave Search (`GET /res/v1/web/search`, key in `X-Subscription-Token`) and
Tavily (`POST /search` with a JSON body, key as `Authorization: Bearer`). Each answers in its
provider's real shape and refuses a wrong key the way the provider does; `index` is the corpus every
provider searches (a result matches when a query word is in it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.base import FakeServer, json_response

BRAVE_KEY = "brave-test-key"
TAVILY_KEY = "tvly-test-key"


@dataclass(frozen=True, slots=True)
class Doc:
    title: str
    url: str
    text: str


DEFAULT_INDEX = (
    Doc(
        "Tidal power - Wikipedia",
        "https://en.wikipedia.org/wiki/Tidal_power",
        "Tidal power or tidal energy is harnessed by converting "
        "energy from tides into useful forms of power.",
    ),
    Doc(
        "Orkney tidal turbines",
        "https://news.example/orkney-tides",
        "The first turbines in the Orkney strait have run through three winters.",
    ),
    Doc(
        "Green tea brewing",
        "https://tea.example/brew",
        "Brew green tea at 80 degrees for two minutes.",
    ),
)


class FakeWebSearch(FakeServer):
    def __init__(self, index: Sequence[Doc] = DEFAULT_INDEX, *, searxng_json: bool = True) -> None:
        super().__init__()
        self.index = list(index)
        self.searxng_json = searxng_json  # a SearXNG without `json` in search.formats answers 403
        self.app.router.add_get("/search", self._searxng)
        self.app.router.add_get("/res/v1/web/search", self._brave)
        self.app.router.add_post("/search", self._tavily)

    @property
    def brave_base_url(self) -> str:
        return f"{self.base_url}/res/v1"

    def _docs_for(self, query: str) -> list[Doc]:
        words = [w.lower() for w in query.split()]
        return [d for d in self.index if any(w in f"{d.title} {d.text}".lower() for w in words)]

    async def _searxng(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "searxng", None)
        if fault := await self.apply_fault(
            request, self.take_fault(["searxng"]), lambda s: "Too Many Requests"
        ):
            return fault
        if request.query.get("format") != "json" or not self.searxng_json:
            return web.Response(status=403, text="403 Forbidden")
        query = request.query.get("q", "")
        results = [
            {
                "url": d.url,
                "title": d.title,
                "content": d.text,
                "engine": "fake",
                "engines": ["fake"],
                "score": 1.0,
                "category": "general",
            }
            for d in self._docs_for(query)
        ]
        return json_response(
            {
                "query": query,
                "number_of_results": len(results),
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        )

    async def _brave(self, request: web.Request) -> web.StreamResponse:
        self.record(request, "brave", None)
        if request.headers.get("X-Subscription-Token") != BRAVE_KEY:
            return json_response(
                _brave_error(
                    401, "SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid."
                ),
                status=401,
            )
        if fault := await self.apply_fault(
            request,
            self.take_fault(["brave"]),
            lambda s: _brave_error(s, "RATE_LIMITED", "Request rate limit exceeded"),
        ):
            return fault
        count = int(request.query.get("count", "20"))
        docs = self._docs_for(request.query.get("q", ""))[:count]
        results = [
            {
                "title": _bold(d.title, request.query.get("q", "")),
                "url": d.url,
                "description": _bold(d.text, request.query.get("q", "")),
                "type": "search_result",
            }
            for d in docs
        ]
        return json_response(
            {
                "type": "search",
                "query": {"original": request.query.get("q", "")},
                "web": {"type": "search", "results": results},
            }
        )

    async def _tavily(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        self.record(request, "tavily", body)
        if request.headers.get("Authorization") != f"Bearer {TAVILY_KEY}":
            return json_response(
                {"detail": {"error": "Unauthorized: missing or invalid API key."}}, status=401
            )
        if fault := await self.apply_fault(
            request,
            self.take_fault(["tavily"]),
            lambda s: {"detail": {"error": "Rate limit exceeded"}},
        ):
            return fault
        docs = self._docs_for(str(body.get("query", "")))[: int(body.get("max_results", 5))]
        return json_response(
            {
                "query": body.get("query"),
                "answer": None,
                "images": [],
                "response_time": 0.4,
                "results": [
                    {
                        "title": d.title,
                        "url": d.url,
                        "content": d.text,
                        "score": 0.9,
                        "raw_content": None,
                    }
                    for d in docs
                ],
            }
        )


def _brave_error(status: int, code: str, detail: str) -> dict[str, Any]:
    return {
        "type": "ErrorResponse",
        "error": {"id": "e1", "status": status, "code": code, "detail": detail},
    }


def _bold(text: str, query: str) -> str:
    for word in query.split():
        text = text.replace(word, f"<strong>{word}</strong>")
    return text

"""Pages web_fetch read a moment ago, so reading a long
page part by part (`start=`) downloads it once.

One per daemon, in memory only: a page is kept for a few minutes (TTL on the injected monotonic
clock), under the URL the model asked for and the URL it ended at, and the least recently used pages
go first once the cache holds more than `max_chars` characters or `max_pages` pages. The
continuation of a page then reads the same text the first part came from, so its character offsets
stay true even when the site changes meanwhile.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

TTL_S = 300.0
MAX_CHARS = 4_000_000  # about 4-16 MB of text in CPython, whatever the pages
MAX_PAGES = 64


@dataclass(frozen=True, slots=True)
class ReadPage:
    url: str  # after redirects
    title: str | None
    markdown: str
    truncated: bool  # the download hit its byte cap

    @property
    def size(self) -> int:
        return len(self.markdown) + len(self.title or "")


class PageCache:
    def __init__(
        self,
        *,
        ttl_s: float = TTL_S,
        max_chars: int = MAX_CHARS,
        max_pages: int = MAX_PAGES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_chars = max_chars
        self.max_pages = max_pages
        self.clock = clock
        # URL → (expires at, page), LRU first
        self._pages: OrderedDict[str, tuple[float, ReadPage]] = OrderedDict()
        # id(page) → the URLs that lead to it: its text counts once
        self._keys: dict[int, list[str]] = {}
        self._chars = 0

    def get(self, url: str) -> ReadPage | None:
        found = self._pages.get(_key(url))
        if found is None:
            return None
        expires, page = found
        if expires <= self.clock():
            self._drop(page)
            return None
        for key in self._keys[id(page)]:
            self._pages.move_to_end(key)
        return page

    def put(self, asked: str, page: ReadPage) -> None:
        """Keep `page` under the URL asked for and its final URL; a page larger than the whole cache
        is not kept."""
        for key in dict.fromkeys((_key(asked), _key(page.url))):
            if key in self._pages:
                self._drop(self._pages[key][1])
        if page.size > self.max_chars:
            return
        keys = self._keys[id(page)] = list(dict.fromkeys((_key(asked), _key(page.url))))
        expires = self.clock() + self.ttl_s
        for key in keys:
            self._pages[key] = (expires, page)
        self._chars += page.size
        while self._chars > self.max_chars or len(self._keys) > self.max_pages:
            self._drop(next(iter(self._pages.values()))[1])

    def _drop(self, page: ReadPage) -> None:
        """Forget a page under every URL that leads to it."""
        for key in self._keys.pop(id(page), ()):
            del self._pages[key]
        self._chars -= page.size

    @property
    def chars(self) -> int:
        """The characters held (each page once, however many URLs lead to it)."""
        return self._chars

    def __len__(self) -> int:
        """How many pages are held."""
        return len(self._keys)


def _key(url: str) -> str:
    return url.strip()

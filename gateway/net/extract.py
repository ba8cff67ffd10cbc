"""A fetched page → readable Markdown, read in the worker (gateway/worker/), so that no page
can stall the event loop or bloat the daemon.

trafilatura is superlinear on some pages (2 MB of plain `<div><p>` pairs takes it minutes), so it
runs under ARTICLE's limits; a page it cannot finish within them is read again for its visible text
alone (gateway/net/readable.py, linear), and a page even that fails on is refused with the reason.
"""

from __future__ import annotations

import logging

from gateway.errors import ToolError
from gateway.net.fetch import Fetched
from gateway.net.readable import Page, article, text_page, visible_page
from gateway.worker.parent import JobLimits, Worker, WorkerFailed

log = logging.getLogger(__name__)

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset(
    {
        "text/plain",
        "text/markdown",
        "text/x-markdown",
        "text/csv",
        "application/json",
        "application/xml",
        "text/xml",
        "application/rss+xml",
        "application/atom+xml",
    }
)
ARTICLE = JobLimits(cpu_s=15, wall_s=60)  # a real 1 MB page takes trafilatura 1-3 s
VISIBLE = JobLimits(cpu_s=5, wall_s=30)
VISIBLE_NOTE = (
    "[The page's main text could not be picked out ({why}); what follows is all of "
    "its visible text, menus included.]"
)

__all__ = ["Page", "page_of"]


async def page_of(fetched: Fetched, worker: Worker) -> Page:
    """The page as Markdown; ToolError for a type web_fetch cannot read, or a page it could not."""
    kind = fetched.content_type
    try:
        if kind in HTML_TYPES or (not kind and fetched.body.lstrip()[:1] == b"<"):
            return await _html(fetched, worker)
        if kind in TEXT_TYPES or kind.startswith("text/") or kind.endswith("+json"):
            return await worker.run(
                text_page, fetched.body, fetched.charset, kind, limits=VISIBLE, returns=Page
            )
    except WorkerFailed as exc:
        raise ToolError(f"This page could not be read: {exc}.") from None
    more = " or more" if fetched.truncated else ""
    raise ToolError(
        f"{fetched.url} is {kind or 'of an unknown type'} ({len(fetched.body):,} "
        f"bytes{more}), not a page web_fetch can read."
    )


async def _html(fetched: Fetched, worker: Worker) -> Page:
    args = (fetched.body, fetched.charset, fetched.url)
    try:
        return await worker.run(article, *args, limits=ARTICLE, returns=Page)
    except WorkerFailed as exc:
        if exc.reason == "busy":
            raise
        log.info(
            "web_fetch: %s: no article within the limits (%s); reading its visible text",
            fetched.url,
            exc,
        )
        page = await worker.run(visible_page, *args, limits=VISIBLE, returns=Page)
        return Page(page.title, f"{VISIBLE_NOTE.format(why=exc)}\n\n{page.markdown}")

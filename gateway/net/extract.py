"""A fetched page → readable Markdown, read in the worker (gateway/worker/), so that no page
can stall the event loop or bloat the daemon.

trafilatura is superlinear on some pages (2 MB of plain `<div><p>` pairs takes it minutes), so it
runs under limits (tools.web_fetch.read_cpu_s); a page it cannot finish within them is read again
for its visible text alone (gateway/net/readable.py, linear), and a page even that fails on is
refused with the reason.
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
ARTICLE_WALL_S = 60  # at least 4x the processor time: room for a busy machine
VISIBLE = JobLimits(cpu_s=5, wall_s=30)
VISIBLE_NOTE = (
    "[The page's main text could not be picked out ({why}); what follows is all of "
    "its visible text, menus included.]"
)

__all__ = ["Page", "page_of"]


async def page_of(fetched: Fetched, worker: Worker, article_cpu_s: float = 15.0) -> Page:
    """The page as Markdown; ToolError for a type web_fetch cannot read, or a page it could not.
    trafilatura gets `article_cpu_s` of processor time (a real 1 MB page takes it 1-3 s)."""
    kind = fetched.content_type
    try:
        if kind in HTML_TYPES or (not kind and fetched.body.lstrip()[:1] == b"<"):
            limits = JobLimits(cpu_s=article_cpu_s, wall_s=max(ARTICLE_WALL_S, 4 * article_cpu_s))
            return await _html(fetched, worker, limits)
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


async def _html(fetched: Fetched, worker: Worker, limits: JobLimits) -> Page:
    args = (fetched.body, fetched.charset, fetched.url)
    try:
        return await worker.run(article, *args, limits=limits, returns=Page)
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

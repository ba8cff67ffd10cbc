"""A fetched page → readable Markdown: the article without navigation, ads and footers (trafilatura).

trafilatura and lxml cost ~40 MB and ~0.3 s to import, so they load on the first page, never at start-up.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

from gateway.errors import ToolError
from gateway.net.fetch import Fetched

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json",
                        "application/xml", "text/xml", "application/rss+xml", "application/atom+xml"})
_TAGS = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class Page:
    title: str | None
    markdown: str


def page_of(fetched: Fetched) -> Page:
    kind = fetched.content_type
    if kind in HTML_TYPES or (not kind and fetched.body.lstrip()[:1] == b"<"):
        return html_page(fetched.text(), fetched.url)
    if kind in TEXT_TYPES or kind.startswith("text/") or kind.endswith("+json"):
        return Page(None, _pretty(fetched.text(), kind))
    raise ToolError(f"{fetched.url} is {kind or 'of an unknown type'} ({len(fetched.body):,} bytes"
                    f"{' or more' if fetched.truncated else ''}), not a page web_fetch can read.")


def html_page(text: str, url: str) -> Page:
    import trafilatura  # lazy: see the module docstring

    doc = trafilatura.bare_extraction(text, url=url, with_metadata=True)
    title = getattr(doc, "title", None) if doc is not None else None
    markdown = trafilatura.extract(text, url=url, output_format="markdown", include_links=True,
                                   include_tables=True, include_comments=False)
    if not markdown:  # no article found: the visible text is better than nothing
        markdown = _visible_text(text)
    return Page(title or None, markdown.strip())


def _visible_text(text: str) -> str:
    text = re.sub(r"(?is)<(script|style|noscript|template)\b.*?</\1>", " ", text)
    lines = (" ".join(html.unescape(line).split()) for line in _TAGS.sub("\n", text).splitlines())
    return "\n".join(line for line in lines if line)


def _pretty(text: str, kind: str) -> str:
    if kind == "application/json" or kind.endswith("+json"):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text

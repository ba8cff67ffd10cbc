"""Render the model's Markdown once per platform flavour: Telegram entities, Slack mrkdwn, Discord,
plain text.

Pure functions, no I/O. Besides the text, a render records where a split must not fall (links,
escapes, formatting spans) and where fenced blocks are, so gateway/delivery/chunking.py can split
without breaking markup. Telegram is rendered in `markup_telegram`, the other flavours in
`markup_text`; `markup_base` holds the shapes.
"""

from __future__ import annotations

import re

from gateway.delivery.markup.base import FENCE, Fence, Flavor, Rendered, Span, utf16_len
from gateway.events import TextEntity

# The renderers are imported on first use: a daemon without Telegram never loads
# telegramify-markdown, and one serving only the web chat (Markdown as is) no Markdown parser.

__all__ = [
    "FENCE",
    "Fence",
    "Flavor",
    "Rendered",
    "Span",
    "render",
    "to_discord",
    "to_plain",
    "to_slack_mrkdwn",
    "to_telegram",
    "utf16_len",
]

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def render(markdown: str, flavor: Flavor) -> Rendered:
    markdown = _clean(markdown)
    if flavor == "telegram":
        from gateway.delivery.markup.telegram import render_telegram

        return render_telegram(markdown)
    from gateway.delivery.markup.text import MarkupRenderer

    try:
        return MarkupRenderer(flavor).render(markdown)
    except RecursionError:
        return MarkupRenderer(flavor).render_flat(markdown)


def to_telegram(markdown: str) -> tuple[str, list[TextEntity]]:
    from gateway.delivery.markup.telegram import render_telegram

    r = render_telegram(_clean(markdown))
    return r.text, list(r.entities)


def to_slack_mrkdwn(markdown: str) -> str:
    return render(markdown, "slack").text


def to_discord(markdown: str) -> str:
    return render(markdown, "discord").text


def to_plain(markdown: str) -> str:
    return render(markdown, "plain").text


def _clean(markdown: str) -> str:
    """Lone surrogates (from broken JSON upstream) cannot be sent anywhere: make them U+FFFD."""
    if _SURROGATE_RE.search(markdown):
        return markdown.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return markdown

"""What every markup renderer shares: the shape of a rendering (text, unsplittable spans, fences,
Telegram entities), UTF-16 lengths, and tables laid out as monospace text (no chat platform here
renders tables)."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal

from gateway.events import TextEntity

Flavor = Literal["telegram", "slack", "discord", "plain"]
Span = tuple[int, int]

FENCE = "```"


@dataclass(frozen=True, slots=True)
class Fence:
    """A fenced block in rendered text. A split inside
    its body closes it and reopens it with `opener`."""

    open_start: int  # the opening ``` (after any container prefix)
    body_start: int  # first character of the first code line (its container prefix included)
    body_end: int  # end of the last code line, before the newline that precedes the closing ```
    close_end: int  # just after the closing ```
    prefix: str  # container prefix of the code lines: "> " in a quote, spaces in a list item
    opener: str  # the opening line without prefix, e.g. "```python"


@dataclass(frozen=True, slots=True)
class Rendered:
    """One flavour's rendering of a reply.

    `keeps` are [start, end) ranges a split should not fall strictly inside; `syntax` are
    markup-only ranges with their plain-text replacement (how `Chunk.plain` is derived). Both are
    Python string indices; `entities` (Telegram only) use UTF-16 offsets like the Bot API.
    """

    text: str
    keeps: tuple[Span, ...] = ()
    fences: tuple[Fence, ...] = ()
    syntax: tuple[tuple[int, int, str], ...] = ()
    entities: tuple[TextEntity, ...] = ()


def utf16_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


def format_table(rows: list[list[str]], aligns: list[str]) -> str:
    if not rows:
        return ""
    ncols = max(len(r) for r in rows)
    widths = [max((_width(r[i]) for r in rows if i < len(r)), default=0) for i in range(ncols)]
    lines = []
    for k, row in enumerate(rows):
        cells = [
            _pad(row[i] if i < len(row) else "", widths[i], aligns[i] if i < len(aligns) else "")
            for i in range(ncols)
        ]
        lines.append(" | ".join(cells).rstrip())
        if k == 0 and len(rows) > 1:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _width(text: str) -> int:
    """Monospace columns: East Asian wide characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def _pad(text: str, width: int, align: str) -> str:
    gap = width - _width(text)
    if "right" in align:
        return " " * gap + text
    if "center" in align:
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap

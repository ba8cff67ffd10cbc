"""The model's Markdown as Telegram text + entities, through telegramify-markdown; raw HTML is
escaped (it would be dropped) and tables become code blocks laid out like the other flavours'."""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Callable, Mapping

import pyromark  # telegramify-markdown's own parser; used only to find raw HTML it would drop
import telegramify_markdown
from telegramify_markdown.config import RenderConfig
from telegramify_markdown.converter import STANDARD_OPTIONS

from gateway.delivery.markup.base import Rendered, format_table, utf16_len
from gateway.events import TextEntity

_LINK_SCHEME = re.compile(r"(?:https?|tg|ftp)://|mailto:", re.IGNORECASE)


@functools.cache
def _telegram_config() -> RenderConfig:
    config = RenderConfig.isolated()
    symbols = config.markdown_symbol
    for level in range(1, 7):  # headings are bold (+underline); no emoji in front
        setattr(symbols, f"heading_level_{level}", "")
    symbols.unordered_list_item = "•"
    symbols.image = "🖼 "
    return config


def render_telegram(markdown: str) -> Rendered:
    source = _tables_as_code(_escape_raw_html(markdown))
    text, raw = telegramify_markdown.convert(source, config=_telegram_config())
    entities = sorted(
        (
            TextEntity(e.type, e.offset, e.length, e.url, e.language)
            for e in raw
            # e.g. a bare email: Telegram links it
            if e.type != "text_link" or _LINK_SCHEME.match(e.url or "")
        ),
        key=lambda e: (e.offset, -e.length, e.type),
    )
    entities = _drop_nested_quotes(entities)
    to_index = _utf16_to_index(text)
    keeps = tuple((to_index(e.offset), to_index(e.offset + e.length)) for e in entities)
    return Rendered(text, keeps=keeps, entities=tuple(entities))


def _drop_nested_quotes(entities: list[TextEntity]) -> list[TextEntity]:
    """Telegram has one quote level (nested blockquote
    entities are refused); the outer quote stays."""
    out: list[TextEntity] = []
    quote_end = -1
    for e in entities:  # sorted: an outer quote comes before the quotes inside it
        if e.type in ("blockquote", "expandable_blockquote"):
            if e.offset + e.length <= quote_end:
                continue
            quote_end = e.offset + e.length
        out.append(e)
    return out


def _escape_raw_html(markdown: str) -> str:
    """Backslash-escape raw HTML so Telegram shows
    `<b>x</b>` as typed; telegramify would drop it."""
    if "<" not in markdown:
        return markdown
    data = markdown.encode("utf-8")
    cuts: list[int] = []
    for payload, where in pyromark.events_with_range(markdown, options=STANDARD_OPTIONS):
        if isinstance(payload, dict) and ("InlineHtml" in payload or "Html" in payload):
            i = data.find(b"<", where["start"], where["end"])
            while i != -1:
                cuts.append(i)
                i = data.find(b"<", i + 1, where["end"])
    if not cuts:
        return markdown
    bounds = [0, *cuts, len(data)]
    return b"\\".join(data[a:b] for a, b in itertools.pairwise(bounds)).decode("utf-8")


def _tables_as_code(markdown: str) -> str:
    """Top-level tables become code blocks laid out like
    the other flavours' (telegramify pads by `len`)."""
    if "|" not in markdown:
        return markdown
    data = markdown.encode("utf-8")
    out: list[bytes] = []
    cursor = depth = 0
    table = _Table()
    for payload, where in pyromark.events_with_range(markdown, options=STANDARD_OPTIONS):
        if not isinstance(payload, dict):
            continue
        tag = payload.get("Start", payload.get("End"))
        name = next(iter(tag)) if isinstance(tag, dict) else tag
        if name in ("BlockQuote", "List", "Item", "FootnoteDefinition"):
            depth += 1 if "Start" in payload else -1
        elif depth:
            continue
        elif name == "Table" and not isinstance(tag, dict):  # End: "Table"
            out += [data[cursor : where["start"]], table.as_code().encode()]
            cursor = where["end"]
        else:
            table.take(name, tag, payload)
    if not out:
        return markdown
    out.append(data[cursor:])
    return b"".join(out).decode("utf-8")


class _Table:
    """The rows of the table being read, cell by cell, from pyromark's events."""

    def __init__(self) -> None:
        self.rows: list[list[str]] = []
        self.aligns: list[str] = []
        self.cell: list[str] | None = None

    def take(self, name: object, tag: object, payload: Mapping[str, object]) -> None:
        if name == "Table" and isinstance(tag, dict):  # Start: {"Table": ("Left", "None", ...)}
            self.rows, self.aligns = [], [str(a).lower() for a in tag["Table"]]
        elif name == "TableCell" and "Start" in payload:
            self.cell = []
        elif name == "TableCell":
            self.rows[-1].append("".join(self.cell or []))
            self.cell = None
        elif name in ("TableHead", "TableRow") and "Start" in payload:
            self.rows.append([])
        elif self.cell is not None:
            self.cell.extend(str(v) for k, v in payload.items() if k in _CELL_TEXT)

    def as_code(self) -> str:
        table = format_table(self.rows, self.aligns)
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", table)), default=0))
        return f"{fence}\n{table}\n{fence}\n"


_CELL_TEXT = ("Text", "Code", "InlineHtml")


def _utf16_to_index(text: str) -> Callable[[int], int]:
    if utf16_len(text) == len(text):
        return int
    cum = list(itertools.accumulate((2 if ord(ch) > 0xFFFF else 1 for ch in text), initial=0))
    return functools.partial(bisect.bisect_left, cum)

"""Split a rendered reply into chunks that each fit the platform's limit, measured the way the
platform counts.

Splits prefer paragraph, then line, then word boundaries; they never fall inside an escape, a link
or a formatting span that fits a chunk by itself, never between a character and its combining marks
when avoidable, and a split inside a code fence closes the fence in one chunk and reopens it (same
language) in the next.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.delivery.markup.render import FENCE, Fence, Flavor, Rendered, render, utf16_len
from gateway.events import TextEntity

__all__ = [
    "MIN_LIMIT",
    "MIN_LIMIT_TEXT",
    "MIN_LINES",
    "Chunk",
    "Flavor",
    "LengthUnit",
    "Piece",
    "TextEntity",
    "render_chunks",
    "split_rendered",
]

log = logging.getLogger(__name__)

LengthUnit = Literal["chars", "utf16"]
# slack/discord: room for a fence's close and reopen lines (container prefix included) and code
MIN_LIMIT = 160
MIN_LIMIT_TEXT = 16  # telegram/plain have no fences to reopen
MIN_LINES = 4
_FREE, _SOFT, _HARD = 0, 1, 2  # may split / avoid splitting / never split at a position
_WORD_BREAK = re.compile(r"[ \t]+(?=[^\s])")
_MAX_GRAPHEME_BACKOFF = 16


@dataclass(frozen=True, slots=True)
class Chunk:
    """One message, ready to send as is."""

    text: str  # what to send (markup for slack/discord; plain text for telegram)
    entities: tuple[TextEntity, ...]  # telegram only, UTF-16 offsets into `text`; () elsewhere
    plain: str  # the same chunk without markup, for a resend when the platform rejects the markup


@dataclass(frozen=True, slots=True)
class Piece:
    """Chunk i is `head + rendered.text[start:end] + tail`.

    `head` is the reopen line of the fence `start` falls inside (else ""), `tail` the close line of
    the fence `end` falls inside (else ""). Pieces are in order and cover the rendered text; only
    whitespace lies between them (a piece of nothing but whitespace is dropped: platforms refuse
    blank messages).
    """

    start: int
    end: int
    head: str = ""
    tail: str = ""


def render_chunks(
    markdown: str,
    flavor: Flavor,
    *,
    limit: int,
    unit: LengthUnit = "chars",
    max_lines: int | None = None,
) -> list[Chunk]:
    """Render once for `flavor` and split. Telegram is always measured in UTF-16 code units, as the
    Bot API does.

    Empty or whitespace-only input gives no chunks; the caller decides what to send instead.
    """
    minimum = MIN_LIMIT_TEXT if flavor in ("telegram", "plain") else MIN_LIMIT
    if limit < minimum:
        raise ValueError(f"limit {limit} is below the minimum of {minimum} for {flavor}")
    if not markdown.strip():
        return []
    rendered = render(markdown, flavor)
    if flavor == "telegram":
        unit = "utf16"
    pieces = split_rendered(rendered, limit=limit, unit=unit, max_lines=max_lines)
    offsets = _Utf16(rendered.text) if flavor == "telegram" else _Utf16("")
    return [_chunk(rendered, p, flavor, offsets) for p in pieces]


def split_rendered(
    rendered: Rendered, *, limit: int, unit: LengthUnit = "chars", max_lines: int | None = None
) -> list[Piece]:
    minimum = MIN_LIMIT if rendered.fences else MIN_LIMIT_TEXT
    if limit < minimum:
        raise ValueError(f"limit {limit} is below the minimum of {minimum}")
    if max_lines is not None and max_lines < MIN_LINES:
        raise ValueError(f"max_lines {max_lines} is below the minimum of {MIN_LINES}")
    return _Splitter(rendered, limit, unit, max_lines).pieces()


class _Splitter:
    def __init__(
        self, rendered: Rendered, limit: int, unit: LengthUnit, max_lines: int | None
    ) -> None:
        self.text = text = rendered.text
        self.n = len(text)
        self.limit = limit
        self.max_lines = max_lines
        self.measure = utf16_len if unit == "utf16" else len
        # cum[i]: UTF-16 length of text[:i]
        self.cum = _utf16_prefix(text) if unit == "utf16" else None
        self.fences = rendered.fences
        self.fence_starts = [f.body_start for f in rendered.fences]
        self.blocked = self._blocked(rendered)
        self.prev_free = _prev_below(self.blocked, _SOFT)
        self.prev_soft = _prev_below(self.blocked, _HARD)
        para, line = _line_breaks(text)
        self.levels = (para, line, [m.end() for m in _WORD_BREAK.finditer(text)])
        self.newlines = [m.start() for m in re.finditer("\n", text)] if max_lines else []

    # -- setup

    def _blocked(self, rendered: Rendered) -> bytearray:
        n = self.n
        soft = [0] * (n + 2)
        hard = [0] * (n + 2)
        for a, b in rendered.keeps:
            if b - a > 1 and self.cost(a, b) <= self.limit:
                # a span longer than a chunk gets clipped
                soft[a + 1] += 1
                soft[b] -= 1
        for f in rendered.fences:  # never inside the opening line or the closing line
            for a, b in ((f.open_start + 1, f.body_start + 1), (f.body_end, f.close_end)):
                hard[a] += 1
                hard[b] -= 1
        blocked = bytearray(n + 1)
        for i, (s, h) in enumerate(
            zip(itertools.accumulate(soft), itertools.accumulate(hard), strict=False)
        ):
            if i > n:
                break
            blocked[i] = _HARD if h > 0 else _SOFT if s > 0 else _FREE
        return blocked

    # -- measuring

    def cost(self, a: int, b: int) -> int:
        return b - a if self.cum is None else self.cum[b] - self.cum[a]

    def max_end(self, s: int, budget: int) -> int:
        if budget <= 0:
            return s
        if self.cum is None:
            return min(self.n, s + budget)
        return min(self.n, bisect.bisect_right(self.cum, self.cum[s] + budget) - 1)

    def fence_at(self, pos: int) -> Fence | None:
        """The fence whose body strictly contains `pos` (a split there must close and reopen it)."""
        k = bisect.bisect_left(self.fence_starts, pos) - 1
        if k >= 0 and self.fences[k].body_start < pos < self.fences[k].body_end:
            return self.fences[k]
        return None

    def head(self, s: int) -> str:
        f = self.fence_at(s)
        if f is None:
            return ""
        return f.prefix + f.opener + "\n" + ("" if self.text[s - 1] == "\n" else f.prefix)

    def tail(self, b: int) -> str:
        f = self.fence_at(b)
        if f is None:
            return ""
        return ("" if self.text[b - 1] == "\n" else "\n") + f.prefix + FENCE

    def lines(self, s: int, b: int, head: str, tail: str) -> int:
        """Lines of head + text[s:b] + tail, not counting
        trailing blank lines (platforms trim them)."""
        end = b
        if not tail:
            while end > s and self.text[end - 1].isspace():
                end -= 1
        inner = bisect.bisect_left(self.newlines, end) - bisect.bisect_left(self.newlines, s)
        return head.count("\n") + inner + tail.count("\n") + 1

    def fits(self, s: int, b: int, head: str) -> bool:
        tail = self.tail(b)
        if self.measure(head) + self.cost(s, b) + self.measure(tail) > self.limit:
            return False
        return self.max_lines is None or self.lines(s, b, head, tail) <= self.max_lines

    # -- choosing split points

    def pieces(self) -> list[Piece]:
        out: list[Piece] = []
        s = 0
        while s < self.n:
            head = self.head(s)
            b = self.choose(s, head)
            if self.text[s:b].strip():
                out.append(Piece(s, b, head, self.tail(b)))
            s = b
        return out

    def choose(self, s: int, head: str) -> int:
        if self.fits(s, self.n, head):
            return self.n
        hi = self.max_end(s, self.limit - self.measure(head))
        if self.max_lines is not None:
            k = bisect.bisect_left(self.newlines, s) + self.max_lines - 1 - head.count("\n")
            if 0 <= k < len(self.newlines):
                hi = min(hi, self.newlines[k] + 1)
        # A boundary of a better kind wins if it still fills half the chunk; else the last boundary
        # of any kind.
        half = s + (hi - s) // 2
        for cands in self.levels:
            b = self.last_candidate(cands, s, hi, half, head)
            if b is not None:
                return b
        found = [self.last_candidate(cands, s, hi, s, head) for cands in self.levels]
        best = max((b for b in found if b is not None), default=None)
        if best is not None:
            return best
        return self.hard_split(s, hi, head)

    def last_candidate(
        self, cands: Sequence[int], s: int, hi: int, lo: int, head: str
    ) -> int | None:
        i = bisect.bisect_right(cands, hi) - 1
        while i >= 0 and cands[i] > lo and cands[i] > s:
            c = cands[i]
            if self.blocked[c] != _FREE:
                i = bisect.bisect_right(cands, self.prev_free[c]) - 1
            elif self.fits(s, c, head):
                return c
            else:
                i -= 1
        return None

    def hard_split(self, s: int, hi: int, head: str) -> int:
        """No boundary fits: cut at the last position
        allowed, inside a kept span only when s is in one."""
        for prev in (self.prev_free, self.prev_soft):
            pos = hi
            while (pos := prev[pos]) > s:
                cut = self.grapheme_start(s, pos)
                if self.blocked[cut] <= self.blocked[pos] and self.fits(s, cut, head):
                    return cut
                if self.fits(s, pos, head):
                    return pos
                pos -= 1
        # Unreachable with limit >= MIN_LIMIT; progress beats an endless loop.
        log.warning("no allowed split point after offset %s; cutting one character", s)
        return s + 1

    def grapheme_start(self, s: int, pos: int) -> int:
        """Move a cut back so combining marks, variation selectors and ZWJ sequences stay whole."""
        cut = pos
        for _ in range(_MAX_GRAPHEME_BACKOFF):
            if cut - 1 <= s or not _joins_previous(self.text, cut):
                return cut
            cut -= 1
        return pos


def _joins_previous(text: str, i: int) -> bool:
    """Would a cut before text[i] split a user-perceived
    character (emoji sequence, accent, flag)?"""
    if i >= len(text):
        return False
    ch, before = text[i], text[i - 1]
    code = ord(ch)
    if _is_regional_indicator(ch) and _is_regional_indicator(before):  # flags are pairs: 🇫🇷🇩🇪
        run = 0
        while i - run - 1 >= 0 and _is_regional_indicator(text[i - run - 1]):
            run += 1
        return run % 2 == 1
    return (
        before == "\u200d"
        or ch == "\u200d"
        or unicodedata.combining(ch) > 0
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
    )


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _utf16_prefix(text: str) -> list[int] | None:
    if utf16_len(text) == len(text):
        return None
    return list(itertools.accumulate((2 if ord(c) > 0xFFFF else 1 for c in text), initial=0))


def _prev_below(blocked: bytearray, level: int) -> list[int]:
    """For each position, the nearest position at or before it whose block level is below `level`
    (-1: none)."""
    out = [0] * len(blocked)
    last = -1
    for i, b in enumerate(blocked):
        if b < level:
            last = i
        out[i] = last
    return out


def _line_breaks(text: str) -> tuple[list[int], list[int]]:
    """Starts of lines that follow a blank line (paragraph
    breaks) and starts of all other non-blank lines."""
    para: list[int] = []
    line: list[int] = []
    start = 0
    prev_blank = False
    for row in text.split("\n"):
        blank = not row.strip(" \t>")
        if start and not blank:
            (para if prev_blank else line).append(start)
        prev_blank = blank
        start += len(row) + 1
    return para, line


def _chunk(rendered: Rendered, piece: Piece, flavor: Flavor, offsets: _Utf16) -> Chunk:
    text = piece.head + rendered.text[piece.start : piece.end] + piece.tail
    if flavor == "telegram":
        return Chunk(text, _clip_entities(rendered, piece, offsets), text)
    if flavor == "plain":
        return Chunk(text, (), text)
    return Chunk(text, (), _strip_syntax(rendered, piece))


class _Utf16:
    """Python index <-> UTF-16 offset over one text (identity when it has no astral characters)."""

    def __init__(self, text: str) -> None:
        self.cum = _utf16_prefix(text)

    def of(self, i: int) -> int:
        return i if self.cum is None else self.cum[i]

    def index(self, offset: int) -> int:
        return offset if self.cum is None else bisect.bisect_left(self.cum, offset)


def _clip_entities(rendered: Rendered, piece: Piece, offsets: _Utf16) -> tuple[TextEntity, ...]:
    """Entities crossing a chunk edge are clipped into
    both chunks (a split `pre` keeps its language)."""
    text = rendered.text
    lo, hi = offsets.of(piece.start), offsets.of(piece.end)
    out: list[TextEntity] = []
    for e in rendered.entities:
        if e.offset >= hi:
            break  # sorted by offset
        a, b = max(e.offset, lo), min(e.offset + e.length, hi)
        if b <= a:
            continue
        if b < e.offset + e.length:  # cut at the chunk's end: leave the trailing newlines out
            pa, pb = offsets.index(a), offsets.index(b)
            while pb > pa and text[pb - 1].isspace():
                pb -= 1
            b = offsets.of(pb)
        if (a, b) != (e.offset, e.offset + e.length) and not text[
            offsets.index(a) : offsets.index(b)
        ].strip():
            continue  # a clipped remnant covering only whitespace is noise
        out.append(TextEntity(e.type, a - lo, b - a, e.url, e.language))
    return tuple(out)


def _strip_syntax(rendered: Rendered, piece: Piece) -> str:
    text, syntax = rendered.text, rendered.syntax
    out: list[str] = []
    cur = piece.start
    k = bisect.bisect_right(syntax, (piece.start, -1, ""))
    while k > 0 and syntax[k - 1][1] > piece.start:
        k -= 1
    for a, b, plain in itertools.islice(syntax, k, None):
        if a >= piece.end:
            break
        out.append(text[cur : max(a, cur)])
        if a >= piece.start:
            out.append(plain)
        cur = max(cur, min(b, piece.end))
    out.append(text[cur : piece.end])
    return "".join(out)

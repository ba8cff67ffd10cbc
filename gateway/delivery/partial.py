"""A partial answer made safe to show: split into preview parts the platform accepts as they are.

The text ends anywhere: inside a code fence, a bold span, a link. It goes through the same renderer
and chunker as the final answer, which parse it as a whole document: an open fence closes at the end
(and is closed and reopened across a split), Telegram entities are computed, never parsed by
Telegram, so a partial can never make the platform refuse the edit. Past the platform's length limit
it rolls over into the next part at a paragraph, line or word boundary. Clients that render Markdown
themselves (the web chat, Slack's own streaming) get it raw.

A long answer is not rendered whole at every update: once the open stretch of text is about a
message long, it is closed at a paragraph break outside any code fence and its parts are kept as
they are (`PartialRenderer`), so an update costs the rendering of one message, however long the
answer grows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.delivery.chunking import render_chunks
from gateway.events import TextEntity
from gateway.prompt.hints import PlatformFacts

CLOSE_AT = 0.75  # the open stretch is closed once its rendering is this share of a message
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)", re.MULTILINE)
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_LINE = re.compile(r"\n")
_SPACE = re.compile(r" (?=\S)")
PROGRESS_PREFIX = "🔧 "
PROGRESS_TOOLS = 8  # the newest this many steps; older ones fold into "…"


@dataclass(frozen=True, slots=True)
class Part:
    text: str
    entities: tuple[TextEntity, ...]
    plain: str


def preview_parts(markdown: str, facts: PlatformFacts, *, raw: bool = False) -> list[Part]:
    if not markdown.strip():
        return []
    if raw or facts.flavor == "markdown":
        return [Part(t, (), t) for t in split_raw(markdown, facts.max_length)]
    chunks = render_chunks(
        markdown,
        facts.flavor,  # type: ignore[arg-type]
        limit=facts.max_length,
        unit=facts.length_unit,  # type: ignore[arg-type]
        max_lines=facts.max_lines,
    )
    return [Part(c.text, c.entities, c.plain) for c in chunks]


class PartialRenderer:
    """Preview parts of one growing answer. Stretches of it that are done (a message long, ended at
    a paragraph outside a code fence) are rendered once; each update renders only the open stretch
    after them."""

    def __init__(self, facts: PlatformFacts, *, raw: bool = False) -> None:
        self.facts = facts
        self.raw = raw or facts.flavor == "markdown"
        self.reset()

    def reset(self) -> None:
        """The text starts over (a retry, the next model call)."""
        self._closed: list[Part] = []
        self._start = 0

    def parts(self, markdown: str) -> list[Part]:
        if self.raw:
            return preview_parts(markdown, self.facts, raw=True)
        open_parts = preview_parts(markdown[self._start :], self.facts)
        if open_parts and (
            len(open_parts) > 1
            or self._measure(open_parts[0].text) > CLOSE_AT * self.facts.max_length
        ):
            cut = _safe_cut(markdown, self._start)
            if cut > self._start:
                self._closed += preview_parts(markdown[self._start : cut], self.facts)
                self._start = cut
                open_parts = preview_parts(markdown[cut:], self.facts)
        return self._closed + open_parts

    def _measure(self, text: str) -> int:
        return (
            len(text.encode("utf-16-le")) // 2 if self.facts.length_unit == "utf16" else len(text)
        )


def _safe_cut(markdown: str, start: int) -> int:
    """The end of the last paragraph (else line, else word) break after `start` outside every code
    fence (`start`: none)."""
    fenced = False
    fence_open = start
    spans: list[tuple[int, int]] = []  # fenced stretches
    for match in _FENCE.finditer(markdown, start):
        if not fenced:
            fence_open = match.start()
        else:
            spans.append((fence_open, match.end()))
        fenced = not fenced
    if fenced:
        spans.append((fence_open, len(markdown)))
    for breaks in (_PARAGRAPH, _LINE, _SPACE):
        # a paragraph break if there is one, else a line, else a word
        best = start
        for brk in breaks.finditer(markdown, start):
            if not any(a <= brk.start() < b for a, b in spans):
                best = brk.end()
        if markdown[start:best].strip():
            return best
    return start


def split_raw(text: str, limit: int) -> list[str]:
    """Raw Markdown in pieces of at most `limit`
    characters, cut after a newline where there is one."""
    out = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit) + 1 or text.rfind(" ", 0, limit) + 1 or limit
        out.append(text[:cut])
        text = text[cut:]
    if text.strip():
        out.append(text)
    return out


def progress_line(tools: Sequence[str]) -> str:
    """`🔧 memory · session_search ×2 · skills`: what the
    agent did so far, newest last, repeats folded."""
    steps: list[tuple[str, int]] = []
    for name in tools:
        if steps and steps[-1][0] == name:
            steps[-1] = (name, steps[-1][1] + 1)
        else:
            steps.append((name, 1))
    words = [f"{name} ×{n}" if n > 1 else name for name, n in steps]
    if len(words) > PROGRESS_TOOLS:
        words = ["…", *words[-PROGRESS_TOOLS:]]
    return PROGRESS_PREFIX + " · ".join(words) if words else ""

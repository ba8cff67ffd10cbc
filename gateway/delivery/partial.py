"""A partial answer made safe to show: split into preview parts the platform accepts as they are.

The text ends anywhere: inside a code fence, a bold span, a link. It goes through the same renderer and chunker as
the final answer, which parse it as a whole document: an open fence closes at the end (and is closed and
reopened across a split), Telegram entities are computed, never parsed by Telegram, so a partial can never make
the platform refuse the edit. Past the platform's length limit it rolls over into the next part at a paragraph,
line or word boundary. Clients that render Markdown themselves (the web chat, Slack's own streaming) get it raw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.delivery.chunking import render_chunks
from gateway.events import TextEntity
from gateway.prompt.hints import PlatformFacts

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
    chunks = render_chunks(markdown, facts.flavor, limit=facts.max_length,  # type: ignore[arg-type]
                           unit=facts.length_unit, max_lines=facts.max_lines)  # type: ignore[arg-type]
    return [Part(c.text, c.entities, c.plain) for c in chunks]


def split_raw(text: str, limit: int) -> list[str]:
    """Raw Markdown in pieces of at most `limit` characters, cut after a newline where there is one."""
    out = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit) + 1 or text.rfind(" ", 0, limit) + 1 or limit
        out.append(text[:cut])
        text = text[cut:]
    if text.strip():
        out.append(text)
    return out


def progress_line(tools: Sequence[str]) -> str:
    """`🔧 memory · session_search ×2 · skills`: what the agent did so far, newest last, repeats folded."""
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

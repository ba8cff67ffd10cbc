"""What of an answer is spoken: its words without code blocks, URLs, pictures or Markdown marks,
cut at a sentence end before the limit (the text reply has it all). Pure: the same answer always
gives the same words."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # markdown-it is imported on first use: a daemon without voice never loads it
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

MAX_INLINE_CODE = 30  # `ls -la` is read out; a longer code span is code, not speech
_URL = re.compile(r"(?:https?|ftp)://\S+|\bwww\.[^\s/]+\.\S+", re.IGNORECASE)
_TAG = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
_MARKS = re.compile(r"[*_~`|]{2,}|`|^\s*(?:#{1,6}|>+)\s+|(?<=\w)_(?=\w)", re.MULTILINE)
_SPACE = re.compile(r"[ \t\u00a0]+")
# Not words: terminal colours, control characters, bidi and zero-width marks; and espeak-ng's
# phoneme brackets, which it would read `[[Main Page]]` through as phoneme codes
_UNSPOKEN = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e"
    r"\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]|\[\[|\]\]"
)
_SENTENCE_END = re.compile(r"[.!?…](?=\s|$)")
_BLOCKS_SKIPPED = {"fence", "code_block", "html_block", "hr"}
_ENDS = (".", "!", "?", "…", ":", ";", ",")


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    markdown = MarkdownIt("commonmark", {"html": False, "maxNesting": 100})
    return markdown.enable(["table", "strikethrough"])


def spoken_text(markdown: str, max_chars: int) -> str:
    """The words to speak for an answer; "" when nothing in it is speakable (all code, say)."""
    try:
        tokens = _parser().parse(markdown)
    except RecursionError:
        tokens = []
    lines = [line for line in _lines(tokens) if line]
    return _cut("\n".join(lines), max_chars)


def _lines(tokens: Sequence[Token]) -> Iterator[str]:
    """One line per block (paragraph, heading, list item, table row), ended with a pause."""
    row: list[str] | None = None
    for tok in tokens:
        kind = tok.type
        if kind in _BLOCKS_SKIPPED:
            continue
        if kind == "tr_open":
            row = []
        elif kind == "tr_close":
            yield _closed(", ".join(cell for cell in row or () if cell))
            row = None
        elif kind == "inline":
            words = _clean(_inline(tok.children or []))
            if row is not None:
                row.append(words.rstrip("."))
            else:
                yield _closed(words)


def _inline(children: Sequence[Token]) -> str:
    parts: list[str] = []
    for child in children:
        if child.type == "text":
            parts.append(child.content)
        elif child.type == "code_inline":
            code = child.content.strip()
            parts.append(code if len(code) <= MAX_INLINE_CODE else "")
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        # pictures, link targets and emphasis marks are not spoken; a link's own words are
    return "".join(parts)


def _clean(text: str) -> str:
    text = _UNSPOKEN.sub("", text)
    text = _URL.sub("", text)
    text = _TAG.sub("", text)
    text = _MARKS.sub(lambda m: " " if m.group(0) == "_" else "", text)
    text = _SPACE.sub(" ", text).strip()
    return re.sub(r"\s+([,.;:!?])", r"\1", text)


def _closed(line: str) -> str:
    line = line.strip(" ,;:(")
    if not line or not any(ch.isalnum() for ch in line):
        return ""
    return line if line.endswith(_ENDS) else line + "."


def _cut(text: str, max_chars: int) -> str:
    """At most `max_chars`: to the last sentence end that keeps half or more, else a whole word."""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars + 1]
    ends = [m.end() for m in _SENTENCE_END.finditer(head) if m.end() <= max_chars]
    if ends and ends[-1] >= max_chars // 2:
        return head[: ends[-1]].strip()
    space = head.rfind(" ", 0, max_chars + 1)
    return (head[:space] if space > 0 else head[:max_chars]).strip()

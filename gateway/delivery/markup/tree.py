"""The model's Markdown parsed by markdown-it into a tree of blocks, with the plain text of inline
runs and of table cells: what the text renderer (Slack, Discord, plain) walks."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

_LANG_RE = re.compile(r"[A-Za-z0-9_+#.-]{1,24}")


@functools.cache
def parser() -> MarkdownIt:
    # html off: raw HTML reaches us as text, so it is shown as typed rather than dropped.
    # maxNesting high: at the limit markdown-it silently drops the deeper text. Too deep a document
    # hits RecursionError instead, and render() falls back to text without formatting.
    return MarkdownIt("commonmark", {"html": False, "maxNesting": 10_000}).enable(
        ["table", "strikethrough"]
    )


@dataclass(slots=True)
class Node:
    """A block of the parse: `token` is the block's
    opening token (or the token itself for leaves)."""

    type: str
    token: Token
    children: list[Node]


def tree(tokens: list[Token]) -> list[Node]:
    root: list[Node] = []
    stack = [root]
    for tok in tokens:
        if tok.nesting == 1:
            node = Node(tok.type.removesuffix("_open"), tok, [])
            stack[-1].append(node)
            stack.append(node.children)
        elif tok.nesting == -1:
            stack.pop()
        else:
            stack[-1].append(Node(tok.type, tok, []))
    return root


def matching_close(tokens: list[Token], i: int) -> int:
    for j in range(i + 1, len(tokens)):
        if tokens[j].type == "link_close":
            return j
    return len(tokens) - 1


def lang(info: str) -> str:
    word = info.split(maxsplit=1)[0] if info.strip() else ""
    return word if _LANG_RE.fullmatch(word) else ""


def inline_tokens(nodes: Sequence[Node]) -> list[Token]:
    return [t for n in nodes if n.type == "inline" for t in n.token.children or []]


def plain_inline(nodes: Sequence[Node], *, soft: str) -> str:
    return plain_inline_tokens(inline_tokens(nodes), soft=soft)


def plain_inline_tokens(tokens: list[Token], *, soft: str) -> str:
    out: list[str] = []
    for tok in tokens:
        if tok.type in ("text", "code_inline"):
            out.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            out.append(soft)
        elif tok.type == "image":
            out.append(plain_inline_tokens(tok.children or [], soft=soft))
    return "".join(out)


def table_rows(node: Node) -> tuple[list[list[str]], list[str]]:
    """A GFM table's cells as plain text, row by row, and its columns' alignments."""
    rows: list[list[str]] = []
    aligns: list[str] = []
    for section in node.children:
        for tr in section.children:
            rows.append([plain_inline(cell.children, soft=" ") for cell in tr.children])
            if not aligns:
                aligns = [str(cell.token.attrs.get("style", "")) for cell in tr.children]
    return rows, aligns

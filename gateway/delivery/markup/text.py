"""The model's Markdown as marked-up text for Slack (mrkdwn), Discord (its Markdown) and plain text:
a walk over markdown-it's block tree that escapes per flavour and records the spans and fences
chunking must respect."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from markdown_it.token import Token

from gateway.delivery.markup.base import FENCE, Fence, Flavor, Rendered, Span, format_table
from gateway.delivery.markup.tree import (
    Node,
    inline_tokens,
    lang,
    matching_close,
    parser,
    plain_inline,
    plain_inline_tokens,
    table_rows,
    tree,
)

_MAX_INDENT_DEPTH = 6  # deeper lists stop indenting, so a fence's reopen line stays short
_BACKTICK_RUN = re.compile(r"``(?=`)")  # a third backtick in a row would close/open a fence
_URL_RE = re.compile(r"https?://[^\s<>`|]*[^\s<>`|.,:;!?\"')\]]")
_DISCORD_SPECIAL = re.compile(r"[\\*_~`|]")
# Text at a line start that Discord would read as a heading, quote or list.
_DISCORD_LINE_START = re.compile(r"(?:#{1,3} |-# |>|[-+] )|\d{1,9}(?=[.)] )")
_SLACK_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SLACK_SPECIAL = re.compile(r"[&<>]")
_RULE = "————————"
_BULLETS = {"slack": "• ", "discord": "- ", "plain": "• "}
_EMPHASIS = {  # (strong, em, strike) markers
    "slack": ("*", "_", "~"),
    "discord": ("**", "*", "~~"),
    "plain": ("", "", ""),
}


class _Line:
    """One output line; containers prepend to `prefix`, marks point into `content` by column."""

    __slots__ = ("content", "lead", "prefix", "start")

    def __init__(self, content: str) -> None:
        self.prefix = ""
        self.content = content
        self.start = 0  # set when the document is assembled
        # length of the prefix as written (a blank line's trailing spaces are trimmed)
        self.lead = 0


_Pos = tuple[_Line, int]  # (line, column in its content)


class _Buf:
    """Inline output with its marks, in offsets of this buffer's own text."""

    __slots__ = ("keeps", "parts", "size", "syntax")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.keeps: list[Span] = []
        self.syntax: list[tuple[int, int, str]] = []

    def add(self, s: str) -> None:
        if s:
            self.parts.append(s)
            self.size += len(s)

    def markup(self, s: str, plain: str = "") -> None:
        if s:
            self.syntax.append((self.size, self.size + len(s), plain))
            self.add(s)

    def atom(self, s: str, plain: str | None = None) -> None:
        """An escape or entity: never split, and `plain` replaces it in the plain fallback."""
        start = self.size
        if plain is None:
            self.add(s)
        else:
            self.markup(s, plain)
        self.keeps.append((start, self.size))

    def at_line_start(self) -> bool:
        return not self.parts or self.parts[-1].endswith("\n")


class MarkupRenderer:
    """One render of one document in one flavour: marks
    are kept as line positions until `_assemble`."""

    def __init__(self, flavor: Flavor) -> None:
        self.flavor = flavor
        self.strong, self.em, self.strike = _EMPHASIS[flavor]
        self.keeps: list[tuple[_Pos, _Pos]] = []
        self.syntax: list[tuple[_Pos, _Pos, str]] = []
        # open, first body, last body, close
        self.fences: list[tuple[_Line, _Line, _Line, _Line]] = []
        self.depth = 0

    def render(self, markdown: str) -> Rendered:
        return self._assemble(self._blocks(tree(parser().parse(markdown))))

    def render_flat(self, markdown: str) -> Rendered:
        """Every source line as text, escaped for the
        flavour: for documents nested too deep to parse."""
        buf = _Buf()
        for line in markdown.splitlines():
            self._text(buf, line)
            buf.add("\n")
        return self._assemble(self._lines(buf))

    # -- blocks

    def _blocks(self, nodes: Sequence[Node], *, tight: bool = False) -> list[_Line]:
        out: list[_Line] = []
        for node in nodes:
            lines = self._block(node)
            if lines and out and not tight:
                out.append(_Line(""))
            out.extend(lines)
        return out

    def _block(self, node: Node) -> list[_Line]:
        kind = node.type
        if kind == "paragraph":
            return self._inline_lines(node.children)
        if kind == "heading":
            return self._heading(node)
        if kind in ("fence", "code_block"):
            return self._code(node.token.content, lang(node.token.info) if kind == "fence" else "")
        if kind in ("bullet_list", "ordered_list"):
            return self._list(node)
        if kind == "blockquote":
            return self._quote(node)
        if kind == "table":
            return self._code(format_table(*table_rows(node)), "")
        if kind == "hr":
            return [_Line(_RULE)]
        if node.children:
            return self._blocks(node.children)
        content = node.token.content.rstrip("\n")
        return [_Line(line) for line in content.split("\n")] if content else []

    def _heading(self, node: Node) -> list[_Line]:
        level = int(node.token.tag[1:])
        buf = _Buf()
        if self.flavor == "slack":
            buf.markup(self.strong)
            self._text(buf, plain_inline(node.children, soft=" "))
            buf.markup(self.strong)
        elif self.flavor == "discord" and level <= 3:
            buf.markup("#" * level + " ")
            self._inline(buf, node.children, soft=" ")
        else:
            buf.markup(self.strong)
            self._inline(buf, node.children, soft=" ")
            buf.markup(self.strong)
        buf.keeps.append((0, buf.size))
        return self._lines(buf)

    def _code(self, content: str, lang: str) -> list[_Line]:
        content = content.removesuffix("\n")
        buf = _Buf()
        if self.flavor == "plain":
            buf.add(content)
            return self._lines(buf)
        content = _BACKTICK_RUN.sub("``\u200b", content)
        if self.flavor == "slack":
            _slack_escape(buf, content)
        else:
            buf.add(content)
        body = self._lines(buf)
        opener = _Line(FENCE + (lang if self.flavor == "discord" else ""))
        closer = _Line(FENCE)
        self.syntax.append(((opener, 0), (body[0], 0), ""))
        last = body[-1]
        self.syntax.append(((last, len(last.content)), (closer, len(FENCE)), ""))
        self.fences.append((opener, body[0], last, closer))
        return [opener, *body, closer]

    def _list(self, node: Node) -> list[_Line]:
        ordered = node.type == "ordered_list"
        number = int(node.token.attrs.get("start", 1)) if ordered else 0
        tight = all(
            c.token.hidden for item in node.children for c in item.children if c.type == "paragraph"
        )
        out: list[_Line] = []
        self.depth += 1
        for item in node.children:
            marker = f"{number}. " if ordered else _BULLETS[self.flavor]
            number += 1
            lines = self._blocks(item.children, tight=tight) or [_Line("")]
            indent = " " * (4 if self.flavor == "slack" else len(marker))
            if self.depth > _MAX_INDENT_DEPTH:
                indent = ""
            lines[0].prefix = marker + lines[0].prefix
            for line in lines[1:]:
                line.prefix = indent + line.prefix
            if out and not tight:
                out.append(_Line(""))
            out.extend(lines)
        self.depth -= 1
        return out

    def _quote(self, node: Node) -> list[_Line]:
        lines = self._blocks(node.children)
        for line in lines:
            # Slack and Discord have one quote level; a nested quote joins its parent.
            if self.flavor == "plain" or not line.prefix.startswith("> "):
                line.prefix = "> " + line.prefix
        return lines

    # -- inline

    def _inline_lines(self, nodes: Sequence[Node]) -> list[_Line]:
        buf = _Buf()
        self._inline(buf, nodes)
        return self._lines(buf)

    def _inline(self, buf: _Buf, nodes: Sequence[Node], *, soft: str = "\n") -> None:
        self._tokens(buf, inline_tokens(nodes), soft=soft)

    def _tokens(
        self, buf: _Buf, tokens: list[Token], *, soft: str = "\n", in_link: bool = False
    ) -> None:
        opened: list[int] = []
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            kind = tok.type
            if kind == "text":
                self._text(buf, tok.content, in_link=in_link)
            elif kind in ("softbreak", "hardbreak"):
                buf.add(soft)
            elif kind == "code_inline":
                self._code_span(buf, tok.content)
            elif kind.endswith("_open") and kind != "link_open":
                opened.append(buf.size)
                buf.markup(self._marker(kind))
            elif kind.endswith("_close") and kind != "link_close":
                buf.markup(self._marker(kind))
                if opened:
                    buf.keeps.append((opened.pop(), buf.size))
            elif kind == "link_open":
                end = matching_close(tokens, i)
                self._link(buf, str(tok.attrs.get("href", "")), tokens[i + 1 : end])
                i = end
            elif kind == "image":
                self._link(buf, str(tok.attrs.get("src", "")), tok.children or [])
            i += 1

    def _marker(self, kind: str) -> str:
        return {"strong": self.strong, "em": self.em, "s": self.strike}.get(
            kind.rsplit("_", 1)[0], ""
        )

    def _text(self, buf: _Buf, text: str, *, in_link: bool = False) -> None:
        if self.flavor == "slack":
            _slack_escape(buf, _BACKTICK_RUN.sub("``\u200b", text))
        elif self.flavor == "discord":
            _discord_escape(buf, text, in_link=in_link)
        else:
            buf.add(text)

    def _code_span(self, buf: _Buf, code: str) -> None:
        start = buf.size
        if self.flavor == "slack":
            buf.markup("`")
            # Slack code spans cannot hold a backtick
            _slack_escape(buf, code.replace("`", "\u02cb"))
            buf.markup("`")
        elif self.flavor == "discord":
            # no run of two, so the delimiter never reads as a fence
            code = re.sub(r"`(?=`)", "`\u200b", code)
            tick = "``" if "`" in code else "`"
            pad = " " if code.startswith("`") or code.endswith("`") else ""
            buf.markup(tick + pad)
            buf.add(code)
            buf.markup(pad + tick)
        else:
            buf.add(code)
        buf.keeps.append((start, buf.size))

    def _link(self, buf: _Buf, url: str, inner: list[Token]) -> None:
        label = plain_inline_tokens(inner, soft=" ")
        is_bare = not label or label == url
        # the label alone says where it goes
        shows_target = is_bare or label == url.removeprefix("mailto:")
        start = buf.size
        if self.flavor == "slack":  # Slack needs &, <, > escaped in plain text too
            target = _slack_text(url).replace("|", "%7C")
            if is_bare:
                buf.markup("<" + target + ">", plain=target)
            else:
                buf.markup(f"<{target}|")
                _slack_escape(buf, label)
                buf.markup(">", plain="" if shows_target else f" ({target})")
        elif self.flavor == "discord" and not is_bare and url.startswith(("http://", "https://")):
            target = url.replace("(", "%28").replace(")", "%29")
            buf.markup("[")
            self._tokens(buf, inner, soft=" ", in_link=True)
            buf.markup(f"]({target})", plain=f" ({url})")
        elif shows_target:
            buf.add(label or url)
        else:
            self._tokens(buf, inner, soft=" ", in_link=True)
            buf.add(f" ({url})")
        buf.keeps.append((start, buf.size))

    # -- assembly

    def _lines(self, buf: _Buf) -> list[_Line]:
        """Split a buffer into lines, turning its marks into line positions."""
        text = "".join(buf.parts)
        lines = [_Line(s) for s in text.split("\n")]
        starts = [0]
        for line in lines[:-1]:
            starts.append(starts[-1] + len(line.content) + 1)

        def pos(offset: int) -> _Pos:
            k = bisect.bisect_right(starts, offset) - 1 if len(starts) > 1 else 0
            return lines[k], offset - starts[k]

        self.keeps.extend((pos(a), pos(b)) for a, b in buf.keeps)
        self.syntax.extend((pos(a), pos(b), plain) for a, b, plain in buf.syntax)
        return lines

    def _assemble(self, lines: list[_Line]) -> Rendered:
        parts: list[str] = []
        offset = 0
        for line in lines:
            prefix = line.prefix
            if not line.content:  # no trailing spaces on a blank line, but "> " stays a quote line
                prefix = prefix.rstrip()
                prefix += " " if prefix.endswith(">") else ""
            line.start, line.lead = offset, len(prefix)
            parts.append(prefix + line.content)
            offset += len(parts[-1]) + 1
        text = "\n".join(parts)

        def at(p: _Pos) -> int:
            return p[0].start + p[0].lead + p[1]

        keeps = sorted((at(a), at(b)) for a, b in self.keeps)
        syntax = sorted((at(a), at(b), plain) for a, b, plain in self.syntax)
        fences = tuple(
            Fence(
                at((o, 0)),
                first.start,
                at((last, len(last.content))),
                at((c, len(FENCE))),
                c.prefix,
                o.content,
            )
            for o, first, last, c in self.fences
        )
        return Rendered(
            text,
            keeps=tuple(k for k in keeps if k[1] - k[0] > 1),
            fences=fences,
            syntax=tuple(syntax),
        )


def _slack_text(text: str) -> str:
    return _SLACK_SPECIAL.sub(lambda m: _SLACK_ESCAPES[m.group()], text)


def _slack_escape(buf: _Buf, text: str) -> None:
    last = 0
    for m in _SLACK_SPECIAL.finditer(text):
        buf.add(text[last : m.start()])
        buf.atom(_SLACK_ESCAPES[m.group()])
        last = m.end()
    buf.add(text[last:])


def _discord_escape(buf: _Buf, text: str, *, in_link: bool) -> None:
    """Backslash what Discord would read as markup; bare URLs stay untouched so they still link."""
    marks: set[int] = set()
    if buf.at_line_start() and (m := _DISCORD_LINE_START.match(text)):
        marks.add(m.end() if m.group().isdigit() else 0)
    last = 0
    for url in [*_URL_RE.finditer(text), None]:
        end = url.start() if url else len(text)
        marks.update(
            m.start()
            for m in _DISCORD_SPECIAL.finditer(text, last, end)
            if not _is_intraword_underscore(text, m.start())
        )
        last = url.end() if url else end
    if in_link:
        marks.update(i for i, c in enumerate(text) if c in "[]")
    last = 0
    for i in sorted(marks):
        buf.add(text[last:i])
        buf.atom("\\" + text[i], plain=text[i])
        last = i + 1
    buf.add(text[last:])


def _is_intraword_underscore(text: str, i: int) -> bool:
    """snake_case needs no escape: Discord's `_` italics
    need a word boundary outside the underscores."""
    return (
        text[i] == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
    )

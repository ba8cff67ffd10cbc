"""Telegram's server-side markup parsing (MarkdownV2, HTML, legacy Markdown) → (plain text,
entities), modelled on TDLib's `parse_markdown_v2` / `parse_html` / `parse_markdown`, with the same
error texts, so the fake rejects what Telegram rejects ("can't parse entities") and shows what the
user would see."""

from __future__ import annotations

import re
from typing import Any

RESERVED_V2 = "_*[]()~`>#+-=|{}.!"
_TYPE_NAMES = {
    "bold": "Bold",
    "italic": "Italic",
    "underline": "Underline",
    "strikethrough": "Strikethrough",
    "spoiler": "Spoiler",
    "code": "Code",
    "pre": "Pre",
    "text_link": "TextUrl",
    "custom_emoji": "CustomEmoji",
}


class EntityParseError(ValueError):
    """Carries the text Telegram puts after "Bad Request: can't parse entities: "."""


def u16len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def parse(text: str, parse_mode: str | None) -> tuple[str, list[dict[str, Any]]]:
    mode = (parse_mode or "").lower()
    if mode == "markdownv2":
        return parse_markdown_v2(text)
    if mode == "html":
        return parse_html(text)
    if mode == "markdown":
        return parse_markdown(text)
    if mode:
        raise ValueError(f"unsupported parse_mode {parse_mode!r}")
    return text, []


class _Out:
    """The growing plain text, with UTF-16 offsets for
    entities and byte offsets of the source for errors."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.u16 = 0

    def add(self, s: str) -> None:
        self.parts.append(s)
        self.u16 += u16len(s)

    def text(self) -> str:
        return "".join(self.parts)


def _byte_offset(text: str, i: int) -> int:
    return len(text[:i].encode())


def _entity(kind: str, offset: int, end: int, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "offset": offset, "length": end - offset, **extra}


def _reserved(ch: str) -> EntityParseError:
    return EntityParseError(
        f"Character '{ch}' is reserved and must be escaped with the preceding '\\'"
    )


def parse_markdown_v2(text: str) -> tuple[str, list[dict[str, Any]]]:
    out = _Out()
    entities: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []  # {"type", "offset", "byte", "begin", "language"?}
    quote: dict[str, Any] | None = None
    n = len(text)

    def at(k: int) -> str:
        return text[k] if k < n else ""

    i = 0
    while i < n:
        c = text[i]
        in_code = bool(stack) and stack[-1]["type"] in ("code", "pre")
        if c == "\\" and at(i + 1) and 0 < ord(at(i + 1)) <= 126:
            out.add(text[i + 1])
            i += 2
            continue
        if not in_code and (i == 0 or text[i - 1] == "\n"):
            quote, marker = _quote_marker(text, i, quote, out)
            if marker:
                i += marker
                continue
        if c == "\n" and quote is not None and not in_code and at(i + 1) != ">":
            entities.append(_entity(quote["type"], quote["offset"], out.u16))
            quote = None
        if (
            quote is not None
            and quote["type"] == "expandable_blockquote"
            and text.startswith("||", i)
            and at(i + 2) in ("", "\n")
            and not stack
        ):
            i += 2
            continue
        reserved = "`" if in_code else RESERVED_V2
        if c not in reserved:
            out.add(c)
            i += 1
            continue
        if stack and _closes(stack[-1]["type"], text, i):
            i = _close_v2(text, i, out, stack, entities)
        else:
            i = _open_v2(text, i, out, stack)
    if stack:
        raise _unclosed(stack[-1])
    if quote is not None:
        entities.append(_entity(quote["type"], quote["offset"], out.u16))
    return out.text(), sorted(entities, key=lambda e: (e["offset"], -e["length"]))


def _quote_marker(
    text: str, i: int, quote: dict[str, Any] | None, out: _Out
) -> tuple[dict[str, Any] | None, int]:
    """At a line's start outside code: the quote a `>` or `**>` opens or a `>` goes on with, and
    the marker's length (0: no marker)."""
    c = text[i]
    if quote is None and (c == ">" or text.startswith("**>", i)):
        kind = "expandable_blockquote" if c == "*" else "blockquote"
        return {"type": kind, "offset": out.u16}, 1 if c == ">" else 3
    return quote, 1 if quote is not None and c == ">" else 0


def _closes(kind: str, text: str, i: int) -> bool:
    """Whether the reserved character at `i` closes the innermost open entity."""
    c = text[i]
    return {
        "bold": c == "*",
        "italic": c == "_" and text[i + 1 : i + 2] != "_",
        "code": c == "`",
        "pre": text.startswith("```", i),
        "text_link": c == "]",
        "custom_emoji": c == "]",
        "underline": text.startswith("__", i),
        "strikethrough": c == "~",
        "spoiler": text.startswith("||", i),
    }[kind]


def _unclosed(top: dict[str, Any]) -> EntityParseError:
    name = "PreCode" if top["type"] == "pre" and top.get("language") else _TYPE_NAMES[top["type"]]
    return EntityParseError(f"Can't find end of {name} entity at byte offset {top['byte']}")


def _open_v2(text: str, i: int, out: _Out, stack: list[dict[str, Any]]) -> int:
    c = text[i]
    entry: dict[str, Any] = {
        "offset": out.u16,
        "byte": _byte_offset(text, i),
        "begin": len(out.text()),
    }
    if c == "_":
        entry["type"] = "underline" if text.startswith("__", i) else "italic"
        i += 2 if entry["type"] == "underline" else 1
    elif c == "*":
        entry["type"], i = "bold", i + 1
    elif c == "~":
        entry["type"], i = "strikethrough", i + 1
    elif c == "|" and text.startswith("||", i):
        entry["type"], i = "spoiler", i + 2
    elif c == "[":
        entry["type"], i = "text_link", i + 1
    elif c == "!" and text.startswith("![", i):
        entry["type"], i = "custom_emoji", i + 2
    elif c == "`" and text.startswith("```", i):
        i = _open_pre(text, i + 3, entry)
    elif c == "`":
        entry["type"], i = "code", i + 1
    else:
        raise _reserved(c)
    stack.append(entry)
    return i


def _open_pre(text: str, i: int, entry: dict[str, Any]) -> int:
    """A pre block's language and the line break after it, from just past its opening ```."""
    entry["type"] = "pre"
    language, i = _pre_language(text, i)
    if language:
        entry["language"] = language
    if text.startswith(("\r\n", "\n\r"), i):
        return i + 2
    return i + 1 if text[i : i + 1] in ("\n", "\r") else i


def _pre_language(text: str, i: int) -> tuple[str, int]:
    """The language word right after a pre block's opening ```, and the index past it."""
    end = i
    while end < len(text) and not text[end].isspace() and text[end] != "`":
        end += 1
    if end != i and end < len(text) and text[end] != "`":
        return text[i:end], end
    return "", i


def _close_v2(
    text: str, i: int, out: _Out, stack: list[dict[str, Any]], entities: list[dict[str, Any]]
) -> int:
    entry = stack.pop()
    kind = entry["type"]
    extra: dict[str, Any] = {}
    step = {"underline": 2, "spoiler": 2, "pre": 3}.get(kind, 1)
    if kind in ("text_link", "custom_emoji"):
        if text[i + 1 : i + 2] != "(":
            if kind == "custom_emoji":
                raise EntityParseError("Custom emoji entity must contain a tg://emoji URL")
            url, i = out.text()[entry["begin"] :], i + 1
        else:
            url, i = _read_url(text, i + 2)
        if kind == "custom_emoji":
            match = re.fullmatch(r"tg://emoji\?id=(\d+)", url)
            if not match:
                raise EntityParseError("Custom emoji URL must have an emoji identifier")
            extra["custom_emoji_id"] = match.group(1)
        elif not _valid_url(url):
            return i  # Telegram silently drops a link entity with an unusable URL
        else:
            extra["url"] = url
    else:
        i += step
    if kind == "pre" and entry.get("language"):
        extra["language"] = entry["language"]
    if out.u16 != entry["offset"]:
        entities.append(_entity(kind, entry["offset"], out.u16, **extra))
    return i


def _read_url(text: str, i: int) -> tuple[str, int]:
    start, url = i, []
    while i < len(text) and text[i] != ")":
        if text[i] == "\\" and i + 1 < len(text) and 0 < ord(text[i + 1]) <= 126:
            url.append(text[i + 1])
            i += 2
            continue
        url.append(text[i])
        i += 1
    if i >= len(text):
        raise EntityParseError(
            f"Can't find end of a URL at byte offset {_byte_offset(text, start)}"
        )
    return "".join(url), i + 1


def _valid_url(url: str) -> bool:
    return bool(re.match(r"^(https?://|tg://|mailto:)?[^\s]+\.[^\s]+|^tg://\S+", url))


# --------------------------------------------------------------------------------------------- HTML
_HTML_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_HTML_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


def parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    out = _Out()
    entities: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "&":
            i = _html_entity(text, i, out)
        elif c != "<":
            out.add(c)
            i += 1
        elif text.startswith("</", i):
            i = _html_end_tag(text, i, out, stack, entities)
        else:
            i = _html_start_tag(text, i, out, stack)
    if stack:
        raise EntityParseError(
            f'Can\'t find end tag corresponding to start tag "{stack[-1]["tag"]}"'
        )
    return out.text(), sorted(entities, key=lambda e: (e["offset"], -e["length"]))


def _html_entity(text: str, i: int, out: _Out) -> int:
    match = re.match(r"&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);", text[i:])
    if match:
        name = match.group(1)
        if name.startswith("#x"):
            out.add(chr(int(name, 0)))
            return i + match.end()
        if name.startswith("#"):
            out.add(chr(int(name[1:])))
            return i + match.end()
        if name in _HTML_ENTITIES:
            out.add(_HTML_ENTITIES[name])
            return i + match.end()
    out.add("&")
    return i + 1


def _html_start_tag(text: str, i: int, out: _Out, stack: list[dict[str, Any]]) -> int:
    begin = _byte_offset(text, i)
    match = re.match(r"<([a-zA-Z0-9-]*)", text[i:])
    assert match is not None
    name = match.group(1).lower()
    if name not in _HTML_TAGS:
        raise EntityParseError(f'Unsupported start tag "{name}" at byte offset {begin}')
    j = i + match.end()
    attrs: dict[str, str] = {}
    while True:
        while j < len(text) and text[j].isspace():
            j += 1
        if j >= len(text):
            raise EntityParseError(f"Unclosed start tag at byte offset {begin}")
        if text[j] == ">":
            j += 1
            break
        attr = re.match(r"([a-zA-Z0-9_-]+)(?:\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+))?", text[j:])
        if not attr:
            raise EntityParseError(
                f'Empty attribute name in the tag "{name}" at byte offset {begin}'
            )
        value = attr.group(2) or ""
        attrs[attr.group(1).lower()] = value[1:-1] if value[:1] in ("'", '"') else value
        j += attr.end()
    if name == "span" and attrs.get("class") != "tg-spoiler":
        raise EntityParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {begin}')
    stack.append({"tag": name, "offset": out.u16, "attrs": attrs, "begin": len(out.text())})
    return j


def _html_end_tag(
    text: str, i: int, out: _Out, stack: list[dict[str, Any]], entities: list[dict[str, Any]]
) -> int:
    begin = _byte_offset(text, i)
    match = re.match(r"</([a-zA-Z0-9-]*)\s*>", text[i:])
    if not match:
        raise EntityParseError(f"Unclosed end tag at byte offset {begin}")
    name = match.group(1).lower()
    if not stack:
        raise EntityParseError(f"Unexpected end tag at byte offset {begin}")
    entry = stack.pop()
    if entry["tag"] != name:
        raise EntityParseError(
            f'Unmatched end tag at byte offset {begin}, expected "</{entry["tag"]}>", '
            f'found "</{name}>"'
        )
    kind, attrs, extra = _HTML_TAGS[name], entry["attrs"], {}
    if kind == "text_link":
        url = attrs.get("href", "")
        if not url or not _valid_url(url):
            return i + match.end()
        extra["url"] = url
    elif kind == "custom_emoji":
        extra["custom_emoji_id"] = attrs.get("emoji-id", "")
    elif kind == "blockquote" and "expandable" in attrs:
        kind = "expandable_blockquote"
    elif (
        kind == "code"
        and stack
        and stack[-1]["tag"] == "pre"
        and attrs.get("class", "").startswith("language-")
    ):
        stack[-1]["language"] = attrs["class"].removeprefix("language-")
        return i + match.end()
    if kind == "pre" and entry.get("language"):
        extra["language"] = entry["language"]
    if out.u16 != entry["offset"]:
        entities.append(_entity(kind, entry["offset"], out.u16, **extra))
    return i + match.end()


# ---------------------------------------------------------------------------------- legacy Markdown
def parse_markdown(text: str) -> tuple[str, list[dict[str, Any]]]:
    out = _Out()
    entities: list[dict[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "_*`[":
            out.add(text[i + 1])
            i += 2
        elif c not in "_*`[":
            out.add(c)
            i += 1
        else:
            i = _markdown_entity(text, i, out, entities)
    return out.text(), entities


def _markdown_entity(text: str, i: int, out: _Out, entities: list[dict[str, Any]]) -> int:
    """The entity whose opening character is at `i`; the index past its closing one."""
    c, begin = text[i], i
    is_pre = text.startswith("```", i)
    language, i = _pre_language(text, i + 3) if is_pre else ("", i + 1)
    if is_pre and text[i : i + 1] == "\n":
        i += 1
    start = out.u16
    end = "```" if is_pre else "]" if c == "[" else c
    while i < len(text) and not text.startswith(end, i):
        out.add(text[i])
        i += 1
    if i >= len(text):
        raise EntityParseError(
            f"Can't find end of the entity starting at byte offset {_byte_offset(text, begin)}"
        )
    if c == "[":
        url, i = _link_target(text, i)
        if url and out.u16 != start:
            entities.append(_entity("text_link", start, out.u16, url=url))
    elif out.u16 != start:
        kind = {"_": "italic", "*": "bold"}.get(c, "pre" if is_pre else "code")
        extra = {"language": language} if is_pre and language else {}
        entities.append(_entity(kind, start, out.u16, **extra))
    return i + (3 if is_pre else 1)


def _link_target(text: str, i: int) -> tuple[str, int]:
    """A legacy link's URL when `(url)` follows its `]` at `i`, and the index of its end."""
    if text[i + 1 : i + 2] == "(":
        close = text.find(")", i + 2)
        if close != -1:
            return text[i + 2 : close], close
    return "", i

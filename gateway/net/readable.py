"""A page's bytes → readable Markdown. These functions run in the worker (gateway/worker/), never
in the daemon.

The page is parsed once with lxml and prepared before trafilatura picks out the article: links made
absolute against the page (or its `<base href>`), permalink marks (Sphinx's ¶) dropped, and each
`<pre>` set aside, so code keeps its lines wherever it sits (a list item, a definition, a table
cell) and comes back as a fenced block. Without an article, the visible text is read instead. Every
step here is linear in the page's size; what trafilatura costs on a hostile page is bounded by the
worker's limits.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

_META_CHARSET = re.compile(
    rb"""<meta[^<>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]{1,40})""", re.IGNORECASE
)
_CODE_TOKEN = re.compile(r"CODE[0-9a-f]{12}N[0-9]+X")
PERMALINK_MARKS = frozenset({"¶", "#", "§", "🔗", "\uf0c1"})  # \uf0c1: Font Awesome's link icon
PERMALINK_CLASSES = frozenset(
    {"headerlink", "anchor", "anchorjs-link", "heading-anchor", "permalink"}
)
HIDDEN = ("script", "style", "noscript", "template", "head")
BLOCKS = (
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "details",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "td",
    "th",
    "tr",
    "ul",
)
MAX_TITLE = 300
MAX_PRETTY = 8_000_000  # characters of indented JSON; a bigger result is sent as it came


@dataclass(frozen=True, slots=True)
class Page:
    title: str | None
    markdown: str


def decode(body: bytes, charset: str | None) -> str:
    """The body as text, in the charset the headers name, else the one an HTML page declares in its
    first bytes (`<meta charset>`), else UTF-8. A charset Python does not know (a site's typo, or a
    trick to make the tool fail) reads as UTF-8; undecodable bytes become U+FFFD."""
    for name in (charset, _declared_charset(body[:4096]), "utf-8"):
        if name:
            try:
                return body.decode(name, errors="replace")
            except LookupError:
                continue
    return body.decode("utf-8", errors="replace")


def _declared_charset(head: bytes) -> str | None:
    found = _META_CHARSET.search(head)
    return found.group(1).decode("ascii") if found else None


def article(body: bytes, charset: str | None, url: str) -> Page:
    """The page's main text as Markdown, and its title; its visible text when it has no article."""
    from trafilatura import bare_extraction
    from trafilatura.metadata import extract_title
    from trafilatura.settings import Extractor
    from trafilatura.utils import normalize_unicode
    from trafilatura.xml import xmltotxt

    tree = _tree(decode(body, charset), url)
    if tree is None:
        return Page(None, "")
    code = _set_code_aside(tree)
    options = Extractor(output_format="markdown", links=True, tables=True, comments=False, url=url)
    found = getattr(bare_extraction(tree, options=options), "body", None)
    markdown = normalize_unicode(xmltotxt(found, True)) if found is not None else ""
    if not markdown.strip():  # no article: the visible text is better than nothing
        _put_code_back_in_tree(tree, code)
        return Page(_title(tree), _visible(tree))
    return Page(clean_title(extract_title(tree)), _put_code_back(markdown, code).strip())


def visible_page(body: bytes, charset: str | None, url: str) -> Page:
    """Every visible line of the page, without trafilatura (for a page it cannot read in time)."""
    tree = _tree(decode(body, charset), url)
    return Page(None, "") if tree is None else Page(_title(tree), _visible(tree))


def text_page(body: bytes, charset: str | None, kind: str) -> Page:
    """A text or JSON document: JSON indented, the rest as it came."""
    text = decode(body, charset)
    if kind == "application/json" or kind.endswith("+json"):
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            return Page(None, text)
        return Page(None, pretty if len(pretty) <= MAX_PRETTY else text)
    return Page(None, text)


def _tree(text: str, url: str) -> Any:
    from trafilatura.utils import load_html

    tree = load_html(text)
    if tree is None:
        return None
    _drop_permalinks(tree)
    _absolute_links(tree, url)
    return tree


def _drop_permalinks(tree: Any) -> None:
    """The ¶ (or #, §, 🔗, an icon) a documentation site puts after each heading: a link to the
    heading itself, not text."""
    for link in list(tree.iter("a")):
        if not (link.get("href") or "").startswith("#"):
            continue
        text = _short_text(link)
        if text in PERMALINK_MARKS or (text == "" and _classes(link) & PERMALINK_CLASSES):
            link.drop_tree()


def _short_text(element: Any, most: int = 8) -> str | None:
    """Its text, stripped, when that is at most `most` characters (None when longer): read lazily,
    so a link around a long text costs no more than a short one."""
    found: list[str] = []
    size = 0
    for piece in element.itertext():
        if piece.strip():
            found.append(piece)
            size += len(piece)
            if size > most:
                return None
    return "".join(found).strip()


def _absolute_links(tree: Any, url: str) -> None:
    """Every `<a href>` resolved as a browser does: against `<base href>` if any, else the page."""
    base = url
    for found in tree.iter("base"):
        if found.get("href"):
            base = _join(url, found.get("href")) or url
            break
    for link in tree.iter("a"):
        href = link.get("href")
        if href is None:
            continue
        joined = _join(base, href)
        if joined is None:
            del link.attrib["href"]
        else:
            link.set("href", joined)


def _join(base: str, href: str) -> str | None:
    try:
        return urljoin(base, href.strip())
    except ValueError:  # an address urllib cannot read (a broken IPv6 literal): no link
        return None


def _classes(element: Any) -> set[str]:
    return set((element.get("class") or "").split())


def _set_code_aside(tree: Any) -> dict[str, str]:
    """Each `<pre>` becomes a one-word paragraph (a token); its fenced code waits in the map."""
    from lxml.html import Element  # type: ignore[import-untyped]

    nonce = os.urandom(6).hex()
    code: dict[str, str] = {}
    for number, pre in enumerate(_outermost(tree, "pre")):
        parent = pre.getparent()
        if parent is None:
            continue
        if _classes(parent) & {"linenos", "linenodiv"}:  # a highlighter's line numbers
            parent.remove(pre)
            continue
        token = f"CODE{nonce}N{number}X"
        text = pre.text_content()
        code[token] = _fence(text, _language(pre)) if text.strip() else ""
        mark = Element("p")
        mark.text = token
        mark.tail = pre.tail
        parent.replace(pre, mark)
    return code


def _outermost(tree: Any, tag: str) -> list[Any]:
    """The `tag` elements not inside another one, in one walk (a `<pre>` in a `<pre>` is text)."""
    found, depth = [], 0
    for event, element in _etree().iterwalk(tree, events=("start", "end"), tag=tag):
        if event == "start":
            if depth == 0:
                found.append(element)
            depth += 1
        else:
            depth -= 1
    return found


def _put_code_back(markdown: str, code: dict[str, str]) -> str:
    if not code:
        return markdown
    markdown = _CODE_TOKEN.sub(lambda m: code.get(m.group(), m.group()), markdown)
    return re.sub(r"\n{3,}", "\n\n", markdown)


def _put_code_back_in_tree(tree: Any, code: dict[str, str]) -> None:
    for mark in tree.iter("p"):
        if mark.text in code:
            mark.text = code[mark.text]


def _fence(text: str, language: str) -> str:
    text = text.strip("\n")
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"\n\n{ticks}{language}\n{text}\n{ticks}\n\n"


def _language(pre: Any) -> str:
    """The language a highlighter named: `language-x` or `lang-x` on the block or its `<code>`,
    Sphinx's `highlight-x` on a wrapper."""
    names = [pre.get("class") or "", *(c.get("class") or "" for c in pre.iter("code"))]
    outer = pre.getparent()
    for _ in range(2):
        if outer is not None:
            names.append(outer.get("class") or "")
            outer = outer.getparent()
    for name in " ".join(names).split():
        for prefix in ("language-", "lang-", "highlight-"):
            found = name[len(prefix) :]
            if name.startswith(prefix) and re.fullmatch(r"[A-Za-z0-9_+#.-]{1,30}", found):
                return found
    return ""


def _title(tree: Any) -> str | None:
    for found in tree.iter("title"):
        return clean_title(found.text_content())
    return None


def clean_title(title: str | None) -> str | None:
    if not title:
        return None
    title = " ".join(title.split()).rstrip("¶ ")
    return (title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…") or None


def _etree() -> Any:
    from lxml import etree  # type: ignore[import-untyped]  # loaded in the worker only

    return etree


def _visible(tree: Any) -> str:
    """The text a reader sees, one line per block; scripts, styles and the head left out."""
    _etree().strip_elements(tree, *HIDDEN, with_tail=False)
    for block in tree.iter(*BLOCKS):
        block.text = "\n" + (block.text or "")
        block.tail = "\n" + (block.tail or "")
    lines = (" ".join(line.split()) for line in tree.text_content().splitlines())
    return "\n".join(line for line in lines if line)

"""Office documents → text, with the standard library only. Word, Excel and PowerPoint files (.docx,
.xlsx, .pptx) and their OpenDocument kin (.odt, .ods, .odp) are zip files of XML: what a reader of
the file sees is pulled out (paragraphs, table rows, cell values sheet by sheet, slide text in slide
order); styles, pictures and macros are not.

The file is the sender's to craft: every member is read through a cap on what it unpacks to (a zip
bomb stops there), parsed as a stream (elements are dropped once read), and XML with a DOCTYPE is
refused (no entities).
"""

from __future__ import annotations

import posixpath
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO
from xml.etree.ElementTree import Element, ParseError, XMLPullParser

from gateway.errors import MediaError
from gateway.media.documents import Extracted, cut, suffix

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"

OFFICE_MIME = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.oasis.opendocument.text": "odt",
    "application/vnd.oasis.opendocument.spreadsheet": "ods",
    "application/vnd.oasis.opendocument.presentation": "odp",
}
SAME_AS = {"docm": "docx", "xlsm": "xlsx", "pptm": "pptx"}
LEGACY = frozenset(
    {
        "doc",
        "xls",
        "ppt",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
    }
)
MAX_UNPACKED = 64 * 1024 * 1024  # bytes all members of one file may unpack to, together
# an OpenDocument cell or row "repeated" more often is written once
MAX_REPEAT = 64
MAX_DEPTH = 256  # XML nesting (Word's deepest real documents stay under 40)
CHUNK = 64 * 1024
Lines = Iterator[str]


def office_format(name: str | None, mime: str | None) -> str | None:
    """docx, xlsx, pptx, odt, ods or odp (None: not an Office document this reads)."""
    ext = suffix(name)
    ext = SAME_AS.get(ext, ext)
    if ext in OFFICE_MIME.values():
        return ext
    return OFFICE_MIME.get((mime or "").lower().split(";")[0].strip())


def is_legacy_office(name: str | None, mime: str | None) -> bool:
    """The binary formats of Office 97–2003 (.doc, .xls, .ppt): not read here, but worth naming to
    the user."""
    return suffix(name) in LEGACY or (mime or "").lower().split(";")[0].strip() in LEGACY


def read_office(path: Path, limit: int, fmt: str) -> Extracted:
    """The document's text, cut at `limit` characters; MediaError for a damaged or
    password-protected file."""
    try:
        with zipfile.ZipFile(path) as archive:
            budget = _Budget(MAX_UNPACKED)
            text = _take(READERS[fmt](archive, budget), limit)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        ParseError,
        KeyError,
        EOFError,
        NotImplementedError,
        RuntimeError,
        ValueError,
        OSError,
        zlib.error,
    ):  # RuntimeError: an encrypted member
        raise MediaError("the document is damaged or password-protected") from None
    if not text.strip():
        raise MediaError("the document has no text in it")
    return cut(text, limit)


def _take(lines: Lines, limit: int) -> str:
    """Lines until the limit is passed: the rest is not
    even parsed (the cut's note says "at least")."""
    out: list[str] = []
    size = 0
    for line in lines:
        out.append(line)
        size += len(line) + 1
        if size > limit:
            break
    return "\n".join(out).strip("\n")


class _Budget:
    def __init__(self, left: int) -> None:
        self.left = left

    def read(self, stream: IO[bytes]) -> Iterator[bytes]:
        while chunk := stream.read(CHUNK):
            self.left -= len(chunk)
            if self.left < 0:
                raise MediaError("the document unpacks to more than 64 MB")
            yield chunk


def _events(
    archive: zipfile.ZipFile, member: str, budget: _Budget
) -> Iterator[tuple[str, Element]]:
    """Start and end events of one member, parsed as it unpacks; a DOCTYPE (entities) is refused,
    and so is nesting deeper than MAX_DEPTH (a tree of millions of nested elements takes GBs)."""
    parser: XMLPullParser[Element] = XMLPullParser(("start", "end"))
    tail = b""
    depth = 0
    with archive.open(member) as stream:
        for chunk in budget.read(stream):
            if b"<!DOCTYPE" in (tail + chunk).upper():  # Office XML never has one
                raise MediaError("the document is damaged or password-protected")
            tail = chunk[-16:]
            parser.feed(chunk)
            for event, element in _pairs(parser):
                depth += 1 if event == "start" else -1
                if depth > MAX_DEPTH:
                    raise MediaError(
                        f"the document nests its parts more than {MAX_DEPTH} deep, "
                        "which no real document does"
                    )
                yield event, element
    parser.close()
    yield from _pairs(parser)


def _has(archive: zipfile.ZipFile, member: str) -> bool:
    """Whether the archive holds `member`, in constant time (namelist() is a new list per call: a
    workbook of 40,000 sheets asked it 40,000 times)."""
    try:
        archive.getinfo(member)
    except KeyError:
        return False
    return True


def _pairs(parser: XMLPullParser[Element]) -> Iterator[tuple[str, Element]]:
    for item in parser.read_events():
        if len(item) == 2 and isinstance(item[1], Element):
            # start and end events carry the element
            yield item[0], item[1]


def _texts(element: Element, tag: str) -> str:
    return "".join(t.text or "" for t in element.iter(tag))


def _targets(archive: zipfile.ZipFile, part: str, budget: _Budget) -> dict[str, str]:
    """A part's relationships: id → the member it names
    (`xl/workbook.xml` → `xl/_rels/workbook.xml.rels`)."""
    folder, name = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", name + ".rels")
    if not _has(archive, rels):
        return {}
    found = {}
    for event, el in _events(archive, rels, budget):
        if event == "end" and el.tag == REL + "Relationship":
            target = el.get("Target", "")
            found[el.get("Id", "")] = (
                target.lstrip("/")
                if target.startswith("/")
                else posixpath.normpath(posixpath.join(folder, target))
            )
    return found


# --------------------------------------------------------------------------------------------- Word
def _docx(archive: zipfile.ZipFile, budget: _Budget) -> Lines:
    depth, cells, row = 0, [], []  # inside how many tables; the cell's paragraphs; the row's cells
    for event, el in _events(archive, "word/document.xml", budget):
        if el.tag == W + "tbl":
            depth += 1 if event == "start" else -1
        elif event != "end":
            continue
        elif el.tag == W + "p":
            text = "".join(_run_text(el))
            if depth:
                cells.append(text)
            else:
                yield text
            el.clear()
        elif el.tag == W + "tc":
            row.append(" ".join(t for t in cells if t))
            cells = []
        elif el.tag == W + "tr":
            yield " | ".join(row)
            row = []


def _run_text(paragraph: Element) -> Iterator[str]:
    for el in paragraph.iter():
        if el.tag == W + "t":
            yield el.text or ""
        elif el.tag == W + "tab":
            yield "\t"
        elif el.tag in (W + "br", W + "cr"):
            yield "\n"


# -------------------------------------------------------------------------------------------- Excel
def _xlsx(archive: zipfile.ZipFile, budget: _Budget) -> Lines:
    shared = _shared_strings(archive, budget)
    targets = _targets(archive, "xl/workbook.xml", budget)
    for event, el in _events(archive, "xl/workbook.xml", budget):
        if event == "end" and el.tag == S + "sheet":
            member = targets.get(el.get(R + "id", ""))
            if member is not None and _has(archive, member):
                yield f"[Sheet: {el.get('name', '')}]"
                yield from _sheet_rows(archive, member, shared, budget)


def _shared_strings(archive: zipfile.ZipFile, budget: _Budget) -> list[str]:
    if not _has(archive, "xl/sharedStrings.xml"):
        return []
    found = []
    for event, el in _events(archive, "xl/sharedStrings.xml", budget):
        if event == "end" and el.tag == S + "si":
            found.append("".join(t.text or "" for t in el.iter(S + "t") if t not in _phonetic(el)))
            el.clear()
    return found


def _phonetic(si: Element) -> set[Element]:
    return {t for ph in si.iter(S + "rPh") for t in ph.iter(S + "t")}


def _sheet_rows(archive: zipfile.ZipFile, member: str, shared: list[str], budget: _Budget) -> Lines:
    cells: dict[int, str] = {}
    for event, el in _events(archive, member, budget):
        if event != "end":
            continue
        if el.tag == S + "c":
            value = _cell(el, shared)
            if value:
                cells[_column(el.get("r", ""), len(cells))] = value
        elif el.tag == S + "row":
            if cells:
                yield "\t".join(cells.get(i, "") for i in range(min(max(cells) + 1, 16384)))
            cells = {}
            el.clear()


def _cell(c: Element, shared: list[str]) -> str:
    kind = c.get("t")
    if kind == "inlineStr":
        return _texts(c, S + "t")
    v = c.find(S + "v")
    raw = v.text or "" if v is not None else ""
    if kind == "s":
        index = int(raw) if raw.isdigit() else -1
        return shared[index] if 0 <= index < len(shared) else ""
    if kind == "b":
        return {"1": "TRUE", "0": "FALSE"}.get(raw, raw)
    return raw


def _column(ref: str, fallback: int) -> int:
    letters = re.match(r"[A-Z]+", ref)
    if not letters:
        return fallback
    n = 0
    for ch in letters.group():
        n = n * 26 + ord(ch) - 64
    return n - 1


# --------------------------------------------------------------------------------------- PowerPoint
def _pptx(archive: zipfile.ZipFile, budget: _Budget) -> Lines:
    targets = _targets(archive, "ppt/presentation.xml", budget)
    order = [
        targets.get(el.get(R + "id", ""))
        for event, el in _events(archive, "ppt/presentation.xml", budget)
        if event == "end" and el.tag == P + "sldId"
    ]
    for number, member in enumerate((m for m in order if m and _has(archive, m)), start=1):
        yield f"[Slide {number}]"
        for event, el in _events(archive, str(member), budget):
            if event == "end" and el.tag == A + "p":
                text = _texts(el, A + "t")
                if text.strip():
                    yield text
                el.clear()


# ------------------------------------------------------------------------------------- OpenDocument
def _odf(archive: zipfile.ZipFile, budget: _Budget) -> Lines:
    cell: list[str] | None = None
    row: list[str] = []
    slides = 0
    for event, el in _events(archive, "content.xml", budget):
        if el.tag == DRAW + "page" and event == "start":
            slides += 1
            yield f"[Slide {slides}]"
        elif el.tag == TABLE + "table" and event == "start":
            yield f"[Table: {el.get(TABLE + 'name', '')}]"
        elif el.tag == TABLE + "table-cell":
            if event == "start":
                cell = []
            else:
                text = " ".join(t for t in cell or () if t)
                row.extend([text] * (min(_repeat(el, "columns"), MAX_REPEAT) if text else 1))
                cell = None
        elif event == "end" and el.tag in (TEXT + "p", TEXT + "h"):
            text = "".join(el.itertext())
            if cell is not None:
                cell.append(text)
            else:
                yield text
            el.clear()
        elif event == "end" and el.tag == TABLE + "table-row":
            line = "\t".join(row).rstrip("\t")
            for _ in range(min(_repeat(el, "rows"), MAX_REPEAT) if line else 0):
                yield line
            row = []


def _repeat(el: Element, what: str) -> int:
    value = el.get(f"{TABLE}number-{what}-repeated", "1")
    return int(value) if value.isdigit() else 1


READERS: dict[str, Callable[[zipfile.ZipFile, _Budget], Lines]] = {
    "docx": _docx,
    "xlsx": _xlsx,
    "pptx": _pptx,
    "odt": _odf,
    "ods": _odf,
    "odp": _odf,
}

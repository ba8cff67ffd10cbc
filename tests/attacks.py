"""Hostile files and pages for the attack round (tests/test_media_attacks.py and
bench/parse_attacks.py): each is at most a few MB on the wire, built here without fixtures on
disk. What each does to a reader is said in its docstring; what the gateway does about it, in the
tests."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable

from tests.mediafiles import W_NS, pdf_file

# ------------------------------------------------------------------------------------------ PDF
CATALOG = b"<< /Type /Catalog /Pages 2 0 R >>"
ONE_KID = b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"


def pdf_many_pages(count: int = 200_000) -> bytes:
    """200,000 empty pages (about 19 MB): every page is an object to parse."""
    kids = b" ".join(b"%d 0 R" % (3 + n) for n in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
    ]
    objects += [b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 9 9]>>"] * count
    return pdf_file(objects)


def pdf_deep_arrays(depth: int = 200_000) -> bytes:
    """A page whose MediaBox is an array nested 200,000 deep: a recursive parser runs out of
    stack."""
    box = b"[" * depth + b"0 0 9 9" + b"]" * depth
    return pdf_file([CATALOG, ONE_KID, b"<< /Type /Page /Parent 2 0 R /MediaBox " + box + b" >>"])


def pdf_deep_tree(depth: int = 50_000) -> bytes:
    """A page tree 50,000 levels deep (each Pages node has one Pages kid), one page at the end."""
    objects = [CATALOG]
    for level in range(depth):
        node, kid = 2 + level, 3 + level
        parent = b" /Parent %d 0 R" % (node - 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>" % (kid, parent))
    objects.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 9 9] >>" % (1 + depth))
    return pdf_file(objects)


def pdf_page_loop() -> bytes:
    """A page tree whose Pages node lists itself as its own kid."""
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 9 9] >>",
        ]
    )


def _flate(data: bytes) -> bytes:
    packer = zlib.compressobj(9)
    return packer.compress(data) + packer.flush()


def pdf_nested_filters(unpacked: int = 70_000_000) -> bytes:
    """A content stream flated twice: 70 KB → 70 MB → 70 MB of zeros, under pypdf's 75 MB a
    stream."""
    inner = _flate(b"\x00" * unpacked)
    stream = _flate(inner)
    return pdf_file(
        [
            CATALOG,
            ONE_KID,
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            b"<< /Length %d /Filter [/FlateDecode /FlateDecode] >>\nstream\n" % len(stream)
            + stream
            + b"\nendstream",
        ]
    )


def pdf_cmap_bomb(entries: int = 3_000_000) -> bytes:
    """A font whose ToUnicode map (compressed to a few MB) holds 3 million mappings, parsed in
    Python by the text extractor: seconds of CPU and hundreds of MB for one page."""
    lines = b"".join(b"<%04X> <%04X>\n" % (n % 65536, 0x41 + n % 26) for n in range(entries))
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        b"1 begincodespacerange <0000> <FFFF> endcodespacerange\n"
        + b"%d beginbfchar\n" % entries
        + lines
        + b"endbfchar\nendcmap\nend end\n"
    )
    packed = _flate(cmap)
    text = b"BT /F1 12 Tf 72 720 Td <00410042> Tj ET"
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>"
    )
    font = b"<< /Type /Font /Subtype /Type0 /BaseFont /X /Encoding /Identity-H /ToUnicode 6 0 R >>"
    return pdf_file(
        [
            CATALOG,
            ONE_KID,
            page,
            b"<< /Length %d >>\nstream\n" % len(text) + text + b"\nendstream",
            font,
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed)
            + packed
            + b"\nendstream",
        ]
    )


# ------------------------------------------------------------------------------------------ office
def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in members.items():
            z.writestr(name, body)
    return out.getvalue()


def docx_deep_nesting(depth: int = 5_000_000) -> bytes:
    """word/document.xml with five million nested elements in one paragraph (15 MB unpacked, within
    the 64 MB cap): a tree of them takes gigabytes."""
    body = (
        b'<?xml version="1.0"?><w:document '
        + W_NS.encode()
        + b"><w:body><w:p><w:r>"
        + b"<w:x>" * depth
        + b"</w:x>" * depth
        + b"</w:r></w:p></w:body></w:document>"
    )
    return _zip({"word/document.xml": body})


def xlsx_many_sheets(count: int = 40_000) -> bytes:
    """A workbook of 40,000 sheets: listing every member once per sheet is 1.6 billion
    comparisons."""
    s = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    r = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
    sheets = "".join(f'<sheet name="S{n}" sheetId="{n + 1}" r:id="rId{n}"/>' for n in range(count))
    rels = "".join(
        f'<Relationship Id="rId{n}" Target="worksheets/s{n}.xml"/>' for n in range(count)
    )
    rel_ns = "http://schemas.openxmlformats.org/package/2006/relationships"
    members = {
        "xl/workbook.xml": f"<workbook {s} {r}><sheets>{sheets}</sheets></workbook>".encode(),
        "xl/_rels/workbook.xml.rels": (
            f'<Relationships xmlns="{rel_ns}">{rels}</Relationships>'
        ).encode(),
    }
    sheet = (
        f'<worksheet {s}><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>x</t></is></c>'
        "</row></sheetData></worksheet>"
    )
    members.update({f"xl/worksheets/s{n}.xml": sheet.encode() for n in range(count)})
    return _zip(members)


# -------------------------------------------------------------------------------------- pictures
def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_many_chunks(count: int = 1_000_000) -> bytes:
    """A 1×1 PNG with a million empty private chunks before its pixels (12 MB): each is a loop turn
    in Pillow's Python chunk reader."""
    header = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    noise = _png_chunk(b"zzZz", b"") * count
    pixels = _png_chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    return b"\x89PNG\r\n\x1a\n" + header + noise + pixels + _png_chunk(b"IEND", b"")


def _save(image: object, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)  # type: ignore[attr-defined]
    return out.getvalue()


def gif_big_canvas_many_frames(frames: int = 2_000) -> bytes:
    """A GIF whose screen is 7999×7999 with 2,000 frames of 1×1 pixel."""
    from PIL import Image

    first = Image.new("P", (7999, 7999))
    small = [Image.new("P", (1, 1), n % 256) for n in range(frames)]
    return _save(
        first, "GIF", save_all=True, append_images=small, duration=10, loop=0, optimize=False
    )


def webp_big_animation(frames: int = 40, side: int = 4000) -> bytes:
    """An animated WebP, 4000×4000 and 40 frames: 16 megapixels each, 2.5 GB if all were decoded.
    One frame is encoded and the container repeats it, as an attacker would: libwebp encoding 40
    frames took 18 s of CPU."""
    from PIL import Image

    still = _save(Image.new("RGB", (side, side), (90, 0, 0)), "WEBP", quality=10, method=0)
    assert still[:4] == b"RIFF" and still[8:16] == b"WEBPVP8 ", still[:16]
    size = _u24(side - 1) + _u24(side - 1)
    body = _riff_chunk(b"VP8X", b"\x02\0\0\0" + size) + _riff_chunk(b"ANIM", bytes(6))
    # each ANMF: at (0, 0), the canvas's size, 100 ms, no blending; then the frame's VP8 chunk
    body += _riff_chunk(b"ANMF", _u24(0) + _u24(0) + size + _u24(100) + b"\0" + still[12:]) * frames
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def _riff_chunk(tag: bytes, data: bytes) -> bytes:
    return tag + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")


def _u24(n: int) -> bytes:
    return n.to_bytes(3, "little")


def heic_large(side: int = 7999) -> bytes:
    """An iPhone-style HEIC of 64 megapixels (libheif decodes it through its own buffers)."""
    import pillow_heif
    from PIL import Image

    pillow_heif.register_heif_opener()
    return _save(Image.new("RGB", (side, side), (20, 120, 200)), "HEIF", quality=10)


def jpeg_many_scans(scans: int = 3_000, side: int = 3000) -> bytes:
    """A progressive JPEG whose last scan is repeated 3,000 times: libjpeg decodes every scan over
    the whole picture (the "progressive JPEG" CPU bomb)."""
    from PIL import Image

    data = _save(Image.new("RGB", (side, side), (90, 90, 90)), "JPEG", progressive=True, quality=50)
    last = data.rfind(b"\xff\xda")
    end = data.rfind(b"\xff\xd9")
    return data[:end] + data[last:end] * scans + data[end:]


def tiff_many_pages(pages: int = 2_000) -> bytes:
    """A TIFF of 2,000 pages, the first 7999×7999 (deflated to a few hundred KB), the rest 8×8:
    only the first is the picture, and nothing should walk the others."""
    from PIL import Image

    first = Image.new("L", (7999, 7999))
    rest = [Image.new("L", (8, 8))] * (pages - 1)
    return _save(first, "TIFF", save_all=True, append_images=rest, compression="tiff_deflate")


# ------------------------------------------------------------------------------------------ HTML
def html(unit: str, size: int = 2_000_000, head: str = "<html><body>") -> bytes:
    body = unit * ((size - len(head)) // len(unit) + 1)
    return (head + body)[:size].encode()


HTML_ATTACKS: dict[str, Callable[[], bytes]] = {
    "deep nesting": lambda: html("<div>"),
    "huge attribute": lambda: b'<html><body><p title="' + b"a" * 2_000_000 + b'">words</p>',
    "entity flood": lambda: html("&amp;&#x10FFFF;&#0;&bogus;", head="<html><body><p>"),
    "a <br> flood": lambda: html("a<br>"),
    "links everywhere": lambda: html('<a href="x/../y?z#w">l</a> ', head="<html><body><article>"),
    "nested links": lambda: html('<a href="#x"><span>'),
    "a <pre> flood": lambda: html("<pre>x\n  y</pre>"),
    "nested <pre>": lambda: html("<pre><b>"),
    "unclosed <script>": lambda: html("<script "),
    "open brackets": lambda: html("<", head="<html><body><p>words "),
}

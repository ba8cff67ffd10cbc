"""Files for the attachment tests, made here (no fixtures on disk): pictures with Pillow, PDFs
written by hand with a real text layer, and a fake voice note."""

from __future__ import annotations

import io


def picture(
    width: int = 800,
    height: int = 600,
    *,
    fmt: str = "JPEG",
    color: tuple[int, ...] = (200, 40, 40),
    mode: str = "RGB",
) -> bytes:
    """A picture with some structure (a stripe per 50 px), so a resize changes its bytes."""
    from PIL import Image, ImageDraw

    image = Image.new(mode, (width, height), color)
    draw = ImageDraw.Draw(image)
    for x in range(0, width, 50):
        draw.line(
            [(x, 0), (x, height)], fill=(10, 10, 200) + ((255,) if mode == "RGBA" else ()), width=3
        )
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def image_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF (Helvetica, one text object
    per page) that pypdf reads back line by line."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        for line in text.split("\n"):
            ops.append(
                "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*"
            )
        stream = "\n".join([*ops, "ET"]).encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_file(objects)


CORRUPT_PDF = (
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\ntruncated in the middle of"
)
# an Ogg page header and noise: the fake transcriber reads bytes
VOICE_NOTE = b"OggS\x00\x02" + bytes(range(256)) * 8


# bit depth, colour type, samples per pixel
PNG_MODES = {"1": (1, 0, 1), "L": (8, 0, 1), "RGB": (8, 2, 3), "RGBA": (8, 6, 4)}


def blank_png(width: int, height: int, *, mode: str = "1") -> bytes:
    """A valid PNG of this size, all black, made without Pillow: at most a few hundred KB on disk
    however many pixels it claims (a decompression bomb; the test process never holds its pixels).
    `mode`: 1-bit, 8-bit grey, RGB or RGBA (7999×7999 RGBA: 248 KB, 244 MB decoded)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    depth, colour, samples = PNG_MODES[mode]
    row = b"\x00" * (1 + (width * depth * samples + 7) // 8)  # filter byte, then the row's bits
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def pdf_bomb(unpacked: int = 40_000_000, copies: int = 2) -> bytes:
    """A PDF of a few KB whose one page's content is `copies` references to a compressed stream of
    `unpacked` zero bytes: reading it unpacks copies × unpacked bytes (past pypdf's 75 MB limit by
    default)."""
    import zlib

    packer = zlib.compressobj(9)
    block = b"\x00" * 1_000_000
    stream = (
        b"".join(packer.compress(block) for _ in range(unpacked // len(block))) + packer.flush()
    )
    refs = " ".join(["4 0 R"] * copies)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [{refs}] "
        "/Resources << /Font << /F1 5 0 R >> >> >>".encode(),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return pdf_file(objects)


def _zip(members: dict[str, str]) -> bytes:
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in members.items():
            z.writestr(name, body)
    return out.getvalue()


W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
R_NS = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
REL_NS = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'


def _rels(targets: list[str]) -> str:
    items = "".join(
        f'<Relationship Id="rId{i}" Type="x" Target="{t}"/>' for i, t in enumerate(targets, start=1)
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><Relationships {REL_NS}>{items}</Relationships>'


def make_docx(paragraphs: list[str], table: list[list[str]] = ()) -> bytes:  # type: ignore[assignment]
    """A Word file as Word writes one: paragraphs of runs (a tab inside one), then a table."""

    def para(text: str) -> str:
        runs = "<w:r><w:tab/></w:r>".join(
            f'<w:r><w:t xml:space="preserve">{part}</w:t></w:r>' for part in text.split("\t")
        )
        return f"<w:p>{runs}</w:p>"

    rows = "".join(
        "<w:tr>" + "".join(f"<w:tc>{para(c)}</w:tc>" for c in row) + "</w:tr>" for row in table
    )
    body = "".join(para(p) for p in paragraphs) + (f"<w:tbl>{rows}</w:tbl>" if table else "")
    return _zip(
        {
            "[Content_Types].xml": "<Types/>",
            "word/document.xml": '<?xml version="1.0"?><w:document '
            f"{W_NS}><w:body>{body}</w:body></w:document>",
        }
    )


def make_xlsx(sheets: dict[str, list[list[str | int]]]) -> bytes:
    """An Excel file: strings in the shared table, numbers inline, sheets named in the workbook (in
    reverse file order, as after a reordering)."""
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    shared: list[str] = []
    members: dict[str, str] = {}
    names = list(sheets)
    for n, name in enumerate(names, start=1):
        rows = []
        for r, row in enumerate(sheets[name], start=1):
            cells = []
            for c, value in enumerate(row):
                ref = f"{chr(65 + c)}{r}"
                if value == "":
                    continue
                if isinstance(value, int):
                    cells.append(f'<c r="{ref}"><v>{value}</v></c>')
                else:
                    shared.append(value)
                    cells.append(f'<c r="{ref}" t="s"><v>{len(shared) - 1}</v></c>')
            rows.append(f'<row r="{r}">{"".join(cells)}</row>')
        members[f"xl/worksheets/sheet{len(names) + 1 - n}.xml"] = (
            f"<worksheet {ns}><sheetData>{''.join(rows)}</sheetData></worksheet>"
        )
    sis = "".join(f"<si><t>{s}</t></si>" for s in shared)
    members["xl/sharedStrings.xml"] = f"<sst {ns}>{sis}</sst>"
    listed = "".join(
        f'<sheet name="{name}" sheetId="{n}" r:id="rId{n}"/>'
        for n, name in enumerate(names, start=1)
    )
    members["xl/workbook.xml"] = f"<workbook {ns} {R_NS}><sheets>{listed}</sheets></workbook>"
    members["xl/_rels/workbook.xml.rels"] = _rels(
        [f"worksheets/sheet{len(names) + 1 - n}.xml" for n in range(1, len(names) + 1)]
    )
    return _zip(members)


def make_pptx(slides: list[list[str]]) -> bytes:
    a = 'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
    p = 'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"'
    members = {}
    for n, texts in enumerate(slides, start=1):
        paras = "".join(f"<a:p><a:r><a:t>{t}</a:t></a:r></a:p>" for t in texts)
        members[f"ppt/slides/slide{n}.xml"] = f"<p:sld {p} {a}><p:txBody>{paras}</p:txBody></p:sld>"
    ids = "".join(f'<p:sldId id="{255 + n}" r:id="rId{n}"/>' for n in range(1, len(slides) + 1))
    members["ppt/presentation.xml"] = (
        f"<p:presentation {p} {R_NS}><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>"
    )
    members["ppt/_rels/presentation.xml.rels"] = _rels(
        [f"slides/slide{n}.xml" for n in range(1, len(slides) + 1)]
    )
    return _zip(members)


def make_odt(paragraphs: list[str], rows: list[list[str]] = ()) -> bytes:  # type: ignore[assignment]
    t = 'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
    tb = 'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
    o = 'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
    body = "".join(f"<text:p>{p}</text:p>" for p in paragraphs)
    if rows:
        body += (
            '<table:table table:name="T1">'
            + "".join(
                "<table:table-row>"
                + "".join(f"<table:table-cell><text:p>{c}</text:p></table:table-cell>" for c in row)
                + '<table:table-cell table:number-columns-repeated="16000"/></table:table-row>'
                for row in rows
            )
            + "<table:table-row "
            'table:number-rows-repeated="1048000"><table:table-cell/></table:table-row></table:table>'
        )
    return _zip(
        {
            "mimetype": "application/vnd.oasis.opendocument.text",
            "content.xml": f"<office:document-content {o} {t} {tb}><office:body><office:text>{body}"
            "</office:text></office:body></office:document-content>",
        }
    )


def pdf_file(objects: list[bytes]) -> bytes:
    """Numbered objects (1: the catalog) → a PDF file with its cross-reference table and trailer."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)

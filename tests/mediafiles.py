"""Files for the attachment tests, made here (no fixtures on disk): pictures with Pillow, PDFs written by hand with a
real text layer, and a fake voice note."""

from __future__ import annotations

import io


def picture(width: int = 800, height: int = 600, *, fmt: str = "JPEG", color: tuple[int, ...] = (200, 40, 40),
            mode: str = "RGB") -> bytes:
    """A picture with some structure (a stripe per 50 px), so a resize changes its bytes."""
    from PIL import Image, ImageDraw

    image = Image.new(mode, (width, height), color)
    draw = ImageDraw.Draw(image)
    for x in range(0, width, 50):
        draw.line([(x, 0), (x, height)], fill=(10, 10, 200) + ((255,) if mode == "RGBA" else ()), width=3)
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def image_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF (Helvetica, one text object per page) that pypdf reads back line by line."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        for line in text.split("\n"):
            ops.append("(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*")
        stream = "\n".join([*ops, "ET"]).encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


CORRUPT_PDF = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\ntruncated in the middle of"
VOICE_NOTE = b"OggS\x00\x02" + bytes(range(256)) * 8  # an Ogg page header and noise: the fake transcriber reads bytes


def blank_png(width: int, height: int) -> bytes:
    """A valid 1-bit PNG of this size, all black, made without Pillow: a few KB on disk however many pixels it
    claims (a decompression bomb; the test process never holds its pixels)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte, then the row's bits
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def pdf_bomb(unpacked: int = 40_000_000, copies: int = 2) -> bytes:
    """A PDF of a few KB whose one page's content is `copies` references to a compressed stream of `unpacked`
    zero bytes: reading it unpacks copies × unpacked bytes (past pypdf's 75 MB limit by default)."""
    import zlib

    packer = zlib.compressobj(9)
    block = b"\x00" * 1_000_000
    stream = b"".join(packer.compress(block) for _ in range(unpacked // len(block))) + packer.flush()
    refs = " ".join(["4 0 R"] * copies)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [{refs}] "
               "/Resources << /Font << /F1 5 0 R >> >> >>".encode(),
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)

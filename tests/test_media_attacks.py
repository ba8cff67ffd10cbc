"""The attack round on the parsers (tests/attacks.py; bench/parse_attacks.py prints the cost of
each): hostile PDFs, office files, pictures and pages go through the real pipeline and the real
worker, and each either reads or is refused with a plain reason; the worker serves the next file."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.config.media import MediaConfig
from gateway.events import Attachment
from gateway.media.prepare import MediaPipeline, Prepared
from gateway.net.extract import page_of
from gateway.net.fetch import Fetched
from gateway.worker.parent import Worker
from tests import attacks
from tests.mediafiles import pdf_bomb, picture


class Files:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        yield self.data


async def read(tmp_path: Path, data: bytes, name: str, mime: str) -> Prepared:
    """One hostile file, then an ordinary photo through the same worker."""
    pipeline = MediaPipeline(MediaConfig(), tmp_path, vision=True, transcriber=None)
    try:
        out = await pipeline.prepare(
            Files(data), [Attachment("document", name, mime, ref="x")], session_id=1, inbound_id=1
        )
        after = await pipeline.prepare(
            Files(picture(40, 30)), [Attachment("photo", ref="y")], session_id=1, inbound_id=2
        )
    finally:
        await pipeline.close()
    assert after.problems == [] and len(after.images) == 1
    return out


REFUSED: list[tuple[Callable[[], bytes], str, str, str]] = [
    (attacks.pdf_deep_arrays, "deep.pdf", "application/pdf", "the PDF is damaged or not a PDF"),
    (attacks.pdf_page_loop, "loop.pdf", "application/pdf", "the PDF is damaged or not a PDF"),
    (pdf_bomb, "bomb.pdf", "application/pdf", "the PDF is too large to read"),
    (attacks.pdf_nested_filters, "nested.pdf", "application/pdf", "the PDF has no text layer"),
    (
        attacks.docx_deep_nesting,
        "deep.docx",
        "",
        "the document nests its parts more than 256 deep, which no real document does",
    ),
    (
        attacks.png_many_chunks,
        "chunks.png",
        "image/png",
        "the picture is damaged (a PNG in more than 10,000 parts)",
    ),
    (
        attacks.jpeg_many_scans,
        "scans.jpg",
        "image/jpeg",
        "the picture is damaged (a JPEG in more than 100 passes)",
    ),
]


@pytest.mark.parametrize(
    ("build", "name", "mime", "why"), REFUSED, ids=[name for _, name, _, _ in REFUSED]
)
async def test_a_hostile_file_is_refused_with_a_reason(
    tmp_path: Path, build: Callable[[], bytes], name: str, mime: str, why: str
) -> None:
    """Nested 200,000 deep, a page tree that loops, streams that unpack to 80 MB or to nothing, an
    XML tree five million deep (1 GB of elements before it was refused by depth), a million PNG
    chunks (9 s of Pillow's loop before), a JPEG decoded 3,000 times over (minutes before)."""
    out = await read(tmp_path, build(), name, mime or "")
    assert len(out.problems) == 1 and out.problems[0].startswith(f"I couldn't use {name}: {why}")


@pytest.mark.parametrize(
    ("build", "name", "mime"),
    [
        (attacks.gif_big_canvas_many_frames, "frames.gif", "image/gif"),
        (attacks.webp_big_animation, "anim.webp", "image/webp"),
    ],
)
async def test_a_picture_of_many_frames_gives_its_first(
    tmp_path: Path, build: Callable[[], bytes], name: str, mime: str
) -> None:
    """A 7999×7999 GIF of 2,000 frames and a 4000×4000 WebP of 40: one frame is decoded."""
    out = await read(tmp_path, build(), name, mime)
    assert out.problems == [] and len(out.images) == 1 and out.blocks == [f"[image: {name}]"]


async def test_an_office_file_of_many_parts_is_read(tmp_path: Path) -> None:
    """40,000 sheets: read up to the document limit (each part looked up in constant time)."""
    out = await read(tmp_path, attacks.xlsx_many_sheets(), "sheets.xlsx", "")
    assert out.problems == [] and "[Sheet: S0]\nx\n[Sheet: S1]\nx" in out.blocks[0]


@pytest.mark.parametrize(
    "name",
    [
        "deep nesting",
        "huge attribute",
        "entity flood",
        "nested links",
        "nested <pre>",
        "unclosed <script>",
    ],
)
async def test_a_hostile_page_reads_as_what_it_shows(name: str) -> None:
    body = attacks.HTML_ATTACKS[name]()
    worker = Worker()
    try:
        page = await page_of(
            Fetched("http://site.test/p", 200, "text/html", None, body, False), worker
        )
    finally:
        await worker.close()
    shown = {"huge attribute": "words", "entity flood": "&\ufffd&bogus;"}.get(name, "")
    assert page.markdown.startswith(shown) and (shown or page.markdown == "")

"""The attack round on the parsers: hostile PDFs, office files, pictures and web pages
(tests/attacks.py) sent through the real paths (MediaPipeline for files, web_fetch's page_of for
pages) and the real worker, with the daemon's limits. For each: its size, the wall time, the
worker's CPU seconds and peak memory, and what the user or the model is told. One worker serves
them all, as in the daemon.

Run:  PYTHONPATH=. python bench/parse_attacks.py [--only NAME] [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from gateway.config.media import MediaConfig
from gateway.events import Attachment
from gateway.media.prepare import MediaPipeline
from gateway.net.extract import page_of
from gateway.net.fetch import Fetched
from gateway.worker.parent import Worker
from tests import attacks
from tests.hostile_daemon import cpu_seconds, memory_mb
from tests.mediafiles import blank_png, pdf_bomb

FILES: dict[str, tuple[str, str, Callable[[], bytes]]] = {  # name → (file name, MIME type, bytes)
    "PDF: 200,000 pages": ("pages.pdf", "application/pdf", attacks.pdf_many_pages),
    "PDF: arrays 200,000 deep": ("deep.pdf", "application/pdf", attacks.pdf_deep_arrays),
    "PDF: page tree 50,000 deep": ("tree.pdf", "application/pdf", attacks.pdf_deep_tree),
    "PDF: page tree loop": ("loop.pdf", "application/pdf", attacks.pdf_page_loop),
    "PDF: flate bomb 2×40 MB": ("bomb.pdf", "application/pdf", pdf_bomb),
    "PDF: flate inside flate, 70 MB": ("nested.pdf", "application/pdf", attacks.pdf_nested_filters),
    "PDF: ToUnicode map of 3 M entries": ("cmap.pdf", "application/pdf", attacks.pdf_cmap_bomb),
    "DOCX: 5 M nested elements": ("deep.docx", "", attacks.docx_deep_nesting),
    "XLSX: 40,000 sheets": ("sheets.xlsx", "", attacks.xlsx_many_sheets),
    "PNG: 7999² RGBA": ("bomb.png", "image/png", lambda: blank_png(7999, 7999, mode="RGBA")),
    "PNG: 1 M chunks": ("chunks.png", "image/png", attacks.png_many_chunks),
    "GIF: 7999² screen, 2,000 frames": (
        "frames.gif",
        "image/gif",
        attacks.gif_big_canvas_many_frames,
    ),
    "WebP: 4000², 40 frames": ("anim.webp", "image/webp", attacks.webp_big_animation),
    "HEIC: 7999²": ("big.heic", "image/heic", attacks.heic_large),
    "JPEG: 3,000 progressive scans": ("scans.jpg", "image/jpeg", attacks.jpeg_many_scans),
    "TIFF: 2,000 pages": ("pages.tiff", "image/tiff", attacks.tiff_many_pages),
}


class Files:
    def __init__(self) -> None:
        self.data = b""

    async def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        for at in range(0, len(self.data), 1 << 20):
            yield self.data[at : at + (1 << 20)]


async def watch(worker: Worker, peak: list[float]) -> None:
    """peak[0]: the worker's largest RSS; peak[1]: the CPU seconds its children used meanwhile (a
    child killed mid-job counts up to the last sample)."""
    cpu: dict[int, tuple[float, float]] = {}
    while True:
        pid = worker.pid
        peak[0] = max(peak[0], memory_mb(pid))
        if pid is not None:
            try:
                now = cpu_seconds(pid)
            except FileNotFoundError:
                now = cpu.get(pid, (0.0, 0.0))[1]
            cpu[pid] = (cpu.get(pid, (now, now))[0], now)
            peak[1] = sum(last - first for first, last in cpu.values())
        await asyncio.sleep(0.05)


async def one(name: str, run: Callable[[], object], worker: Worker, size: int) -> None:
    peak = [0.0, 0.0]
    watching = asyncio.create_task(watch(worker, peak))
    started = time.monotonic()
    try:
        told = await run()  # type: ignore[misc]
    except Exception as exc:  # noqa: BLE001 - the figure to print is what was raised
        told = f"{type(exc).__name__}: {exc}"
    watching.cancel()
    print(
        f"{name:40} {size / 1e6:6.1f} MB {time.monotonic() - started:6.1f} s  worker cpu "
        f"≥{peak[1]:5.1f} s  peak {peak[0]:5.0f} MB  → {str(told)[:150]}",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the attacks whose name contains this")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    names = [*FILES, *(f"HTML: {n}" for n in attacks.HTML_ATTACKS)]
    if args.list:
        print("\n".join(names))
        return
    print(f"load average {os.getloadavg()[0]:.2f}")
    files = Files()
    with tempfile.TemporaryDirectory() as home:
        config = MediaConfig()
        worker = Worker(memory_mb=config.worker_memory_mb)
        pipeline = MediaPipeline(config, Path(home), vision=True, transcriber=None, worker=worker)
        for name in names:
            if args.only and args.only.lower() not in name.lower():
                continue
            if name in FILES:
                filename, mime, build = FILES[name]
                files.data = build()
                attachment = Attachment("document", filename, mime or None, ref="x")

                async def read(a: Attachment = attachment) -> object:
                    out = await pipeline.prepare(files, [a], session_id=1, inbound_id=1)
                    return out.problems or [b[:150] for b in out.blocks] or out.images

                await one(name, read, worker, len(files.data))
            else:
                body = attacks.HTML_ATTACKS[name.removeprefix("HTML: ")]()
                url = "http://site.test/a/page.html"
                fetched = Fetched(url, 200, "text/html", None, body, False)

                async def page(f: Fetched = fetched) -> object:
                    found = await page_of(f, worker)
                    return (
                        f"title {found.title!r}, {len(found.markdown):,} chars: "
                        f"{found.markdown[:80]!r}"
                    )

                await one(name, page, worker, len(body))
        await worker.close()


if __name__ == "__main__":
    asyncio.run(main())

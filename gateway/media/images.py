"""A downloaded picture → the image a model is sent: upright, within the providers' limits, JPEG or
PNG.

Pictures are decoded in the worker (gateway/worker/: `prepare_picture` sends one there,
`prepare_image` runs there), never in the daemon: a pixel bomb costs the worker's memory, under its
cap, one picture at a time. Only the formats people send are opened; the size is checked from the
header before anything is decoded (at most MAX_SOURCE_PIXELS, and at most `media.max_decode_mb` of
decoded pixels); a JPEG is decoded at 1/2 to 1/8 of its size when that is enough (draft), and the
shrinking reduces by whole factors first (reducing_gap). HEIC/HEIF (what an iPhone saves) opens
through pillow-heif, loaded with the first such picture.
The output is written once and sent byte for byte on every later turn (the prompt cache keys on
those bytes), so nothing here runs again for a picture already in the history.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from gateway.errors import MediaError
from gateway.worker.parent import JobLimits, Worker, WorkerFailed

if TYPE_CHECKING:
    from PIL.Image import Image

log = logging.getLogger(__name__)

# Anthropic scales anything past ~1.15 megapixels or 1568 px down on its side (and refuses > 8000 px
# or 5 MB); OpenAI fits "high" detail into 2048 px and then 768 px on the short side. Sending at
# most this is never refused and costs no more tokens than the model would spend anyway.
MAX_EDGE = 1568
MAX_PIXELS = 1_150_000
MAX_ENCODED_BYTES = 3_700_000  # base64 of it stays under Anthropic's 5 MB per image
JPEG_QUALITY = 85
MAX_SOURCE_PIXELS = 64_000_000  # a "decompression bomb" past this is refused before it is decoded
# ISO base media files whose `ftyp` brand says HEIF (AVIF, the same container, Pillow reads itself)
HEIF_BRANDS = frozenset(
    {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"}
)
# what is opened (JPEG includes MPO); never EPS (Ghostscript), PSD or the other rare decoders
FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "HEIF", "AVIF")
DECODE_MB = 256  # media.max_decode_mb's default: a 64-megapixel picture at 4 bytes a pixel fits
PICTURE = JobLimits(cpu_s=20, wall_s=60)
MAX_PNG_CHUNKS = 10_000  # a real PNG has a dozen; Pillow reads each in a Python loop
MAX_JPEG_SCANS = 100  # a progressive JPEG has ~10; each pass decodes the whole picture again
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REDUCING_GAP = 3.0  # shrink by whole factors down to 3× the size wanted, then resample (Pillow)
STRIP_ROWS = 256
MB = 1024 * 1024
# EXIF orientation → the transpose that sets the picture upright (as ImageOps.exif_transpose does)
UPRIGHT = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}


@dataclass(frozen=True, slots=True)
class PreparedImage:
    media_type: str  # image/jpeg or image/png
    data: bytes
    width: int
    height: int


async def prepare_picture(
    worker: Worker, source: Path, *, max_decode_mb: int = DECODE_MB
) -> PreparedImage:
    """`prepare_image` in the worker; MediaError for a picture it cannot read or gave up on."""
    try:
        return await worker.run(
            prepare_image, source, max_decode_mb, limits=PICTURE, returns=PreparedImage
        )
    except WorkerFailed as exc:
        raise MediaError(f"it could not be read: {exc}") from None


def prepare_image(source: Path, max_decode_mb: int = DECODE_MB) -> PreparedImage:
    """Decode, downscale, rotate per EXIF, drop animation (first frame), and encode; MediaError
    when unreadable. Runs in the worker."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    # Pillow warns past this (refuses past twice it); we refuse
    PILImage.MAX_IMAGE_PIXELS = MAX_SOURCE_PIXELS
    _check_structure(source)
    if is_heif(source):
        _open_heif()
    try:
        PILImage.init()
        with PILImage.open(source, formats=[f for f in FORMATS if f in PILImage.OPEN]) as opened:
            width, height = opened.size  # from the header: nothing is decoded yet
            if width * height > MAX_SOURCE_PIXELS:
                raise PILImage.DecompressionBombError(f"{width}x{height}")
            opened.seek(0)  # an animated GIF/WebP sticker: its first frame is the still image
            # a big JPEG is decoded at 1/2, 1/4 or 1/8 of its size
            opened.draft(None, _target(width, height))
            _check_decode_size(opened, width, height, max_decode_mb)
            orientation = opened.getexif().get(0x0112)
            opened.load()
            image = _fit(opened)
            if image is opened:  # small enough already: a copy outlives the file
                image = opened.copy()
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
        # the warning: where it is an error
        raise MediaError("the picture is too large to open (over 64 megapixels)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        log.info("image %s unreadable: %s", source.name, type(exc).__name__)
        raise MediaError(
            "it is not a picture that can be opened (damaged, or a picture format not read here)"
        ) from None
    return _encode(_upright(image, orientation))


def _check_structure(source: Path) -> None:
    """Refuse, before Pillow reads it, a PNG of more than MAX_PNG_CHUNKS chunks and a JPEG of more
    than MAX_JPEG_SCANS passes: both cost CPU per part, and a few MB hold a million parts."""
    with source.open("rb") as f:
        head = f.read(8)
        if head == PNG_SIGNATURE and _png_chunks(f) > MAX_PNG_CHUNKS:
            raise MediaError(
                f"the picture is damaged (a PNG in more than {MAX_PNG_CHUNKS:,} parts)"
            )
        if head[:2] == b"\xff\xd8" and _jpeg_scans(f, head) > MAX_JPEG_SCANS:
            raise MediaError(
                f"the picture is damaged (a JPEG in more than {MAX_JPEG_SCANS:,} passes)"
            )


def _png_chunks(f: BinaryIO) -> int:
    """How many chunks follow the signature, counted up to one past the cap."""
    count = 0
    while count <= MAX_PNG_CHUNKS and len(header := f.read(8)) == 8:
        count += 1
        if header[4:8] == b"IEND":
            break
        f.seek(int.from_bytes(header[:4], "big") + 4, 1)  # the data and its CRC
    return count


def _jpeg_scans(f: BinaryIO, head: bytes) -> int:
    """Start-of-scan markers (FF DA): entropy-coded data stuffs every FF byte, so each is one."""
    count, last = head.count(b"\xff\xda"), head[-1:]
    while chunk := f.read(1 << 20):
        count += (last + chunk).count(b"\xff\xda")
        last = chunk[-1:]
    return count


def _check_decode_size(opened: Image, width: int, height: int, max_decode_mb: int) -> None:
    """Refuse, before decoding, a picture whose pixels would take more than `max_decode_mb`
    (Pillow keeps 1 byte a pixel for 1, L and P, 2 for 16-bit grey, 4 for everything else)."""
    depth = 1 if opened.mode in ("1", "L", "P") else 2 if opened.mode.startswith("I;16") else 4
    need = opened.size[0] * opened.size[1] * depth
    if need > max_decode_mb * MB:
        raise MediaError(
            f"the picture is too large to open ({width}×{height} pixels would take "
            f"{need / MB:,.0f} MB to decode; the limit is {max_decode_mb:,} MB)"
        )


def _upright(image: Image, orientation: object) -> Image:
    from PIL.Image import Transpose

    method = UPRIGHT.get(orientation) if isinstance(orientation, int) else None
    return image.transpose(Transpose[method]) if method else image


def _scale(width: int, height: int) -> float:
    """How much a picture of this size is shrunk (1.0: not at all); the same either way round."""
    return min(1.0, MAX_EDGE / max(width, height), float((MAX_PIXELS / (width * height)) ** 0.5))


def _target(width: int, height: int) -> tuple[int, int]:
    scale = _scale(width, height)
    return max(1, int(width * scale)), max(1, int(height * scale))


def is_heif(source: Path) -> bool:
    """An iPhone's HEIC (or another HEIF still): `....ftyp<brand>` at the start of the file."""
    with source.open("rb") as f:
        head = f.read(12)
    return head[4:8] == b"ftyp" and head[8:12] in HEIF_BRANDS


def _open_heif() -> None:
    try:
        import pillow_heif
    except ImportError:  # the dependency is missing from this install: say so plainly
        raise MediaError(
            "it is a HEIC picture, which this installation cannot open (pillow-heif is missing); "
            "send it as a photo, or as JPEG"
        ) from None
    pillow_heif.register_heif_opener()  # once is enough; again is harmless


def _fit(image: Image) -> Image:
    from PIL.Image import Resampling

    width, height = image.size
    scale = _scale(width, height)
    if scale < 1.0:
        size = (max(1, int(width * scale)), max(1, int(height * scale)))
        factor = int(1 / scale / 2)  # down to 2-4× the size wanted
        if factor > 1 and image.mode in ("RGBA", "LA"):
            image = _reduce_in_strips(image, factor)
        # reduce by whole factors first (cheap, small), then resample what is left
        image = image.resize(size, Resampling.LANCZOS, reducing_gap=REDUCING_GAP)
    return image


def _reduce_in_strips(image: Image, factor: int) -> Image:
    """`image.reduce(factor)` a strip of rows at a time: Pillow reduces a picture with alpha through
    a premultiplied copy, which for the whole picture would double the memory its pixels take."""
    from PIL import Image as PILImage

    width, height = image.size
    out = PILImage.new(image.mode, (-(-width // factor), -(-height // factor)))
    step = factor * max(1, STRIP_ROWS // factor)
    for top in range(0, height, step):
        strip = image.crop((0, top, width, min(height, top + step)))
        out.paste(strip.reduce(factor), (0, top // factor))
    return out


def _encode(image: Image) -> PreparedImage:
    """PNG keeps transparency (stickers) when it stays small; everything else is JPEG on white."""
    from PIL import Image as PILImage

    if _has_alpha(image):
        rgba = image.convert("RGBA")
        png = _save(rgba, "PNG", optimize=False, compress_level=6)
        if len(png) <= MAX_ENCODED_BYTES:
            return PreparedImage("image/png", png, *rgba.size)
        flat = PILImage.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        image = flat
    rgb = image.convert("RGB")
    return PreparedImage(
        "image/jpeg", _save(rgb, "JPEG", quality=JPEG_QUALITY, optimize=False), *rgb.size
    )


def _has_alpha(image: Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info
    )


def _save(image: Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()

"""A downloaded picture → the image a model is sent: upright, within the providers' limits, JPEG or PNG.

Pillow is imported here only, on the first picture: a gateway that never receives one never loads it. HEIC/HEIF
(what an iPhone saves, and sends when a photo goes as a file) is opened through pillow-heif, loaded on the first
such picture only.
The output is written once and sent byte for byte on every later turn (the prompt cache keys on those bytes), so
nothing here runs again for a picture already in the history.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.errors import MediaError

if TYPE_CHECKING:
    from PIL.Image import Image

log = logging.getLogger(__name__)

# Anthropic scales anything past ~1.15 megapixels or 1568 px down on its side (and refuses > 8000 px or 5 MB);
# OpenAI fits "high" detail into 2048 px and then 768 px on the short side. Sending at most this is never refused
# and costs no more tokens than the model would spend anyway.
MAX_EDGE = 1568
MAX_PIXELS = 1_150_000
MAX_ENCODED_BYTES = 3_700_000  # base64 of it stays under Anthropic's 5 MB per image
JPEG_QUALITY = 85
MAX_SOURCE_PIXELS = 64_000_000  # a "decompression bomb" past this is refused before it is decoded
# What a chat sends as a picture. Pillow reads some forty formats, a few through outside programs
# (EPS runs Ghostscript on the file): a file that claims to be a picture is opened as one of these,
# or not at all.
PICTURE_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF", "AVIF", "HEIF")  # JPEG: MPO too
# ISO base media files whose `ftyp` brand says HEIF (AVIF, the same container, Pillow reads itself)
HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"})


@dataclass(frozen=True, slots=True)
class PreparedImage:
    media_type: str  # image/jpeg or image/png
    data: bytes
    width: int
    height: int


def prepare_image(source: Path) -> PreparedImage:
    """Decode, rotate per EXIF, drop animation (first frame), downscale, and encode; MediaError when unreadable."""
    from PIL import Image as PILImage
    from PIL import ImageOps, UnidentifiedImageError

    PILImage.MAX_IMAGE_PIXELS = MAX_SOURCE_PIXELS  # Pillow warns past this (refuses past twice it); we refuse
    if is_heif(source):
        _open_heif()
    try:
        PILImage.init()
        readable = [name for name in PICTURE_FORMATS if name in PILImage.OPEN]  # HEIF: registered
        with PILImage.open(source, formats=readable) as opened:
            width, height = opened.size  # from the header: nothing is decoded yet
            if width * height > MAX_SOURCE_PIXELS:
                raise PILImage.DecompressionBombError(f"{width}x{height}")
            opened.seek(0)  # an animated GIF/WebP sticker: its first frame is the still image
            opened.draft(None, _target(width, height))  # a big JPEG is decoded at 1/2, 1/4 or 1/8 of its size
            image = ImageOps.exif_transpose(opened)
            image.load()
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):  # the warning: where it is an error
        raise MediaError("the picture is too large to open (over 64 megapixels)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        log.info("image %s unreadable: %s", source.name, type(exc).__name__)
        raise MediaError("it is not a picture that can be opened (damaged, or a picture format not read here)") \
            from None
    return _encode(_fit(image))


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
        raise MediaError("it is a HEIC picture, which this installation cannot open (pillow-heif is missing); "
                         "send it as a photo, or as JPEG") from None
    pillow_heif.register_heif_opener()  # once is enough; again is harmless


def _fit(image: Image) -> Image:
    from PIL.Image import Resampling

    width, height = image.size
    scale = _scale(width, height)
    if scale < 1.0:
        size = (max(1, int(width * scale)), max(1, int(height * scale)))
        image = image.resize(size, Resampling.LANCZOS)
    return image


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
    return PreparedImage("image/jpeg", _save(rgb, "JPEG", quality=JPEG_QUALITY, optimize=False), *rgb.size)


def _has_alpha(image: Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _save(image: Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


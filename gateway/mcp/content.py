"""An MCP tool result (as the plain JSON the server
sent) → the text of a tool result, and its pictures.

Text, embedded text resources, resource links and structured content become the text. Images (an
`image` block, or an embedded resource whose blob is an image) come out as bytes for a model that
sees images (the caller prepares and stores them; the wires send them as image blocks); for one that
does not, or for audio and other binary content, a short line says what it was. A resource whose
blob is typed as text is that text.

A server's PNG may carry an optional chunk with a wrong checksum (the reference server's
`get-tiny-image` does: its colour profile's CRC is off); browsers show such a picture, Pillow
refuses it. Such optional chunks are left out of an MCP tool's picture before it is prepared
(never of a picture a person sends); a damaged required chunk stays damaged.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# per result: each costs the model ~1,500 tokens; more are described in a line instead
MAX_IMAGES = 8
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Besides text/*: the types whose blob is text to read (a server may send any resource as base64).
TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/x-sh",
        "application/csv",
        "application/ecmascript",
        "application/graphql",
    }
)


@dataclass(frozen=True, slots=True)
class ResultImage:
    media_type: str  # as the server said; the caller checks what the bytes really are
    data: bytes


@dataclass(frozen=True, slots=True)
class ToolOutput:
    text: str
    is_error: bool
    images: tuple[ResultImage, ...] = ()


def tool_output(result: Mapping[str, Any], *, max_chars: int, images: bool = False) -> ToolOutput:
    """A CallToolResult dumped with aliases (`content`, `structuredContent`, `isError`); with
    `images`, its pictures as bytes (at most MAX_IMAGES) instead of a line each."""
    blocks = result.get("content")
    blocks = [b for b in (blocks if isinstance(blocks, Sequence) else ()) if isinstance(b, Mapping)]
    found = [image for b in blocks if (image := _image(b))][:MAX_IMAGES] if images else []
    taken = {id(image_block) for image_block, _ in found}
    parts = [part for b in blocks if id(b) not in taken and (part := _block(b, images))]
    structured = result.get("structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=1))
    text = (
        "\n\n".join(parts)
        if parts
        else ("(the tool returned only images)" if found else "(the tool returned no content)")
    )
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... cut at {max_chars:,} of {len(text):,} characters]"
    return ToolOutput(text, bool(result.get("isError")), tuple(image for _, image in found))


def _image(block: Mapping[str, Any]) -> tuple[Mapping[str, Any], ResultImage] | None:
    """An image block, or an embedded resource holding an image, with data that decodes."""
    source = block.get("resource") if block.get("type") == "resource" else block
    if not isinstance(source, Mapping) or block.get("type") not in ("image", "resource"):
        return None
    media_type = str(source.get("mimeType") or "")
    data = source.get("data" if block.get("type") == "image" else "blob")
    if not media_type.startswith("image/") or not isinstance(data, str):
        return None
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return block, ResultImage(media_type, without_bad_optional_chunks(decoded))


def without_bad_optional_chunks(data: bytes) -> bytes:
    """A PNG without its ancillary chunks (lower-case first letter: colour profile, text, EXIF …)
    whose CRC is wrong; anything else (not a PNG, a bad critical chunk, a cut file) as it is."""
    if not data.startswith(PNG_SIGNATURE):
        return data
    kept, pos, dropped = [PNG_SIGNATURE], len(PNG_SIGNATURE), []
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, end = data[pos + 4 : pos + 8], pos + 12 + length
        if end > len(data) or not kind.isalpha():
            return data
        crc = int.from_bytes(data[end - 4 : end], "big")
        if zlib.crc32(data[pos + 4 : end - 4]) != crc and kind[0] & 0x20:
            dropped.append(kind.decode("ascii"))
        else:
            kept.append(data[pos:end])
        pos = end
        if kind == b"IEND":
            break
    if not dropped:
        return data
    log.info("mcp image: left out optional PNG chunks with a wrong CRC: %s", ", ".join(dropped))
    return b"".join(kept) + data[pos:]


def _block(block: Mapping[str, Any], vision: bool) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind in ("image", "audio"):
        return _media_note(kind, block, vision)
    if kind == "resource":
        return _resource(block.get("resource"))
    if kind == "resource_link":
        about = f": {block['description']}" if block.get("description") else ""
        return f"[resource link {block.get('name') or ''} {block.get('uri') or ''}{about}]".replace(
            "  ", " "
        )
    return f"[{kind or 'unknown'} content not shown]"


def _media_note(kind: str, block: Mapping[str, Any], vision: bool) -> str:
    size = _size_text(_decoded_size(block.get("data")))
    why = (
        "this model cannot see images"
        if kind == "image" and not vision
        else f"only the first {MAX_IMAGES} readable images of a result are shown"
        if kind == "image"
        else "audio is not passed on"
    )
    return (
        f"[{kind} {block.get('mimeType') or ''}, {size}: "
        f"returned by the tool, not shown to you ({why})]"
    ).replace(" ,", ",")


def _resource(resource: Any) -> str:
    if not isinstance(resource, Mapping):
        return ""
    uri = resource.get("uri") or ""
    text = resource.get("text")
    if not isinstance(text, str):
        text = _text_blob(str(resource.get("mimeType") or ""), resource.get("blob"))
    if text is not None:
        return f"[resource {uri}]\n{text}"
    size = _size_text(_decoded_size(resource.get("blob")))
    return (
        f"[binary resource {uri} ({resource.get('mimeType') or 'unknown type'}, {size}) not shown]"
    )


def _text_blob(mime_type: str, blob: Any) -> str | None:
    """A blob typed as text (`text/*`, JSON, XML, YAML …), decoded in its charset (UTF-8 when none
    is given); None when it is not typed so, or does not decode."""
    kind, _, params = mime_type.partition(";")
    kind = kind.strip().lower()
    textual = kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml"))
    if not textual or not isinstance(blob, str):
        return None
    pairs = (p.partition("=") for p in params.split(";"))
    given = (v.strip().strip('"') for k, _, v in pairs if k.strip().lower() == "charset")
    charset = next(given, "utf-8")
    try:
        return base64.b64decode(blob, validate=True).decode(codecs.lookup(charset).name)
    except (binascii.Error, ValueError, LookupError):  # UnicodeDecodeError is a ValueError
        return None


def _size_text(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size / 1024:.1f} KB"


def _decoded_size(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)

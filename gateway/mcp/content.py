"""An MCP tool result (as the plain JSON the server sent) → the text of a tool result.

Tool results reach the model as text on both wires today, so an image or a binary resource becomes a short
line saying what it was; text, embedded text resources, resource links and structured content come through.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any


def result_text(result: Mapping[str, Any], *, max_chars: int) -> tuple[str, bool]:
    """(text, is_error) for a CallToolResult dumped with aliases (`content`, `structuredContent`, `isError`)."""
    blocks = result.get("content")
    parts = [part for b in (blocks if isinstance(blocks, Sequence) else ()) if (part := _block(b))]
    structured = result.get("structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=1))
    text = "\n\n".join(parts) if parts else "(the tool returned no content)"
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... cut at {max_chars:,} of {len(text):,} characters]"
    return text, bool(result.get("isError"))


def _block(block: Any) -> str:
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind in ("image", "audio"):
        return _media_note(kind, block)
    if kind == "resource":
        return _resource(block.get("resource"))
    if kind == "resource_link":
        about = f": {block['description']}" if block.get("description") else ""
        return f"[resource link {block.get('name') or ''} {block.get('uri') or ''}{about}]".replace("  ", " ")
    return f"[{kind or 'unknown'} content not shown]"


def _media_note(kind: str, block: Mapping[str, Any]) -> str:
    size = _size_text(_decoded_size(block.get("data")))
    return (f"[{kind} {block.get('mimeType') or ''}, {size}: returned by the tool, not shown to you "
            "(tool results carry text only)]").replace(" ,", ",")


def _resource(resource: Any) -> str:
    if not isinstance(resource, Mapping):
        return ""
    uri = resource.get("uri") or ""
    if isinstance(resource.get("text"), str):
        return f"[resource {uri}]\n{resource['text']}"
    size = _size_text(_decoded_size(resource.get("blob")))
    return f"[binary resource {uri} ({resource.get('mimeType') or 'unknown type'}, {size}) not shown]"


def _size_text(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size / 1024:.1f} KB"


def _decoded_size(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)

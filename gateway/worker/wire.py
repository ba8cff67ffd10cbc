"""The frames between the daemon and its worker: a JSON header and raw byte blobs, length-prefixed.

The child parses hostile input, so what it sends back is read as hostile too: no pickle, a size cap
on every frame, and only plain values come out (None, bool, int, float, str, bytes, lists,
string-keyed maps, paths). A dataclass goes over as the map of its fields; the caller rebuilds it
with `rebuild`, which checks each field's type, so a confused or compromised child cannot hand the
daemon an object of its choosing.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

PREFIX = struct.Struct(">IQ")  # header length, blobs length
MAX_HEADER = 16 * 1024 * 1024  # the JSON part: text, a page's Markdown
MAX_BLOBS = 64 * 1024 * 1024  # bytes: a prepared picture, a page's body
T = TypeVar("T")


class WireError(Exception):
    """A frame that is not one: too large, cut short, or not the shape it must have."""


def encode(value: Any) -> bytes:
    blobs: list[bytes] = []
    header = json.dumps(
        {"v": _pack(value, blobs), "sizes": [len(b) for b in blobs]},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()
    return PREFIX.pack(len(header), sum(len(b) for b in blobs)) + header + b"".join(blobs)


def _pack(value: Any, blobs: list[bytes]) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        blobs.append(bytes(value))
        return {"b": len(blobs) - 1}
    if isinstance(value, Path):
        return {"p": str(value)}
    if isinstance(value, list | tuple):
        return {"l": [_pack(v, blobs) for v in value]}
    if isinstance(value, dict):
        return {"m": {str(k): _pack(v, blobs) for k, v in value.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {"m": {f.name: _pack(getattr(value, f.name), blobs) for f in fields}}
    raise TypeError(f"cannot send a {type(value).__name__} to or from the worker")


def split(prefix: bytes) -> tuple[int, int]:
    """The header and blob lengths a frame's prefix announces, refused past the caps."""
    header, blobs = PREFIX.unpack(prefix)
    if header > MAX_HEADER or blobs > MAX_BLOBS:
        raise WireError(f"a frame of {header + blobs:,} bytes is over the cap")
    return header, blobs


def decode(header: bytes, blob_bytes: bytes) -> Any:
    try:
        frame = json.loads(header)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"the header is not JSON ({type(exc).__name__})") from None
    sizes = frame.get("sizes") if isinstance(frame, dict) else None
    if (
        not isinstance(sizes, list)
        or not all(isinstance(n, int) and n >= 0 for n in sizes)
        or sum(sizes) != len(blob_bytes)
    ):
        raise WireError("the blob sizes do not add up")
    blobs, at = [], 0
    for n in sizes:
        blobs.append(blob_bytes[at : at + n])
        at += n
    try:
        return _unpack(frame.get("v"), blobs)
    except RecursionError:
        raise WireError("the value is nested too deeply") from None


def _unpack(value: Any, blobs: list[bytes]) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        raise WireError("a value of an unknown shape")
    ((tag, inner),) = value.items()
    if tag == "b" and isinstance(inner, int) and 0 <= inner < len(blobs):
        return blobs[inner]
    if tag == "p" and isinstance(inner, str):
        return Path(inner)
    if tag == "l" and isinstance(inner, list):
        return [_unpack(v, blobs) for v in inner]
    if tag == "m" and isinstance(inner, dict):
        return {k: _unpack(v, blobs) for k, v in inner.items()}
    raise WireError(f"a value tagged {tag!r} of the wrong shape")


def read_frame(stream: IO[bytes]) -> Any | None:
    """The next value on a blocking stream (the child's stdin); None at a clean end of input."""
    prefix = stream.read(PREFIX.size)
    if not prefix:
        return None
    if len(prefix) < PREFIX.size:
        raise WireError("the frame was cut short")
    header, blobs = split(prefix)
    head, body = stream.read(header), stream.read(blobs)
    if len(head) < header or len(body) < blobs:
        raise WireError("the frame was cut short")
    return decode(head, body)


def rebuild(cls: type[T], value: Any) -> T:
    """A dataclass from the map of its fields, each checked against the field's declared type."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if not isinstance(value, dict) or sorted(value) != sorted(fields):
        raise WireError(f"not the fields of {cls.__name__}")
    for name in fields:
        if not _fits(value[name], hints[name]):
            raise WireError(f"{cls.__name__}.{name} has the wrong type")
    return cls(**value)


def _fits(value: Any, hint: Any) -> bool:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    check: Callable[[Any], bool] = {
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    }.get(hint, lambda v: isinstance(v, hint))
    return isinstance(hint, type) and check(value)

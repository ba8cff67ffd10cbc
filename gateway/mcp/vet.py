"""An MCP tool's description and JSON schema, checked before the model reads them.

A server's tool descriptions and parameter descriptions go into every model request as if they were
part of the prompt, but the owner did not write them: a server (or a new version of one) can use
them to give the model orders ("tool poisoning"). They are scanned with gateway/scan.py when a
server's tools are listed. A tool whose text carries a prompt injection or an instruction to leak
data is withheld: sessions never get it, and `gateway tools list` and `gateway doctor` say why.
Invisible characters are dropped from what is kept. Credentials the servers were given (`mask`: env
and header values, what a URL carries) are masked in it: a server that writes its key into its own
description would hand it to every request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.scan import INVISIBLE_CHARS, scan_text

WITHHOLD = ("injection", "exfiltration")


@dataclass(frozen=True, slots=True)
class Vetted:
    description: str
    schema: dict[str, Any]
    problem: str | None  # why the tool is withheld (a scan finding), None when it may be offered


def _unmasked(text: str) -> str:
    return text


def vet_tool(
    description: str, schema: Mapping[str, Any], *, mask: Callable[[str], str] = _unmasked
) -> Vetted:
    """The tool's text as the model may see it (`mask` applied to every string), or the finding that
    withholds it."""
    findings = scan_text("\n".join([description, *_strings(schema)]))
    problem = next((f for f in findings if f.kind in WITHHOLD), None)
    cleaned = dict(_cleaned(schema, mask))
    return Vetted(mask(_visible(description)), cleaned, mask(str(problem)) if problem else None)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a schema the model reads: keys (property names) and values (descriptions,
    enums, defaults)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _cleaned(value: Any, mask: Callable[[str], str]) -> Any:
    """The schema with invisible characters dropped from its string values (keys keep them: the
    server matches them) and credentials masked everywhere, keys included (a call naming a masked
    key fails; the key never reaches the model)."""
    if isinstance(value, str):
        return mask(_visible(value))
    if isinstance(value, Mapping):
        return {mask(str(key)): _cleaned(item, mask) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_cleaned(item, mask) for item in value]
    return value


def _visible(text: str) -> str:
    return text if text.isascii() else "".join(ch for ch in text if ch not in INVISIBLE_CHARS)

"""A FakeLLM whose every answer comes from one function of the request (the chaos suites' scripted
model), and the reply shapes they share: a header naming the message, optionally numbered lines so a
lost, doubled or reordered chunk shows in what the user received."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.fakes.llm import FakeLLM

HEADER = re.compile(r"reply to (\S+) \[users=(\d+)\]")
LINE = re.compile(r"\b(\S+) L(\d{4})\b")
FILLER = "the quick brown fox jumps over the lazy dog while the gateway keeps its promises"


class RespondingLLM(FakeLLM):
    """Scripted steps and injected faults still come
    first; otherwise `respond(body)` gives the step."""

    def __init__(self, respond: Callable[[dict[str, Any]], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.respond = respond

    async def _step(self, request: Any, body: dict[str, Any], wire: str) -> Any:
        if not self._script:
            self._script.append(self.respond)
        return await super()._step(request, body, wire)


def blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def text_of(message: Mapping[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in blocks(message) if b.get("type") == "text")


def numbered_reply(tag: str, users: int, lines: int) -> str:
    head = f"reply to {tag} [users={users}]"
    if not lines:
        return head
    return head + "\n\n" + "\n".join(f"{tag} L{j:04d} {FILLER}" for j in range(lines))


def chunk_keys(text: str) -> list[tuple[str, int]]:
    """What a received message carries: (tag, -1) for a header, (tag, n) for line n."""
    keys = [(tag, -1) for tag, _ in HEADER.findall(text)]
    keys += [(tag, int(n)) for tag, n in LINE.findall(text)]
    return keys

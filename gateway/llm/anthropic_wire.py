"""The Anthropic Messages wire: neutral history → request body (with cache breakpoints), JSON answer
→ LLMReply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.errors import LLMUnavailable
from gateway.llm.http import HttpTransport, encoded_array, encoded_object
from gateway.llm.streams import AnthropicAssembler
from gateway.llm.transport import WireSettings, make_transport
from gateway.llm.types import (
    ChatMessage,
    History,
    LLMReply,
    TextSink,
    ToolCall,
    ToolDef,
    Usage,
    WirePrefix,
    as_object,
    fit_images,
    split_images,
    token_count,
)

KEEP_TAIL = 3  # a history's last messages, built anew for each request: the breakpoints sit there


# ---------------------------------------------------------------------------------------- Anthropic
def anthropic_messages(
    messages: Sequence[ChatMessage], *, vision: bool = True
) -> list[dict[str, Any]]:
    """Neutral history → Anthropic messages: tool results ride in user turns; same-role turns merge;
    a user message's images go first as base64 `image` blocks (Anthropic's advice: images before the
    text)."""
    out: list[dict[str, Any]] = []
    for m in fit_images(messages):
        role = m["role"]
        blocks: list[dict[str, Any]] = []
        if role == "tool":
            role = "user"
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"],
                    "content": _result_content(m, vision),
                    **({"is_error": True} if m.get("is_error") else {}),
                }
            )
        else:
            text, images = (
                split_images(m, vision) if "images" in m else (m.get("content") or "", [])
            )
            blocks.extend(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": media_type, "data": data},
                }
                for media_type, data in images
            )
            if text.strip():  # the API refuses a whitespace-only text block
                blocks.append({"type": "text", "text": text})
            for call in m.get("tool_calls") or ():
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": _json_object(call.get("arguments")),
                    }
                )
            if not blocks:
                blocks.append({"type": "text", "text": "(empty)"})
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _result_content(m: ChatMessage, vision: bool) -> str | list[dict[str, Any]]:
    """A tool result's text, or (a tool that returned pictures) its text and image blocks: a
    tool_result block may hold text and image blocks."""
    if "images" not in m:
        return m.get("content") or ""
    text, images = split_images(m, vision)
    if not images:
        return text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    blocks.extend(
        {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        for media_type, data in images
    )
    return blocks


def add_cache_breakpoints(
    system: str, messages: list[dict[str, Any]], *, ttl: Literal["5m", "1h"]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """ "system_and_3": a breakpoint on the system prompt
    and on the last block of the last 3 messages.

    Never mutates `messages`: only the marked messages are copied (a deep copy of the whole history
    cost more than the rest of the request); at most 4 breakpoints (the API's limit).
    """
    marker: dict[str, Any] = {"type": "ephemeral"}
    if ttl == "1h":
        marker["ttl"] = "1h"
    system_blocks = [{"type": "text", "text": system, "cache_control": dict(marker)}]
    copied = list(messages)
    for i in range(max(0, len(copied) - 3), len(copied)):
        msg = copied[i]
        if msg["content"]:
            content = list(msg["content"])
            content[-1] = {**content[-1], "cache_control": dict(marker)}
            copied[i] = {**msg, "content": content}
    return system_blocks, copied


def _wire_starts(messages: Sequence[ChatMessage], start: int, end: int) -> list[int]:
    """Where each Anthropic message begins among messages[start:end]: a tool result rides in the
    user's turn, and consecutive turns of one role merge (anthropic_messages)."""
    starts: list[int] = []
    last = None
    for i in range(start, end):
        role = messages[i]["role"]
        role = "user" if role == "tool" else role
        if role != last:
            starts.append(i)
            last = role
    return starts


def _tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in tools
    ]


def _json_object(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class PromptCache:
    """Anthropic prompt caching: breakpoints on the stable prefix, kept `ttl` long."""

    ttl: Literal["5m", "1h"] = "5m"
    enabled: bool = True


class AnthropicClient:
    provider = "anthropic"

    def __init__(
        self,
        wire: WireSettings,
        *,
        cache: PromptCache = PromptCache(),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.wire = wire
        self.model = wire.model
        self.vision = wire.vision
        self.context_window = wire.context_window
        self.max_tokens = wire.max_tokens
        self.cache_ttl = cache.ttl
        self.caching = cache.enabled
        self._transport = make_transport("anthropic", wire, env)

    def request_body(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        wire = anthropic_messages(messages, vision=self.vision)
        system_blocks, wire = self._marked(system, wire)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens or self.max_tokens,
            "system": system_blocks,
            "messages": wire,
        }
        if tools:
            body["tools"] = _tools(tools)
        return body

    def _marked(
        self, system: str, wire: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if self.caching:
            return add_cache_breakpoints(system, wire, ttl=self.cache_ttl)
        return [{"type": "text", "text": system}], wire

    def encoded_body(
        self,
        *,
        system: str,
        messages: History,
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: bool = False,
    ) -> bytes | None:
        """`request_body` (with `stream`: true) as bytes, built from what this session's memo keeps
        of its stored history plus the rest: byte for byte what encoding the whole body gives.
        None when there is no memo, or a text orjson refuses (a lone surrogate: the whole body then
        goes the stdlib's way, see encode_body)."""
        memo = messages.memo
        if memo is None:
            return None
        key = f"anthropic:{self.vision}"
        try:
            prefix = memo.prefixes.get(key) or WirePrefix()
            if memo.requests and prefix.neutral <= messages.stored:  # asked once: nothing kept
                prefix = self._kept_longer(messages, key, prefix)
            memo.requests += 1
            tail = anthropic_messages(messages[prefix.neutral :], vision=self.vision)
            system_blocks, tail = self._marked(system, tail)
            members = [
                ("model", orjson.dumps(self.model)),
                ("max_tokens", orjson.dumps(max_tokens or self.max_tokens)),
                ("system", orjson.dumps(system_blocks)),
                ("messages", encoded_array([prefix.data, *map(orjson.dumps, tail)])),
            ]
            if tools:
                members.append(("tools", orjson.dumps(_tools(tools))))
            if stream:
                members.append(("stream", b"true"))
        except TypeError:  # orjson.JSONEncodeError
            return None
        return encoded_object(members)

    def _kept_longer(self, messages: History, key: str, prefix: WirePrefix) -> WirePrefix:
        """The memo's prefix grown to all but the last KEEP_TAIL Anthropic messages of the stored
        history (a later message can merge into the last one; the breakpoints move over them)."""
        assert messages.memo is not None
        starts = _wire_starts(messages, prefix.neutral, messages.stored)
        if len(starts) <= KEEP_TAIL:
            return prefix
        cut = starts[-KEEP_TAIL]
        wire = anthropic_messages(messages[prefix.neutral : cut], vision=self.vision)
        grown = WirePrefix(cut, encoded_array([prefix.data, *map(orjson.dumps, wire)])[1:-1])
        messages.memo.keep(key, grown)
        return grown

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        transport = self._transport
        if isinstance(transport, HttpTransport) and isinstance(messages, History):
            data = self.encoded_body(
                system=system,
                messages=messages,
                tools=tools,
                max_tokens=max_tokens,
                stream=stream is not None,
            )
            if data is not None:
                if stream is None:
                    return anthropic_reply(await transport.post_raw(data), self.model)
                answer = await transport.stream_raw(data, AnthropicAssembler(self.model, stream))
                return anthropic_reply(answer, self.model)
        body = self.request_body(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        if stream is None:
            return anthropic_reply(await transport.post(body), self.model)
        streamed = {**body, "stream": True}
        answer = await transport.stream(streamed, AnthropicAssembler(self.model, stream))
        return anthropic_reply(answer, self.model)

    async def close(self) -> None:
        await self._transport.close()


def anthropic_reply(data: Mapping[str, Any], model: str) -> LLMReply:
    """An Anthropic Messages answer (JSON) → LLMReply; read leniently, as the SDKs do."""
    content = data.get("content")
    if not isinstance(content, list):
        raise LLMUnavailable(f"{model}: bad response (no content)")
    blocks = [b for b in content if isinstance(b, dict)]
    text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    calls = tuple(
        ToolCall(str(b.get("id") or ""), str(b.get("name") or ""), json.dumps(b.get("input") or {}))
        for b in blocks
        if b.get("type") == "tool_use"
    )
    u = as_object(data.get("usage"))
    usage = Usage(
        token_count(u, "input_tokens"),
        token_count(u, "output_tokens"),
        token_count(u, "cache_read_input_tokens"),
        token_count(u, "cache_creation_input_tokens"),
    )
    return LLMReply(text, calls, usage, model, "anthropic", str(data.get("stop_reason") or ""))

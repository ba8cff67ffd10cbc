"""The OpenAI Chat Completions wire (OpenAI, OpenRouter, vLLM, Ollama…): history → request body,
JSON → LLMReply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.errors import LLMUnavailable
from gateway.llm.http import HttpTransport, encoded_array, encoded_object
from gateway.llm.streams import OpenAIAssembler
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


def openai_messages(
    system: str, messages: Sequence[ChatMessage], *, vision: bool = True
) -> list[dict[str, Any]]:
    """Neutral history → Chat Completions messages; a user message with images gets content parts
    (its text, then each image as an `image_url` data URL), or with no vision plain text with a note
    per image. Tool messages are text only, so the pictures tool results returned follow their step
    as one user message."""
    return [{"role": "system", "content": system}, *_turns(messages, vision)]


def _turns(messages: Sequence[ChatMessage], vision: bool) -> list[dict[str, Any]]:
    """openai_messages without the system message. Split before any message but a tool result,
    the parts give the whole (what the tool results before the split showed ends the first)."""
    out: list[dict[str, Any]] = []
    # image parts of the tool results just added (see _tool_result)
    shown: list[dict[str, Any]] = []
    for m in fit_images(messages):
        if m["role"] == "tool":
            out.append(_tool_result(m, vision, shown))
            continue
        if shown:
            out.append({"role": "user", "content": shown})
            shown = []
        if m.get("tool_calls"):
            out.append(
                {
                    "role": "assistant",
                    "content": m.get("content") or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": c.get("arguments") or "{}",
                            },
                        }
                        for c in m["tool_calls"]
                    ],
                }
            )
        elif "images" in m:
            out.append({"role": m["role"], "content": _parts(m, vision)})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    if shown:
        out.append({"role": "user", "content": shown})
    return out


def _tool_result(m: ChatMessage, vision: bool, shown: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool message (text only on this wire); a result's pictures go to `shown`, which becomes one
    user message after the step's last tool message (a user message between them would break the
    tool-call sequence)."""
    text, images = split_images(m, vision) if "images" in m else (m.get("content") or "", [])
    if images:
        shown.append(
            {
                "type": "text",
                "text": f"The image{'s' if len(images) > 1 else ''} returned by tool call "
                f"{m['tool_call_id']} (tool results carry text only on this API):",
            }
        )
        shown.extend(
            {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}
            for media_type, data in images
        )
    return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": text}


def _parts(m: ChatMessage, vision: bool) -> str | list[dict[str, Any]]:
    text, images = split_images(m, vision)
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    parts.extend(
        {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}
        for media_type, data in images
    )
    return parts


class OpenAIClient:
    provider = "openai"

    def __init__(self, wire: WireSettings, *, env: Mapping[str, str] | None = None) -> None:
        self.wire = wire
        self.model = wire.model
        self.vision = wire.vision
        self.context_window = wire.context_window
        self.max_tokens = wire.max_tokens
        self._transport = make_transport("openai", wire, env)

    def request_body(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(system, messages, vision=self.vision),
            "max_tokens": max_tokens or self.max_tokens,
        }
        if tools:
            body["tools"] = _tools(tools)
        return body

    def encoded_body(
        self,
        *,
        system: str,
        messages: History,
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: bool = False,
    ) -> bytes | None:
        """`request_body` (streamed: with `stream` and `stream_options`) as bytes, from what this
        session's memo keeps of its stored history plus the rest (AnthropicClient.encoded_body);
        None without a memo."""
        memo = messages.memo
        if memo is None:
            return None
        key = f"openai:{self.vision}"
        try:
            prefix = memo.prefixes.get(key) or WirePrefix()
            if memo.requests and prefix.neutral <= messages.stored:
                prefix = self._kept_longer(messages, key, prefix)
            memo.requests += 1
            tail = _turns(messages[prefix.neutral :], self.vision)
            system_message = orjson.dumps({"role": "system", "content": system})
            members = [
                ("model", orjson.dumps(self.model)),
                (
                    "messages",
                    encoded_array([system_message, prefix.data, *map(orjson.dumps, tail)]),
                ),
                ("max_tokens", orjson.dumps(max_tokens or self.max_tokens)),
            ]
            if tools:
                members.append(("tools", orjson.dumps(_tools(tools))))
            if stream:
                members += [("stream", b"true"), ("stream_options", b'{"include_usage":true}')]
        except TypeError:  # orjson.JSONEncodeError: the whole body goes the stdlib's way
            return None
        return encoded_object(members)

    def _kept_longer(self, messages: History, key: str, prefix: WirePrefix) -> WirePrefix:
        """The memo's prefix grown to the stored history's last message but a tool result
        (see _turns)."""
        assert messages.memo is not None
        cut = next(
            (
                i
                for i in range(messages.stored - 1, prefix.neutral, -1)
                if messages[i]["role"] != "tool"
            ),
            prefix.neutral,
        )
        if cut <= prefix.neutral:
            return prefix
        turns = _turns(messages[prefix.neutral : cut], self.vision)
        grown = WirePrefix(cut, encoded_array([prefix.data, *map(orjson.dumps, turns)])[1:-1])
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
                    return openai_reply(await transport.post_raw(data), self.model)
                assembler = OpenAIAssembler(self.model, stream)
                return openai_reply(await transport.stream_raw(data, assembler), self.model)
        body = self.request_body(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        if stream is None:
            return openai_reply(await transport.post(body), self.model)
        # the usage comes in the last chunk
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        answer = await transport.stream(streamed, OpenAIAssembler(self.model, stream))
        return openai_reply(answer, self.model)

    async def close(self) -> None:
        await self._transport.close()


def _tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def openai_reply(data: Mapping[str, Any], model: str) -> LLMReply:
    """An OpenAI Chat Completions answer (JSON) → LLMReply; read leniently, as the SDKs do."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMUnavailable(f"{model}: response had no choices")
    choice = choices[0]
    msg = as_object(choice.get("message"))
    calls = tuple(
        ToolCall(str(c.get("id") or ""), str(f.get("name") or ""), str(f.get("arguments") or "{}"))
        for c in (msg.get("tool_calls") or ())
        if isinstance(c, dict) and isinstance(f := c.get("function"), dict)
    )
    u = as_object(data.get("usage"))
    cached = token_count(as_object(u.get("prompt_tokens_details")), "cached_tokens")
    usage = Usage(
        max(0, token_count(u, "prompt_tokens") - cached),
        token_count(u, "completion_tokens"),
        cached,
        0,
    )
    return LLMReply(
        _openai_text(msg.get("content")),
        calls,
        usage,
        str(data.get("model") or model),
        "openai",
        str(choice.get("finish_reason") or ""),
    )


def _openai_text(content: Any) -> str:
    """A string, or (some compatible servers, e.g. reasoning
    models) a list of parts: their text joined."""
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "")
            for p in content
            if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return str(content or "")

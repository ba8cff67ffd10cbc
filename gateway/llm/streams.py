"""Streamed answers: Server-Sent Events decoded, and each wire's events folded back into its
non-streamed answer.

Both transports feed these assemblers, and the assemblers hand back the JSON the same request would
have got without `stream: true`, so one parser per wire (anthropic_reply, openai_reply) reads both:
the streamed answer's text is the non-streamed one byte for byte. Text deltas go to the caller's
TextSink as they are read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import LLMUnavailable
from gateway.llm.types import TextSink, as_object


class SseDecoder:
    """Bytes as they arrive → (event, data) pairs: one event per blank line, `data:` lines joined
    with newlines, comments and retry hints ignored (the WHATWG event-stream rules, as the SDKs
    implement them). Lines may be split across reads and may end in CRLF; no line is too long."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        lines = (self._buffer + chunk).split(b"\n")
        self._buffer = lines.pop()
        events: list[tuple[str, str]] = []
        for line in lines:
            self._line(line.rstrip(b"\r").decode("utf-8", "replace"), events)
        return events

    def end(self) -> list[tuple[str, str]]:
        """What is left when the server closed: a last event without its blank line still counts."""
        events: list[tuple[str, str]] = []
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r").decode("utf-8", "replace"), events)
            self._buffer = b""
        self._line("", events)
        return events

    def _line(self, text: str, events: list[tuple[str, str]]) -> None:
        if not text:
            if self._data:
                events.append((self._event, "\n".join(self._data)))
            self._event, self._data = "", []
            return
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value


def sse_data(data: str) -> Any:
    """An event's data: OpenAI's closing `[DONE]` as is,
    anything else JSON (ValueError when it is not)."""
    if data == "[DONE]":
        return data
    try:
        return orjson.loads(data)
    except ValueError:
        return json.loads(data)  # a lone surrogate's \u escape, which orjson refuses


class AnthropicAssembler:
    """message_start … content_block_* … message_delta,
    message_stop → the Messages API's JSON answer."""

    def __init__(self, model: str, sink: TextSink | None) -> None:
        self.model = model
        self.sink = sink
        self._told = False
        self.reset()

    def reset(self) -> None:
        """A retry starts over: whoever was told the text so far hears that it is void."""
        if self._told and self.sink is not None:
            self.sink.restart()
        self._told = False
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._done = False

    def feed(self, event: str, data: Any) -> None:
        kind = event or str(as_object(data).get("type") or "")
        body = as_object(data)
        if kind == "message_start":
            self._message = dict(as_object(body.get("message")))
            self._usage.update(as_object(self._message.get("usage")))
        elif kind == "content_block_start":
            self._blocks[int(body.get("index") or 0)] = dict(as_object(body.get("content_block")))
        elif kind == "content_block_delta":
            self._delta(int(body.get("index") or 0), as_object(body.get("delta")))
        elif kind == "message_delta":
            self._stop_reason = (
                str(as_object(body.get("delta")).get("stop_reason") or "") or self._stop_reason
            )
            self._usage.update(
                {k: v for k, v in as_object(body.get("usage")).items() if v is not None}
            )
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            error = as_object(body.get("error"))
            raise LLMUnavailable(
                f"{self.model}: {error.get('type') or 'error'} mid-stream: "
                f"{str(error.get('message') or '')[:300]}"
            )

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            piece = str(delta.get("text") or "")
            block["text"] = str(block.get("text") or "") + piece
            if self.sink is not None and piece:
                self._told = True
                self.sink.text(piece)
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = str(delta.get("signature") or "")

    def answer(self) -> dict[str, Any]:
        if not self._done:
            raise LLMUnavailable(f"{self.model}: the stream ended before message_stop")
        content = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.get("type") == "tool_use":
                raw = "".join(self._json.get(index, ()))
                block = {**block, "input": _json_input(raw)}
            content.append(block)
        return {
            **self._message,
            "content": content,
            "stop_reason": self._stop_reason,
            "usage": self._usage,
        }


class OpenAIAssembler:
    """chat.completion.chunk … [DONE] → a chat.completion; the usage comes in the last chunk when
    the request asked for it (stream_options.include_usage)."""

    def __init__(self, model: str, sink: TextSink | None) -> None:
        self.model = model
        self.sink = sink
        self._told = False
        self.reset()

    def reset(self) -> None:
        if self._told and self.sink is not None:
            self.sink.restart()
        self._told = False
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False
        self._chunks = 0

    def feed(self, event: str, data: Any) -> None:
        if data == "[DONE]":
            self._done = True
            return
        chunk = as_object(data)
        if "error" in chunk:
            error = as_object(chunk.get("error"))
            raise LLMUnavailable(
                f"{self.model}: error mid-stream: {str(error.get('message') or error)[:300]}"
            )
        self._chunks += 1
        if not self._head:
            self._head = {
                k: chunk[k] for k in ("id", "model", "created", "system_fingerprint") if k in chunk
            }
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and int(choice.get("index") or 0) == 0:
                self._choice(choice)

    def _choice(self, choice: Mapping[str, Any]) -> None:
        delta = as_object(choice.get("delta"))
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            self._text.append(piece)
            if self.sink is not None:
                self._told = True
                self.sink.text(piece)
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._call(call)
        if choice.get("finish_reason"):
            self._finish = str(choice["finish_reason"])

    def _call(self, call: Mapping[str, Any]) -> None:
        slot = self._calls.setdefault(
            int(call.get("index") or 0), {"id": "", "name": [], "arguments": []}
        )
        slot["id"] = slot["id"] or str(call.get("id") or "")
        function = as_object(call.get("function"))
        if function.get("name"):
            slot["name"].append(str(function["name"]))
        if function.get("arguments"):
            slot["arguments"].append(str(function["arguments"]))

    def answer(self) -> dict[str, Any]:
        if not (self._done or self._finish):
            raise LLMUnavailable(f"{self.model}: the stream ended before its last chunk")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"],
                    "type": "function",
                    "function": {
                        "name": "".join(slot["name"]),
                        "arguments": "".join(slot["arguments"]) or "{}",
                    },
                }
                for _, slot in sorted(self._calls.items())
            ]
        choices = (
            [{"index": 0, "message": message, "finish_reason": self._finish}]
            if self._chunks
            else []
        )
        return {
            **self._head,
            "object": "chat.completion",
            "choices": choices,
            "usage": self._usage or {},
        }


def _json_input(raw: str) -> Any:
    """A tool call's streamed input; unreadable JSON stays text for the tool layer to report, as a
    non-streamed answer's would never be (the API sends an object)."""
    if not raw.strip():
        return {}
    try:
        return sse_data(raw)
    except ValueError:
        return raw

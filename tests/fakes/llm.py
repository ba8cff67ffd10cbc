"""Fake LLM server speaking the OpenAI chat-completions and Anthropic messages wires (plain and
SSE), with scripted replies, faults, token usage and an Anthropic prompt-cache emulation. Not a
model.

Token estimate (documented so tests can compute expectations): the prompt is cut into *elements*,
and each element costs `len(canonical_json(element)) // 4` tokens, where canonical JSON is
`json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
  * Anthropic elements, in the API's own cache order: each tool definition, each system block (a
    string system prompt is one text block), then every content block of every message as `{"role":
    ..., **block}` (string content is one text block). `cache_control` is removed before measuring
    and hashing.
  * OpenAI elements: each tool definition, then each message dict as sent.
Output tokens are `len(text) // 4` (a tool call counts `len(name + json(arguments)) // 4`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.base import (
    Call,
    Clock,
    ConnectionReset,
    Counter,
    Delay,
    FakeServer,
    Fault,
    Malformed,
    json_response,
)

__all__ = [
    "Call",
    "ConnectionReset",
    "CutStream",
    "Delay",
    "FakeLLM",
    "Fault",
    "Malformed",
    "Paced",
    "Reply",
    "StreamError",
    "StreamGate",
    "ToolCall",
    "ToolCalls",
    "Usage",
    "canonical_json",
    "estimate_tokens",
    "prompt_elements",
]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


# -------------------------------------------------------------------------------------------- steps
@dataclass(frozen=True, slots=True)
class Reply:
    """A plain text answer. `finish` overrides the stop reason (e.g. "length" / "max_tokens");
    `usage` overrides individual usage numbers of the wire (e.g. {"output_tokens": 9})."""

    text: str
    finish: str | None = None
    usage: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """Several tool calls in one response, optionally after some text."""

    calls: Sequence[ToolCall]
    text: str = ""


@dataclass(frozen=True, slots=True)
class CutStream:
    """Start answering normally, then drop the connection: after `after` SSE events when streaming,
    half-way through the JSON body otherwise. `then` is the answer that gets cut (None: the
    default)."""

    after: int = 2
    then: Reply | ToolCall | ToolCalls | None = None


@dataclass(frozen=True, slots=True)
class Paced:
    """Stream `answer` slowly, as a model writes: before text piece i (0-based) the fake awaits
    `gate(i)` (a `StreamGate` lets a test hand out pieces one by one), and pieces are `every`
    seconds apart (the fake's `sleep`)."""

    answer: Reply | ToolCall | ToolCalls | CutStream | None = None
    gate: Callable[[int], Awaitable[None]] | None = None
    every: float = 0.0


@dataclass(frozen=True, slots=True)
class StreamError:
    """Stream normally, then send the provider's mid-stream error event after `after` events
    (Anthropic: `event: error` with an `overloaded_error`; OpenAI: a chunk with an `error` object)
    and end the stream."""

    after: int = 3
    then: Reply | ToolCall | ToolCalls | None = None


class StreamGate:
    """Holds a `Paced` stream before each text piece until the test releases it; `waiting` is the
    piece index the stream is held at (-1 while it is not held)."""

    def __init__(self) -> None:
        self.released = 0
        self.waiting = -1
        self._changed = asyncio.Event()

    async def __call__(self, index: int) -> None:
        while index >= self.released:
            self.waiting = index
            self._changed.clear()
            await self._changed.wait()
        self.waiting = -1

    def release(self, pieces: int = 1) -> None:
        self.released += pieces
        self._changed.set()

    def release_all(self) -> None:
        self.release(1_000_000)


Step = (
    Reply
    | ToolCall
    | ToolCalls
    | Fault
    | Delay
    | Malformed
    | CutStream
    | Paced
    | StreamError
    | ConnectionReset
)
StepSource = Step | Callable[[dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """The numbers the fake reported for one request (also handy for expectations)."""

    input_tokens: int
    output_tokens: int
    cache_read: int = 0
    cache_creation: int = 0

    @property
    def prompt_total(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_creation


# ---------------------------------------------------------------------------------- token estimate
def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def estimate_tokens(obj: Any) -> int:
    return len(canonical_json(obj)) // 4


def _strip_cc(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def prompt_elements(body: Mapping[str, Any], wire: str) -> list[tuple[dict[str, Any], bool]]:
    """(element, has_cache_control) in prompt order; see the module docstring."""
    out: list[tuple[dict[str, Any], bool]] = []
    for tool in body.get("tools") or []:
        out.append((_strip_cc(tool), "cache_control" in tool))
    if wire == "openai":
        out.extend((dict(m), False) for m in body.get("messages") or [])
        return out
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append(({"type": "text", "text": system}, False))
    elif isinstance(system, list):
        out.extend((_strip_cc(b), "cache_control" in b) for b in system)
    for msg in body.get("messages") or []:
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            out.append(({"role": msg.get("role"), **_strip_cc(block)}, "cache_control" in block))
    return out


def _prefix_hashes(model: str, elements: Sequence[Mapping[str, Any]]) -> list[str]:
    digest = hashlib.sha256(model.encode())
    hashes = []
    for element in elements:
        digest.update(canonical_json(element).encode())
        hashes.append(digest.copy().hexdigest())
    return hashes


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def default_reply_text(body: Mapping[str, Any]) -> str:
    """`echo: <last user text> [users=<user-role message
    count>]`: lets tests see what history arrived."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    texts = [t for t in (_text_of(m.get("content")) for m in users) if t]
    return f"echo: {texts[-1] if texts else ''} [users={len(users)}]"


# ------------------------------------------------------------------------------------------- fake
class FakeLLM(FakeServer):
    """OpenAI (`base_url=f"{url}/v1"`) and Anthropic (`base_url=url`) on one server."""

    def __init__(
        self,
        *,
        cache: bool = False,
        api_key: str | None = None,
        validate: bool = True,
        stream_chunk_chars: int = 16,
        cache_min_tokens: int = 0,
        cache_lookback: int | None = 20,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(**({"clock": clock} if clock else {}))
        self.sleep = sleep
        self.cache = cache
        self.api_key = api_key
        self.validate = validate
        self.stream_chunk_chars = max(1, stream_chunk_chars)
        self.cache_min_tokens = cache_min_tokens
        self.cache_lookback = cache_lookback
        self.usages: list[Usage] = []
        self._script: deque[StepSource] = deque()
        self._anthropic_cache: set[str] = set()
        self._openai_cache: set[str] = set()
        self._ids = Counter(1)
        self.app.router.add_post(OPENAI_PATH, self._openai)
        self.app.router.add_post(ANTHROPIC_PATH, self._anthropic)
        self.app.router.add_post(COUNT_TOKENS_PATH, self._count_tokens)

    # -- test API --------------------------------------------------------------------------------
    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def requests(self) -> list[tuple[str, Any, Mapping[str, str]]]:
        return [(c.path, c.body, c.headers) for c in self.calls]

    def script(self, *steps: StepSource) -> None:
        """Queue replies, one consumed per chat request
        (either wire); afterwards the default echo."""
        self._script.extend(steps)

    def pending_steps(self) -> int:
        return len(self._script)

    def forget(self) -> None:
        """Empty the prompt caches (what a TTL expiry would do)."""
        self._anthropic_cache.clear()
        self._openai_cache.clear()

    def last_request(self) -> dict[str, Any]:
        body: dict[str, Any] = self.calls[-1].body
        return body

    def openai_requests(self) -> list[dict[str, Any]]:
        return [c.body for c in self.calls if c.path == OPENAI_PATH]

    def anthropic_requests(self) -> list[dict[str, Any]]:
        return [c.body for c in self.calls if c.path == ANTHROPIC_PATH]

    def anthropic_raw(self) -> list[bytes]:
        """The Anthropic request bodies exactly as they arrived."""
        return [c.raw for c in self.calls if c.path == ANTHROPIC_PATH]

    # -- common request handling ---------------------------------------------------------------
    async def _begin(
        self, request: web.Request, wire: str
    ) -> tuple[dict[str, Any] | None, web.StreamResponse | None]:
        try:
            body = await request.json()
        except ValueError:
            self.record(request, request.path, None)
            return None, json_response(_error(wire, 400, "request body is not valid JSON"), 400)
        # read() is cached: the same bytes
        self.record(request, request.path, body, await request.read())
        key = (
            request.headers.get("x-api-key")
            or request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        )
        if not key or (self.api_key is not None and key != self.api_key):
            return None, json_response(
                _error(
                    wire,
                    401,
                    "invalid x-api-key" if wire == "anthropic" else "Incorrect API key provided",
                ),
                401,
            )
        if wire == "anthropic" and "anthropic-version" not in request.headers:
            return None, json_response(
                _error(wire, 400, "anthropic-version: header is required"), 400
            )
        if wire == "anthropic" and len(await request.read()) > MAX_ANTHROPIC_REQUEST_BYTES:
            return None, json_response(_error(wire, 413, "Request exceeds the maximum size"), 413)
        problem = _validate(body, wire) if self.validate else None
        if problem:
            return None, json_response(_error(wire, 400, problem), 400)
        return body, None

    async def _step(
        self, request: web.Request, body: dict[str, Any], wire: str
    ) -> tuple[Any, web.StreamResponse | None]:
        step = self.take_fault([request.path])
        if step is None and self._script:
            step = self._script.popleft()
        step = _resolve(step, body)
        while isinstance(step, Delay):
            await asyncio.sleep(step.seconds)
            step = _resolve(step.then, body)
        if isinstance(step, (Fault, Malformed, ConnectionReset)):
            return None, await self.apply_fault(
                request, step, lambda s: _error(wire, s, "injected fault")
            )
        return (step if step is not None else Reply(default_reply_text(body))), None

    def _usage(self, body: Mapping[str, Any], wire: str, out_tokens: int) -> Usage:
        pairs = prompt_elements(body, wire)
        elements = [e for e, _ in pairs]
        sizes = [estimate_tokens(e) for e in elements]
        cum = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        total = cum[-1] if cum else 0
        read = creation = 0
        if self.cache and elements:
            hashes = _prefix_hashes(str(body.get("model", "")), elements)
            if wire == "openai":
                hit = max((i for i, h in enumerate(hashes) if h in self._openai_cache), default=-1)
                read = cum[hit] if hit >= 0 and cum[hit] >= self.cache_min_tokens else 0
                self._openai_cache.update(
                    h for i, h in enumerate(hashes) if cum[i] >= self.cache_min_tokens
                )
            else:
                read, creation = self._anthropic_cache_step(pairs, hashes, cum)
        usage = Usage(
            input_tokens=total - read - creation,
            output_tokens=out_tokens,
            cache_read=read,
            cache_creation=creation,
        )
        self.usages.append(usage)
        return usage

    def _anthropic_cache_step(
        self,
        pairs: Sequence[tuple[dict[str, Any], bool]],
        hashes: Sequence[str],
        cum: Sequence[int],
    ) -> tuple[int, int]:
        """Longest cached prefix ending at or up to `cache_lookback` blocks before a breakpoint is
        read; everything after it up to the last breakpoint is written (and remembered)."""
        breakpoints = [
            i for i, (_, marked) in enumerate(pairs) if marked and cum[i] >= self.cache_min_tokens
        ]
        if not breakpoints:
            return 0, 0
        hit = -1
        for b in breakpoints:
            low = 0 if self.cache_lookback is None else max(0, b - self.cache_lookback)
            for i in range(b, low - 1, -1):
                if hashes[i] in self._anthropic_cache:
                    hit = max(hit, i)
                    break
        read = cum[hit] if hit >= 0 else 0
        last = breakpoints[-1]
        creation = cum[last] - read if last > hit else 0
        self._anthropic_cache.update(hashes[b] for b in breakpoints)
        return read, creation

    # -- OpenAI -----------------------------------------------------------------------------------
    async def _openai(self, request: web.Request) -> web.StreamResponse:
        body, early = await self._begin(request, "openai")
        if early is not None or body is None:
            return early  # type: ignore[return-value]
        step, early = await self._step(request, body, "openai")
        if early is not None:
            return early
        pace, step = _unwrap(step, body)
        cut = step if isinstance(step, (CutStream, StreamError)) else None
        answer = (cut.then or Reply(default_reply_text(body))) if cut else step
        text, calls, finish = self._answer_parts(answer, "openai")
        usage = self._usage(body, "openai", _out_tokens(text, calls))
        usage_json = {
            "prompt_tokens": usage.prompt_total,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_total + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        if isinstance(answer, Reply) and answer.usage:
            usage_json.update(answer.usage)
        cid, created, model = (
            f"chatcmpl-{self._ids()}",
            1_700_000_000 + len(self.calls),
            body.get("model", ""),
        )
        tool_calls: list[dict[str, Any]] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
            }
            for c in calls
        ]
        if not body.get("stream"):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text or None,
                "refusal": None,
            }
            if tool_calls:
                message["tool_calls"] = tool_calls
            payload = {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": usage_json,
                "system_fingerprint": "fp_fake",
            }
            return await self._json_or_cut(request, payload, cut)

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
                ],
            }

        events: list[tuple[str | None, Any]] = [
            (None, chunk({"role": "assistant", "content": "", "refusal": None}))
        ]
        events += [(None, chunk({"content": piece})) for piece in self._pieces(text)]
        for index, call in enumerate(tool_calls):
            args = call["function"]["arguments"]
            events.append(
                (
                    None,
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {"name": call["function"]["name"], "arguments": ""},
                                }
                            ]
                        }
                    ),
                )
            )
            events += [
                (None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
                for piece in self._pieces(args)
            ]
        events.append((None, chunk({}, finish)))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                (
                    None,
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage_json,
                    },
                )
            )
        events.append((None, "[DONE]"))
        return await self._sse(request, events, cut, pace, "openai")

    # -- Anthropic -----------------------------------------------------------------------------
    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        body, early = await self._begin(request, "anthropic")
        if early is not None or body is None:
            return early  # type: ignore[return-value]
        step, early = await self._step(request, body, "anthropic")
        if early is not None:
            return early
        pace, step = _unwrap(step, body)
        cut = step if isinstance(step, (CutStream, StreamError)) else None
        answer = (cut.then or Reply(default_reply_text(body))) if cut else step
        text, calls, stop = self._answer_parts(answer, "anthropic")
        usage = self._usage(body, "anthropic", _out_tokens(text, calls))
        usage_json = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_creation,
            "cache_read_input_tokens": usage.cache_read,
            "service_tier": "standard",
        }
        if isinstance(answer, Reply) and answer.usage:
            usage_json.update(answer.usage)
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
            for c in calls
        ]
        mid, model = f"msg_{self._ids():04d}", body.get("model", "")
        if not body.get("stream"):
            payload = {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage_json,
            }
            return await self._json_or_cut(request, payload, cut)
        events: list[tuple[str | None, Any]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": mid,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": dict(usage_json, output_tokens=1),
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(content):
            if block["type"] == "text":
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                )
                events += [
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                    for piece in self._pieces(block["text"])
                ]
            else:
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": dict(block, input={}),
                        },
                    )
                )
                events += [
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                    for piece in self._pieces(json.dumps(block["input"]))
                ]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage_json["output_tokens"]},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return await self._sse(request, events, cut, pace, "anthropic")

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        body, early = await self._begin(request, "anthropic")
        if early is not None or body is None:
            return early  # type: ignore[return-value]
        return json_response(
            {"input_tokens": sum(estimate_tokens(e) for e, _ in prompt_elements(body, "anthropic"))}
        )

    # -- helpers ----------------------------------------------------------------------------------
    def _answer_parts(self, answer: Any, wire: str) -> tuple[str, list[ToolCall], str]:
        if isinstance(answer, ToolCall):
            answer = ToolCalls([answer])
        if isinstance(answer, ToolCalls):
            prefix = "call_" if wire == "openai" else "toolu_"
            calls = [
                c if c.id else ToolCall(c.name, c.arguments, f"{prefix}{self._ids():04d}")
                for c in answer.calls
            ]
            return answer.text, calls, ("tool_calls" if wire == "openai" else "tool_use")
        if isinstance(answer, Reply):
            return answer.text, [], answer.finish or ("stop" if wire == "openai" else "end_turn")
        raise TypeError(f"not a script step: {answer!r}")

    def _pieces(self, text: str) -> list[str]:
        n = self.stream_chunk_chars
        return [text[i : i + n] for i in range(0, len(text), n)]

    async def _json_or_cut(
        self, request: web.Request, payload: Any, cut: CutStream | StreamError | None
    ) -> web.StreamResponse:
        if cut is None or isinstance(cut, StreamError):
            return json_response(payload)
        raw = json.dumps(payload).encode()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(raw)
        await resp.prepare(request)
        await resp.write(raw[: len(raw) // 2])
        return await _drop(request)

    async def _sse(
        self,
        request: web.Request,
        events: Sequence[tuple[str | None, Any]],
        cut: CutStream | StreamError | None,
        pace: Paced | None,
        wire: str,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        pieces = 0
        for sent, (event, data) in enumerate(events):
            if isinstance(cut, CutStream) and sent >= cut.after:
                return await _drop(request)
            if isinstance(cut, StreamError) and sent >= cut.after:
                await self._write_frame(resp, *_error_event(wire))
                break
            if pace is not None and _is_text(data):
                if pace.gate is not None:
                    await pace.gate(pieces)
                if pace.every and pieces:
                    await self.sleep(pace.every)
                pieces += 1
            await self._write_frame(resp, event, data)
        await resp.write_eof()
        return resp

    @staticmethod
    async def _write_frame(resp: web.StreamResponse, event: str | None, data: Any) -> None:
        """One SSE frame as the providers send it (`event:` line for Anthropic, `data:` for both, a
        blank line), in two writes split mid-frame: the client's parser must put lines back together
        across reads."""
        frame = (
            (f"event: {event}\n" if event else "")
            + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        ).encode()
        half = len(frame) // 2
        await resp.write(frame[:half])
        await asyncio.sleep(0)
        await resp.write(frame[half:])
        await asyncio.sleep(0)


def _unwrap(step: Any, body: dict[str, Any]) -> tuple[Paced | None, Any]:
    if not isinstance(step, Paced):
        return None, step
    return step, step.answer if step.answer is not None else Reply(default_reply_text(body))


def _is_text(data: Any) -> bool:
    """A frame carrying answer text: Anthropic's text_delta, or an OpenAI chunk with content."""
    if not isinstance(data, dict):
        return False
    if (data.get("delta") or {}).get("type") == "text_delta":
        return True
    choices = data.get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


def _error_event(wire: str) -> tuple[str | None, Any]:
    if wire == "anthropic":
        return "error", {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
    return None, {
        "error": {
            "message": "The server had an error while processing your request.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }


async def _drop(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(0.01)  # let the partial bytes leave before the reset
    if request.transport is not None:
        request.transport.abort()
    raise asyncio.CancelledError


def _resolve(step: Any, body: dict[str, Any]) -> Any:
    while callable(step) and not isinstance(step, type):
        step = step(body)
    return step


def _out_tokens(text: str, calls: Sequence[ToolCall]) -> int:
    return len(text) // 4 + sum(len(c.name + json.dumps(dict(c.arguments))) // 4 for c in calls)


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}


def _error(wire: str, status: int, message: str) -> dict[str, Any]:
    if wire == "anthropic":
        return {
            "type": "error",
            "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message},
        }
    code = "invalid_api_key" if status == 401 else None
    return {
        "error": {
            "message": message,
            "type": _OPENAI_ERROR_TYPES.get(status, "server_error"),
            "param": None,
            "code": code,
        }
    }


# ------------------------------------------------------------------------------------ validation
def _validate(body: Mapping[str, Any], wire: str) -> str | None:
    """The request-shape rules the real APIs enforce that a gateway's history code can break."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    problem = _validate_images(messages, wire)
    if problem:
        return problem
    return _validate_openai(messages) if wire == "openai" else _validate_anthropic(body, messages)


IMAGE_TYPES = {
    "image/jpeg": b"\xff\xd8\xff",
    "image/png": b"\x89PNG",
    "image/gif": b"GIF8",
    "image/webp": b"RIFF",
}
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # Anthropic: 5 MB per image (OpenAI allows 20 MB)
MAX_IMAGES = {"anthropic": 100, "openai": 500}  # per request
MAX_OPENAI_IMAGE_BYTES = 50 * 1024 * 1024  # OpenAI: image bytes per request
# Anthropic: the whole request (413 request_too_large past it)
MAX_ANTHROPIC_REQUEST_BYTES = 32 * 1024 * 1024


def _validate_images(messages: Sequence[Mapping[str, Any]], wire: str) -> str | None:
    """Image blocks as the APIs check them: user messages only, a known type, base64 that decodes to
    an image of that type and size, and no more of them in one request than the API takes."""
    sources = [
        s
        for m in messages
        for b in _with_tool_result_blocks(_blocks(m), wire)
        if (s := _image_source(b, wire))
    ]
    if len(sources) > MAX_IMAGES[wire]:
        return (
            f"Too much media: 0 document pages + {len(sources)} images > {MAX_IMAGES[wire]}"
            if wire == "anthropic"
            else f"Too many images: {len(sources)} provided, at most {MAX_IMAGES[wire]} per request"
        )
    if wire == "openai" and sum(len(data) * 3 // 4 for _, data in sources) > MAX_OPENAI_IMAGE_BYTES:
        return "Total image bytes in this request exceed the 50 MB limit"
    for n, m in enumerate(messages):
        content = m.get("content")
        for block in _with_tool_result_blocks(content if isinstance(content, list) else [], wire):
            source = _image_source(block, wire)
            if source is None:
                continue
            if m.get("role") != "user":
                return f"messages.{n}: images are only allowed in messages with role 'user'"
            media_type, data = source
            if media_type not in IMAGE_TYPES:
                return f"messages.{n}: image media_type {media_type!r} is not supported"
            try:
                raw = base64.b64decode(data, validate=True)
            except ValueError:
                return f"messages.{n}: image data is not valid base64"
            if len(raw) > MAX_IMAGE_BYTES:
                return (
                    f"messages.{n}: image exceeds 5 MB maximum: "
                    f"{len(raw)} bytes > {MAX_IMAGE_BYTES} bytes"
                )
            if not raw.startswith(IMAGE_TYPES[media_type]):
                return f"messages.{n}: Image does not match the provided media type {media_type}"
    return None


def _blocks(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _with_tool_result_blocks(blocks: list[Any], wire: str) -> list[Any]:
    """Anthropic: a tool_result's content may itself hold
    text and image blocks, checked like the others."""
    if wire != "anthropic":
        return blocks
    nested = [
        b
        for r in blocks
        if isinstance(r, dict)
        and r.get("type") == "tool_result"
        and isinstance(r.get("content"), list)
        for b in r["content"]
    ]
    return [*blocks, *nested]


def _image_source(block: Any, wire: str) -> tuple[str, str] | None:
    if not isinstance(block, dict):
        return None
    if wire == "anthropic" and block.get("type") == "image":
        source = block.get("source") or {}
        return str(source.get("media_type")), str(source.get("data")) if source.get(
            "type"
        ) == "base64" else ""
    if wire == "openai" and block.get("type") == "image_url":
        url = str((block.get("image_url") or {}).get("url") or "")
        head, _, data = url.partition(",")
        if not head.startswith("data:") or not head.endswith(";base64"):
            return "not a data URL", ""
        return head[len("data:") : -len(";base64")], data
    return None


def _validate_openai(messages: Sequence[Mapping[str, Any]]) -> str | None:
    open_ids: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in open_ids:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            open_ids.discard(m["tool_call_id"])
            continue
        if open_ids:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(open_ids))}"
            )
        open_ids = (
            {c["id"] for c in m.get("tool_calls") or []} if m.get("role") == "assistant" else set()
        )
    return None


def _validate_anthropic(
    body: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> str | None:
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    marked = sum(1 for e, cc in prompt_elements(body, "anthropic") if cc)
    if marked > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {marked}."
    previous_tool_ids: set[str] = set()
    for n, m in enumerate(messages):
        content = m.get("content")
        blocks = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )
        is_final_assistant = n == len(messages) - 1 and m.get("role") == "assistant"
        if not blocks and not is_final_assistant:
            return (
                f"messages.{n}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        if (
            any(b.get("type") == "text" and not b.get("text") for b in blocks)
            and not is_final_assistant
        ):
            return "messages: text content blocks must be non-empty"
        if (
            blocks
            and all(b.get("type") == "text" and not str(b.get("text")).strip() for b in blocks)
            and not is_final_assistant
        ):  # whitespace beside real text passes; on its own it is refused
            return "messages: text content blocks must contain non-whitespace text"
        result_ids = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        stray = result_ids - previous_tool_ids
        if stray:
            return (
                f"messages.{n}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(map(str, stray)))}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        missing = previous_tool_ids - result_ids
        if missing:
            return (
                f"messages.{n - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(missing))}. Each `tool_use` block must have "
                "a corresponding `tool_result` block in the next message."
            )
        previous_tool_ids = (
            {b["id"] for b in blocks if b.get("type") == "tool_use"}
            if m.get("role") == "assistant"
            else set()
        )
    if previous_tool_ids:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(sorted(previous_tool_ids))}. Each `tool_use` block "
            "must have a corresponding `tool_result` block in the next message."
        )
    return None

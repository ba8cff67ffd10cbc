"""Streamed model calls (gateway/llm/streams.py and both transports): the text reaches the sink as
the model writes it, and the reply is the non-streamed reply byte for byte (text, tool calls, usage
with cache read/write). Retries, mid-stream cuts and error events, and the fallback model behave as
they do without streaming.

Every client test runs through the gateway's own HTTP transport and through the official SDKs, for
real against the fake LLM server, which frames its SSE as each provider does (and splits frames
across writes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.errors import LLMUnavailable
from gateway.llm.anthropic_wire import AnthropicClient, PromptCache
from gateway.llm.factory import FallbackClient
from gateway.llm.openai_wire import OpenAIClient
from gateway.llm.streams import AnthropicAssembler, OpenAIAssembler, SseDecoder
from gateway.llm.transport import WireSettings
from gateway.llm.types import ChatMessage
from tests.fakes.base import Fault
from tests.fakes.llm import (
    CutStream,
    FakeLLM,
    Paced,
    Reply,
    StreamError,
    StreamGate,
    ToolCall,
    ToolCalls,
)

SYSTEM = "You are a test assistant. " * 20
HISTORY: list[ChatMessage] = [
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": "one"},
    {"role": "user", "content": "last question"},
]
LONG = (
    "Here is a longer answer, written over many deltas: "
    + "word " * 40
    + "\n\n```python\nprint('hi')\n```\n"
    + "and ünïcødé ✓ at the end."
)
KIND: dict[str, str] = {"client": "native"}


@pytest.fixture(autouse=True, params=["native", "sdk"])
def client_kind(request: pytest.FixtureRequest) -> str:
    KIND["client"] = request.param
    return str(request.param)


class Sink:
    """A TextSink that records what a preview would have been told."""

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.restarts = 0

    def text(self, delta: str) -> None:
        self.deltas.append(delta)

    def restart(self) -> None:
        self.restarts += 1
        self.deltas.append("\x00restart")

    @property
    def since_restart(self) -> str:
        return "".join(self.deltas).rpartition("\x00restart")[2]


@dataclass(frozen=True)
class Tool:
    name: str = "lookup"
    description: str = "Look a word up."
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        }
    )


def anthropic(fake: FakeLLM, cache: PromptCache | None = None, **kw: Any) -> AnthropicClient:
    args: dict[str, Any] = {
        "model": "claude-test",
        "api_key": "k",
        "base_url": fake.base_url,
        "max_tokens": 256,
        "timeout_s": 10.0,
        "max_retries": 0,
        "context_window": 200_000,
        "client": KIND["client"],
    }
    client = AnthropicClient(WireSettings(**(args | kw)), cache=cache or PromptCache())
    client._transport._sleep = _no_wait  # type: ignore[attr-defined]
    return client


def openai(fake: FakeLLM, **kw: Any) -> OpenAIClient:
    args: dict[str, Any] = {
        "model": "gpt-test",
        "api_key": "k",
        "base_url": fake.openai_base_url,
        "max_tokens": 256,
        "timeout_s": 10.0,
        "max_retries": 0,
        "context_window": 128_000,
        "client": KIND["client"],
    }
    client = OpenAIClient(WireSettings(**(args | kw)))
    client._transport._sleep = _no_wait  # type: ignore[attr-defined]
    return client


async def _no_wait(seconds: float) -> None:
    return None


CLIENTS = [
    pytest.param(anthropic, "/v1/messages", id="anthropic"),
    pytest.param(openai, "/v1/chat/completions", id="openai"),
]


# ---- the reply is the non-streamed one -----------------------------------------------------------


@pytest.mark.parametrize("make, path", CLIENTS)
@pytest.mark.parametrize(
    "answer",
    [
        Reply(LONG),
        ToolCalls(
            [
                ToolCall("lookup", {"word": "ünï"}, id="call_1"),
                ToolCall("lookup", {"word": "b" * 70}, id="call_2"),
            ],
            text="Let me look both up.",
        ),
    ],
    ids=["text", "tool-calls"],
)
async def test_a_streamed_reply_equals_the_non_streamed_one(
    make: Any, path: str, answer: Any
) -> None:
    async with FakeLLM(cache=True, stream_chunk_chars=7) as fake:
        client = make(fake)
        sink = Sink()
        try:
            fake.script(answer)
            plain = await client.complete(system=SYSTEM, messages=HISTORY, tools=[Tool()])
            fake.forget()  # the same cache state for the second request
            fake.script(answer)
            streamed = await client.complete(
                system=SYSTEM, messages=HISTORY, tools=[Tool()], stream=sink
            )
        finally:
            await client.close()
    assert streamed == plain
    assert "".join(sink.deltas) == plain.text and len(sink.deltas) >= (
        len(plain.text) // 7 if plain.text else 0
    )
    request = fake.calls[-1].body
    assert request["stream"] is True and "stream" not in fake.calls[0].body
    if path == "/v1/chat/completions":
        assert request["stream_options"] == {"include_usage": True}  # usage comes in the last chunk


@pytest.mark.parametrize("make, path", CLIENTS)
async def test_cache_read_and_write_are_counted_from_the_stream(make: Any, path: str) -> None:
    async with FakeLLM(cache=True) as fake:
        client = make(fake)
        try:
            first = await client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=Sink())
            second = await client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=Sink())
        finally:
            await client.close()
    reported = fake.usages
    assert (first.usage.cache_read_tokens, second.usage.cache_read_tokens) == (
        reported[0].cache_read,
        reported[1].cache_read,
    )
    assert (
        second.usage.cache_read_tokens > 0
        and second.usage.output_tokens == reported[1].output_tokens
    )
    if path == "/v1/messages":
        assert first.usage.cache_write_tokens == reported[0].cache_creation > 0
        assert first.usage.input_tokens == reported[0].input_tokens


@pytest.mark.parametrize("make, path", CLIENTS)
async def test_text_reaches_the_sink_while_the_model_is_still_writing(make: Any, path: str) -> None:
    gate = StreamGate()
    async with FakeLLM(stream_chunk_chars=5) as fake:
        client = make(fake)
        sink = Sink()
        fake.script(Paced(Reply("one two three four"), gate=gate))
        try:
            call = asyncio.ensure_future(
                client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=sink)
            )
            gate.release(1)
            while "".join(sink.deltas) != "one t":
                await asyncio.sleep(0.005)
            assert not call.done() and gate.waiting == 1  # the model has not written the rest yet
            gate.release_all()
            reply = await asyncio.wait_for(call, 10)
        finally:
            await client.close()
    assert reply.text == "".join(sink.deltas) == "one two three four"


# ---- retries and the fallback --------------------------------------------------------------------


@pytest.mark.parametrize("make, path", CLIENTS)
@pytest.mark.parametrize(
    "fault",
    [CutStream(after=4, then=Reply(LONG)), StreamError(after=4, then=Reply(LONG))],
    ids=["cut", "error-event"],
)
async def test_a_stream_that_breaks_midway_is_tried_again_from_the_start(
    make: Any, path: str, fault: Any
) -> None:
    async with FakeLLM() as fake:
        client = make(fake, max_retries=2)
        sink = Sink()
        fake.script(fault, Reply(LONG))
        try:
            reply = await client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=sink)
        finally:
            await client.close()
    assert reply.text == LONG and len(fake.calls) == 2
    # the preview starts over with the retry
    assert sink.restarts == 1 and sink.since_restart == LONG


@pytest.mark.parametrize("make, path", CLIENTS)
async def test_a_broken_stream_without_retries_left_is_unavailable(make: Any, path: str) -> None:
    async with FakeLLM() as fake:
        client = make(fake)
        fake.script(CutStream(after=4, then=Reply(LONG)))
        try:
            with pytest.raises(LLMUnavailable):
                await client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=Sink())
        finally:
            await client.close()


@pytest.mark.parametrize("make, path", CLIENTS)
async def test_a_429_before_the_stream_is_retried(make: Any, path: str) -> None:
    async with FakeLLM() as fake:
        client = make(fake, max_retries=1)
        fake.fail(path, Fault(429, headers={"retry-after-ms": "5"}))
        try:
            reply = await client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=Sink())
        finally:
            await client.close()
    assert reply.text == "echo: last question [users=2]" and len(fake.calls) == 2


async def test_the_fallback_model_streams_after_the_primary_failed() -> None:
    async with FakeLLM() as fake:
        client = FallbackClient(anthropic(fake), openai(fake))
        sink = Sink()
        fake.script(CutStream(after=4, then=Reply(LONG)), Reply("from the fallback"))
        try:
            reply = await client.complete(system=SYSTEM, messages=HISTORY, tools=[], stream=sink)
        finally:
            await client.close()
    assert (reply.provider, reply.text) == ("openai", "from the fallback")
    assert sink.restarts == 1 and sink.since_restart == "from the fallback"


# ---- the decoder and assemblers on their own -----------------------------------------------------


def test_sse_lines_are_put_back_together_across_reads() -> None:
    decoder = SseDecoder()
    raw = (
        b': a comment\r\nevent: message_start\r\ndata: {"a":\r\n'
        b"retry: 10\n\n"
        b"data: line one\ndata: line two\n\ndata: [DONE]"
    )
    events = [e for i in range(len(raw)) for e in decoder.feed(raw[i : i + 1])] + decoder.end()
    assert events == [("message_start", '{"a":'), ("", "line one\nline two"), ("", "[DONE]")]


def test_a_utf8_character_split_between_reads_survives() -> None:
    decoder = SseDecoder()
    raw = 'data: {"t": "✓"}\n\n'.encode()
    cut = raw.index("✓".encode()) + 1
    assert decoder.feed(raw[:cut]) == [] and decoder.feed(raw[cut:]) == [("", '{"t": "✓"}')]


def test_an_anthropic_stream_without_its_stop_is_incomplete() -> None:
    assembler = AnthropicAssembler("m", None)
    assembler.feed(
        "message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}
    )
    with pytest.raises(LLMUnavailable, match="message_stop"):
        assembler.answer()


def test_openai_tool_call_deltas_are_joined_by_index() -> None:
    assembler = OpenAIAssembler("m", None)
    for delta in (
        {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "two", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "one", "arguments": '{"x"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
    ):
        assembler.feed("", {"choices": [{"index": 0, "delta": delta}]})
    assembler.feed("", {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    message = assembler.answer()["choices"][0]["message"]
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
    ] == [("a", "one", '{"x": 1}'), ("b", "two", "{}")]

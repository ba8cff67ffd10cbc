"""Model clients: cache breakpoints, usage and cache
accounting, tool round trips and error translation.

Every client test runs twice: through the gateway's own HTTP transport (the default) and through the
official SDKs (`model.client: sdk`), both for real against the fake LLM server on 127.0.0.1;
`max_retries=0` so a fault is seen once.
"""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.errors import LLMRejected, LLMTimeout, LLMUnavailable
from gateway.llm.anthropic_wire import (
    AnthropicClient,
    PromptCache,
    add_cache_breakpoints,
    anthropic_messages,
)
from gateway.llm.factory import FallbackClient, build_llm
from gateway.llm.openai_wire import OpenAIClient
from gateway.llm.transport import WireSettings
from gateway.llm.types import ChatMessage
from tests.fakes.base import ConnectionReset, Delay, Fault, Malformed
from tests.fakes.llm import FakeLLM, Reply, ToolCall, prompt_elements
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

SYSTEM = "You are a test assistant. " * 20
KIND: dict[str, str] = {"client": "native"}


@pytest.fixture(autouse=True, params=["native", "sdk"])
def client_kind(request: pytest.FixtureRequest) -> str:
    """Which transport the `anthropic(...)` / `openai(...)` helpers below build."""
    KIND["client"] = request.param
    return str(request.param)


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
    return AnthropicClient(WireSettings(**(args | kw)), cache=cache or PromptCache())


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
    return OpenAIClient(WireSettings(**(args | kw)))


def conversation(turns: int) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for n in range(turns):
        out += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    out.append({"role": "user", "content": "last question"})
    return out


def marked(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e, cc in prompt_elements(body, "anthropic") if cc]


# ---- breakpoints: pure ---------------------------------------------------------------------------


def test_breakpoints_on_the_system_prompt_and_the_last_three_messages() -> None:
    wire = anthropic_messages(conversation(5))
    before = copy.deepcopy(wire)
    system, out = add_cache_breakpoints(SYSTEM, wire, ttl="5m")

    assert system == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    flags = [[("cache_control" in b) for b in m["content"]] for m in out]
    assert flags == [[False]] * 8 + [[True]] * 3
    assert [m["content"][0]["text"] for m in out[-3:]] == [
        "question 4",
        "answer 4",
        "last question",
    ]
    assert wire == before  # the caller's list and blocks are not touched
    assert all("cache_control" not in b for m in wire for b in m["content"])


def test_breakpoint_goes_on_the_last_block_of_a_message_with_several() -> None:
    history: list[ChatMessage] = [
        {"role": "user", "content": "look up 'cat'"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "t1", "name": "lookup", "arguments": '{"word": "cat"}'},
                {"id": "t2", "name": "lookup", "arguments": '{"word": "dog"}'},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "a feline"},
        {"role": "tool", "tool_call_id": "t2", "content": "a canine"},
    ]
    _, out = add_cache_breakpoints(SYSTEM, anthropic_messages(history), ttl="5m")
    assert [
        [b["type"] + ("*" if "cache_control" in b else "") for b in m["content"]] for m in out
    ] == [["text*"], ["text", "tool_use", "tool_use*"], ["tool_result", "tool_result*"]]


@pytest.mark.parametrize("turns", [0, 1, 2, 10])
def test_never_more_than_four_breakpoints(turns: int) -> None:
    system, out = add_cache_breakpoints(SYSTEM, anthropic_messages(conversation(turns)), ttl="5m")
    count = sum("cache_control" in b for b in system) + sum(
        "cache_control" in b for m in out for b in m["content"]
    )
    assert count == min(4, 1 + 2 * turns + 1)


def test_one_hour_ttl_adds_the_ttl_field() -> None:
    system, out = add_cache_breakpoints(SYSTEM, anthropic_messages(conversation(2)), ttl="1h")
    markers = [b["cache_control"] for b in system] + [
        b["cache_control"] for m in out for b in m["content"] if "cache_control" in b
    ]
    assert markers == [{"type": "ephemeral", "ttl": "1h"}] * 4
    assert markers[0] is not markers[1]  # one dict per block, never shared


# ---- breakpoints: on the wire --------------------------------------------------------------------


async def test_anthropic_request_carries_the_breakpoints_and_history_is_untouched(
    fake_llm: FakeLLM,
) -> None:
    client = anthropic(fake_llm, PromptCache(ttl="1h"))
    history = conversation(6)
    before = copy.deepcopy(history)
    try:
        await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
    finally:
        await client.close()
    body = fake_llm.last_request()
    assert history == before
    assert body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert [e.get("text") for e in marked(body)] == [
        SYSTEM,
        "question 5",
        "answer 5",
        "last question",
    ]
    assert all("cache_control" not in t for t in body["tools"])


async def test_caching_disabled_sends_no_markers(fake_llm: FakeLLM) -> None:
    client = anthropic(fake_llm, PromptCache(enabled=False))
    try:
        await client.complete(system=SYSTEM, messages=conversation(3), tools=[])
    finally:
        await client.close()
    assert marked(fake_llm.last_request()) == []


async def test_config_ttl_reaches_the_wire(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, base_url=fake_llm.base_url, extra="prompt_caching:\n  ttl: 1h\n")
    client = build_llm(load_config(home), {}, probe_ollama=False)
    try:
        await client.complete(system=SYSTEM, messages=conversation(1), tools=[])
    finally:
        await client.close()
    assert fake_llm.last_request()["system"][0]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "1h",
    }


async def test_openai_request_has_no_markers_and_cached_tokens_are_read() -> None:
    async with FakeLLM(cache=True) as fake:
        client = openai(fake)
        history = conversation(3)
        try:
            first = await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
            second = await client.complete(
                system=SYSTEM,
                messages=[
                    *history,
                    {"role": "assistant", "content": "x"},
                    {"role": "user", "content": "y"},
                ],
                tools=[Tool()],
            )
        finally:
            await client.close()
        bodies = fake.openai_requests()
        usages = fake.usages
    assert "cache_control" not in json.dumps(bodies)
    assert bodies[0]["messages"][0] == {"role": "system", "content": SYSTEM}
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == usages[1].cache_read > 0
    # input_tokens is the uncached part, so input + cache_read is the whole prompt.
    assert second.usage.input_tokens + second.usage.cache_read_tokens == usages[1].prompt_total
    assert second.usage.output_tokens == usages[1].output_tokens


async def test_anthropic_cache_read_and_write_are_reported() -> None:
    async with FakeLLM(cache=True) as fake:
        client = anthropic(fake)
        try:
            first = await client.complete(system=SYSTEM, messages=conversation(1), tools=[])
            second = await client.complete(system=SYSTEM, messages=conversation(2), tools=[])
        finally:
            await client.close()
        usages = fake.usages
    assert (first.usage.cache_read_tokens, first.usage.cache_write_tokens) == (
        0,
        usages[0].cache_creation,
    )
    assert first.usage.cache_write_tokens > 0
    assert second.usage.cache_read_tokens == usages[1].cache_read > 0
    assert second.usage.cache_write_tokens == usages[1].cache_creation


async def test_cache_tokens_are_summed_per_session_in_the_sessions_row(home: Path) -> None:
    async with FakeLLM(cache=True) as fake:
        write_config(home, base_url=fake.base_url)
        adapter = RecordingAdapter()
        gw = gateway_for(home, [adapter])
        try:
            fake.script(
                ToolCall(
                    "memory", {"action": "add", "target": "memory", "content": "Likes trains."}
                ),
                Reply("Saved."),
            )
            for text in ("remember trains", "two", "three"):
                await gw.sessions.submit(inbound(text))
                await gw.sessions.wait_idle()
            row = gw.store.active_session("cli:dm:c1")
            calls = gw.store.all(
                "SELECT purpose, cache_read_tokens, cache_write_tokens FROM llm_calls ORDER BY id"
            )
        finally:
            await gw.llm.close()
            gw.store.close()
        usages = fake.usages
    assert row is not None and len(usages) == 4
    assert row.cache_read_tokens == sum(u.cache_read for u in usages) > 0
    assert row.cache_write_tokens == sum(u.cache_creation for u in usages) > 0
    assert row.input_tokens == sum(u.input_tokens for u in usages)
    assert row.output_tokens == sum(u.output_tokens for u in usages)
    assert [(c["purpose"], c["cache_read_tokens"], c["cache_write_tokens"]) for c in calls] == [
        ("turn", u.cache_read, u.cache_creation) for u in usages
    ]


# ---- tool round trips ----------------------------------------------------------------------------


async def round_trip(client: Any, fake: FakeLLM) -> tuple[Any, Any, list[ChatMessage]]:
    fake.script(ToolCall("lookup", {"word": "cat"}), Reply("A cat is a feline."))
    history: list[ChatMessage] = [{"role": "user", "content": "what is a cat?"}]
    first = await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
    [call] = first.tool_calls
    history += [
        {
            "role": "assistant",
            "content": first.text,
            "tool_calls": [{"id": call.id, "name": call.name, "arguments": call.arguments}],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "cat: a small feline"},
    ]
    second = await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
    return first, second, history


async def test_anthropic_tool_call_round_trip(fake_llm: FakeLLM) -> None:
    client = anthropic(fake_llm)
    try:
        first, second, _ = await round_trip(client, fake_llm)
    finally:
        await client.close()
    call = first.tool_calls[0]
    assert (call.name, json.loads(call.arguments), first.stop_reason) == (
        "lookup",
        {"word": "cat"},
        "tool_use",
    )
    assert (second.text, second.tool_calls, second.stop_reason) == (
        "A cat is a feline.",
        (),
        "end_turn",
    )
    body = fake_llm.last_request()
    assert body["tools"] == [
        {
            "name": "lookup",
            "description": "Look a word up.",
            "input_schema": dict(Tool().parameters),
        }
    ]
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == [
        {
            "type": "tool_use",
            "id": call.id,
            "name": "lookup",
            "input": {"word": "cat"},
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert msgs[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": "cat: a small feline",
            "cache_control": {"type": "ephemeral"},
        }
    ]


async def test_openai_tool_call_round_trip(fake_llm: FakeLLM) -> None:
    client = openai(fake_llm)
    try:
        first, second, _ = await round_trip(client, fake_llm)
    finally:
        await client.close()
    call = first.tool_calls[0]
    assert (call.name, json.loads(call.arguments), first.stop_reason) == (
        "lookup",
        {"word": "cat"},
        "tool_calls",
    )
    assert (second.text, second.stop_reason, second.provider) == (
        "A cat is a feline.",
        "stop",
        "openai",
    )
    msgs = fake_llm.last_request()["messages"]
    assert msgs[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": "lookup", "arguments": call.arguments},
            }
        ],
    }
    assert msgs[3] == {"role": "tool", "tool_call_id": call.id, "content": "cat: a small feline"}


async def test_tool_error_results_are_flagged_on_the_anthropic_wire(fake_llm: FakeLLM) -> None:
    client = anthropic(fake_llm)
    history: list[ChatMessage] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "t1", "name": "lookup", "arguments": "{bad"}],
        },
        {
            "role": "tool",
            "tool_call_id": "t1",
            "content": "arguments are not JSON",
            "is_error": True,
        },
    ]
    try:
        await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
    finally:
        await client.close()
    msgs = fake_llm.last_request()["messages"]
    # invalid JSON from the model is sent back as an empty object
    assert msgs[1]["content"][0]["input"] == {}
    assert msgs[2]["content"][0]["is_error"] is True


# ---- errors --------------------------------------------------------------------------------------

CLIENTS = [
    pytest.param(anthropic, "/v1/messages", id="anthropic"),
    pytest.param(openai, "/v1/chat/completions", id="openai"),
]


@pytest.mark.parametrize("make, path", CLIENTS)
@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_overload_and_server_errors_are_unavailable(
    fake_llm: FakeLLM, make: Any, path: str, status: int
) -> None:
    client = make(fake_llm)
    fake_llm.fail(path, Fault(status))
    try:
        with pytest.raises(LLMUnavailable, match=f"HTTP {status}"):
            await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()


@pytest.mark.parametrize("make, path", CLIENTS)
@pytest.mark.parametrize("status", [400, 401, 403])
async def test_client_errors_are_rejections(
    fake_llm: FakeLLM, make: Any, path: str, status: int
) -> None:
    client = make(fake_llm)
    fake_llm.fail(path, Fault(status))
    try:
        with pytest.raises(LLMRejected, match=f"HTTP {status}"):
            await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()


@pytest.mark.parametrize("make", [anthropic, openai])
async def test_wrong_api_key_is_a_rejection(make: Any) -> None:
    async with FakeLLM(api_key="right") as fake:
        client = make(fake)
        try:
            with pytest.raises(LLMRejected, match="HTTP 401"):
                await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
        finally:
            await client.close()


@pytest.mark.parametrize("make, path", CLIENTS)
async def test_timeout(fake_llm: FakeLLM, make: Any, path: str) -> None:
    client = make(fake_llm, timeout_s=0.2)
    fake_llm.fail(path, Delay(1.0))
    try:
        with pytest.raises(LLMTimeout, match="timed out"):
            await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()


@pytest.mark.parametrize("make, path", CLIENTS)
@pytest.mark.parametrize("fault", [Malformed(), ConnectionReset()], ids=["malformed", "reset"])
async def test_malformed_body_and_dropped_connection_are_unavailable(
    fake_llm: FakeLLM, make: Any, path: str, fault: Any
) -> None:
    client = make(fake_llm)
    fake_llm.fail(path, fault)
    try:
        with pytest.raises(LLMUnavailable):
            await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()


async def test_retries_are_used_before_giving_up(fake_llm: FakeLLM) -> None:
    client = anthropic(fake_llm, max_retries=1)
    fake_llm.fail("/v1/messages", Fault(529, headers={"retry-after-ms": "1"}))
    try:
        reply = await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()
    assert reply.text == "echo: last question [users=1]"
    assert len(fake_llm.anthropic_requests()) == 2


# ---- fallback ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault", [Fault(529), Fault(429), Delay(1.0)], ids=["overloaded", "rate", "timeout"]
)
async def test_fallback_model_answers_when_the_primary_fails(fake_llm: FakeLLM, fault: Any) -> None:
    client = FallbackClient(anthropic(fake_llm, timeout_s=0.2), openai(fake_llm))
    fake_llm.fail("/v1/messages", fault)
    try:
        reply = await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()
    assert (reply.provider, reply.model, reply.text) == (
        "openai",
        "gpt-test",
        "echo: last question [users=1]",
    )
    assert [c.path for c in fake_llm.calls] == ["/v1/messages", "/v1/chat/completions"]


async def test_fallback_is_not_used_for_a_rejected_request(fake_llm: FakeLLM) -> None:
    client = FallbackClient(anthropic(fake_llm), openai(fake_llm))
    fake_llm.fail("/v1/messages", Fault(400))
    try:
        with pytest.raises(LLMRejected):
            await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()
    assert [c.path for c in fake_llm.calls] == ["/v1/messages"]


async def test_both_failing_raises_the_fallbacks_error(fake_llm: FakeLLM) -> None:
    client = FallbackClient(anthropic(fake_llm), openai(fake_llm))
    fake_llm.fail("*", Fault(529), Fault(503))
    try:
        with pytest.raises(LLMUnavailable, match="gpt-test: HTTP 503"):
            await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()


async def test_configured_fallback_is_built_and_used(home: Path, fake_llm: FakeLLM) -> None:
    path = write_config(home, base_url=fake_llm.base_url)
    fallback = textwrap.indent(
        textwrap.dedent(f"""\
        fallback:
          provider: openai
          name: gpt-backup
          base_url: {fake_llm.openai_base_url}
          api_key: k2
          max_retries: 0
        """),
        "  ",
    )
    path.write_text(path.read_text().replace("model:\n", f"model:\n{fallback}", 1))
    config = load_config(home)
    assert config.model is not None and config.model.fallback is not None
    client = build_llm(config, {}, probe_ollama=False)
    assert isinstance(client, FallbackClient)
    fake_llm.fail("/v1/messages", Fault(529))
    try:
        reply = await client.complete(system=SYSTEM, messages=conversation(0), tools=[])
    finally:
        await client.close()
    assert (reply.model, fake_llm.calls[-1].headers["Authorization"]) == ("gpt-backup", "Bearer k2")


def test_wire_settings_never_show_the_key() -> None:
    wire = WireSettings(model="claude-test", api_key="sk-ant-secret")
    assert "sk-ant-secret" not in repr(wire)
    assert "claude-test" in repr(wire)

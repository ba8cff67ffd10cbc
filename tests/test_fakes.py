"""Self-test of the wire fakes in tests/fakes/: each one driven by the real client library it imitates."""

from __future__ import annotations

import json

import anthropic
import httpx2
import openai
import pytest

from tests.fakes.fixtures import fake_llm  # noqa: F401  (fixture)
from tests.fakes.llm import (CutStream, Delay, Fault, FakeLLM, Malformed, Reply, ToolCall, ToolCalls,
                             estimate_tokens, prompt_elements)


# ------------------------------------------------------------------------------------------------ LLM
def _openai(fake: FakeLLM, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sk-test", base_url=fake.openai_base_url, max_retries=retries, timeout=5)


def _anthropic(fake: FakeLLM, retries: int = 0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=fake.base_url, max_retries=retries, timeout=5)


async def test_openai_default_echo_stream_tools_and_retry(fake_llm: FakeLLM) -> None:
    client = _openai(fake_llm, retries=2)
    history = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "x"},
               {"role": "user", "content": "two"}]
    r = await client.chat.completions.create(model="m", messages=history)
    assert r.choices[0].message.content == "echo: two [users=2]"
    assert r.usage is not None and r.usage.prompt_tokens == sum(estimate_tokens(m) for m in history)
    assert r.usage.completion_tokens == len("echo: two [users=2]") // 4

    fake_llm.script(ToolCalls([ToolCall("get_time", {"tz": "UTC"}), ToolCall("add", {"a": 1})], text="hm"))
    stream = await client.chat.completions.create(model="m", messages=history, stream=True,
                                                  stream_options={"include_usage": True})
    text, args, names, usage = "", {}, {}, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            names[d.index] = d.function.name or names.get(d.index)
            args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == "hm" and names == {0: "get_time", 1: "add"}
    assert json.loads(args[0]) == {"tz": "UTC"} and json.loads(args[1]) == {"a": 1} and usage is not None

    fake_llm.script(Fault(429, headers={"retry-after-ms": "5"}), Reply("after retry"))
    n = len(fake_llm.calls)
    r = await client.chat.completions.create(model="m", messages=history)
    assert r.choices[0].message.content == "after retry" and len(fake_llm.calls) - n == 2

    bad = [{"role": "tool", "tool_call_id": "call_x", "content": "orphan"}]
    with pytest.raises(openai.BadRequestError, match="role 'tool'"):
        await client.chat.completions.create(model="m", messages=bad)
    await client.close()


async def test_openai_faults(fake_llm: FakeLLM) -> None:
    client = _openai(fake_llm)
    msgs = [{"role": "user", "content": "hi"}]
    fake_llm.script(Malformed(), CutStream(after=2), Delay(1.0))
    with pytest.raises(json.JSONDecodeError):  # the SDK lets the raw ValueError through
        await client.chat.completions.create(model="m", messages=msgs)
    with pytest.raises((openai.APIConnectionError, httpx2.RemoteProtocolError)):
        stream = await client.chat.completions.create(model="m", messages=msgs, stream=True)
        async for _ in stream:
            pass
    with pytest.raises(openai.APITimeoutError):
        await client.with_options(timeout=0.2).chat.completions.create(model="m", messages=msgs)
    fake_llm.script(lambda body: Reply(f"saw {len(body['messages'])}"))
    r = await client.chat.completions.create(model="m", messages=msgs)
    assert r.choices[0].message.content == "saw 1"
    await client.close()


SYSTEM = [{"type": "text", "text": "You are a gateway. " * 100, "cache_control": {"type": "ephemeral"}}]


async def test_anthropic_echo_tools_stream_and_errors(fake_llm: FakeLLM) -> None:
    client = _anthropic(fake_llm, retries=1)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    r = await client.messages.create(model="c", max_tokens=50, system="sys", messages=msgs)
    assert r.content[0].text == "echo: hello [users=1]" and r.stop_reason == "end_turn"
    assert fake_llm.calls[-1].headers["Authorization"] == "Bearer sk-ant-test"

    fake_llm.script(ToolCall("get_time", {"tz": "UTC"}, id="toolu_1"))
    async with client.messages.stream(model="c", max_tokens=50, messages=msgs) as s:
        final = await s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].input == {"tz": "UTC"}
    msgs += [{"role": "assistant", "content": [b.model_dump() for b in final.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}]}]
    async with client.messages.stream(model="c", max_tokens=50, messages=msgs) as s:
        text = "".join([t async for t in s.text_stream])
    assert text == "echo: hello [users=2]"

    with pytest.raises(anthropic.BadRequestError, match="tool_result"):
        await client.messages.create(model="c", max_tokens=5, messages=msgs[:1] + msgs[2:])
    fake_llm.script(Fault(529, headers={"retry-after-ms": "5"}), Fault(529, headers={"retry-after-ms": "5"}))
    with pytest.raises(anthropic.APIStatusError) as err:
        await client.messages.create(model="c", max_tokens=5, messages=msgs[:1])
    assert err.value.status_code == 529
    await client.close()


async def test_anthropic_prefix_cache_emulation() -> None:
    async with FakeLLM(cache=True) as fake:
        client = _anthropic(fake)
        turn1 = [{"role": "user", "content": [{"type": "text", "text": "first question",
                                                "cache_control": {"type": "ephemeral"}}]}]
        r1 = await client.messages.create(model="c", max_tokens=50, system=SYSTEM, messages=turn1)
        body1 = fake.anthropic_requests()[-1]
        sizes = [estimate_tokens(e) for e, _ in prompt_elements(body1, "anthropic")]
        assert r1.usage.cache_read_input_tokens == 0
        assert r1.usage.cache_creation_input_tokens == sum(sizes) and r1.usage.input_tokens == 0

        # Turn 2 moves the breakpoint to the newest message: the whole of turn 1 is read back.
        turn2 = [{"role": "user", "content": [{"type": "text", "text": "first question"}]},
                 {"role": "assistant", "content": [{"type": "text", "text": r1.content[0].text}]},
                 {"role": "user", "content": [{"type": "text", "text": "second",
                                               "cache_control": {"type": "ephemeral"}}]}]
        r2 = await client.messages.create(model="c", max_tokens=50, system=SYSTEM, messages=turn2)
        sizes2 = [estimate_tokens(e) for e, _ in prompt_elements(fake.anthropic_requests()[-1], "anthropic")]
        assert r2.usage.cache_read_input_tokens == sum(sizes)
        assert r2.usage.cache_creation_input_tokens == sum(sizes2) - sum(sizes)
        assert r2.usage.input_tokens == 0

        # Same system, new conversation without a message breakpoint: only the system prefix is read.
        r3 = await client.messages.create(model="c", max_tokens=50, system=SYSTEM,
                                          messages=[{"role": "user", "content": "other"}])
        assert r3.usage.cache_read_input_tokens == sizes[0] and r3.usage.cache_creation_input_tokens == 0
        fake.forget()
        r4 = await client.messages.create(model="c", max_tokens=50, system=SYSTEM,
                                          messages=[{"role": "user", "content": "other"}])
        assert r4.usage.cache_read_input_tokens == 0 and r4.usage.cache_creation_input_tokens == sizes[0]
        await client.close()

"""The gateway's own model transport (gateway/llm/http.py): retry policy, headers, odd bodies, and
that it puts the same request on the wire as the official SDKs do.

Runs against the fake LLM server on 127.0.0.1; waits between retries go to an injected sleep, not
the clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.errors import LLMRejected, LLMTimeout, LLMUnavailable
from gateway.llm.anthropic_wire import AnthropicClient
from gateway.llm.factory import build_llm
from gateway.llm.http import (
    HttpTransport,
    backoff_s,
    decode_answer,
    encode_body,
    error_message,
    retry_after_s,
)
from gateway.llm.openai_wire import OpenAIClient
from gateway.llm.transport import WireSettings
from gateway.llm.types import ChatMessage
from tests.fakes.base import ConnectionReset, Delay, Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import write_config

SYSTEM = "You are a test assistant. " * 20
HISTORY: list[ChatMessage] = [
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": "one"},
    {"role": "user", "content": "last question"},
]


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def native(fake: FakeLLM, sleeps: Sleeps, **kw: Any) -> AnthropicClient:
    options: dict[str, Any] = {
        "model": "claude-test",
        "api_key": "k",
        "base_url": fake.base_url,
        "max_tokens": 256,
        "timeout_s": 5.0,
        "max_retries": 2,
        "context_window": 200_000,
    }
    client = AnthropicClient(WireSettings(**(options | kw)))
    transport = client._transport
    assert isinstance(transport, HttpTransport)
    transport._sleep = sleeps
    return client


# ---- the retry policy ----------------------------------------------------------------------------


def test_retry_after_headers_are_read_like_the_sdks_read_them() -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert (
        retry_after_s(
            {
                "retry-after": format_datetime(
                    datetime(2026, 11, 29, 12, 0, 7, tzinfo=UTC), usegmt=True
                )
            },
            now=now,
        )
        == 7.0
    )
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_backoff_doubles_to_eight_seconds_with_up_to_a_quarter_off() -> None:
    assert [backoff_s(n, rng=lambda: 0.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff_s(0, rng=lambda: 1.0) == 0.375
    assert backoff_s(10_000, rng=lambda: 0.0) == 8.0


async def test_a_429_is_retried_after_the_time_the_server_asked_for(fake_llm: FakeLLM) -> None:
    sleeps = Sleeps()
    client = native(fake_llm, sleeps)
    fake_llm.fail(
        "/v1/messages",
        Fault(429, headers={"retry-after": "2"}),
        Fault(529, headers={"retry-after-ms": "250"}),
    )
    try:
        reply = await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert reply.text == "echo: last question [users=2]"
    assert sleeps.delays == [2.0, 0.25]
    assert len(fake_llm.anthropic_requests()) == 3


async def test_without_a_retry_after_the_backoff_is_used(fake_llm: FakeLLM) -> None:
    sleeps = Sleeps()
    client = native(fake_llm, sleeps)
    fake_llm.fail("/v1/messages", Fault(500), ConnectionReset())
    try:
        reply = await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert reply.text.startswith("echo: last question")
    assert len(sleeps.delays) == 2
    assert 0.375 <= sleeps.delays[0] <= 0.5 and 0.75 <= sleeps.delays[1] <= 1.0


async def test_retries_run_out_with_the_last_error(fake_llm: FakeLLM) -> None:
    sleeps = Sleeps()
    client = native(fake_llm, sleeps, max_retries=1)
    fake_llm.fail("/v1/messages", Fault(503), Fault(502))
    try:
        with pytest.raises(LLMUnavailable, match="claude-test: HTTP 502"):
            await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert len(sleeps.delays) == 1 and len(fake_llm.anthropic_requests()) == 2


@pytest.mark.parametrize(
    "fault, status",
    [
        (Fault(500, headers={"x-should-retry": "false"}), 500),  # the provider says not to
        # minutes: fail now, so the fallback can answer
        (Fault(429, headers={"retry-after": "600"}), 429),
    ],
    ids=["x-should-retry-false", "retry-after-of-minutes"],
)
async def test_errors_that_are_not_retried(fake_llm: FakeLLM, fault: Fault, status: int) -> None:
    sleeps = Sleeps()
    client = native(fake_llm, sleeps)
    fake_llm.fail("/v1/messages", fault)
    try:
        with pytest.raises(LLMUnavailable, match=f"HTTP {status}"):
            await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert sleeps.delays == [] and len(fake_llm.calls) == 1


async def test_a_timeout_is_retried_then_reported(fake_llm: FakeLLM) -> None:
    sleeps = Sleeps()
    client = native(fake_llm, sleeps, timeout_s=0.2, max_retries=1)
    fake_llm.fail("/v1/messages", Delay(1.0), Delay(1.0))
    try:
        with pytest.raises(LLMTimeout, match="claude-test: timed out"):
            await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert len(sleeps.delays) == 1


async def test_a_bad_request_is_not_retried_and_says_what_the_provider_said(
    fake_llm: FakeLLM,
) -> None:
    sleeps = Sleeps()
    client = native(fake_llm, sleeps)
    fake_llm.fail(
        "/v1/messages",
        Fault(
            400,
            body={
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "messages: roles must alternate",
                },
            },
        ),
    )
    try:
        with pytest.raises(LLMRejected, match="HTTP 400: messages: roles must alternate"):
            await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert sleeps.delays == []


def test_error_bodies_that_are_not_the_envelope_still_give_a_sentence() -> None:
    assert error_message(b'{"error": {"message": "overloaded"}}') == "overloaded"
    assert error_message(b'{"error": "bad key"}') == "bad key"
    assert error_message(b"<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"
    assert error_message(b"") == "no body"


# ---- the request on the wire ---------------------------------------------------------------------


async def test_headers_name_the_gateway_and_carry_the_key(fake_llm: FakeLLM) -> None:
    anth = native(fake_llm, Sleeps(), api_key="sk-ant")
    oai = OpenAIClient(
        WireSettings(
            model="gpt-test",
            api_key="sk-oai",
            base_url=fake_llm.openai_base_url,
            max_tokens=64,
            timeout_s=5.0,
            max_retries=0,
            context_window=128_000,
        )
    )
    try:
        await anth.complete(system=SYSTEM, messages=HISTORY, tools=[])
        await oai.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await anth.close()
        await oai.close()
    first, second = fake_llm.calls
    assert (first.headers["x-api-key"], first.headers["anthropic-version"]) == (
        "sk-ant",
        "2023-06-01",
    )
    assert first.headers["User-Agent"].startswith("agent-gateway")
    assert second.headers["Authorization"] == "Bearer sk-oai"
    assert second.headers["Content-Type"] == "application/json"


def test_a_lone_surrogate_is_escaped_instead_of_failing_the_turn() -> None:
    body = {"messages": [{"role": "user", "content": "bad \ud800 half, ok é"}]}
    raw = encode_body(body)
    assert json.loads(raw) == body
    # UTF-8, not \\u escapes
    assert encode_body({"text": "é ✓"}).decode("utf-8") == '{"text":"é ✓"}'


TOOL = {
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
    },
}


class Tool:
    name = TOOL["name"]
    description = TOOL["description"]
    parameters = TOOL["parameters"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_native_and_sdk_send_the_same_request_and_read_the_same_reply(
    fake_llm: FakeLLM, provider: str
) -> None:
    replies = {}
    for kind in ("native", "sdk"):
        if provider == "anthropic":
            client: Any = AnthropicClient(
                WireSettings(
                    model="m",
                    api_key="k",
                    base_url=fake_llm.base_url,
                    max_tokens=64,
                    timeout_s=5.0,
                    max_retries=0,
                    context_window=200_000,
                    client=kind,
                )
            )
        else:
            client = OpenAIClient(
                WireSettings(
                    model="m",
                    api_key="k",
                    base_url=fake_llm.openai_base_url,
                    max_tokens=64,
                    timeout_s=5.0,
                    max_retries=0,
                    context_window=128_000,
                    client=kind,
                )
            )
        fake_llm.script(ToolCall("lookup", {"word": "ça"}), Reply("Voilà: **ça** ✓"))
        history: list[ChatMessage] = [{"role": "user", "content": "what is ça? \u200b"}]
        try:
            first = await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
            call = first.tool_calls[0]
            history += [
                {
                    "role": "assistant",
                    "content": first.text,
                    "tool_calls": [{"id": call.id, "name": call.name, "arguments": call.arguments}],
                },
                {"role": "tool", "tool_call_id": call.id, "content": "ça: that"},
            ]
            second = await client.complete(system=SYSTEM, messages=history, tools=[Tool()])
        finally:
            await client.close()
        replies[kind] = (first, second)
    bodies = [c.body for c in fake_llm.calls]
    assert len(bodies) == 4
    assert bodies[0] == bodies[2]

    def same(a: Any, b: Any) -> bool:
        # tool call ids are random per request; everything else must agree
        return bool(
            json.loads(json.dumps(a).replace(a_id, "ID"))
            == json.loads(json.dumps(b).replace(b_id, "ID"))
        )

    a_id, b_id = replies["native"][0].tool_calls[0].id, replies["sdk"][0].tool_calls[0].id
    assert same(bodies[1], bodies[3])
    (n1, n2), (s1, s2) = replies["native"], replies["sdk"]
    assert (n1.tool_calls[0].name, json.loads(n1.tool_calls[0].arguments), n1.stop_reason) == (
        s1.tool_calls[0].name,
        json.loads(s1.tool_calls[0].arguments),
        s1.stop_reason,
    )
    assert (n2.text, n2.usage, n2.stop_reason, n2.model) == (
        s2.text,
        s2.usage,
        s2.stop_reason,
        s2.model,
    )
    assert n2.text == "Voilà: **ça** ✓"


# ---- construction --------------------------------------------------------------------------------


async def test_sdk_base_url_variable_is_honoured_when_the_config_names_none(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, base_url=fake_llm.base_url)
    config = load_config(home)
    assert config.model is not None
    from dataclasses import replace

    config = replace(config, model=replace(config.model, base_url=None))
    client = build_llm(config, {"ANTHROPIC_BASE_URL": fake_llm.base_url}, probe_ollama=False)
    try:
        reply = await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert reply.text.startswith("echo: last question")


async def test_client_sdk_in_the_config_sends_through_the_official_sdk(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, base_url=fake_llm.base_url, extra="")
    path = home / "config.yaml"
    path.write_text(
        path.read_text().replace(
            "  provider: anthropic\n", "  provider: anthropic\n  client: sdk\n"
        )
    )
    config = load_config(home)
    assert config.model is not None and config.model.client == "sdk"
    client = build_llm(config, {}, probe_ollama=False)
    try:
        await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    assert fake_llm.calls[-1].headers["User-Agent"].startswith("AsyncAnthropic/Python")


def test_the_default_client_does_not_import_the_sdks() -> None:
    code = (
        "import sys, gateway.ops.daemon\n"
        "from gateway.llm.anthropic_wire import AnthropicClient\n"
        "from gateway.llm.openai_wire import OpenAIClient\n"
        "from gateway.llm.transport import WireSettings\n"
        "c = AnthropicClient(WireSettings('m', 'k', max_tokens=1, timeout_s=1, max_retries=0))\n"
        "o = OpenAIClient(WireSettings('m', 'k', max_tokens=1, timeout_s=1, max_retries=0))\n"
        "print(sorted(m for m in ('anthropic', 'openai') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


PROXY_VARS = (
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
    "all_proxy",
    "ALL_PROXY",
)


async def ask_an_unresolvable_host() -> str:
    """Only a request that goes through a proxy (the fake) can reach `llm.invalid`."""
    client = AnthropicClient(
        WireSettings(
            model="claude-test",
            api_key="k",
            base_url="http://llm.invalid",
            max_tokens=64,
            timeout_s=5.0,
            max_retries=0,
            context_window=200_000,
        )
    )
    try:
        return (await client.complete(system=SYSTEM, messages=HISTORY, tools=[])).text
    finally:
        await client.close()


async def test_the_proxy_from_the_environment_is_used_and_no_proxy_is_honoured(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", fake_llm.base_url)
    assert (await ask_an_unresolvable_host()).startswith("echo: last question")
    assert fake_llm.calls[-1].path == "/v1/messages"
    monkeypatch.setenv("NO_PROXY", "llm.invalid")
    with pytest.raises(LLMUnavailable, match="cannot connect"):
        await ask_an_unresolvable_host()


def test_an_answer_with_a_lone_surrogate_escape_is_still_read() -> None:
    assert decode_answer(b'{"content": [{"type": "text", "text": "half \\ud800 pair"}]}') == {
        "content": [{"type": "text", "text": "half \ud800 pair"}]
    }
    with pytest.raises(ValueError):
        decode_answer(b'{"ok": tru')


@pytest.mark.parametrize(
    "var, value",
    [("HTTP_PROXY", "{hostport}"), ("ALL_PROXY", "http://{hostport}")],
    ids=["no-scheme", "all-proxy"],
)
async def test_proxy_spellings_the_sdks_accept(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(var, value.format(hostport=fake_llm.base_url.removeprefix("http://")))
    assert (await ask_an_unresolvable_host()).startswith("echo: last question")


async def test_openai_organization_and_project_from_the_environment(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="openai", base_url=fake_llm.openai_base_url)
    env = {"OPENAI_ORG_ID": "org-123", "OPENAI_PROJECT_ID": "proj_456"}
    client = build_llm(load_config(home, env=env), env, probe_ollama=False)
    try:
        await client.complete(system=SYSTEM, messages=HISTORY, tools=[])
    finally:
        await client.close()
    headers = fake_llm.calls[-1].headers
    assert (headers["OpenAI-Organization"], headers["OpenAI-Project"]) == ("org-123", "proj_456")


def test_openai_content_given_as_parts_is_read_as_text() -> None:
    from gateway.llm.openai_wire import openai_reply

    reply = openai_reply(
        {
            "choices": [
                {
                    "message": {
                        "content": [
                            {"type": "thinking", "thinking": "hmm"},
                            {"type": "text", "text": "Hello "},
                            {"type": "text", "text": "there"},
                        ]
                    },
                    "finish_reason": "stop",
                }
            ],
            "model": "m",
        },
        "m",
    )
    assert reply.text == "Hello there"

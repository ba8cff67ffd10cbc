"""SessionModels (gateway/llm/factory.py): the model a conversation chose answers its own turn only,
and everything that reads the agent's model (name, context window, vision) follows the choice; a
choice that is no longer configured or cannot be used falls back to the main model."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import ModelConfig, Secret
from gateway.errors import LLMNotConfigured
from gateway.llm.factory import ModelOption, SessionModels
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.ops.wiring import Gateway
from gateway.sessions.commands import model_choices, model_list
from gateway.sessions.flush import FLUSH_MARK
from tests.fakes.llm import FakeLLM, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config
from tests.jobs_support import settle
from tests.lifecycle_support import FakeClock


class Named:
    """A contract fake model: answers with its own name."""

    provider = "fake"

    def __init__(self, model: str, context_window: int) -> None:
        self.model = model
        self.context_window = context_window
        self.closed = False

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        await asyncio.sleep(0)
        return LLMReply(self.model, (), Usage(1, 1), self.model, self.provider)

    async def close(self) -> None:
        self.closed = True


def configured(name: str, key: str | None = "k") -> ModelConfig:
    return ModelConfig(provider="openai", name=name, api_key=Secret(key) if key else None)


def build(m: ModelConfig) -> Named:
    if m.api_key is None:
        raise LLMNotConfigured(f"model {m.name}: no API key (set OPENAI_API_KEY or model.api_key)")
    return Named(m.name, 8_000)


async def test_each_turn_answers_with_its_own_conversation_s_choice() -> None:
    main = Named("big-model", 200_000)
    models = SessionModels(main, {"fast": configured("small-model")}, build)

    async def turn(choice: str | None) -> tuple[str, int, str]:
        models.choose(choice)
        reply = await models.complete(system="", messages=[], tools=[])
        return models.model, models.context_window, reply.text

    got = list(await asyncio.gather(turn("fast"), turn(None), turn("fast")))
    assert got == [
        ("small-model", 8_000, "small-model"),
        ("big-model", 200_000, "big-model"),
        ("small-model", 8_000, "small-model"),
    ]
    assert models.model == "big-model"  # outside any turn: the main model
    await models.close()
    assert not main.closed and models.client("fast").model == "small-model"


async def test_a_choice_that_cannot_answer_falls_back_to_the_main_model() -> None:
    main = Named("big-model", 200_000)
    models = SessionModels(main, {"keyless": configured("k-model", key=None)}, build)

    async def turn(choice: str) -> str:
        return models.choose(choice).model

    assert await asyncio.create_task(turn("removed-from-config")) == "big-model"
    assert await asyncio.create_task(turn("keyless")) == "big-model"


def test_the_list_marks_the_current_model_and_offers_each_as_a_choice() -> None:
    models = SessionModels(
        Named("big-model", 1),
        {"fast": configured("small-model"), "cheap": configured("tiny")},
        build,
    )
    options = models.options("fast")
    assert options == [
        ModelOption("default", "big-model", "fake", False),
        ModelOption("fast", "small-model", "openai", True),
        ModelOption("cheap", "tiny", "openai", False),
    ]
    assert model_choices(options) == [
        ("default: big-model", "/model default"),
        ("fast: small-model", "/model fast"),
        ("cheap: tiny", "/model cheap"),
    ]
    assert model_list(models.options(None)).splitlines()[1:3] == [
        "▸ default: big-model (fake)",
        "• fast: small-model (openai)",
    ]


# ---- the whole gateway --------------------------------------------------------------------------
def models_config(home: Path, fake: FakeLLM, extra: str = "") -> None:
    write_config(
        home,
        base_url=fake.base_url,
        extra=textwrap.dedent(f"""\
        models_switch: everyone
        models:
          fast:
            provider: openai
            name: gpt-fast
            base_url: {fake.openai_base_url}
            api_key: test-key
            max_retries: 0
            context_window: 64000
        """)
        + extra,
    )


@asynccontextmanager
async def gateway(
    home: Path, *, background: bool = False
) -> AsyncIterator[tuple[Gateway, RecordingAdapter]]:
    adapter = RecordingAdapter()
    gw = gateway_for(home, [adapter], clock=FakeClock())
    assert gw.lifecycle is not None
    if background:
        await gw.lifecycle.start()
    try:
        yield gw, adapter
    finally:
        await settle(gw)
        await gw.sessions.cancel_all()
        if gw.lifecycle.started or gw.lifecycle.flusher.running:
            await gw.lifecycle.stop(0)
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()


async def ask(gw: Gateway, adapter: RecordingAdapter, text: str, chat_id: str = "c1") -> str:
    before = len(adapter.sent)
    await gw.sessions.submit(inbound(text, chat_id=chat_id))
    await adapter.wait_for(before + 1, timeout=60)
    await gw.sessions.wait_idle()
    return adapter.sent[-1].text


async def test_the_flush_of_a_switched_conversation_asks_the_model_it_chose(
    home: Path, fake_llm: FakeLLM
) -> None:
    """The pre-reset flush reuses the session's prompt, which was built for the model the
    conversation chose: it goes to that model (its cache, its family's prompt), not the main one."""
    models_config(home, fake_llm, "memory: {flush_min_messages: 2}\n")
    async with gateway(home, background=True) as (gw, adapter):
        assert (await ask(gw, adapter, "/model fast")).startswith("Switched to fast")
        await ask(gw, adapter, "I am Ada and I live in Oslo")
        await ask(gw, adapter, "hello from another chat", chat_id="c2")  # the main model's
        await gw.sessions.submit(inbound("/new"))
        await gw.lifecycle.flusher.wait_idle()  # type: ignore[union-attr]
    flushes = [
        b
        for b in fake_llm.openai_requests() + fake_llm.anthropic_requests()
        if FLUSH_MARK in json.dumps(b["messages"][-1])
    ]
    assert len(flushes) == 1
    (flush,) = flushes
    assert flush.get("model") == "gpt-fast"
    assert "Model: gpt-fast" in flush["messages"][0]["content"]


async def test_two_conversations_on_different_models_at_once_keep_their_own(
    home: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """c1 chose `fast`, c2 did not. Their first model calls meet at the fake (each is held until the
    other has arrived), so both turns are in flight together; c1 then calls a tool and the model
    again. Every request goes to its own conversation's model with its own prompt: a choice never
    leaks into the other turn, nor into the same turn's later calls."""
    models_config(home, fake_llm)
    arrived = {"c1": asyncio.Event(), "c2": asyncio.Event()}
    step = fake_llm._step

    async def held(request: Any, body: dict[str, Any], wire: str) -> Any:
        said = json.dumps(body["messages"])
        for me, other in (("c1", "c2"), ("c2", "c1")):
            if (
                f"hello from {me}" in said
                and "tool_call_id" not in said
                and "tool_use_id" not in said
            ):
                arrived[me].set()
                await arrived[other].wait()
        return await step(request, body, wire)

    def search_first(body: dict[str, Any]) -> ToolCall | None:
        said = json.dumps(body["messages"])
        first = "hello from c1" in said and "tool_call_id" not in said
        return ToolCall("session_search", {"query": "Oslo"}) if first else None

    monkeypatch.setattr(fake_llm, "_step", held)
    fake_llm.script(*[search_first] * 4)
    async with gateway(home) as (gw, adapter):
        assert (await ask(gw, adapter, "/model fast")).startswith("Switched to fast")
        await gw.sessions.submit(inbound("hello from c1", chat_id="c1"))
        await gw.sessions.submit(inbound("hello from c2", chat_id="c2"))
        await adapter.wait_for(3, timeout=60)
        await gw.sessions.wait_idle()
        await ask(gw, adapter, "and again from c2", chat_id="c2")
    fast = fake_llm.openai_requests()
    assert [b["model"] for b in fast] == ["gpt-fast", "gpt-fast"]  # c1's two calls
    assert all("hello from c1" in json.dumps(b["messages"]) for b in fast)
    assert all("Model: gpt-fast" in b["messages"][0]["content"] for b in fast)
    main = fake_llm.anthropic_requests()
    assert [b["model"] for b in main] == ["claude-test", "claude-test"]  # c2's two turns
    assert all("hello from c2" in json.dumps(b["messages"]) for b in main)
    assert all("Model: claude-test" in json.dumps(b["system"]) for b in main)
    assert "echo: hello from c1" in {m.text.split(" [")[0] for m in adapter.sent}

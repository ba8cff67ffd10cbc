"""SessionModels (gateway/llm/factory.py): the model a conversation chose answers its own turn only,
and everything that reads the agent's model (name, context window, vision) follows the choice; a
choice that is no longer configured or cannot be used falls back to the main model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.config.settings import ModelConfig, Secret
from gateway.errors import LLMNotConfigured
from gateway.llm.factory import ModelOption, SessionModels
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.sessions.commands import model_choices, model_list


class Named:
    """A contract fake model: answers with its own name."""

    provider = "fake"

    def __init__(self, model: str, context_window: int) -> None:
        self.model = model
        self.context_window = context_window
        self.closed = False

    async def complete(self, *, system: str, messages: Sequence[ChatMessage],
                       tools: Sequence[ToolDef], max_tokens: int | None = None,
                       stream: TextSink | None = None) -> LLMReply:
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
    assert got == [("small-model", 8_000, "small-model"), ("big-model", 200_000, "big-model"),
                   ("small-model", 8_000, "small-model")]
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
    models = SessionModels(Named("big-model", 1), {"fast": configured("small-model"),
                                                    "cheap": configured("tiny")}, build)
    options = models.options("fast")
    assert options == [ModelOption("default", "big-model", "fake", False),
                       ModelOption("fast", "small-model", "openai", True),
                       ModelOption("cheap", "tiny", "openai", False)]
    assert model_choices(options) == [("default: big-model", "/model default"),
                                      ("fast: small-model", "/model fast"),
                                      ("cheap: tiny", "/model cheap")]
    assert model_list(models.options(None)).splitlines()[1:3] == ["▸ default: big-model (fake)",
                                                                   "• fast: small-model (openai)"]

"""Which model answers: the configured one, else auto-detected from the environment; its fallback; a
stand-in when none is configured; the one a conversation switched to (`models:`, /model).
The only place that turns `model:` config into a client."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from gateway.config.settings import Config, ModelConfig, ModelEndpoint, Secret
from gateway.errors import LLMNotConfigured, LLMTimeout, LLMUnavailable
from gateway.llm.anthropic_wire import AnthropicClient, PromptCache
from gateway.llm.openai_wire import OpenAIClient
from gateway.llm.transport import WireSettings
from gateway.llm.types import ChatMessage, LLMClient, LLMReply, TextSink, ToolDef

log = logging.getLogger(__name__)

DEFAULT_MODELS = {
    "ANTHROPIC_API_KEY": ("anthropic", "claude-sonnet-4-5", None),
    "OPENAI_API_KEY": ("openai", "gpt-4.1-mini", None),
    "OPENROUTER_API_KEY": ("openai", "anthropic/claude-sonnet-4.5", "https://openrouter.ai/api/v1"),
}
OLLAMA_URL = "http://127.0.0.1:11434"
# `model.vision: auto`: substrings of the lowercased model name of families that take images
# (OpenAI-compatible servers; every Claude model from 3 on does). A name not listed is treated as
# blind: `model.vision: true` says otherwise.
VISION_NAMES = (
    "gpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "chatgpt-4o",
    "o1",
    "o3",
    "o4",
    "claude",
    "gemini",
    "gemma3",
    "gemma-3",
    "llava",
    "bakllava",
    "vision",
    "-vl",
    "vl-",
    "qwen2.5vl",
    "qvq",
    "pixtral",
    "mistral-small-3",
    "mistral-medium",
    "llama-4",
    "llama4",
    "minicpm-v",
    "moondream",
    "grok-4",
    "grok-2-vision",
    "internvl",
    "glm-4v",
    "glm-4.5v",
    "phi-4-multimodal",
    "kimi-vl",
)
BLIND_NAMES = (
    "o1-mini",
    "o3-mini",
    "claude-2",
    "claude-instant",
    "gpt-4o-audio",
    "gpt-4o-mini-audio",
    "gpt-4o-transcribe",
    "gpt-4o-mini-transcribe",
    "gpt-4o-mini-tts",
)
NOT_CONFIGURED = (
    "No model is configured. Run `gateway init`, or set ANTHROPIC_API_KEY, OPENAI_API_KEY or "
    "OPENROUTER_API_KEY, "
    "start Ollama on 127.0.0.1:11434, or add a `model:` section to config.yaml "
    "(see docs/configuration.md)."
)


class FallbackClient:
    """Try the primary model; when it still fails after its own retries, try the fallback once."""

    def __init__(self, primary: LLMClient, fallback: LLMClient) -> None:
        self.primary = primary
        self.fallback = fallback
        self.provider = primary.provider
        self.model = primary.model
        self.context_window = min(primary.context_window, fallback.context_window)
        # the fallback renders what it cannot see as notes itself
        self.vision = sees_images_client(primary)

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        try:
            return await self.primary.complete(
                system=system, messages=messages, tools=tools, max_tokens=max_tokens, stream=stream
            )
        except (LLMUnavailable, LLMTimeout) as exc:
            log.warning(
                "model %s failed (%s); trying fallback %s",
                self.primary.model,
                exc,
                self.fallback.model,
            )
            if stream is not None:
                stream.restart()  # what the primary had written is not the fallback's answer
            return await self.fallback.complete(
                system=system, messages=messages, tools=tools, max_tokens=max_tokens, stream=stream
            )

    async def close(self) -> None:
        await self.primary.close()
        await self.fallback.close()


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model that answers and how it was chosen, in
    words for the operator (start-up banner, dashboard)."""

    model: ModelConfig
    source: str


def choose_model(
    config: Config, env: Mapping[str, str], *, probe_ollama: bool = True
) -> ModelChoice:
    """The configured model, else the first API key
    found in the environment, else a local Ollama."""
    if config.model is not None:
        return ModelChoice(config.model, "configured")
    for var, (provider, name, base_url) in DEFAULT_MODELS.items():
        if env.get(var):
            found = ModelConfig(provider=provider, name=name, base_url=base_url, api_key_env=var)  # type: ignore[arg-type]
            return ModelChoice(found, f"auto-detected from {var}")
    if probe_ollama:
        local = ollama_model()
        if local:
            return ModelChoice(
                ModelConfig(
                    provider="openai",
                    name=local,
                    base_url=f"{OLLAMA_URL}/v1",
                    api_key=Secret("ollama"),
                    context_window=32_768,
                ),
                f"auto-detected: Ollama at {OLLAMA_URL}",
            )
    raise LLMNotConfigured(NOT_CONFIGURED)


def resolve_model(
    config: Config, env: Mapping[str, str], *, probe_ollama: bool = True
) -> ModelConfig:
    return choose_model(config, env, probe_ollama=probe_ollama).model


def ollama_model() -> str | None:
    try:
        with urllib.request.urlopen(f"{OLLAMA_URL}/api/tags", timeout=0.5) as resp:
            models = json.load(resp).get("models") or []
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return str(models[0]["name"]) if models else None


def _api_key(m: ModelEndpoint, env: Mapping[str, str]) -> str:
    if m.api_key:
        return m.api_key.value
    var = m.api_key_env or ("ANTHROPIC_API_KEY" if m.provider == "anthropic" else "OPENAI_API_KEY")
    key = env.get(var)
    if key:
        return key
    if m.base_url and ("127.0.0.1" in m.base_url or "localhost" in m.base_url):
        # local servers (Ollama, vLLM, llama.cpp) ignore the key but the SDKs want one
        return "local"
    raise LLMNotConfigured(f"model {m.name}: no API key (set {var} or model.api_key)")


def sees_images(m: ModelEndpoint) -> bool:
    """`model.vision`, with `auto` decided by the model's name (see VISION_NAMES)."""
    if m.vision != "auto":
        return bool(m.vision)
    name = m.name.lower()
    if any(blind in name for blind in BLIND_NAMES):
        return False
    if m.provider == "anthropic":
        return True
    return any(seeing in name for seeing in VISION_NAMES)


def sees_images_client(client: LLMClient) -> bool:
    """Whether a built client takes image blocks (a client without the attribute, e.g. a test
    double: yes)."""
    return bool(getattr(client, "vision", True))


def make_client(m: ModelEndpoint, env: Mapping[str, str], config: Config) -> LLMClient:
    key = _api_key(m, env)
    # An unset base_url means the provider's public API, or the SDKs' own override variable when it
    # is set.
    base_url = (
        m.base_url
        or env.get("ANTHROPIC_BASE_URL" if m.provider == "anthropic" else "OPENAI_BASE_URL")
        or None
    )
    wire = WireSettings(
        model=m.name,
        api_key=key,
        base_url=base_url,
        max_tokens=m.max_tokens,
        timeout_s=m.timeout_s,
        max_retries=m.max_retries,
        context_window=m.context_window,
        client=m.client,
        vision=sees_images(m),
    )
    if m.provider == "anthropic":
        cache = PromptCache(config.prompt_caching.ttl, config.prompt_caching.enabled)
        return AnthropicClient(wire, cache=cache, env=env)
    return OpenAIClient(wire, env=env)


def build_llm(config: Config, env: Mapping[str, str], *, probe_ollama: bool = True) -> LLMClient:
    return build_chosen(choose_model(config, env, probe_ollama=probe_ollama), env, config)


def build_chosen(choice: ModelChoice, env: Mapping[str, str], config: Config) -> LLMClient:
    model = choice.model
    client = make_client(model, env, config)
    if model.fallback is not None:
        return FallbackClient(client, make_client(model.fallback, env, config))
    return client


class UnconfiguredLLM:
    """Stands in when no model can answer, so the chat surfaces can say what to set instead of
    crashing: none is configured, or the one chosen (`wanted`, provider/name) cannot be used (its
    key variable is not set)."""

    provider = "none"
    model = "none"
    context_window = 200_000

    def __init__(self, reason: str = NOT_CONFIGURED, *, wanted: str | None = None) -> None:
        self.reason = reason
        self.wanted = wanted

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        raise LLMNotConfigured(self.reason)

    async def close(self) -> None:
        return None


def model_problem(llm: object) -> str | None:
    """Why the chosen model cannot answer (e.g. its key variable is unset); None when it can, or
    none was chosen."""
    return llm.reason if isinstance(llm, UnconfiguredLLM) and llm.wanted else None


# The model the running turn's conversation chose (SessionModels.choose): set as the turn starts, it
# holds for that task and the tasks it starts, and for no other turn.
_CHOSEN: ContextVar[LLMClient | None] = ContextVar("gateway_chosen_model", default=None)
# The model of the agent whose turn runs in this task (several agents: docs/agents.md), set with
# the choice above: what reads "the model" outside that agent's own parts (whether the pictures of
# attachments and of MCP results can be shown to it) asks `answering`.
_ANSWERING: ContextVar[LLMClient | None] = ContextVar("gateway_answering_model", default=None)


def answer_with(client: LLMClient) -> None:
    """`client` (an agent's model, or its SessionModels) answers the turn of this task."""
    _ANSWERING.set(client)


def answering(default: LLMClient) -> LLMClient:
    """The model answering the turn of this task; `default` outside any turn."""
    return _ANSWERING.get() or default


@dataclass(frozen=True, slots=True)
class ModelOption:
    """One line of /model's list: `name` is what /model takes (`default` for the main model)."""

    name: str
    model: str
    provider: str
    current: bool


class SessionModels:
    """The main model and the named ones of `models:`, as the one client the agent holds. Each turn
    answers with the model its conversation chose (`choose`, as the turn starts); anything else
    with the main one.

    The choice lives in a context variable, so the agent loop, the compression check
    (`context_window`) and the prompt builder (`model`: the family's guidance, and a rebuild when
    it changed) all follow it with no client passed through them. Named clients are built on
    first use and kept."""

    def __init__(
        self,
        main: LLMClient,
        named: Mapping[str, ModelConfig],
        build: Callable[[ModelConfig], LLMClient],
    ) -> None:
        self.main = main
        self.named = dict(named)
        self._build = build
        self._clients: dict[str, LLMClient] = {}

    def client(self, name: str) -> LLMClient:
        """The named model's client; KeyError when `models:` has no such name, LLMNotConfigured
        when it cannot be used here (its key variable is not set)."""
        found = self._clients.get(name)
        if found is None:
            found = self._clients[name] = self._build(self.named[name])
        return found

    def choose(self, name: str | None) -> LLMClient:
        """Make the conversation's choice answer in this task: the main model for None, or for a
        name no longer configured or that cannot be used (said in the log)."""
        chosen = self.main
        if name is not None:
            try:
                chosen = self.client(name)
            except KeyError:
                log.warning(
                    "model %r was chosen in chat but is no longer in models:; the main "
                    "model answers",
                    name,
                )
            except LLMNotConfigured as exc:
                log.warning(
                    "model %r was chosen in chat but cannot answer (%s); the main model answers",
                    name,
                    exc,
                )
        _CHOSEN.set(None if chosen is self.main else chosen)
        return chosen

    def options(self, current: str | None) -> list[ModelOption]:
        """The main model, then `models:` in the file's order; `current` is the conversation's."""
        main = ModelOption(
            "default", self.main.model, self.main.provider, current not in self.named
        )
        named = [
            ModelOption(name, m.name, m.provider, name == current) for name, m in self.named.items()
        ]
        return [main, *named]

    @property
    def current(self) -> LLMClient:
        return _CHOSEN.get() or self.main

    @property
    def provider(self) -> str:
        return self.current.provider

    @property
    def model(self) -> str:
        return self.current.model

    @property
    def context_window(self) -> int:
        return self.current.context_window

    @property
    def vision(self) -> bool:
        return sees_images_client(self.current)

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        return await self.current.complete(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens, stream=stream
        )

    async def close(self) -> None:
        """The named clients (the main one belongs to whoever built it)."""
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

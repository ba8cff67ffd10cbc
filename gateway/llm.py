"""Model clients: the Anthropic Messages wire and the OpenAI Chat Completions wire behind one `complete` call.

History is kept in one neutral shape (role user / assistant / tool; tool calls as {id, name, arguments});
each client translates it to its wire and reads the wire's JSON answer here. Sending is a transport's job:
the gateway's own aiohttp POST (gateway/llm_http.py, the default) or the official SDKs (gateway/llm_sdk.py).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gateway.config import Config, ModelConfig, ModelEndpoint, Secret
from gateway.errors import LLMNotConfigured, LLMTimeout, LLMUnavailable
from gateway.llm_http import HttpTransport
from gateway.store import Usage

log = logging.getLogger(__name__)

ChatMessage = dict[str, Any]  # {"role", "content", "tool_calls"?: [{"id","name","arguments"}], "tool_call_id"?}

DEFAULT_MODELS = {
    "ANTHROPIC_API_KEY": ("anthropic", "claude-sonnet-4-5", None),
    "OPENAI_API_KEY": ("openai", "gpt-4.1-mini", None),
    "OPENROUTER_API_KEY": ("openai", "anthropic/claude-sonnet-4.5", "https://openrouter.ai/api/v1"),
}
OLLAMA_URL = "http://127.0.0.1:11434"
NOT_CONFIGURED = ("No model is configured. Set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENROUTER_API_KEY, "
                  "start Ollama on 127.0.0.1:11434, or add a `model:` section to config.yaml "
                  "(see docs/configuration.md).")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it (may be invalid; the tool layer reports that)


class ToolDef(Protocol):
    """What a client needs of a tool: gateway.tools.ToolSpec satisfies it."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class LLMReply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    model: str
    provider: str
    stop_reason: str = ""


class LLMClient(Protocol):
    provider: str
    model: str
    context_window: int

    async def complete(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                       max_tokens: int | None = None) -> LLMReply: ...

    async def close(self) -> None: ...


# ------------------------------------------------------------------------------------------ Anthropic
def anthropic_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Neutral history → Anthropic messages: tool results ride in user turns; same-role turns merge."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        blocks: list[dict[str, Any]] = []
        if role == "tool":
            role = "user"
            blocks.append({"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m.get("content") or "",
                           **({"is_error": True} if m.get("is_error") else {})})
        else:
            if (m.get("content") or "").strip():  # the API refuses a whitespace-only text block
                blocks.append({"type": "text", "text": m["content"]})
            for call in m.get("tool_calls") or ():
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"],
                               "input": _json_object(call.get("arguments"))})
            if not blocks:
                blocks.append({"type": "text", "text": "(empty)"})
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def add_cache_breakpoints(system: str, messages: list[dict[str, Any]], *, ttl: Literal["5m", "1h"]
                          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """"system_and_3": a breakpoint on the system prompt and on the last block of the last 3 messages.

    Never mutates `messages`: only the marked messages are copied (a deep copy of the whole history cost more
    than the rest of the request); at most 4 breakpoints (the API's limit).
    """
    marker: dict[str, Any] = {"type": "ephemeral"}
    if ttl == "1h":
        marker["ttl"] = "1h"
    system_blocks = [{"type": "text", "text": system, "cache_control": dict(marker)}]
    copied = list(messages)
    for i in range(max(0, len(copied) - 3), len(copied)):
        msg = copied[i]
        if msg["content"]:
            content = list(msg["content"])
            content[-1] = {**content[-1], "cache_control": dict(marker)}
            copied[i] = {**msg, "content": content}
    return system_blocks, copied


def _json_object(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class Transport(Protocol):
    """Sends one request body of a wire and returns the JSON answer (gateway/llm_http.py, gateway/llm_sdk.py)."""

    async def post(self, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


ClientKind = Literal["native", "sdk"]
ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
OPENAI_URL = "https://api.openai.com/v1"
OPENAI_ENV_HEADERS = {"OPENAI_ORG_ID": "OpenAI-Organization", "OPENAI_PROJECT_ID": "OpenAI-Project"}


def _user_agent() -> str:
    try:
        from importlib.metadata import version  # noqa: PLC0415 (only when a client is made)
        return f"agent-gateway/{version('agent-gateway')}"
    except Exception:  # noqa: BLE001 (an uninstalled checkout still talks to the model)
        return "agent-gateway"


def make_transport(provider: Literal["anthropic", "openai"], client: ClientKind, *, model: str, api_key: str,
                   base_url: str | None, timeout_s: float, max_retries: int,
                   env: Mapping[str, str] | None = None) -> Transport:
    if client == "sdk":
        from gateway.llm_sdk import SdkTransport  # noqa: PLC0415 (the SDK is imported only if chosen)
        return SdkTransport(provider=provider, model=model, api_key=api_key, base_url=base_url,
                            timeout_s=timeout_s, max_retries=max_retries)
    if provider == "anthropic":
        url = (base_url or ANTHROPIC_URL).rstrip("/") + "/v1/messages"
        headers = {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}
    else:
        url = (base_url or OPENAI_URL).rstrip("/") + "/chat/completions"
        headers = {"authorization": f"Bearer {api_key}"}
        for var, header in OPENAI_ENV_HEADERS.items():  # as the openai SDK sends them
            if (env or {}).get(var):
                headers[header] = (env or {})[var]
    return HttpTransport(url=url, model=model, timeout_s=timeout_s, max_retries=max_retries,
                         headers={**headers, "user-agent": _user_agent()})


class AnthropicClient:
    provider = "anthropic"

    def __init__(self, *, model: str, api_key: str, base_url: str | None, max_tokens: int, timeout_s: float,
                 max_retries: int, context_window: int, cache_ttl: Literal["5m", "1h"] = "5m",
                 caching: bool = True, client: ClientKind = "native", env: Mapping[str, str] | None = None) -> None:
        self.model = model
        self.context_window = context_window
        self.max_tokens = max_tokens
        self.cache_ttl = cache_ttl
        self.caching = caching
        self._transport = make_transport("anthropic", client, model=model, api_key=api_key, base_url=base_url,
                                         timeout_s=timeout_s, max_retries=max_retries, env=env)

    def request_body(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                     max_tokens: int | None = None) -> dict[str, Any]:
        wire = anthropic_messages(messages)
        if self.caching:
            system_blocks, wire = add_cache_breakpoints(system, wire, ttl=self.cache_ttl)
        else:
            system_blocks = [{"type": "text", "text": system}]
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens or self.max_tokens,
                                "system": system_blocks, "messages": wire}
        if tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                             for t in tools]
        return body

    async def complete(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                       max_tokens: int | None = None) -> LLMReply:
        body = self.request_body(system=system, messages=messages, tools=tools, max_tokens=max_tokens)
        return anthropic_reply(await self._transport.post(body), self.model)

    async def close(self) -> None:
        await self._transport.close()


def anthropic_reply(data: Mapping[str, Any], model: str) -> LLMReply:
    """An Anthropic Messages answer (JSON) → LLMReply; read leniently, as the SDKs do."""
    content = data.get("content")
    if not isinstance(content, list):
        raise LLMUnavailable(f"{model}: bad response (no content)")
    blocks = [b for b in content if isinstance(b, dict)]
    text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    calls = tuple(ToolCall(str(b.get("id") or ""), str(b.get("name") or ""), json.dumps(b.get("input") or {}))
                  for b in blocks if b.get("type") == "tool_use")
    u = _object(data.get("usage"))
    usage = Usage(_count(u, "input_tokens"), _count(u, "output_tokens"), _count(u, "cache_read_input_tokens"),
                  _count(u, "cache_creation_input_tokens"))
    return LLMReply(text, calls, usage, model, "anthropic", str(data.get("stop_reason") or ""))


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


# ------------------------------------------------------------------------------------------ OpenAI
def openai_messages(system: str, messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m.get("content") or ""})
        elif m.get("tool_calls"):
            out.append({"role": "assistant", "content": m.get("content") or None, "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c.get("arguments") or "{}"}}
                for c in m["tool_calls"]]})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


class OpenAIClient:
    provider = "openai"

    def __init__(self, *, model: str, api_key: str, base_url: str | None, max_tokens: int, timeout_s: float,
                 max_retries: int, context_window: int, client: ClientKind = "native",
                 env: Mapping[str, str] | None = None) -> None:
        self.model = model
        self.context_window = context_window
        self.max_tokens = max_tokens
        self._transport = make_transport("openai", client, model=model, api_key=api_key, base_url=base_url,
                                         timeout_s=timeout_s, max_retries=max_retries, env=env)

    def request_body(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                     max_tokens: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(system, messages),
                                "max_tokens": max_tokens or self.max_tokens}
        if tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": dict(t.parameters)}} for t in tools]
        return body

    async def complete(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                       max_tokens: int | None = None) -> LLMReply:
        body = self.request_body(system=system, messages=messages, tools=tools, max_tokens=max_tokens)
        return openai_reply(await self._transport.post(body), self.model)

    async def close(self) -> None:
        await self._transport.close()


def openai_reply(data: Mapping[str, Any], model: str) -> LLMReply:
    """An OpenAI Chat Completions answer (JSON) → LLMReply; read leniently, as the SDKs do."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMUnavailable(f"{model}: response had no choices")
    choice = choices[0]
    msg = _object(choice.get("message"))
    calls = tuple(ToolCall(str(c.get("id") or ""), str(f.get("name") or ""), str(f.get("arguments") or "{}"))
                  for c in (msg.get("tool_calls") or ()) if isinstance(c, dict)
                  and isinstance(f := c.get("function"), dict))
    u = _object(data.get("usage"))
    cached = _count(_object(u.get("prompt_tokens_details")), "cached_tokens")
    usage = Usage(max(0, _count(u, "prompt_tokens") - cached), _count(u, "completion_tokens"), cached, 0)
    return LLMReply(_openai_text(msg.get("content")), calls, usage, str(data.get("model") or model), "openai",
                    str(choice.get("finish_reason") or ""))


def _openai_text(content: Any) -> str:
    """A string, or (some compatible servers, e.g. reasoning models) a list of parts: their text joined."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content
                       if isinstance(p, dict) and p.get("type", "text") == "text")
    return str(content or "")


class FallbackClient:
    """Try the primary model; when it still fails after its own retries, try the fallback once."""

    def __init__(self, primary: LLMClient, fallback: LLMClient) -> None:
        self.primary = primary
        self.fallback = fallback
        self.provider = primary.provider
        self.model = primary.model
        self.context_window = min(primary.context_window, fallback.context_window)

    async def complete(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                       max_tokens: int | None = None) -> LLMReply:
        try:
            return await self.primary.complete(system=system, messages=messages, tools=tools, max_tokens=max_tokens)
        except (LLMUnavailable, LLMTimeout) as exc:
            log.warning("model %s failed (%s); trying fallback %s", self.primary.model, exc, self.fallback.model)
            return await self.fallback.complete(system=system, messages=messages, tools=tools, max_tokens=max_tokens)

    async def close(self) -> None:
        await self.primary.close()
        await self.fallback.close()


# ------------------------------------------------------------------------------------------ construction
def resolve_model(config: Config, env: Mapping[str, str], *, probe_ollama: bool = True) -> ModelConfig:
    """The configured model, else the first API key found in the environment, else a local Ollama."""
    if config.model is not None:
        return config.model
    for var, (provider, name, base_url) in DEFAULT_MODELS.items():
        if env.get(var):
            return ModelConfig(provider=provider, name=name, base_url=base_url, api_key_env=var)  # type: ignore[arg-type]
    if probe_ollama:
        local = _ollama_model()
        if local:
            return ModelConfig(provider="openai", name=local, base_url=f"{OLLAMA_URL}/v1", api_key=Secret("ollama"),
                               context_window=32_768)
    raise LLMNotConfigured(NOT_CONFIGURED)


def _ollama_model() -> str | None:
    try:
        with urllib.request.urlopen(f"{OLLAMA_URL}/api/tags", timeout=0.5) as resp:  # noqa: S310 (loopback)
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
        return "local"  # local servers (Ollama, vLLM, llama.cpp) ignore the key but the SDKs want one
    raise LLMNotConfigured(f"model {m.name}: no API key (set {var} or model.api_key)")


def make_client(m: ModelEndpoint, env: Mapping[str, str], config: Config) -> LLMClient:
    key = _api_key(m, env)
    # An unset base_url means the provider's public API, or the SDKs' own override variable when it is set.
    base_url = m.base_url or env.get("ANTHROPIC_BASE_URL" if m.provider == "anthropic" else "OPENAI_BASE_URL") or None
    if m.provider == "anthropic":
        return AnthropicClient(model=m.name, api_key=key, base_url=base_url, max_tokens=m.max_tokens,
                               timeout_s=m.timeout_s, max_retries=m.max_retries, context_window=m.context_window,
                               cache_ttl=config.prompt_caching.ttl, caching=config.prompt_caching.enabled,
                               client=m.client, env=env)
    return OpenAIClient(model=m.name, api_key=key, base_url=base_url, max_tokens=m.max_tokens,
                        timeout_s=m.timeout_s, max_retries=m.max_retries, context_window=m.context_window,
                        client=m.client, env=env)


def build_llm(config: Config, env: Mapping[str, str], *, probe_ollama: bool = True) -> LLMClient:
    model = resolve_model(config, env, probe_ollama=probe_ollama)
    client = make_client(model, env, config)
    if model.fallback is not None:
        return FallbackClient(client, make_client(model.fallback, env, config))
    return client


class UnconfiguredLLM:
    """Stands in when no model is configured, so the chat surfaces can say what to set instead of crashing."""

    provider = "none"
    model = "none"
    context_window = 200_000

    def __init__(self, reason: str = NOT_CONFIGURED) -> None:
        self.reason = reason

    async def complete(self, *, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef],
                       max_tokens: int | None = None) -> LLMReply:
        raise LLMNotConfigured(self.reason)

    async def close(self) -> None:
        return None

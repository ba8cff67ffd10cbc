"""Which transport sends a wire's request: the gateway's own aiohttp POST (gateway/llm/http.py, the
default) or the official SDKs (gateway/llm/sdk.py, imported only when `model.client: sdk` chooses
them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gateway.llm.http import HttpTransport
from gateway.llm.types import ClientKind, Transport

ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
OPENAI_URL = "https://api.openai.com/v1"
OPENAI_ENV_HEADERS = {"OPENAI_ORG_ID": "OpenAI-Organization", "OPENAI_PROJECT_ID": "OpenAI-Project"}


def _user_agent() -> str:
    try:
        from importlib.metadata import version

        return f"agent-gateway/{version('agent-gateway')}"
    except Exception:  # noqa: BLE001 (an uninstalled checkout still talks to the model)
        return "agent-gateway"


@dataclass(frozen=True, slots=True)
class WireSettings:
    """One model endpoint as a client reaches it, built from config in gateway/llm/factory.py;
    `vision`: the model takes image blocks. The key never shows in its repr."""

    model: str
    api_key: str = field(repr=False)
    base_url: str | None = None  # None: the provider's public API
    max_tokens: int = 4096
    timeout_s: float = 120.0
    max_retries: int = 2
    context_window: int = 200_000
    client: ClientKind = "native"
    vision: bool = True


def make_transport(
    provider: Literal["anthropic", "openai"],
    wire: WireSettings,
    env: Mapping[str, str] | None = None,
) -> Transport:
    if wire.client == "sdk":
        from gateway.llm.sdk import SdkTransport

        return SdkTransport(
            provider=provider,
            model=wire.model,
            api_key=wire.api_key,
            base_url=wire.base_url,
            timeout_s=wire.timeout_s,
            max_retries=wire.max_retries,
        )
    if provider == "anthropic":
        url = (wire.base_url or ANTHROPIC_URL).rstrip("/") + "/v1/messages"
        headers = {"x-api-key": wire.api_key, "anthropic-version": ANTHROPIC_VERSION}
    else:
        url = (wire.base_url or OPENAI_URL).rstrip("/") + "/chat/completions"
        headers = {"authorization": f"Bearer {wire.api_key}"}
        for var, header in OPENAI_ENV_HEADERS.items():  # as the openai SDK sends them
            if (env or {}).get(var):
                headers[header] = (env or {})[var]
    return HttpTransport(
        url=url,
        model=wire.model,
        timeout_s=wire.timeout_s,
        max_retries=wire.max_retries,
        headers={**headers, "user-agent": _user_agent()},
    )

"""Which transport sends a wire's request: the gateway's own aiohttp POST (gateway/llm/http.py, the
default) or the official SDKs (gateway/llm/sdk.py, imported only when `model.client: sdk` chooses
them)."""

from __future__ import annotations

from collections.abc import Mapping
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


def make_transport(
    provider: Literal["anthropic", "openai"],
    client: ClientKind,
    *,
    model: str,
    api_key: str,
    base_url: str | None,
    timeout_s: float,
    max_retries: int,
    env: Mapping[str, str] | None = None,
) -> Transport:
    if client == "sdk":
        from gateway.llm.sdk import SdkTransport

        return SdkTransport(
            provider=provider,
            model=model,
            api_key=api_key,
            base_url=base_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
        )
    if provider == "anthropic":
        url = (base_url or ANTHROPIC_URL).rstrip("/") + "/v1/messages"
        headers = {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}
    else:
        url = (base_url or OPENAI_URL).rstrip("/") + "/chat/completions"
        headers = {"authorization": f"Bearer {api_key}"}
        for var, header in OPENAI_ENV_HEADERS.items():  # as the openai SDK sends them
            if (env or {}).get(var):
                headers[header] = (env or {})[var]
    return HttpTransport(
        url=url,
        model=model,
        timeout_s=timeout_s,
        max_retries=max_retries,
        headers={**headers, "user-agent": _user_agent()},
    )
